"""Synchronous straggler policies: wait for all, a deadline, the fastest K of an over-selection."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from simfl._checks import MAX_DEVICES, check_bool, check_choice, check_int, check_real
from simfl.algorithms.base import Algorithm
from simfl.policies.base import (
    RoundPlan,
    SyncPolicy,
    View,
    check_partial_work,
    check_sampling,
    cohort_size,
    sample_uniform,
    sample_weighted,
)

if TYPE_CHECKING:
    from simfl.tasks.base import Task

__all__ = ["Deadline", "FastestK", "WaitAll"]


@dataclass(frozen=True)
class WaitAll(SyncPolicy[None]):
    """Sample a cohort and wait for every job to arrive or drop.

    Parameters
    ----------
    fraction
        Cohort size as a fraction of the fleet, in (0, 1]; the cohort has
        ``max(floor(fraction * n), 1)`` devices (as in the FedRep code).
    count
        Cohort size as a number of devices (instead of ``fraction``). With neither, the whole
        fleet takes part every round. Only online devices can be drawn; when fewer are online
        the cohort is all of them.
    weights
        ``None``: uniform sampling. ``"size"``: probability proportional to each client's number
        of samples (the task's ``client_sizes()``), as FedMAvg samples.
    replace
        Sample with replacement (only with ``weights``): a client drawn twice runs one job and
        its update counts twice in the average.
    """

    fraction: float | None = None
    count: int | None = None
    weights: str | None = None
    replace: bool = False

    name: ClassVar[str] = "wait-all"

    def __post_init__(self) -> None:
        check_sampling("WaitAll", self.fraction, self.count)
        if self.weights is not None:
            check_choice("WaitAll.weights", self.weights, ("size",))
        object.__setattr__(self, "replace", check_bool("WaitAll.replace", self.replace))
        if self.replace and self.weights is None:
            raise ValueError("WaitAll.replace=True needs WaitAll.weights='size'")

    def check(self, n_devices: int) -> None:  # noqa: D102
        if not self.replace:
            cohort_size("WaitAll", self.fraction, self.count, n_devices)

    def check_task(self, task: Task | None) -> None:  # noqa: D102
        if self.weights is not None and task is None:
            raise ValueError(
                "WaitAll.weights='size' needs a task whose data report client_sizes(); "
                "Scenario.task is None"
            )

    def plan(self, state: None, view: View) -> tuple[None, RoundPlan]:  # noqa: D102
        n = view.n_devices
        if self.replace and self.count is not None:
            size = self.count
        else:
            size = cohort_size("WaitAll", self.fraction, self.count, n)
        online = view.online()
        if self.weights is None:
            return None, RoundPlan(sample_uniform(view.round, online, size, view.streams))
        sizes = view.client_sizes()
        if sizes is None:
            raise ValueError(
                "WaitAll.weights='size' needs a task whose data report client_sizes(); this "
                "scenario's task does not"
            )
        cohort = sample_weighted(view.round, online, sizes, size, self.replace, view.streams)
        return None, RoundPlan(cohort)


@dataclass(frozen=True)
class Deadline(SyncPolicy[None]):
    """Sample a cohort uniformly; aggregate what has arrived ``seconds`` after the round starts.

    The round closes earlier if every job has arrived or dropped. Jobs still running at the
    deadline are recorded ``late`` and their updates are discarded (never computed).

    Parameters
    ----------
    seconds
        The deadline, in simulated seconds after the round starts (> 0).
    fraction, count
        Cohort size, as for :class:`WaitAll`.
    partial
        Partial work (FedProx's gamma-inexact solutions, Li et al., MLSys 2020): each device
        does as many whole local steps as fit before the deadline instead of being late (see
        :class:`~simfl.policies.RoundPlan`); a device that cannot fit one step is still late.
        Needs an algorithm with ``partial_work`` (pair it with ``aggregation="fednova"`` where
        the algorithm offers it, so unequal local work does not bias the model).
    """

    seconds: float
    fraction: float | None = None
    count: int | None = None
    partial: bool = False

    name: ClassVar[str] = "deadline"

    def __post_init__(self) -> None:
        check_real("Deadline.seconds", self.seconds, low=0.0, low_open=True)
        check_sampling("Deadline", self.fraction, self.count)
        object.__setattr__(self, "partial", check_bool("Deadline.partial", self.partial))

    def check(self, n_devices: int) -> None:  # noqa: D102
        cohort_size("Deadline", self.fraction, self.count, n_devices)

    def check_algorithm(self, algorithm: Algorithm[Any]) -> None:  # noqa: D102
        if self.partial:
            check_partial_work("Deadline.partial", algorithm)

    def plan(self, state: None, view: View) -> tuple[None, RoundPlan]:  # noqa: D102
        size = cohort_size("Deadline", self.fraction, self.count, view.n_devices)
        cohort = sample_uniform(view.round, view.online(), size, view.streams)
        return None, RoundPlan(cohort, deadline=self.seconds, partial=self.partial)


@dataclass(frozen=True)
class FastestK(SyncPolicy[None]):
    """Over-selection: start ``ceil(k * (1 + overcommit))`` jobs, keep the first ``k`` arrivals.

    The remaining jobs are cancelled when the ``k``-th update arrives (or the round closes when
    every job has arrived or dropped, if fewer than ``k`` can arrive). With i.i.d. Exp(1)
    compute times and no network, the round lasts ``H_n - H_(n-k)`` on average, where ``n`` is
    the number of jobs started.

    Parameters
    ----------
    k
        Updates aggregated per round (>= 1).
    overcommit
        Extra fraction of devices started (>= 0); e.g. 0.3 starts 30% more than ``k``.
    """

    k: int
    overcommit: float = 0.0

    name: ClassVar[str] = "fastest-k"

    def __post_init__(self) -> None:
        k = check_int("FastestK.k", self.k, low=1)
        overcommit = check_real("FastestK.overcommit", self.overcommit, low=0.0)
        if not k * (1.0 + overcommit) <= MAX_DEVICES:
            raise ValueError(
                f"FastestK.k * (1 + FastestK.overcommit) must be at most {MAX_DEVICES:,} devices "
                f"(the largest fleet), got k={self.k}, overcommit={self.overcommit:g}"
            )

    @property
    def started(self) -> int:
        """Number of jobs started each round."""
        return max(self.k, math.ceil(self.k * (1.0 + self.overcommit) - 1e-9))

    def check(self, n_devices: int) -> None:  # noqa: D102
        if self.started > n_devices:
            raise ValueError(
                f"FastestK.k * (1 + FastestK.overcommit) = {self.started} devices must be <= "
                f"the fleet size {n_devices} (k={self.k}, overcommit={self.overcommit})"
            )

    def plan(self, state: None, view: View) -> tuple[None, RoundPlan]:  # noqa: D102
        cohort = sample_uniform(view.round, view.online(), self.started, view.streams)
        return None, RoundPlan(cohort, quota=min(self.k, cohort.size))
