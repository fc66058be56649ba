"""The contract between the engine (time) and an algorithm (math).

The engine decides who takes part and which updates arrive; the algorithm computes. An algorithm
is a small frozen dataclass of hyper-parameters whose methods take a state and return a new one
(FedJAX's ``FederatedAlgorithm(init, apply)`` split into the steps the engine needs to time).
Every algorithm implements the abstract methods (marked *required*; a class that lacks one cannot
be instantiated); the others have defaults. ``docs/writing-an-algorithm.md`` shows the contract
and a complete example.

``check(task) -> None`` (required)
    raise ``ValueError`` naming ``Scenario.task`` if this algorithm cannot train ``task``;
    called when the :class:`~simfl.Scenario` is built, before anything runs
``initial_state(data, streams) -> state`` (required)
    the server state before round 0
``work(state, clients) -> NDArray[float64]``
    compute work units of each selected client (times the fleet's seconds/unit; default 1)
``payload(state) -> Payload`` (required)
    bytes sent down to and up from each selected client
``local_updates(state, data, clients, round, streams) -> Updates`` (required)
    the local updates of a cohort, in one batched computation
``job_steps(state, clients) -> NDArray[float64]``
    local steps of each client's full job (default: its work units)
``partial_updates(state, data, clients, round, streams, steps) -> Updates``
    the same when client ``i`` did only ``steps[i]`` of its local steps: partial work under a
    deadline (only algorithms whose ``partial_work`` is true)
``aggregate(state, updates, outcome) -> state`` (required)
    the new state from the accepted updates; ``outcome`` (:class:`simfl.outcome.Outcome`) says
    what happened to every job of the aggregation (arrived, late, dropped, cancelled, their
    times and staleness), so stragglers and dropouts are an input of the math
``background(state, data, outcome) -> state``
    local work of the clients outside the round between aggregations (e.g. FedMAvg's PCC
    updates of ``H_p``), called by the engine right after every successful aggregation with the
    bound task data; default: the state unchanged
``evaluate(state, data) -> dict[str, float]`` (required)
    the metrics of the task for the current state
``evaluate_clients(state, data) -> (clients, {metric: values}) | None``
    the metrics of each evaluated client, where the task evaluates per client (called once, for
    the final state, for per-group results); default ``None``: not per client
``shared(state) -> dict[str, NDArray]``
    the server-side parameters clients update, by name (for asynchronous mixing)
``with_shared(state, shared) -> state``
    the state with new server-side parameters (e.g. re-orthonormalised)
``keep_local(state, updates) -> state``
    the state with the clients' own parameters of ``updates`` kept (default: unchanged)
``synchronous_only_reason() -> str | None``
    why this instance cannot run under asynchronous or tiered policies (default: the class's
    ``synchronous_only``)
``job_updates(states, data, clients, keys, streams) -> Updates``
    the updates of jobs that each started from their own state (default: one
    ``local_updates`` call per job)
``prepare_jobs(data, clients, keys) -> None``
    a hint that these jobs are about to start (default: nothing)

:class:`Updates` is the typed batch of local updates: the client of each row, the per-parameter
arrays (first axis over the rows), and optionally each row's mean training ``loss`` (recorded as
the round's ``train_loss``) and aggregation ``weight`` (e.g. sample counts). A client drawn
several times (sampling with replacement) has its row repeated (:meth:`Updates.repeat`).
Asynchronous policies mix ``params`` into :meth:`Algorithm.shared` with the weights of
:mod:`simfl.algorithms.mixing`.

Lazy exactness: the engine calls ``local_updates`` only for the clients whose updates it will
aggregate. Every algorithm must therefore compute each client's update from that client's own
keyed data and the state alone, never from which other clients share the batch, so that the
result equals computing the whole cohort and discarding the rest. A client whose update is not
aggregated (late, dropped, cancelled) also keeps no local state from that round (its local work
outside the round, if any, belongs to ``background``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np
from numpy.typing import NDArray

from simfl.network import Payload
from simfl.outcome import Outcome
from simfl.rng import Streams
from simfl.tasks.base import Task

__all__ = ["Algorithm", "ClientMetrics", "Updates"]

StateT = TypeVar("StateT")
#: The evaluated clients and, per metric, each one's value (aligned with the clients).
ClientMetrics = tuple[NDArray[np.int64], dict[str, NDArray[np.float64]]]


@dataclass(frozen=True, eq=False)
class Updates:
    """Local updates of a batch of clients: one row per client, in batch order.

    Attributes
    ----------
    clients
        The client of each row.
    params
        Per-parameter arrays whose first axis runs over the rows (for asynchronous policies,
        ``params[name][i]`` is row ``i``'s new value of ``Algorithm.shared(state)[name]``).
    loss
        Mean local training loss per row (``None``: none); its mean is the round's
        ``train_loss``.
    weight
        Aggregation weight per row (e.g. sample counts), if the algorithm uses one.
    """

    clients: NDArray[np.int64]
    params: dict[str, NDArray[Any]]
    loss: NDArray[np.float64] | None = None
    weight: NDArray[np.float64] | None = None

    def __post_init__(self) -> None:
        n = self.clients.shape[0]
        for v in self._arrays():
            if v.ndim == 0 or v.shape[0] != n:
                raise ValueError(
                    f"Updates: every array needs a first axis of {n} rows (one per client), "
                    f"got shape {v.shape}"
                )

    def __len__(self) -> int:
        return int(self.clients.shape[0])

    def _arrays(self) -> Iterator[NDArray[Any]]:
        """Every array: the clients, the params, then the loss and the weight if present."""
        yield self.clients
        yield from self.params.values()
        if self.loss is not None:
            yield self.loss
        if self.weight is not None:
            yield self.weight

    def finite(self) -> bool:
        """Whether every array (params, loss, weight; clients are integers) is finite."""
        arrays = self._arrays()
        next(arrays)  # the clients: integers, always finite
        return all(np.isfinite(v).all() for v in arrays)

    def _map(self, f: Callable[[NDArray[Any]], NDArray[Any]]) -> Updates:
        return Updates(
            f(self.clients),
            {k: f(v) for k, v in self.params.items()},
            None if self.loss is None else f(self.loss),
            None if self.weight is None else f(self.weight),
        )

    def take(self, index: NDArray[Any] | slice) -> Updates:
        """The rows selected by ``index`` (integer indices, a boolean mask or a slice)."""
        return self._map(lambda v: v[index])

    def repeat(self, counts: NDArray[np.int64]) -> Updates:
        """Every row repeated ``counts`` times in place (sampling with replacement)."""
        return self._map(lambda v: np.repeat(v, counts, axis=0))

    @staticmethod
    def concat(parts: Sequence[Updates]) -> Updates:
        """The rows of ``parts`` one after another (parameters named as in ``parts[0]``)."""
        if not parts:
            raise ValueError("Updates.concat needs at least one part")
        first = parts[0]
        return Updates(
            np.concatenate([p.clients for p in parts]),
            {name: np.concatenate([p.params[name] for p in parts]) for name in first.params},
            None if first.loss is None else np.concatenate([_need(p.loss) for p in parts]),
            None if first.weight is None else np.concatenate([_need(p.weight) for p in parts]),
        )


def _need(v: NDArray[np.float64] | None) -> NDArray[np.float64]:
    if v is None:
        raise ValueError("Updates.concat: every part must have the same optional arrays")
    return v


class Algorithm(ABC, Generic[StateT]):
    """Base class of simfl's algorithms (see the module docstring for the contract).

    A subclass implements the abstract methods :meth:`check`, :meth:`initial_state`,
    :meth:`payload`, :meth:`local_updates`, :meth:`aggregate` and :meth:`evaluate` (without
    one, instantiating it raises ``TypeError``), and may override the others, whose defaults
    suit a synchronous algorithm that does one work unit per job.
    """

    #: Short name used in summaries and plots.
    name: ClassVar[str] = "algorithm"
    #: Whether :meth:`partial_updates` is implemented: a client can stop after any whole
    #: number of its :meth:`job_steps` (partial work under a deadline).
    partial_work: ClassVar[bool] = False
    #: Why this algorithm cannot run under asynchronous or tiered policies (``None``: it can,
    #: given :meth:`shared` and :meth:`with_shared`). Those policies mix only the server's
    #: parameters, so state that only :meth:`aggregate` updates (client controls, personal
    #: models) would be lost.
    synchronous_only: ClassVar[str | None] = None
    #: Whether :meth:`work` and :meth:`payload` depend on the clients only, never on the state
    #: (asynchronous runs then plan jobs in blocks across model versions).
    fixed_jobs: ClassVar[bool] = False
    #: Whether the algorithm computes nothing: its state never changes, its updates carry
    #: their clients only (no params, loss or weight) and :meth:`background` returns the state
    #: unchanged. Asynchronous runs then skip computing and mixing updates (the records are
    #: the same: timing-only simulations).
    inert: ClassVar[bool] = False

    @abstractmethod
    def check(self, task: Task | None) -> None:
        """Raise ``ValueError`` naming ``Scenario.task`` if this algorithm cannot train ``task``."""

    @abstractmethod
    def initial_state(self, data: Any, streams: Streams) -> StateT:
        """The state before the first round, from the bound task ``data``."""

    def work(self, state: StateT, clients: NDArray[np.int64]) -> NDArray[np.float64]:
        """Work units each of ``clients`` performs in a round (default: one unit each)."""
        return np.ones(clients.shape, dtype=np.float64)

    @abstractmethod
    def payload(self, state: StateT) -> Payload:
        """Bytes the server sends each selected client and each client sends back."""

    @abstractmethod
    def local_updates(
        self, state: StateT, data: Any, clients: NDArray[np.int64], round: int, streams: Streams
    ) -> Updates:
        """The updates of ``clients`` (batched), computed from ``state`` and their own data."""

    def job_updates(
        self,
        states: Sequence[StateT],
        data: Any,
        clients: NDArray[np.int64],
        keys: Sequence[int],
        streams: Streams,
    ) -> Updates:
        """The updates of jobs that each started from their own state, with their own data key.

        Row ``i`` is client ``clients[i]``'s update from ``states[i]`` (the model version its
        job downloaded) with data keyed by ``keys[i]``, as :meth:`local_updates` computes it;
        asynchronous runs compute an aggregation's updates this way. Default: one
        :meth:`local_updates` call per job, which any algorithm can do exactly. An algorithm
        whose updates are the same to the last bit whatever batch computes them may batch
        them here (:class:`~simfl.algorithms.TimingOnly` does, and the linear FedRep and
        FedAvg: they take every product per job, as a stack of one-job products, since a
        product across the jobs, e.g. one matrix for the whole cohort, rounds differently
        from the one-job product in the last bits).
        """
        parts = [
            self.local_updates(state, data, clients[i : i + 1], key, streams)
            for i, (state, key) in enumerate(zip(states, keys, strict=True))
        ]
        return Updates.concat(parts) if len(parts) > 1 else parts[0]

    def prepare_jobs(self, data: Any, clients: NDArray[np.int64], keys: NDArray[np.int64]) -> None:
        """Hint: jobs of ``clients`` with data keys ``keys`` are about to start.

        Their updates will be asked of :meth:`job_updates` later (from model versions not
        known yet); an algorithm may draw their data ahead here, in one batch (the linear
        algorithms do), but must not change any number. Default: nothing.
        """

    def job_steps(self, state: StateT, clients: NDArray[np.int64]) -> NDArray[np.float64]:
        """Local steps of each client's full job, each taking an equal share of its compute.

        Default: one step per work unit (:meth:`work`).
        """
        return self.work(state, clients)

    def partial_updates(
        self,
        state: StateT,
        data: Any,
        clients: NDArray[np.int64],
        round: int,
        streams: Streams,
        steps: NDArray[np.float64],
    ) -> Updates:
        """The updates of ``clients`` when client ``i`` did only its first ``steps[i]`` steps.

        ``steps[i]`` is at least 1 and at most the client's :meth:`job_steps`; with every
        step the result equals :meth:`local_updates`. Only algorithms with
        ``partial_work = True`` implement it.
        """
        raise NotImplementedError(f"{type(self).__name__} does not support partial work")

    @abstractmethod
    def aggregate(self, state: StateT, updates: Updates, outcome: Outcome) -> StateT:
        """The new state after accepting ``updates`` (at least one client).

        ``outcome`` holds every job of the aggregation and how it ended (its ``round`` is the
        aggregation's index); ``updates`` are the rows of the arrived jobs, repeated as
        ``outcome.repeats`` says.
        """

    def background(self, state: StateT, data: Any, outcome: Outcome) -> StateT:
        """Local work of the clients outside the round between aggregations.

        Called right after every successful aggregation with the new ``state``, the bound task
        ``data`` and the aggregation's ``outcome``. Default: ``state`` unchanged.
        """
        return state

    @abstractmethod
    def evaluate(self, state: StateT, data: Any) -> dict[str, float]:
        """The task's metrics for ``state`` (keys are the task's ``metrics``)."""

    def evaluate_clients(self, state: StateT, data: Any) -> ClientMetrics | None:
        """The metrics of each evaluated client for ``state``, where the task has them.

        Returns the evaluated clients and, for each metric measured per client (a subset of
        the task's ``metrics``), their values; ``None`` (the default) where the algorithm or
        the task does not evaluate per client. The engine calls it once, for the final state,
        so that results can be read per group of devices.
        """
        return None

    def shared(self, state: StateT) -> dict[str, NDArray[Any]]:
        """The server-side parameters that clients update, by the names used in their updates.

        Asynchronous policies mix these with staleness weights (``updates.params[name][i]`` is
        row ``i``'s new value of ``shared(state)[name]``, see :mod:`simfl.algorithms.mixing`).
        Algorithms that cannot run asynchronously keep this default, which raises.
        """
        raise NotImplementedError(f"{type(self).__name__} does not support asynchronous policies")

    def with_shared(self, state: StateT, shared: dict[str, NDArray[Any]]) -> StateT:
        """``state`` with its server-side parameters replaced by ``shared``."""
        raise NotImplementedError(f"{type(self).__name__} does not support asynchronous policies")

    def synchronous_only_reason(self) -> str | None:
        """Why this algorithm, as configured, cannot run under asynchronous or tiered policies.

        ``None``: it can (given :meth:`shared` and :meth:`with_shared`). Default: the class's
        :attr:`synchronous_only`; an algorithm whose fields decide (a neural algorithm with a
        server optimiser) overrides it.
        """
        return type(self).synchronous_only

    def keep_local(self, state: StateT, updates: Updates) -> StateT:
        """``state`` with the clients' own parameters in ``updates`` kept, as in :meth:`aggregate`.

        The clients' own parameters: FedRep's heads, LG-FedAvg's local layers.
        Asynchronous and tiered policies mix only :meth:`shared`; they call this so that the
        clients' local parameters of the applied updates are not lost. Default: ``state``
        unchanged (no client-side parameters).
        """
        return state
