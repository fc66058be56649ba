"""What a participation / straggler-mitigation policy is."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Generator
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from simfl._checks import check_int, check_real
from simfl.algorithms.base import Algorithm
from simfl.rng import Streams

if TYPE_CHECKING:
    from simfl.engine import RunContext
    from simfl.network import Network

__all__ = [
    "Policy",
    "SyncPolicy",
    "check_sampling",
    "client_sizes",
    "cohort_size",
    "sample_uniform",
    "sample_weighted",
]


class Policy(ABC):
    """Decides who takes part and when the server aggregates.

    A policy supplies the server process of a run (:meth:`serve`), built from the engine's
    primitives; synchronous policies share one (:class:`SyncPolicy`).
    """

    name: ClassVar[str] = "policy"

    def check(self, n_devices: int) -> None:  # noqa: B027 - a hook, no-op by default
        """Raise ``ValueError`` naming the field if the policy cannot run on ``n_devices``."""

    def check_algorithm(self, algorithm: Algorithm[Any]) -> None:  # noqa: B027 - a hook
        """Raise ``ValueError`` if the policy cannot drive ``algorithm``."""

    def check_network(self, network: Network | None) -> None:  # noqa: B027 - a hook
        """Raise ``ValueError`` if the policy cannot work with the scenario's ``network``."""

    @abstractmethod
    def serve(self, run: RunContext) -> Generator[Any, Any, None]:
        """The SimPy server process of a run."""


class SyncPolicy(Policy):
    """Synchronous rounds: select a cohort, start its jobs, close the round, aggregate.

    A round closes at the earliest of: ``quota`` arrivals; every job resolved (arrived or
    dropped; dropouts are noticed by the server when they happen, like a broken connection);
    the ``deadline``. Jobs still running then are recorded ``late`` if the deadline closed the
    round and ``cancelled`` otherwise (over-selection), and their updates are never computed.
    """

    @abstractmethod
    def select(self, run: RunContext) -> NDArray[np.int64]:
        """The devices of this round's cohort (``run.round``), sorted ascending.

        A device may appear more than once (sampling with replacement): it runs one job, and
        its update counts once per appearance in the aggregate.
        """

    def quota(self, n_selected: int) -> int:
        """Arrivals after which the round closes (default: all of the cohort)."""
        return n_selected

    def deadline(self, round: int) -> float | None:
        """Seconds after the round starts at which it closes regardless (``None``: no limit)."""
        return None

    def stage(self, round: int) -> int:
        """Stage index of the round (for fleets that re-draw speeds per stage)."""
        return 0

    def serve(self, run: RunContext) -> Generator[Any, Any, None]:  # noqa: D102
        from simfl.rounds import sync_server

        return sync_server(run, self)


def cohort_size(owner: str, fraction: float | None, count: int | None, n_devices: int) -> int:
    """``count``, or ``max(floor(fraction * n_devices), 1)`` as in the FedRep code."""
    if count is not None:
        if count > n_devices:
            raise ValueError(f"{owner}.count must be <= the fleet size {n_devices}, got {count}")
        return count
    frac = 1.0 if fraction is None else fraction
    return max(math.floor(frac * n_devices + 1e-9), 1)


def check_sampling(owner: str, fraction: float | None, count: int | None) -> None:
    """Validate a ``fraction`` / ``count`` pair (at most one of them)."""
    if fraction is not None and count is not None:
        raise ValueError(f"{owner}: give fraction or count, not both (got {fraction}, {count})")
    if fraction is not None:
        check_real(f"{owner}.fraction", fraction, low=0.0, high=1.0, low_open=True)
    if count is not None:
        check_int(f"{owner}.count", count, low=1)


def sample_uniform(
    round: int, population: NDArray[np.int64], size: int, streams: Streams
) -> NDArray[np.int64]:
    """``size`` distinct devices of ``population`` (sorted ids) drawn uniformly, sorted.

    All of them if ``size`` is not smaller than the population (e.g. when few are online).
    """
    if size >= population.size:
        return population
    pick = streams.generator("select", round).choice(population.size, size=size, replace=False)
    return np.sort(population[pick]).astype(np.int64)


def sample_weighted(
    round: int,
    population: NDArray[np.int64],
    weights: NDArray[np.float64],
    size: int,
    replace: bool,
    streams: Streams,
) -> NDArray[np.int64]:
    """``size`` devices of ``population`` drawn in proportion to their ``weights``, sorted.

    ``weights`` has one entry per device of the fleet. With ``replace`` a device can be drawn
    several times (FedMAvg's sampling in proportion to data size); without, at most ``size``
    distinct devices are drawn.
    """
    p = np.asarray(weights, dtype=np.float64)[population]
    p = p / p.sum()
    if not replace:
        size = min(size, population.size)
    rng = streams.generator("select/weighted", round)
    pick = rng.choice(p.size, size=size, replace=replace, p=p)
    return np.sort(population[pick]).astype(np.int64)


def client_sizes(run: RunContext, owner: str) -> NDArray[np.float64]:
    """Samples held by each client of the run's task, for size-weighted sampling."""
    sizes = getattr(run.data, "client_sizes", None)
    if sizes is None:
        raise ValueError(
            f"{owner}.weights='size' needs a task whose data report client_sizes(); "
            f"{type(run.scenario.task).__name__} does not"
        )
    return np.asarray(sizes(), dtype=np.float64)
