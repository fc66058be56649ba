"""Supervised learning on data split over the clients of the fleet: any data, any module.

:class:`Supervised` names a data source (:mod:`simfl.neural.datasets`: images;
:mod:`simfl.neural.text`; :mod:`simfl.neural.own_data`: your own tensors), a partition
(:mod:`simfl.neural.partition`), a model (any ``torch.nn.Module`` factory,
:class:`~simfl.neural.module.Model`, or a paper network ``MLP(...)``/``CNN(...)``) and an
:class:`~simfl.neural.objective.Objective` (loss and metrics, with defaults for classification,
next-token prediction and regression). :class:`ImageClassification` is the same task with
image defaults (scikit-learn's digits, FedRep's shards and MLP).

Binding it to a fleet (:meth:`Supervised.build`) loads the data (cached per process), splits
the training pool over the ``n`` clients (client ``i`` lives on device ``i``) with the run's
keyed stream ``"neural/partition"``, deals each client a test set (for classification with the
same classes, :func:`~simfl.neural.partition.match_test`), builds the model and checks it on
the data before anything runs: a forward pass that fails on one sample, a loss that is not a
scalar, a client without training samples are errors that say so.

Metrics (the FedRep code's ``test_img_local_all``): each metric is averaged over the evaluated
clients' test samples, every client scored on its own test set with its own personalised model
(its head, its local layers, or the shared model). For classification ``accuracy`` and
``loss`` (cross-entropy).

A paper network under the default classification objective trains on its fast path
(:class:`~simfl.neural.models.Net`: frozen prefixes computed once, batched linear layers, the
kernels of :mod:`~simfl.neural.kernels`); its module twin (``spec.factory(...)``) trains on the
generic path to float tolerance of it (``tests/test_neural_module.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray

from simfl._checks import check_int
from simfl.neural.data import DataSource
from simfl.neural.datasets import Digits
from simfl.neural.models import MLP, ModelSpec, Net
from simfl.neural.module import Model, ModelCheckError, ModuleNet, as_model
from simfl.neural.objective import Objective
from simfl.neural.partition import Natural, Partition, Shards
from simfl.rng import Streams
from simfl.tasks.base import Task

__all__ = [
    "ClientData",
    "ClientImages",
    "ImageClassification",
    "Supervised",
    "check_device",
    "pad",
    "torch_threads",
]

IntArray = NDArray[np.int64]


def check_device(field: str, device: object) -> str:
    """``device`` if it names the CPU or a CUDA device present here, else ``ValueError``."""
    if not isinstance(device, str):
        raise ValueError(f"{field} must be 'cpu' or 'cuda[:N]', got {device!r}")
    try:
        where = torch.device(device)
    except RuntimeError:
        where = None
    if where is None or where.type not in ("cpu", "cuda"):
        raise ValueError(f"{field} must be 'cpu' or 'cuda[:N]', got {device!r}")
    if where.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(
                f"{field}={device!r}: no CUDA device on this machine (torch "
                f"{torch.__version__}, CUDA available: False); use device='cpu'"
            )
        if where.index is not None and where.index >= count:
            raise ValueError(f"{field}={device!r}: this machine has CUDA devices 0..{count - 1}")
    return device


@contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    """Run the block with torch's intra-op threads set to ``threads``, then restore them."""
    before = torch.get_num_threads()
    if before != threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def pad(parts: list[IntArray], clients: IntArray) -> IntArray:
    """The index lists of ``clients`` as one ``(C, max length)`` array padded with -1."""
    width = max((parts[int(c)].size for c in clients), default=0)
    out = np.full((clients.size, width), -1, dtype=np.int64)
    for row, c in enumerate(clients):
        p = parts[int(c)]
        out[row, : p.size] = p
    return out


_DIGITS, _SHARDS, _FEDREP_MLP = Digits(), Shards(2), MLP.fedrep()
_NATURAL, _CLASSIFY = Natural(), Objective()


@dataclass(frozen=True)
class Supervised(Task):
    """Labelled data split over the clients, the model they train and what it minimises.

    Parameters
    ----------
    dataset
        Where the samples come from (a :class:`~simfl.neural.data.DataSource`).
    partition
        How the training pool is split (default: the data set's own groups, ``Natural()``).
    model
        A ``torch.nn.Module`` factory (a class or a zero-argument function), a
        :class:`~simfl.neural.module.Model`, or a paper network ``MLP(...)``/``CNN(...)``.
    eval_clients
        Evaluate this many clients (a fixed, uniformly drawn subset; ``None``: all of them).
    device
        Where the cohort's training and the evaluation run: ``"cpu"`` (default) or a CUDA
        device (``"cuda"``, ``"cuda:1"``), which must exist on the machine that builds the
        scenario. The server state stays on the CPU; results agree with the CPU's to
        floating-point rounding, not bit for bit.
    threads
        torch's compute threads for the run's training and evaluation on the CPU (default 1).
        The count decides how the CPU kernels round (oneDNN's convolutions split their sums
        by thread: LeNet-5 on Fashion-MNIST, 5 clients per round, scores 0.0900 after one
        round with 1 thread and 0.0864 with 2), so it is part of the scenario:
        :func:`simfl.run` sets it for the run (:meth:`session`) and restores the process's
        count afterwards, and the same scenario gives the same frames under every executor,
        whatever threads its workers were given. More threads speed up one large run (the
        threads benchmark's LeNet-5 run on MNIST, on a 2-core machine: 1.74 s with 1 thread,
        1.36 s with 2); ``workers`` runs side by side want ``threads * workers`` at most the
        cores.
    objective
        The loss and metrics (default: the data source's kind's, e.g. for classification
        cross-entropy, ``accuracy`` and ``loss``; see :attr:`resolved_objective`).
    augment
        Data augmentation of the training minibatches: ``augment(x, generator) -> x`` for one
        client's batch ``x``, drawing only from ``generator`` (a ``torch.Generator`` seeded
        from the client's keyed stream at each step, so runs stay reproducible); ``None``
        (default): none. Modules only (a paper network trains a module twin with it).
    """

    dataset: DataSource
    partition: Partition = _NATURAL
    model: Any = None
    eval_clients: int | None = None
    device: str = "cpu"
    threads: int = 1
    objective: Objective | None = None
    augment: Callable[[torch.Tensor, torch.Generator], torch.Tensor] | None = None

    def __post_init__(self) -> None:
        owner = type(self).__name__
        if not isinstance(self.dataset, DataSource):
            raise ValueError(
                f"{owner}.dataset must be a simfl.neural data source (Digits(), "
                f"FashionMNIST(), Tensors(...), ...), got {self.dataset!r}"
            )
        if not isinstance(self.partition, Partition):
            raise ValueError(
                f"{owner}.partition must be a simfl.neural partition (Shards(2), "
                f"Dirichlet(0.5), LogNormalSizes(1.0), Natural()), got {self.partition!r}"
            )
        if self.model is None:
            raise ValueError(
                f"{owner}.model is required: a torch.nn.Module factory (its class or a "
                f"zero-argument function), a simfl.neural.Model, or MLP(...)/CNN(...)"
            )
        if not isinstance(self.model, ModelSpec):
            as_model(self.model, f"{owner}.model")
        if self.objective is not None and not isinstance(self.objective, Objective):
            raise ValueError(
                f"{owner}.objective must be a simfl.neural.Objective or None, got "
                f"{self.objective!r}"
            )
        if self.augment is not None and not callable(self.augment):
            raise ValueError(f"{owner}.augment must be callable or None, got {self.augment!r}")
        if self.eval_clients is not None:
            check_int(f"{owner}.eval_clients", self.eval_clients, low=1)
        check_device(f"{owner}.device", self.device)
        check_int(f"{owner}.threads", self.threads, low=1)

    @property
    def resolved_objective(self) -> Objective:
        """:attr:`objective`, or the default of the data source's kind.

        ``"classification"`` for images, ``"next_token"`` for text, a
        :class:`~simfl.neural.Tensors`' own.
        """
        if self.objective is not None:
            return self.objective
        kind = getattr(self.dataset, "kind", "classification")
        return _CLASSIFY if kind == "classification" else Objective(kind)

    @property
    def metrics(self) -> tuple[str, ...]:  # type: ignore[override]
        """The objective's metrics, in column order."""
        return self.resolved_objective.metric_names

    @property
    def goals(self) -> dict[str, str]:  # type: ignore[override]
        """Each metric's goal (``"max"`` or ``"min"``)."""
        return self.resolved_objective.goal_map

    @property
    def fast_path(self) -> bool:
        """Whether the model trains on the paper networks' fast path (see the module doc)."""
        obj = self.resolved_objective
        return (
            isinstance(self.model, ModelSpec)
            and obj.kind == "classification"
            and obj.loss is None
            and obj.metrics is None
            and self.augment is None
        )

    @property
    def fork_safe(self) -> bool:
        """One CPU thread: a forked sweep worker can run it (see :attr:`Task.fork_safe`)."""
        return self.threads == 1 and self.device == "cpu"

    def session(self) -> AbstractContextManager[None]:
        """Set torch's threads to :attr:`threads` for the run (restored when it ends)."""
        return torch_threads(self.threads)

    def build(self, n_clients: int, streams: Streams) -> ClientData:
        """Load, split and bind the data to ``n_clients`` clients; build and check the model."""
        return ClientData(self, n_clients, streams)


@dataclass(frozen=True)
class ImageClassification(Supervised):
    """A labelled image data set split over the clients, and the network they train.

    :class:`Supervised` with image defaults: scikit-learn's 8x8 digits, FedRep's 2 classes per
    client (``Shards(2)``) and FedRep's MLP (784-512-256-64-C for 28x28 images). Any module
    may replace the network (``model=MyResNet``).
    """

    dataset: DataSource = _DIGITS
    partition: Partition = _SHARDS
    model: Any = _FEDREP_MLP


class ClientData:
    """A :class:`Supervised` task bound to a fleet: the clients' data and the model.

    Attributes
    ----------
    x_train, y_train, x_test, y_test
        The pooled samples and targets (torch tensors on the task's ``device``; on the CPU
        they share memory with the cached numpy arrays).
    train_parts, test_parts
        Each client's indices into the pools.
    network
        The built model: a paper :class:`~simfl.neural.models.Net` on the fast path, else a
        :class:`~simfl.neural.module.ModuleNet`.
    objective
        The task's loss and metrics.
    eval_clients
        The clients evaluated (sorted).
    """

    def __init__(self, spec: Supervised, n_clients: int, streams: Streams) -> None:
        self.spec = spec
        self.n_clients = n_clients
        self.streams = streams
        self.objective = spec.resolved_objective
        data = spec.dataset.load()
        self.dataset = data
        if data.kind != self.objective.kind:
            raise ValueError(
                f"{type(spec).__name__}.objective is for kind {self.objective.kind!r} but "
                f"{spec.dataset!r} holds {data.kind!r} data"
            )
        rng = streams.generator("neural/partition")
        self.train_parts, self.test_parts = spec.partition.split_dataset(data, n_clients, rng)
        self.device = torch.device(spec.device)
        self.x_train = torch.from_numpy(data.x_train).to(self.device)
        self.y_train = torch.from_numpy(data.y_train).to(self.device)
        self.x_test = torch.from_numpy(data.x_test).to(self.device)
        self.y_test = torch.from_numpy(data.y_test).to(self.device)
        self.network: Net | ModuleNet = self._network(spec, data.input_shape, data.n_classes)
        n_eval = n_clients if spec.eval_clients is None else min(spec.eval_clients, n_clients)
        if n_eval == n_clients:
            self.eval_clients: IntArray = np.arange(n_clients, dtype=np.int64)
        else:
            pick = streams.generator("neural/eval_clients").choice(n_clients, n_eval, False)
            self.eval_clients = np.sort(pick).astype(np.int64)

    def _network(
        self, spec: Supervised, input_shape: tuple[int, ...], n_classes: int | None
    ) -> Net | ModuleNet:
        """The paper network (fast path) or the module, checked on the data."""
        owner = f"{type(spec).__name__}.model"
        if spec.fast_path:
            assert isinstance(spec.model, ModelSpec)
            if n_classes is None:
                raise ValueError(f"{owner}: a paper network needs a classification data set")
            return spec.model.build(input_shape, n_classes)
        if isinstance(spec.model, ModelSpec):
            if n_classes is None:
                raise ValueError(f"{owner}: a paper network needs a number of classes")
            model = Model(spec.model.factory(input_shape, n_classes))
        else:
            model = as_model(spec.model, owner)
        empty = [c for c, p in enumerate(self.train_parts) if p.size == 0]
        if empty:
            raise ValueError(
                f"{type(spec).__name__}: clients {empty[:10]}{' ...' if len(empty) > 10 else ''} "
                f"have no training samples under {spec.partition!r}; every client of the "
                f"fleet trains on its own data (use fewer devices or another partition)"
            )
        if self.x_train.shape[0] == 0:
            raise ValueError(f"{type(spec).__name__}.dataset has no training samples")
        first = self.train_parts[0][:2]
        first = np.resize(first, 2)  # two samples (a client with one repeats it)
        ids = torch.from_numpy(first).to(self.device)
        x, y = self.x_train.index_select(0, ids), self.y_train.index_select(0, ids)
        check_on_data(owner, model, self.objective, x, y, self.device)
        return ModuleNet(model, self.objective, (x, y), self.device, augment=spec.augment)

    def describe(self) -> dict[str, Any]:
        """What trains the model (``res.meta["training"]``): the model, its size, the path."""
        net = self.network
        if isinstance(net, ModuleNet):
            return {
                "model": net.name,
                "parameters": net.n_params(),
                "buffers": len(net.buffer_names),
                "trainer": net.trainer["path"],
                "trainer_reason": net.trainer["reason"],
            }
        return {
            "model": net.name,
            "parameters": net.n_params(),
            "buffers": 0,
            "trainer": "paper",
            "trainer_reason": "a paper network under the default objective: its fast path",
        }

    def client_sizes(self) -> NDArray[np.float64]:
        """Training samples of each client."""
        return np.array([p.size for p in self.train_parts], dtype=np.float64)

    def train_index(self, clients: IntArray) -> IntArray:
        """``(C, Nmax)`` indices into the training pool of ``clients``, padded with -1."""
        return pad(self.train_parts, clients)

    def test_index(self, clients: IntArray) -> IntArray:
        """``(C, Tmax)`` indices into the test pool of ``clients``, padded with -1."""
        return pad(self.test_parts, clients)

    def classes(self, client: int) -> set[int]:
        """The classes of a client's training samples."""
        return {int(v) for v in np.unique(self.dataset.y_train[self.train_parts[client]])}


#: The former name of :class:`ClientData` (image tasks were the only ones).
ClientImages = ClientData


def check_on_data(
    owner: str,
    model: Model,
    objective: Objective,
    x: torch.Tensor,
    y: torch.Tensor,
    device: torch.device,
) -> None:
    """Run the model on two samples of the data and its loss and metrics on the output.

    Raises ``ModelCheckError`` (a ``ValueError``) naming ``owner`` if the factory does not
    build a module, the forward pass fails, or the loss or a metric is not a finite-typed
    scalar.
    """
    from simfl.neural.module import build_module

    try:
        module = build_module(model.factory, 0).to(device)
    except ModelCheckError:
        raise
    except Exception as exc:
        raise ModelCheckError(f"{owner}: the model factory failed: {exc!r}") from exc
    module.train()
    shape = tuple(x.shape[1:])
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            out = module(x)
    except Exception as exc:
        raise ModelCheckError(
            f"{owner}: the forward pass of {type(module).__name__} fails on samples of the "
            f"data (one sample's shape {shape}, dtype {x.dtype}): {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(out, torch.Tensor):
        raise ModelCheckError(
            f"{owner}: the forward pass of {type(module).__name__} returned "
            f"{type(out).__name__}, not a tensor"
        )
    fns = {"loss": objective.loss_fn, **objective.metric_fns}
    for name, fn in fns.items():
        what = "Objective.loss" if name == "loss" else f"Objective.metrics[{name!r}]"
        try:
            value = fn(out, y)
        except Exception as exc:
            raise ModelCheckError(
                f"{what} fails on the model's output (shape {tuple(out.shape)}) and the "
                f"targets (shape {tuple(y.shape)}, dtype {y.dtype}): {type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(value, torch.Tensor) or value.dim() != 0:
            got = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            raise ModelCheckError(
                f"{what} must return a scalar tensor (the batch's mean), got {got}"
            )
    if not objective.loss_fn(out, y).requires_grad:
        raise ModelCheckError(
            "Objective.loss does not depend on the model's parameters (no gradient)"
        )
