"""Image classification on a real data set split over the clients of the fleet.

:class:`ImageClassification` names a data set (:mod:`simfl.neural.data`), a partition
(:mod:`simfl.neural.partition`) and a network (:mod:`simfl.neural.models`). Binding it to a
fleet (:meth:`ImageClassification.build`) loads the data (cached per process), splits the
training pool over the ``n`` clients (client ``i`` lives on device ``i``) with the run's keyed
stream ``"neural/partition"``, deals each client a test set with the same classes
(:func:`~simfl.neural.partition.match_test`) and builds the network.

Metrics (the FedRep code's ``test_img_local_all``): ``accuracy`` is the average local test
accuracy, each evaluated client scored on its own test set with its own personalised model
(its head, its local layers, or the shared model) and weighted by its number of test samples;
``loss`` the cross-entropy averaged the same way.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from numpy.typing import NDArray

from simfl._checks import check_int
from simfl.neural.data import DataSource, Digits
from simfl.neural.models import MLP, ModelSpec, Net
from simfl.neural.partition import Partition, Shards
from simfl.rng import Streams
from simfl.tasks.base import Task

__all__ = ["ClientImages", "ImageClassification", "check_device", "pad", "torch_threads"]

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


@dataclass(frozen=True)
class ImageClassification(Task):
    """A labelled image data set split over the clients, and the network they train.

    Parameters
    ----------
    dataset
        Where the images come from (default: scikit-learn's 8x8 digits).
    partition
        How the training pool is split (default: FedRep's 2 classes per client).
    model
        The network (default: FedRep's MLP, 784-512-256-64-C for 28x28 images).
    eval_clients
        Evaluate this many clients (a fixed, uniformly drawn subset; ``None``: all of them).
    device
        Where the cohort's training and the evaluation run: ``"cpu"`` (default) or a CUDA
        device (``"cuda"``, ``"cuda:1"``), which must exist on the machine that builds the
        scenario. The server state stays on the CPU (float32 either way); results agree with
        the CPU's to floating-point rounding, not bit for bit.
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
    """

    dataset: DataSource = _DIGITS
    partition: Partition = _SHARDS
    model: ModelSpec = _FEDREP_MLP
    eval_clients: int | None = None
    device: str = "cpu"
    threads: int = 1

    metrics: ClassVar[tuple[str, ...]] = ("accuracy", "loss")
    goals: ClassVar[dict[str, str]] = {"accuracy": "max", "loss": "min"}

    def __post_init__(self) -> None:
        if not isinstance(self.dataset, DataSource):
            raise ValueError(
                f"ImageClassification.dataset must be a simfl.neural data source (Digits(), "
                f"MNIST(), FashionMNIST(), ...), got {self.dataset!r}"
            )
        if not isinstance(self.partition, Partition):
            raise ValueError(
                f"ImageClassification.partition must be a simfl.neural partition (Shards(2), "
                f"Dirichlet(0.5), LogNormalSizes(1.0), Natural()), got {self.partition!r}"
            )
        if not isinstance(self.model, ModelSpec):
            raise ValueError(
                f"ImageClassification.model must be MLP(...) or CNN(...), got {self.model!r}"
            )
        if self.eval_clients is not None:
            check_int("ImageClassification.eval_clients", self.eval_clients, low=1)
        check_device("ImageClassification.device", self.device)
        check_int("ImageClassification.threads", self.threads, low=1)

    @property
    def fork_safe(self) -> bool:
        """One CPU thread: a forked sweep worker can run it (see :attr:`Task.fork_safe`)."""
        return self.threads == 1 and self.device == "cpu"

    def session(self) -> AbstractContextManager[None]:
        """Set torch's threads to :attr:`threads` for the run (restored when it ends)."""
        return torch_threads(self.threads)

    def build(self, n_clients: int, streams: Streams) -> ClientImages:
        """Load, split and bind the data to ``n_clients`` clients."""
        return ClientImages(self, n_clients, streams)


class ClientImages:
    """An :class:`ImageClassification` bound to a fleet: the clients' data and the network.

    Attributes
    ----------
    x_train, y_train, x_test, y_test
        The pooled images (torch tensors on the task's ``device``; on the CPU they share
        memory with the cached numpy arrays).
    train_parts, test_parts
        Each client's indices into the pools.
    network
        The built :class:`~simfl.neural.models.Net`.
    eval_clients
        The clients evaluated (sorted).
    """

    def __init__(self, spec: ImageClassification, n_clients: int, streams: Streams) -> None:
        self.spec = spec
        self.n_clients = n_clients
        self.streams = streams
        data = spec.dataset.load()
        self.dataset = data
        rng = streams.generator("neural/partition")
        self.train_parts = spec.partition.split(
            data.y_train,
            n_clients,
            data.n_classes,
            rng,
            None if data.groups is None else data.groups[0],
        )
        self.test_parts = spec.partition.split_test(
            self.train_parts, data.y_train, data.y_test, data.n_classes, rng, data.groups
        )
        self.network: Net = spec.model.build(data.input_shape, data.n_classes)
        self.device = torch.device(spec.device)
        self.x_train = torch.from_numpy(data.x_train).to(self.device)
        self.y_train = torch.from_numpy(data.y_train).to(self.device)
        self.x_test = torch.from_numpy(data.x_test).to(self.device)
        self.y_test = torch.from_numpy(data.y_test).to(self.device)
        n_eval = n_clients if spec.eval_clients is None else min(spec.eval_clients, n_clients)
        if n_eval == n_clients:
            self.eval_clients: IntArray = np.arange(n_clients, dtype=np.int64)
        else:
            pick = streams.generator("neural/eval_clients").choice(n_clients, n_eval, False)
            self.eval_clients = np.sort(pick).astype(np.int64)

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
