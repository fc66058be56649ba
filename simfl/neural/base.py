"""What the neural algorithms share: the state, batched local updates, aggregation, evaluation.

Every algorithm of :mod:`simfl.neural.algorithms` splits the network's layers into *shared*
ones (the server averages them and sends them to the cohort) and *local* ones (each client keeps
its own copy between rounds: FedRep's and FedPer's head, LG-FedAvg's local layers, everything
for Local-only), and runs a local schedule of :class:`~simfl.neural.train.Phase` s. The state is
a value: ``aggregate`` returns a new one and never changes the old one or its tensors.

* ``local_updates`` trains the cohort in one batched call (:func:`~simfl.neural.train.
  train_cohort`) from the shared parameters and each client's own local ones (a client that
  never took part starts from the initial local parameters, as every ``w_locals[i]`` starts as
  the initial model in the FedRep code). Minibatch order comes from the keyed stream
  ``("neural/batches", client, round)``, so a client's update depends only on the state and its
  own data. The :class:`~simfl.algorithms.Updates` hold numpy arrays with a leading client
  axis: the trained parameters (``params``), the clients, their training-set sizes (the
  aggregation ``weight``) and their mean minibatch ``loss``.
* ``aggregate`` replaces each shared parameter by the average of the cohort's copies weighted by
  training-set size (the FedRep code's ``lens`` weighting, also the SRPFL code's) and stores each
  aggregated client's local parameters (and the cohort's average of them, for
  ``finetune_from="average"``); nothing else changes. With a ``server_optimizer``
  (:mod:`simfl.neural.server`: FedAvgM, FedAdam, FedYogi, FedAdagrad) the server instead steps
  from its model along the average's move, keeping the optimiser's state in
  :attr:`NeuralState.server_state`.
* Client optimisers (:mod:`simfl.neural.optim`: SGD, Adam, AdamW) with ``state="keep"`` carry
  each client's optimiser state over to its next local update: an update holds the final state
  as rows named ``"optim/<slot>/<parameter>"`` (:data:`OPTIM`), never averaged into the model
  nor counted in the payload, and ``keep_local`` stores them in
  :attr:`NeuralState.opt_state`, as it stores the local parameters (so asynchronous and tiered
  policies keep them too).
* ``evaluate`` scores every evaluated client with its personalised model; with
  ``finetune_epochs > 0`` each client first trains its personal part (its local layers, or the
  head when there are none, as FedAvg+FT) on its own training data for that many epochs, from a
  stream keyed by ``("neural/finetune", client, aggregations so far)``. That is FedRep's "+FT"
  protocol, and how the SRPFL code evaluates at every test; ``finetune_from="average"`` starts
  every client from the size-weighted average of the last cohort's local parameters, as the
  SRPFL code's ``test_fine_tune`` does (its server averages every key, local ones included),
  instead of from the client's own.
* ``work`` is the GMAC (1e9 multiply-accumulates) of the local update: samples times epochs times
  :meth:`~simfl.neural.models.Net.train_macs` of each phase, so a fleet's compute
  distribution is in seconds per GMAC. ``payload`` is the bytes of the float32 shared parameters,
  each way.

Runs are reproducible bit for bit for a given torch build (the number of torch threads, which
changes how CPU kernels round, is the task's :attr:`~simfl.neural.ImageClassification.threads`,
set for the run whatever the process has); a client's update computed in a different
cohort agrees to floating-point rounding (batched matrix products may block differently).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch
from numpy.typing import NDArray

from simfl.algorithms.base import Algorithm, ClientMetrics, Updates
from simfl.network import Payload
from simfl.neural.models import Params
from simfl.neural.module import AnyNet, ModuleNet
from simfl.neural.optim import SGD, ClientOptimizer, OptState
from simfl.neural.server import ServerOptimizing, check_server_optimizer, server_step
from simfl.neural.task import ClientData, Supervised
from simfl.neural.train import Phase, score_cohort, train_cohort
from simfl.outcome import Outcome
from simfl.rng import Streams
from simfl.tasks.base import Task

__all__ = [
    "EVAL_CHUNK",
    "GMAC",
    "OPTIM",
    "NeuralAlgorithm",
    "NeuralState",
    "weighted_means",
    "weighted_means64",
]

IntArray = NDArray[np.int64]
#: Multiply-accumulates per work unit.
GMAC = 1e9
#: Clients evaluated per batched call (bounds the memory of stacked local layers).
EVAL_CHUNK = 32
S = TypeVar("S", bound="NeuralState")
#: Prefix of the rows of an update that hold a client's optimiser state (``state="keep"``).
OPTIM = "optim/"


@dataclass(frozen=True)
class NeuralState:
    """Server parameters, each client's local parameters, and what ``work`` needs."""

    network: AnyNet
    #: The server's parameters and buffers (no client axis).
    shared: Params
    #: The local parameters of a client that has none of its own yet.
    local_default: Params
    #: Each client's own local parameters, once it has been aggregated.
    local: Mapping[int, Params]
    #: Training samples of every client.
    sizes: NDArray[np.float64]
    #: Size-weighted average of the local parameters of the last aggregated cohort.
    local_average: Params = field(default_factory=dict)
    #: Aggregations so far.
    round: int = 0
    #: Each client's optimiser state after its last aggregated update (client optimisers with
    #: ``state="keep"``), by ``"<slot>/<parameter>"``, without the client axis.
    opt_state: Mapping[int, Params] = field(default_factory=dict)
    #: The server optimiser's state, by ``"<slot>/<parameter>"`` (float64).
    server_state: Params = field(default_factory=dict)

    def client_params(self, clients: IntArray) -> Params:
        """The models of ``clients``: shared parameters as they are, local ones stacked."""
        params = dict(self.shared)
        for name in self.local_default:
            params[name] = torch.stack(
                [self.local.get(int(c), self.local_default)[name] for c in clients]
            )
        return params


class NeuralAlgorithm(Algorithm[NeuralState], ServerOptimizing):
    """Base of the neural algorithms (see the module docstring); subclasses are dataclasses.

    Partial work (``partial_work``): a step is one minibatch step, so a client under a
    deadline trains on a prefix of its batches (:meth:`partial_updates`).

    Every subclass has the keyword-only field ``server_optimizer`` (default ``None``: the
    size-weighted average; :class:`~simfl.neural.server.ServerOptimizing`), and its
    ``__post_init__`` calls :meth:`check_optimizers`. The simfl classes are declared with
    ``repr=False`` and use this class's ``__repr__``: the dataclass repr with
    ``server_optimizer`` last, shown only when set.
    """

    partial_work: ClassVar[bool] = True
    #: Why this algorithm takes no server optimiser (``None``: it does, on the size-weighted
    #: average of the shared parameters that its aggregation takes).
    server_rule: ClassVar[str | None] = None
    #: Why this algorithm's client optimiser must be :class:`~simfl.neural.SGD` (``None``:
    #: any client optimiser).
    sgd_only: ClassVar[str | None] = None
    #: Why this algorithm's client optimiser must have ``state="reset"`` (``None``: either).
    reset_only: ClassVar[str | None] = None

    optimizer: ClientOptimizer
    #: Epochs each client fine-tunes its personal part before it is evaluated (0: none).
    finetune_epochs: int = 0
    #: Where fine-tuning starts: ``"own"`` local parameters or the last cohort's ``"average"``.
    finetune_from: str = "own"

    # ------------------------------------------------------------------ what subclasses say
    def local_layers(self, network: AnyNet) -> tuple[str, ...]:
        """Layers each client keeps between rounds (the rest is shared)."""
        raise NotImplementedError

    def phases(self, network: AnyNet) -> tuple[Phase, ...]:
        """The local schedule of one round."""
        raise NotImplementedError

    def prox(self, state: NeuralState) -> tuple[float, Params] | None:
        """A proximal term ``(mu, w0)`` for the local loss (FedProx), or ``None``."""
        return None

    def exchanged(self, state: NeuralState) -> tuple[str, ...]:
        """Names of the parameters sent down and up each round (default: the shared ones)."""
        return tuple(state.shared)

    def check_model(self, task: Supervised) -> None:
        """Raise ``ValueError`` if the task's network does not suit this algorithm."""

    def check_network(self, network: AnyNet) -> None:
        """Raise ``ValueError`` if the built network does not suit this algorithm."""

    def check_optimizers(self) -> None:
        """Raise ``ValueError`` naming the field if an optimiser does not suit this algorithm.

        ``optimizer`` must be a client optimiser (an SGD where :attr:`sgd_only`, with
        ``state="reset"`` where :attr:`reset_only`), ``server_optimizer`` ``None`` or a server
        optimiser (``None`` where :attr:`server_rule`).
        """
        owner = type(self).__name__
        opt = self.optimizer
        if self.sgd_only is not None and not isinstance(opt, SGD):
            raise ValueError(
                f"{owner}.optimizer must be a simfl.neural.SGD ({self.sgd_only}), got {opt!r}"
            )
        if not isinstance(opt, ClientOptimizer):
            raise ValueError(
                f"{owner}.optimizer must be a simfl.neural.SGD, Adam or AdamW (a "
                f"ClientOptimizer), got {opt!r}"
            )
        if self.reset_only is not None and opt.state != "reset":
            raise ValueError(
                f"{owner}.optimizer.state must be 'reset' ({self.reset_only}), got {opt.state!r}"
            )
        check_server_optimizer(owner, self.server_optimizer)
        if self.server_optimizer is not None and self.server_rule is not None:
            raise ValueError(f"{owner}.server_optimizer must be None: {self.server_rule}")

    def __repr__(self) -> str:
        """The dataclass repr, with ``server_optimizer`` last and only when it is set."""
        parts = [
            f"{f.name}={getattr(self, f.name)!r}"
            for f in fields(self)
            if f.repr and f.name != "server_optimizer"
        ]
        if self.server_optimizer is not None:
            parts.append(f"server_optimizer={self.server_optimizer!r}")
        return f"{type(self).__qualname__}({', '.join(parts)})"

    def synchronous_only_reason(self) -> str | None:
        """A server optimiser's state changes only in a synchronous aggregation."""
        if self.server_optimizer is not None:
            return (
                f"its server optimizer ({type(self.server_optimizer).__name__}) steps only in "
                f"a synchronous aggregation"
            )
        return super().synchronous_only_reason()

    # ------------------------------------------------------------------ the contract
    def check(self, task: Task | None) -> None:  # noqa: D102
        if not isinstance(task, Supervised):
            raise ValueError(
                f"Scenario.task must be a simfl.neural.ImageClassification or Supervised "
                f"for {type(self).__name__}, got {task!r}"
            )
        self.check_model(task)

    def initial_state(self, data: ClientData, streams: Streams) -> NeuralState:
        """Parameters from the keyed stream ``"neural/init"`` (the model's own initialisation).

        A module's normalisation layers stay local under ``Model(norm="local")`` (FedBN),
        whatever the algorithm shares.
        """
        net = data.network
        self.check_network(net)
        if isinstance(net, ModuleNet):  # one client's training must fit the device's memory
            net.cohort_chunk(self.optimizer.batch_size)
        seed = int(streams.generator("neural/init").integers(2**63))
        params = net.init(torch.Generator().manual_seed(seed))
        local = set(net.names_of((*self.local_layers(net), *net.local_layers)))
        return NeuralState(
            network=net,
            shared={n: p for n, p in params.items() if n not in local},
            local_default={n: p for n, p in params.items() if n in local},
            local={},
            sizes=data.client_sizes(),
            local_average={n: p for n, p in params.items() if n in local},
        )

    def work(self, state: NeuralState, clients: IntArray) -> NDArray[np.float64]:
        """GMAC of each client's local update (samples x epochs x per-sample training cost)."""
        net = state.network
        per_sample = sum(p.epochs * net.train_macs(p.layers) for p in self.phases(net))
        return np.asarray(state.sizes[clients] * (per_sample / GMAC), dtype=np.float64)

    def payload(self, state: NeuralState) -> Payload:
        """The float32 parameters of :meth:`exchanged`, each way."""
        size = sum(
            int(p.numel()) * p.element_size()
            for n, p in {**state.shared, **state.local_default}.items()
            if n in self.exchanged(state)
        )
        return Payload(down=size, up=size)

    def job_steps(self, state: NeuralState, clients: IntArray) -> NDArray[np.float64]:
        """Minibatch steps of each client's round: every phase's epochs of its batches."""
        batches = np.ceil(state.sizes[clients] / self.optimizer.batch_size)
        epochs = sum(p.epochs for p in self.phases(state.network))
        return np.asarray(epochs * batches, dtype=np.float64)

    def partial_updates(
        self,
        state: NeuralState,
        data: ClientData,
        clients: IntArray,
        round: int,
        streams: Streams,
        steps: NDArray[np.float64],
    ) -> Updates:
        """The cohort's parameters after each client's first ``steps[i]`` minibatch steps.

        The same batches in the same order as :meth:`local_updates` (a client that stops
        early skips the rest of its schedule), so a client's partial update is the prefix of
        its full one.
        """
        return self.local_updates(state, data, clients, round, streams, limit=steps)

    def local_updates(
        self,
        state: NeuralState,
        data: ClientData,
        clients: IntArray,
        round: int,
        streams: Streams,
        limit: NDArray[np.float64] | None = None,
    ) -> Updates:
        """The cohort's trained parameters, in one batched computation (see the module doc).

        ``limit`` caps each client's minibatch steps (partial work; ``None``: every step).
        """
        net = state.network
        phases = self.phases(net)
        rngs = [streams.generator("neural/batches", int(c), round) for c in clients]
        trained = net.params_of({layer for p in phases for layer in p.layers})
        opt_state = self.start_opt_state(state, clients, trained)
        params, loss = train_cohort(
            net,
            state.client_params(clients),
            data.x_train,
            data.y_train,
            data.train_index(clients),
            phases,
            self.optimizer,
            rngs,
            self.prox(state),
            limit=limit,
            opt_state=opt_state,
        )
        trained = net.params_of({layer for p in phases for layer in p.layers})
        trained += net.buffer_names  # the forward passes update every buffer
        return Updates(
            clients.astype(np.int64),
            {**{n: params[n].cpu().numpy() for n in trained}, **opt_rows(opt_state)},
            loss=np.nan_to_num(loss, nan=0.0),  # a client without data trains nothing
            weight=state.sizes[clients],
        )

    def aggregate(self, state: NeuralState, updates: Updates, outcome: Outcome) -> NeuralState:
        """Size-weighted average of the shared parameters (or the server optimiser's step).

        Clients keep their local parameters and optimiser state (:meth:`keep_local`).
        """
        shared, server = self.server_update(state, updates, state.shared)
        kept = self.keep_local(state, updates)
        return replace(kept, shared=shared, server_state=server, round=state.round + 1)

    def server_update(
        self, state: NeuralState, updates: Updates, current: Params
    ) -> tuple[Params, Params]:
        """The server's new values of ``current``'s parameters, and its optimiser state.

        Without a server optimiser: the size-weighted averages of the parameters ``updates``
        carries (the others as they are). With one: its step from ``current`` along
        ``average - current`` (:func:`~simfl.neural.server.server_step`).
        """
        means = weighted_means64(updates, tuple(current))

        def cast(values: dict[str, Any]) -> Params:  # each in its tensor's dtype
            return {
                n: v
                if isinstance(v, torch.Tensor) and v.dtype == current[n].dtype
                else torch.from_numpy(_as_dtype(np.asarray(v), current[n].numpy().dtype))
                for n, v in values.items()
            }

        if self.server_optimizer is None:
            return {**current, **cast(means)}, state.server_state
        # a module's buffers (and BatchNorm's by name) take the average; parameters are stepped
        buffers = set(state.network.buffer_names)
        averaged = {n: v for n, v in means.items() if n in buffers}
        moved = {n: v for n, v in means.items() if n not in buffers}
        stepped, server = server_step(
            self.server_optimizer,
            {n: p for n, p in current.items() if n not in buffers},
            moved,
            state.server_state,
        )
        return {**current, **cast(stepped), **cast(averaged)}, server

    def start_opt_state(
        self, state: NeuralState, clients: IntArray, names: Sequence[str], space: str = ""
    ) -> OptState | None:
        """The optimiser state ``clients`` start a local update from, stacked per client.

        ``None`` with ``state="reset"`` (a fresh optimiser); with ``"keep"`` each client's
        stored state (:attr:`NeuralState.opt_state`, entries named ``space + key``), zeros for
        a client that has none, for the parameters ``names``.
        """
        if self.optimizer.state != "keep":
            return None
        fresh = self.optimizer.fresh({n: state.network.shapes[n] for n in names})
        own = [state.opt_state.get(int(c), {}) for c in clients]
        return {k: torch.stack([o.get(space + k, zero) for o in own]) for k, zero in fresh.items()}

    def keep_opt_state(self, state: S, updates: Updates) -> S:
        """``state`` with each updated client's optimiser state (rows :data:`OPTIM`) stored."""
        names = [n for n in updates.params if n.startswith(OPTIM)]
        if not names:
            return state
        stored = dict(state.opt_state)
        for j, c in enumerate(updates.clients):
            own = dict(stored.get(int(c), {}))
            for n in names:
                own[n[len(OPTIM) :]] = torch.from_numpy(np.array(updates.params[n][j]))
            stored[int(c)] = own
        return replace(state, opt_state=stored)

    def keep_local(self, state: NeuralState, updates: Updates) -> NeuralState:
        """Each updated client keeps its new local parameters and optimiser state.

        The cohort's average of the local parameters is kept too (``finetune_from``).
        """
        state = self.keep_opt_state(state, updates)
        local = dict(state.local)
        for j, c in enumerate(updates.clients):
            own = dict(local.get(int(c), state.local_default))
            for name in state.local_default:
                if name in updates.params:
                    own[name] = torch.from_numpy(np.array(updates.params[name][j]))
            local[int(c)] = own
        average = {**state.local_average, **weighted_means(updates, tuple(state.local_default))}
        return replace(state, local=local, local_average=average)

    def shared(self, state: NeuralState) -> dict[str, NDArray[Any]]:
        """The server's parameters as float32 arrays (for asynchronous and tiered mixing)."""
        return {name: p.numpy() for name, p in state.shared.items()}

    def with_shared(self, state: NeuralState, shared: dict[str, NDArray[Any]]) -> NeuralState:
        """``state`` with new server parameters, each in its own dtype (integers rounded)."""
        params = {
            name: torch.from_numpy(_as_dtype(np.asarray(value), state.shared[name].numpy().dtype))
            for name, value in shared.items()
        }
        return replace(state, shared=params)

    def evaluate(self, state: NeuralState, data: ClientData) -> dict[str, float]:
        """The task's metrics averaged over the evaluated clients' test samples."""
        sums: dict[str, float] = {}
        count = 0.0
        for values, samples in self._scores(state, data):
            for m, v in values.items():
                sums[m] = sums.get(m, 0.0) + float(v.sum())
            count += float(samples.sum())
        return {m: v / max(count, 1.0) for m, v in sums.items()}

    def evaluate_clients(self, state: NeuralState, data: ClientData) -> ClientMetrics | None:
        """Each evaluated client's metrics on its test samples (NaN without samples)."""
        parts = list(self._scores(state, data))
        samples = np.concatenate([p[1] for p in parts]).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            metrics = {m: np.concatenate([p[0][m] for p in parts]) / samples for m in parts[0][0]}
        return data.eval_clients, metrics

    def _scores(
        self, state: NeuralState, data: ClientData
    ) -> Iterator[tuple[dict[str, NDArray[np.float64]], NDArray[np.int64]]]:
        """Per chunk of evaluated clients: each metric's sum per client, and its samples."""
        net = state.network
        clients = data.eval_clients
        for i in range(0, clients.size, EVAL_CHUNK):
            chunk = clients[i : i + EVAL_CHUNK]
            if self.finetune_from == "average":
                params = {**state.shared}
                for n, p in state.local_average.items():
                    params[n] = p.expand(chunk.size, *p.shape)
            else:
                params = state.client_params(chunk)
            if self.finetune_epochs > 0:
                rngs = [
                    data.streams.generator("neural/finetune", int(c), state.round) for c in chunk
                ]
                params, _ = train_cohort(
                    net,
                    params,
                    data.x_train,
                    data.y_train,
                    data.train_index(chunk),
                    (Phase(self.local_layers(net) or net.head, self.finetune_epochs),),
                    self.optimizer,
                    rngs,
                )
            index = data.test_index(chunk)
            sums = score_cohort(net, params, data.x_test, data.y_test, index)
            yield sums, (index >= 0).sum(axis=1)


def _as_dtype(value: NDArray[Any], dtype: np.dtype[Any]) -> NDArray[Any]:
    """``value`` in ``dtype``: float32 as it is cast, an integer type rounded to nearest."""
    if np.issubdtype(dtype, np.integer):
        return np.asarray(np.rint(value), dtype=dtype)
    return np.asarray(value, dtype=dtype)


def weighted_means(updates: Updates, names: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """Size-weighted means over the cohort of the ``names`` present in ``updates.params``.

    Float32 tensors as float32 means (accumulated in float64); integer buffers (BatchNorm's
    ``num_batches_tracked``) rounded to the nearest integer.
    """
    out: dict[str, torch.Tensor] = {}
    for name, value in weighted_means64(updates, names).items():
        got = np.asarray(updates.params[name])
        dtype = got.dtype if np.issubdtype(got.dtype, np.integer) else np.dtype(np.float32)
        out[name] = torch.from_numpy(_as_dtype(value, dtype))
    return out


def weighted_means64(updates: Updates, names: tuple[str, ...]) -> dict[str, NDArray[np.float64]]:
    """:func:`weighted_means` in float64, before the cast to each tensor's dtype."""
    w = np.asarray(updates.weight, dtype=np.float64)
    w = w / w.sum()
    out: dict[str, NDArray[np.float64]] = {}
    for name in names:
        if name in updates.params:
            value: Any = np.tensordot(w, np.asarray(updates.params[name], dtype=np.float64), axes=1)
            out[name] = np.asarray(value, dtype=np.float64)
    return out


def _float32(value: NDArray[np.float64]) -> torch.Tensor:
    return torch.from_numpy(np.asarray(value, dtype=np.float32))


def opt_rows(opt_state: OptState | None, space: str = "") -> dict[str, NDArray[Any]]:
    """The rows of an update that carry the final optimiser state (``None``: none).

    Named ``OPTIM + space + key``; ``space`` keeps apart the optimisers of one update (as
    for the :meth:`NeuralAlgorithm.start_opt_state` it started from).
    """
    if opt_state is None:
        return {}
    return {OPTIM + space + k: v.detach().cpu().numpy() for k, v in opt_state.items()}
