"""What the baselines of :mod:`simfl.neural.baselines` share: state, batched steps, a base.

A :class:`BaselineState` adds per-client tensors to the neural state. The baselines' local
updates are not a schedule of :class:`~simfl.neural.train.Phase` s, so they are written here
step by step, still batched over the cohort: :func:`minibatches` yields each step's minibatch
positions of every client (a fresh permutation per epoch and batch role from the client's keyed
generator, as :func:`~simfl.neural.train.train_cohort` draws them), :func:`batch_loss` and
:func:`grads` give each client's loss and its own gradient (the gradient of the sum splits by
client), and :class:`Momentum` is the client optimiser's step on stacked parameters
(``torch.optim.SGD``'s, or Adam's and AdamW's of :mod:`simfl.neural.optim`), masked for the
clients that have no batch left or reached their step limit.

Any ``torch.nn.Module`` (:class:`~simfl.neural.module.ModuleNet`) runs through the same
pieces. Its params dict also holds the module's buffers (BatchNorm's running statistics and
``num_batches_tracked``): :func:`stack_copy` and :func:`leaves` stack them per client without
a gradient, :func:`grads` differentiates only the tensors that require one (so
:class:`Momentum`, control variates, proximal and mixing terms, all written over the
gradient's names, never touch a buffer), and :func:`batch_loss` runs the module in training
mode on each client's exact minibatch (:meth:`~simfl.neural.module.ModuleNet.losses`), whose
forward pass updates the client's stacked buffers in place. A client's update is what one
torch module trained by the method's reference code does: every training forward pass updates
the module's running statistics, whatever parameters it runs with (Per-FedAvg's adapted and
HF-MAML's perturbed copies share the model's buffers; pFedMe's local copy ``w`` shares those of
the personal model ``theta``, the module its code trains), while a method with two models per
client (Ditto, APFL) gives each its own buffers. Dropout masks come from :class:`StepSeeds`,
keyed per client. The server averages buffers by training-set size (integer ones rounded); a
server step, control variate or mixing rule of a method applies to its trainable parameters
only (each method's module docstring says what it does with buffers).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as nnf
from numpy.typing import NDArray
from torch import Tensor

from simfl._checks import check_int
from simfl.algorithms.base import Updates
from simfl.neural.base import EVAL_CHUNK, OPTIM, NeuralAlgorithm, NeuralState
from simfl.neural.models import ModelSpec, Net, Params
from simfl.neural.module import ModuleNet, as_model
from simfl.neural.optim import SGD, ClientOptimizer, OptState
from simfl.neural.task import ClientImages, Supervised
from simfl.neural.train import Phase, epoch_order, score_cohort, train_cohort
from simfl.rng import Streams

__all__ = [
    "CONTROL",
    "PERSONAL",
    "Baseline",
    "BaselineState",
    "Momentum",
    "StepSeeds",
    "batch_loss",
    "grads",
    "minibatches",
]

IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]
#: Prefixes of the per-client tensors an update carries besides the trained model.
PERSONAL = "personal/"
CONTROL = "control/"


@dataclass(frozen=True)
class BaselineState(NeuralState):
    """:class:`~simfl.neural.base.NeuralState` plus what the baselines keep besides the model."""

    #: Each client's own tensors (personal model, SCAFFOLD control, APFL's ``alpha``).
    personal: Mapping[int, Params] = field(default_factory=dict)
    #: Server tensors besides the model (SCAFFOLD's control ``c``).
    extra: Params = field(default_factory=dict)
    #: The initial model (every client's personal model before it first takes part).
    start: Params = field(default_factory=dict)

    def stacked(self, clients: IntArray, default: Params) -> Params:
        """The ``personal`` tensors of ``clients`` named in ``default``, stacked (client axis)."""
        return {
            n: torch.stack([self.personal.get(int(c), default)[n] for c in clients])
            for n in default
        }


# ---------------------------------------------------------------------- batched SGD pieces
def stack_copy(params: Params, c: int, buffers: Collection[str] = ()) -> Params:
    """Each of ``params`` (no client axis) expanded to ``(c, ...)`` as a new leaf with grad.

    ``buffers`` (a module's running statistics) are stacked copies without a gradient.
    """
    return {
        n: p.detach().expand(c, *p.shape).clone().requires_grad_(n not in buffers)
        for n, p in params.items()
    }


def leaves(params: Params, buffers: Collection[str] = ()) -> Params:
    """New leaves (requiring grad) with the values of stacked ``params``; ``buffers`` copies."""
    return {n: p.detach().clone().requires_grad_(n not in buffers) for n, p in params.items()}


class StepSeeds:
    """Each client's keyed seeds for a module's random layers (dropout), one per forward pass.

    For a :class:`~simfl.neural.module.ModuleNet` with random layers, each client's seed
    generator is drawn from its minibatch generator ``rngs[i]`` before its first permutation
    (as :func:`~simfl.neural.train.train_cohort` draws it), and every training forward pass
    draws one seed for each client with a sample in it, so a client's masks follow only its own
    steps. Otherwise (a paper network, a module without random layers) nothing is drawn and the
    passes get ``None``.
    """

    def __init__(self, net: Net | ModuleNet, rngs: Sequence[np.random.Generator]) -> None:
        self.gens: list[np.random.Generator] | None = None
        if isinstance(net, ModuleNet) and net.random:
            self.gens = [np.random.default_rng(r.integers(2**63)) for r in rngs]

    def __call__(self, going: BoolArray) -> list[int] | None:
        """One seed per client for a pass in which the clients ``going`` have samples."""
        if self.gens is None:
            return None
        return [int(g.integers(2**63)) if on else 0 for g, on in zip(self.gens, going, strict=True)]


def batch_loss(
    net: Net | ModuleNet,
    params: Params,
    x: Tensor,
    y: Tensor,
    idx: Tensor,
    pos: Tensor,
    seeds: StepSeeds | None = None,
) -> Tensor:
    """Each client's mean loss on its minibatch ``pos`` (-1: none; 0 for no sample).

    ``idx`` ``(C, Nmax)`` holds each client's sample indices into ``x`` (padded with -1), ``pos``
    ``(C, B)`` positions into its row, the valid ones first. A paper network computes the
    cross-entropy of every client's padded batch and masks it; a module computes its
    objective's loss on exactly each client's samples in training mode
    (:meth:`~simfl.neural.module.ModuleNet.losses`: ``params``' stacked buffers are updated in
    place, ``seeds`` draws the dropout seeds).
    """
    valid = pos >= 0
    ids = idx.gather(1, pos.clamp(min=0))
    flat = ids.clamp(min=0)
    if isinstance(net, ModuleNet):
        n_valid = valid.sum(dim=1).numpy()
        sel = flat.to(x.device)
        return net.losses(
            params,
            x[sel.reshape(-1)].reshape(*sel.shape, *x.shape[1:]),
            y[sel],
            n_valid,
            None if seeds is None else seeds(n_valid > 0),
        )
    logits = net.forward(params, x[flat.reshape(-1)].reshape(*flat.shape, *x.shape[1:]))
    ce = nnf.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), y[flat].reshape(-1), reduction="none"
    ).reshape(ids.shape)
    return (ce * valid).sum(dim=1) / valid.sum(dim=1).clamp(min=1)


def grads(loss: Tensor, params: Params) -> Params:
    """Gradient of the cohort's summed loss: each client's own, by parameter name.

    Only the tensors of ``params`` that require a gradient (not a module's buffers).
    """
    names = [n for n, p in params.items() if p.requires_grad]
    values = torch.autograd.grad(loss.sum(), [params[n] for n in names])
    return dict(zip(names, values, strict=True))


def minibatches(
    rngs: Sequence[np.random.Generator],
    counts: IntArray,
    batch_size: int,
    epochs: int,
    limit: NDArray[np.float64] | None = None,
    roles: int = 1,
) -> Iterator[tuple[list[Tensor], BoolArray]]:
    """The cohort's local steps: per step, ``roles`` position batches ``(C, B)`` and who steps.

    Every epoch each client draws ``roles`` permutations (:func:`~simfl.neural.train.
    epoch_order`) in role order; a client steps while it has batches left and has taken fewer
    than ``limit`` steps (its positions are -1 otherwise).
    """
    c = len(rngs)
    done = np.zeros(c)
    for _ in range(epochs):
        orders = []
        for _role in range(roles):
            rows = [epoch_order(rngs[i], int(counts[i]), batch_size) for i in range(c)]
            out = np.full((c, max(r.shape[0] for r in rows), batch_size), -1, dtype=np.int64)
            for i, r in enumerate(rows):
                out[i, : r.shape[0]] = r
            orders.append(out)
        for s in range(orders[0].shape[1]):
            active = orders[0][:, s, 0] >= 0
            if limit is not None:
                active &= done < limit
            if not active.any():
                continue
            yield [torch.from_numpy(np.where(active[:, None], o[:, s], -1)) for o in orders], active
            done[active] += 1


@dataclass
class Momentum:
    """The client optimiser's step for stacked parameters, masked per client (in place).

    It steps the gradient's names (:func:`grads`: trainable parameters, never buffers).

    :class:`~simfl.neural.SGD` steps as ``torch.optim.SGD`` writes it, ``buf.mul_(momentum)
    .add_(g)`` (the baselines' numbers follow it; the cohort trainer's ``torch.add(g, buf,
    alpha=momentum)`` rounds differently where ``momentum * buf`` is inexact); Adam and AdamW
    take their own :meth:`~simfl.neural.optim.ClientOptimizer.step`. :attr:`bufs` is the
    optimiser state (``"<slot>/<parameter>"``, stacked per client); give it to start from a
    kept state.
    """

    sgd: ClientOptimizer
    bufs: OptState = field(default_factory=dict)

    def step(self, params: Params, grad: Params, active: BoolArray) -> None:
        """``g = grad + wd w``; ``buf = momentum buf + g``; ``w -= lr buf`` (active clients).

        For Adam and AdamW their step instead. ``grad``'s tensors are fresh and may be
        changed in place.
        """
        sgd = self.sgd
        act = torch.from_numpy(active)
        if not isinstance(sgd, SGD):
            sgd.step(params, self.bufs, list(grad), list(grad.values()), act)
            return
        everyone = bool(active.all())
        with torch.no_grad():
            for n, g in grad.items():
                p = params[n]
                if sgd.weight_decay and n.endswith(".weight"):
                    g.add_(p, alpha=sgd.weight_decay)
                key = f"momentum_buffer/{n}"
                buf = self.bufs.get(key)
                if everyone:  # torch.optim.SGD's own in-place order
                    if buf is None:
                        self.bufs[key] = buf = g
                    else:
                        buf.mul_(sgd.momentum).add_(g)
                    p.add_(buf, alpha=-sgd.lr)
                else:
                    mask = act.reshape(-1, *([1] * (p.dim() - 1)))
                    new = g if buf is None else buf * sgd.momentum + g
                    self.bufs[key] = torch.where(mask, new, 0.0 if buf is None else buf)
                    p.add_(self.bufs[key] * mask, alpha=-sgd.lr)


def masked(active: BoolArray, like: Tensor) -> Tensor:
    return torch.from_numpy(active).reshape(-1, *([1] * (like.dim() - 1)))


# ---------------------------------------------------------------------- the common base
class Baseline(NeuralAlgorithm):
    """Base of the baselines: every layer shared, a :class:`BaselineState`, own evaluation.

    Evaluation (``_scores``): each client is scored with :meth:`eval_params` (the global model,
    its personal model, or Per-FedAvg's adapted one). With ``finetune_epochs > 0`` every
    evaluated client, whether or not it ever took part, first trains the head of that model on
    its own training data for that many epochs (the method's ``optimizer``, the keyed stream
    ``("neural/finetune", client, aggregations so far)``); the rest of the model stays fixed.
    That is the FedRep paper's "+FT" rule (10 head epochs once training ends), and applied to
    every method it is the same final budget the FedRep code gives its own heads in its extra
    last round (see :class:`~simfl.neural.NeuralFedRep`). ``0`` (the default) scores the model
    as trained, so a client never selected is scored with the initial model.
    """

    epochs: int
    #: Forward and backward passes per sample of each local epoch (for ``work``).
    passes: ClassVar[float] = 1.0
    #: Whether clients are evaluated with their personal models (Ditto, pFedMe, L2GD).
    evaluates_personal: ClassVar[bool] = False

    def local_layers(self, network: Net | ModuleNet) -> tuple[str, ...]:
        """None: every layer is shared (personal models live in ``BaselineState.personal``)."""
        return ()

    def check_model(self, task: Supervised) -> None:
        """Refuse ``Model(norm="local")``: a baseline's clients train the whole model."""
        if isinstance(task.model, ModelSpec):
            return
        model = as_model(task.model, f"{type(task).__name__}.model")
        if model.norm == "local":
            raise ValueError(
                f"{type(task).__name__}.model: Model(norm='local') keeps the normalisation "
                f"layers on the clients (FedBN), which {type(self).__name__} does not support "
                f"(its clients train the whole model); use Model(norm='shared')"
            )

    def local_epochs(self) -> int:
        """Epochs of minibatch steps of a round (what ``job_steps`` counts)."""
        return self.epochs

    def phases(self, network: Net | ModuleNet) -> tuple[Phase, ...]:
        """Every layer for :meth:`local_epochs` (what ``work`` and ``job_steps`` count)."""
        return (Phase(network.layer_names, self.local_epochs()),)

    def work(self, state: NeuralState, clients: IntArray) -> NDArray[np.float64]:
        """GMAC: samples x epochs x per-sample training cost x :attr:`passes`."""
        return np.asarray(super().work(state, clients) * self.passes, dtype=np.float64)

    def initial_state(self, data: ClientImages, streams: Streams) -> BaselineState:
        """The neural initial state, its model kept as ``start`` and :meth:`initial_extra`."""
        base = super().initial_state(data, streams)
        values = {f.name: getattr(base, f.name) for f in fields(base)}
        return BaselineState(**values, start=dict(base.shared), extra=self.initial_extra(base))

    def initial_extra(self, state: NeuralState) -> Params:
        """The server's extra tensors before round 0 (default: none)."""
        return {}

    def eval_params(self, state: BaselineState, data: ClientImages, clients: IntArray) -> Params:
        """The models ``clients`` are evaluated with.

        Their personal ones if :attr:`evaluates_personal` (the initial model for a client never
        selected), else the global model.
        """
        if self.evaluates_personal:
            return state.stacked(clients, state.start)
        return dict(state.shared)

    def _data(self, data: ClientImages, clients: IntArray) -> tuple[Tensor, IntArray]:
        index = data.train_index(clients)
        return torch.from_numpy(index), (index >= 0).sum(axis=1)

    def _rngs(
        self, streams: Streams, clients: IntArray, round: int, key: str = "neural/batches"
    ) -> list[np.random.Generator]:
        """Each client's keyed minibatch stream ``(key, client, round)``."""
        return [streams.generator(key, int(c), round) for c in clients]

    def _scores(
        self, state: NeuralState, data: ClientImages
    ) -> Iterator[tuple[dict[str, NDArray[np.float64]], NDArray[np.int64]]]:
        """Per chunk of evaluated clients: each metric's sum per client, and its samples."""
        assert isinstance(state, BaselineState)
        net = state.network
        clients = data.eval_clients
        for i in range(0, clients.size, EVAL_CHUNK):
            chunk = clients[i : i + EVAL_CHUNK]
            params = self.eval_params(state, data, chunk)
            if self.finetune_epochs > 0:
                rngs = self._rngs(data.streams, chunk, state.round, "neural/finetune")
                params, _ = train_cohort(
                    net,
                    params,
                    data.x_train,
                    data.y_train,
                    data.train_index(chunk),
                    (Phase(net.head, self.finetune_epochs),),
                    self.optimizer,
                    rngs,
                )
            index = data.test_index(chunk)
            yield score_cohort(net, params, data.x_test, data.y_test, index), (index >= 0).sum(1)

    def _momentum(
        self, state: NeuralState, clients: IntArray, names: Sequence[str], space: str = ""
    ) -> Momentum:
        """The optimiser of ``clients``' parameters ``names``: fresh, or their kept state.

        ``space`` names it apart from another optimiser of the same update (APFL's ``w`` and
        ``v``); its final state goes into the update with :meth:`_optimizer_rows`.
        """
        start = self.start_opt_state(state, clients, names, space)
        return Momentum(self.optimizer, {} if start is None else start)

    def _optimizer_rows(self, bufs: OptState | None, space: str = "") -> dict[str, Tensor]:
        """A final optimiser state as rows of an update (``state="keep"``; else none)."""
        if bufs is None or self.optimizer.state != "keep":
            return {}
        return {OPTIM + space + k: v for k, v in bufs.items()}

    def _updates(
        self, state: NeuralState, clients: IntArray, params: Params, loss: NDArray[np.float64]
    ) -> Updates:
        return Updates(
            clients.astype(np.int64),
            {n: p.detach().numpy() for n, p in params.items()},
            loss=np.nan_to_num(loss, nan=0.0),
            weight=state.sizes[clients],
        )

    def _personal_rows(
        self, state: BaselineState, updates: Updates, prefix: str
    ) -> dict[int, Params]:
        """Each updated client's ``personal`` tensors with the ``prefix`` rows of ``updates``."""
        names = [n for n in updates.params if n.startswith(prefix)]
        out: dict[int, Params] = dict(state.personal)
        for j, c in enumerate(updates.clients):
            own = dict(out.get(int(c), {}))
            for n in names:
                own[n[len(prefix) :]] = torch.from_numpy(np.array(updates.params[n][j]))
            out[int(c)] = own
        return out


def check_common(alg: Baseline) -> None:
    """The checks of the fields every baseline has: epochs, optimisers, fine-tuning."""
    owner = type(alg).__name__
    check_int(f"{owner}.epochs", alg.epochs, low=1)
    alg.check_optimizers()
    check_int(f"{owner}.finetune_epochs", alg.finetune_epochs, low=0)


def mean_loss(loss_sum: NDArray[np.float64], steps: NDArray[np.float64]) -> NDArray[np.float64]:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(loss_sum / steps, dtype=np.float64)
