"""The planned playbacks: private links, devices always online (see :mod:`.base`).

A synchronous round's outcome follows from its job plan in one vectorised step
(:meth:`PlannedPlayback._round`); an asynchronous run is handled from a heap of the instants
its jobs resolve (:class:`~simfl.engine.async_planned.PlannedAsyncLoop`), or, when nothing is
computed, as columns of plain numbers (:class:`~simfl.engine.async_timing.TimingAsyncLoop`).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from simfl.engine.async_planned import PlannedAsyncLoop
from simfl.engine.async_timing import TimingAsyncLoop
from simfl.engine.clock import landing_delay
from simfl.engine.jobs import resolution
from simfl.engine.playbacks.base import Playback, ServerLoop
from simfl.engine.rounds import quota_close
from simfl.outcome import ARRIVED, CANCELLED, DROPPED, LATE
from simfl.policies.base import AsyncPolicy

if TYPE_CHECKING:
    from simfl.engine.context import RunContext
    from simfl.engine.rounds import RoundState

__all__ = ["PlannedPlayback", "TimingPlayback"]


class PlannedPlayback(Playback):
    """Private links, devices always online: rounds and asynchronous jobs without job events."""

    name = "planned"

    def _round(
        self, ctx: RunContext, rnd: RoundState, deadline: float | None, alone: bool
    ) -> Generator[Any, Any, None]:
        """The round without job events: its outcome follows from the plan in one step.

        On private links with devices always online nothing interacts with a job once it
        starts, so when each job arrives or drops is known up front. The server sleeps until
        the round closes and then records exactly what job processes record, ties included:
        jobs resolving at one instant count in job order, one resolving exactly at the
        deadline is in time, and (with a ``max_time``) the server wakes on an event created at
        the closing instant, as the processes' "round done" event is, so a run ending at that
        very instant abandons the round alike.
        """
        env, plan = ctx.env, rnd.plan
        t0 = env.now
        after, arrives = resolution(plan)
        t_res = t0 + after  # when each job's timeout would fire
        order: NDArray[np.int64] | None = None
        closing = quota_close(t_res, arrives, rnd.quota)
        if closing is None:  # the round closes when every job has resolved
            due = np.ones(plan.size, dtype=bool)
            t_close = float(t_res.max())
        else:  # over-selection: the quota-th arrival, in the order the timeouts would fire
            order, n_due = closing
            due = np.zeros(plan.size, dtype=bool)
            due[order[:n_due]] = True
            t_close = float(t_res[order[n_due - 1]])
        late = False
        if deadline is not None:
            t_deadline = t0 + deadline
            if t_deadline < t_close:  # a job resolving exactly at the deadline is in time
                t_close, late = t_deadline, True
                due = t_res <= t_deadline

        def unsettled(t: float) -> None:  # the run ends while the round is in flight
            _settle(rnd, t_res, arrives, order, t)

        rnd.unsettled = unsettled
        yield env.timeout(landing_delay(t0, t_close))
        if ctx.scenario.max_time is not None:
            # wake on an event created now, like the processes' "done" event, so that a run
            # ending at this very instant abandons the round as it would with job processes
            yield env.timeout(0.0)
        rnd.unsettled = None
        rnd.status[:] = np.where(
            due, np.where(arrives, ARRIVED, DROPPED), LATE if late else CANCELLED
        )
        rnd.t_end[:] = np.where(due, t_res, t_close)
        rnd.closed = True

    def async_loop(self, ctx: RunContext, policy: AsyncPolicy[Any]) -> ServerLoop:
        """Jobs handled from a heap of the instants they resolve (no SimPy process each)."""
        return PlannedAsyncLoop(ctx, policy)


class TimingPlayback(PlannedPlayback):
    """A planned run that computes nothing: asynchronous jobs as columns of plain numbers."""

    name = "planned-timing"

    def async_loop(self, ctx: RunContext, policy: AsyncPolicy[Any]) -> ServerLoop:
        """The schedule planned in blocks and played over plain numbers."""
        return TimingAsyncLoop(ctx, policy)


def _settle(
    rnd: RoundState,
    t_res: NDArray[np.float64],
    arrives: NDArray[np.bool_],
    order: NDArray[np.int64] | None,
    t: float,
) -> None:
    """Set ``rnd`` to what the job processes would have made of it by time ``t``.

    Jobs resolve in ``order`` (by time, ties by job index: the order their timeouts fire in);
    each arrives or drops as ``rnd.arrive``/``rnd.drop`` would record it, until the round
    closes (quota reached or every job resolved); later resolutions are ignored, as the
    processes' would be.
    """
    if order is None:
        order = np.argsort(t_res, kind="stable")
    plan = rnd.plan
    due = order[: int(np.searchsorted(t_res[order], t, side="right"))]
    got = arrives[due]
    closing = np.flatnonzero(np.cumsum(got) >= rnd.quota)
    last = int(closing[0]) + 1 if closing.size else due.size
    due, got = due[:last], got[:last]
    rnd.status[due] = np.where(got, ARRIVED, DROPPED)
    rnd.t_end[due] = t_res[due]
    rnd.n_arrived = int(got.sum())
    rnd.n_resolved = int(due.size)
    rnd.closed = rnd.n_arrived >= rnd.quota or rnd.n_resolved == plan.size
