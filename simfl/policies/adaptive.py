"""A deadline that follows the fleet: a quantile of recent job durations."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from simfl._checks import check_int, check_real
from simfl.outcome import ARRIVED, LATE, Outcome
from simfl.policies.base import (
    RoundPlan,
    SyncPolicy,
    View,
    check_sampling,
    cohort_size,
    sample_uniform,
)

__all__ = ["AdaptiveDeadline"]


@dataclass(frozen=True)
class AdaptiveDeadline(SyncPolicy["AdaptiveState"]):
    """Deadline = the ``quantile`` of the job durations seen in the last ``window`` rounds.

    What the server can observe: the duration of every job that arrived, and that every late job
    took longer than its deadline (censored, counted as +inf). Dropped jobs say nothing about
    speed and are left out. If more than ``1 - quantile`` of the observed jobs were late, the
    quantile is unknown and the deadline grows by ``backoff`` instead. The first round has the
    ``initial`` deadline (``None``: wait for every job, which measures the fleet).

    Parameters
    ----------
    quantile
        Target fraction of jobs that should make the deadline, in (0, 1].
    window
        Rounds of history used (>= 1).
    initial
        Deadline of the first round in seconds (> 0), or ``None`` for none.
    backoff
        Growth factor of the deadline when too many jobs were late (> 1).
    fraction, count
        Cohort size, as for :class:`~simfl.policies.WaitAll`.
    """

    quantile: float = 0.8
    window: int = 5
    initial: float | None = None
    backoff: float = 1.5
    fraction: float | None = None
    count: int | None = None

    name: ClassVar[str] = "adaptive-deadline"

    def __post_init__(self) -> None:
        check_real("AdaptiveDeadline.quantile", self.quantile, low=0.0, high=1.0, low_open=True)
        check_int("AdaptiveDeadline.window", self.window, low=1)
        if self.initial is not None:
            check_real("AdaptiveDeadline.initial", self.initial, low=0.0, low_open=True)
        check_real("AdaptiveDeadline.backoff", self.backoff, low=1.0, low_open=True)
        check_sampling("AdaptiveDeadline", self.fraction, self.count)

    def check(self, n_devices: int) -> None:  # noqa: D102
        cohort_size("AdaptiveDeadline", self.fraction, self.count, n_devices)

    def next_deadline(self, durations: NDArray[np.float64], previous: float | None) -> float | None:
        """The deadline given observed ``durations`` (``inf`` for late jobs)."""
        if durations.size == 0:
            return previous
        q = float(np.quantile(durations, self.quantile, method="inverted_cdf"))
        if np.isfinite(q) and q > 0:
            return q
        return None if previous is None else previous * self.backoff

    def start(self, view: View) -> AdaptiveState:  # noqa: D102
        return AdaptiveState(self.initial, ())

    def plan(self, state: AdaptiveState, view: View) -> tuple[AdaptiveState, RoundPlan]:  # noqa: D102
        size = cohort_size("AdaptiveDeadline", self.fraction, self.count, view.n_devices)
        cohort = sample_uniform(view.round, view.online(), size, view.streams)
        return state, RoundPlan(cohort, deadline=state.deadline)

    def observe(self, state: AdaptiveState, outcome: Outcome, view: View) -> AdaptiveState:
        """Add the round's observed durations (late jobs as +inf) and set the next deadline."""
        status = outcome.status
        seen = np.where(status == ARRIVED, outcome.durations, np.inf)
        history = (*state.history, seen[(status == ARRIVED) | (status == LATE)])[-self.window :]
        return AdaptiveState(self.next_deadline(np.concatenate(history), state.deadline), history)


@dataclass(frozen=True)
class AdaptiveState:
    """The deadline of the next round and the durations seen in the last rounds (one array each)."""

    deadline: float | None
    history: tuple[NDArray[np.float64], ...]
