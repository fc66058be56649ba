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
  ``finetune_from="average"``); nothing else changes.
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

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np
import torch
from numpy.typing import NDArray

from simfl.algorithms.base import Algorithm, ClientMetrics, Updates
from simfl.network import Payload
from simfl.neural.models import Params
from simfl.neural.module import AnyNet, ModuleNet
from simfl.neural.task import ClientData, Supervised
from simfl.neural.train import SGD, Phase, score_cohort, train_cohort
from simfl.outcome import Outcome
from simfl.rng import Streams
from simfl.tasks.base import Task

__all__ = ["EVAL_CHUNK", "GMAC", "NeuralAlgorithm", "NeuralState", "weighted_means"]

IntArray = NDArray[np.int64]
#: Multiply-accumulates per work unit.
GMAC = 1e9
#: Clients evaluated per batched call (bounds the memory of stacked local layers).
EVAL_CHUNK = 32


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

    def client_params(self, clients: IntArray) -> Params:
        """The models of ``clients``: shared parameters as they are, local ones stacked."""
        params = dict(self.shared)
        for name in self.local_default:
            params[name] = torch.stack(
                [self.local.get(int(c), self.local_default)[name] for c in clients]
            )
        return params


class NeuralAlgorithm(Algorithm[NeuralState]):
    """Base of the neural algorithms (see the module docstring); subclasses are dataclasses.

    Partial work (``partial_work``): a step is one minibatch SGD step, so a client under a
    deadline trains on a prefix of its batches (:meth:`partial_updates`).
    """

    partial_work: ClassVar[bool] = True

    optimizer: SGD
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
        """Minibatch SGD steps of each client's round: every phase's epochs of its batches."""
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
        )
        trained = net.params_of({layer for p in phases for layer in p.layers})
        trained += net.buffer_names  # the forward passes update every buffer
        return Updates(
            clients.astype(np.int64),
            {n: params[n].cpu().numpy() for n in trained},
            loss=np.nan_to_num(loss, nan=0.0),  # a client without data trains nothing
            weight=state.sizes[clients],
        )

    def aggregate(self, state: NeuralState, updates: Updates, outcome: Outcome) -> NeuralState:
        """Size-weighted average of the shared parameters; clients keep their local ones."""
        shared = dict(state.shared)
        for name, value in weighted_means(updates, tuple(state.shared)).items():
            shared[name] = value
        kept = self.keep_local(state, updates)
        return replace(kept, shared=shared, round=state.round + 1)

    def keep_local(self, state: NeuralState, updates: Updates) -> NeuralState:
        """Each updated client keeps its new local parameters (and the cohort's average)."""
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
    w = np.asarray(updates.weight, dtype=np.float64)
    w = w / w.sum()
    out: dict[str, torch.Tensor] = {}
    for name in names:
        if name in updates.params:
            got = np.asarray(updates.params[name])
            value: Any = np.tensordot(w, np.asarray(got, dtype=np.float64), axes=1)
            dtype = got.dtype if np.issubdtype(got.dtype, np.integer) else np.dtype(np.float32)
            out[name] = torch.from_numpy(_as_dtype(np.asarray(value), dtype))
    return out
