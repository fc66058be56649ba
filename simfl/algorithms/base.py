"""The contract between the engine (time) and an algorithm (math).

The engine decides who takes part and which updates arrive; the algorithm computes. An algorithm
is a small frozen dataclass of hyper-parameters whose methods take a state and return a new one
(FedJAX's ``FederatedAlgorithm(init, apply)`` split into the steps the engine needs to time):

``initial_state``   the server state before round 0
``work``            compute work units of each selected client (times the fleet's seconds/unit)
``payload``         bytes sent down to and up from each selected client
``local_updates``   the local updates of a cohort, in one batched computation
``aggregate``       the new state from the accepted updates
``evaluate``        the metrics of the task for the current state
``shared``          the server-side parameters clients update, by name (for asynchronous mixing)
``with_shared``     the state with new server-side parameters (e.g. re-orthonormalised)

Lazy exactness: the engine calls ``local_updates`` only for the clients whose updates it will
aggregate. Every algorithm must therefore compute each client's update from that client's own
keyed data and the state alone, never from which other clients share the batch, so that the
result equals computing the whole cohort and discarding the rest. A client whose update is not
aggregated (late, dropped, cancelled) also keeps no local state from that round.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np
from numpy.typing import NDArray

from simfl.network import Payload
from simfl.rng import Streams
from simfl.tasks.base import Task

__all__ = ["Algorithm", "Updates"]

StateT = TypeVar("StateT")

#: Local updates: arrays whose first axis runs over the clients of the batch, in batch order.
#: A ``"loss"`` entry (one float per client) is recorded as the round's ``train_loss``.
Updates = dict[str, NDArray[Any]]


class Algorithm(ABC, Generic[StateT]):
    """Base class of simfl's algorithms (see the module docstring for the contract)."""

    #: Short name used in summaries and plots.
    name: ClassVar[str] = "algorithm"

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

    @abstractmethod
    def aggregate(self, state: StateT, updates: Updates, round: int) -> StateT:
        """The new state after accepting ``updates`` (at least one client)."""

    @abstractmethod
    def evaluate(self, state: StateT, data: Any) -> dict[str, float]:
        """The task's metrics for ``state`` (keys are the task's ``metrics``)."""

    def shared(self, state: StateT) -> dict[str, NDArray[Any]]:
        """The server-side parameters that clients update, by the names used in their updates.

        Asynchronous policies mix these with staleness weights (``updates[name][i]`` is client
        ``i``'s new value of ``shared(state)[name]``). Algorithms that cannot run asynchronously
        keep this default, which raises.
        """
        raise NotImplementedError(f"{type(self).__name__} does not support asynchronous policies")

    def with_shared(self, state: StateT, shared: dict[str, NDArray[Any]]) -> StateT:
        """``state`` with its server-side parameters replaced by ``shared``."""
        raise NotImplementedError(f"{type(self).__name__} does not support asynchronous policies")
