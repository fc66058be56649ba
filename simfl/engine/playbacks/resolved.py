"""The resolved playback: availability on private links (see :mod:`.base`).

Availability is then the only thing touching a running job, so its whole history follows
from its plan and its device's on-intervals (:func:`~simfl.engine.offline.resolve`, bit for
bit what live job processes record). Flat synchronous rounds are played from it without job
events; a round whose closing instant other jobs' events share is handed to the job
processes (the order SimPy handles tied events in decides what is recorded).
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import numpy as np

from simfl.engine.clock import delay_below, sleep_until
from simfl.engine.jobs import JobPlan
from simfl.engine.offline import Resolution, resolve
from simfl.engine.playbacks.base import Playback
from simfl.engine.players import LiveJobs
from simfl.engine.rounds import quota_close
from simfl.outcome import ARRIVED, CANCELLED, DROPPED, LATE, RUNNING

if TYPE_CHECKING:
    from simfl.engine.context import RunContext
    from simfl.engine.rounds import RoundState

__all__ = ["TIE", "ResolvedPlayback"]

#: The reason a resolved round is handed to the job processes (``meta["playback_fallbacks"]``).
TIE = "events of several jobs at a round's closing instant"


class ResolvedPlayback(Playback):
    """Availability on private links: flat rounds resolved from their plans."""

    name = "resolved"

    def __init__(self, jobs: LiveJobs) -> None:
        super().__init__(jobs)
        devices = jobs.devices
        if devices is None or devices.cursor is None or devices.network is not None:
            raise ValueError("the resolved playback needs an availability and private links")
        self.cursor = devices.cursor
        self.pause = devices.offline == "pause"
        #: The latest pending event a stopped job left in the schedule (see :meth:`leave`).
        self.pending_until = -math.inf

    def resolve(self, plan: JobPlan) -> Resolution:
        """The events of the jobs of ``plan``, which start now."""
        return resolve(plan, self.cursor, self.pause)

    def leave(self, t: float) -> None:
        """Keep an event at ``t`` in the schedule, as a stopped live job leaves its timeout.

        Such events change nothing, but the clock passes them when a run ends because nothing
        is left to happen (paused jobs waiting for devices that never return); only the
        latest matters.
        """
        if math.isfinite(t) and t > self.pending_until:
            self.pending_until = t
            env = self.env

            def land(_: object) -> None:  # from a few ulps short of t, t - now is exact
                if env.now < t:
                    env.timeout(t - env.now)

            env.timeout(delay_below(env.now, t)).callbacks.append(land)

    def _round(
        self, ctx: RunContext, rnd: RoundState, deadline: float | None, alone: bool
    ) -> Generator[Any, Any, None]:
        """The round without job events, its devices going on and off: resolved from the plan.

        The server sleeps until the round closes and records exactly what job processes
        record: where each stopped job stood, its pending event kept in the schedule. A round
        not played alone, or whose closing instant other jobs' events share, is played with
        those processes.
        """
        if not alone:
            yield from self.processes(ctx, rnd, deadline)
            return
        env, plan = ctx.env, rnd.plan
        t0 = env.now
        res = self.resolve(plan)
        close = _close(res, rnd.quota, t0, deadline)
        if close is None:
            self.fell_back(TIE)
            yield from self.processes(ctx, rnd, deadline)
            return
        t_close, late = close

        def unsettled(t: float) -> None:  # events at this very instant are not processed
            _apply(rnd, res, t, inclusive=False)

        rnd.unsettled = unsettled
        if math.isinf(t_close):  # jobs paused for ever: the last event happens, then nothing
            last = float(res.times[np.isfinite(res.times)].max())
            yield from sleep_until(env, last)
            rnd.unsettled = None
            _apply(rnd, res, last, inclusive=True)
            yield env.event()  # never triggered: the run ends (offline, or at max_time)
        yield from sleep_until(env, t_close)
        if ctx.scenario.max_time is not None:
            yield env.timeout(0.0)  # as the processes' "round done" event (see PlannedPlayback)
        rnd.unsettled = None
        _apply(rnd, res, t_close, inclusive=True)
        stopped = np.flatnonzero(rnd.status == RUNNING)
        rnd.status[stopped] = LATE if late else CANCELLED
        rnd.t_end[stopped] = t_close
        rnd.closed = True
        if stopped.size:  # their pending timeouts stay in the schedule, as the processes' do
            pending = res.next_after(t_close)[stopped]
            pending = pending[np.isfinite(pending)]
            if pending.size:
                self.leave(float(pending.max()))


def _close(
    res: Resolution, quota: int, t0: float, deadline: float | None
) -> tuple[float, bool] | None:
    """When a resolved round closes and whether its deadline closes it (late jobs).

    ``None`` when events of several jobs coincide at the closing instant (besides the job
    closing it): the order SimPy processes them in then decides what is recorded, so the
    round is played with live job processes instead.
    """
    t_res, arrives = res.t_end, res.arrives
    closer = -1  # the job whose arrival closes the round (-1: every job resolved, or deadline)
    closing = quota_close(t_res, arrives, quota)
    if closing is None:  # every job resolves first
        t_close = float(t_res.max())
    else:  # the quota-th arrival, jobs resolving at one instant in job order
        order, n_due = closing
        closer = int(order[n_due - 1])
        t_close = float(t_res[closer])
    late = False
    if deadline is not None and t0 + deadline <= t_close:  # any event at it is a tie
        t_close, late, closer = t0 + deadline, True, -1
    elif closer < 0:
        return t_close, False  # every job resolved: the order they did so in changes nothing
    at = res.times == t_close
    if closer >= 0:
        at[closer] = False
    return None if at.any() else (t_close, late)


def _apply(rnd: RoundState, res: Resolution, t: float, inclusive: bool) -> None:
    """Bring ``rnd`` and its plan's record to what the live processes left at ``t``.

    ``inclusive``: the events at ``t`` itself were processed.
    """
    plan = rnd.plan
    spent, progress, active = res.state_at(t, inclusive)
    plan.spent[:] = spent
    plan.progress[:] = progress
    plan.active_since[:] = active
    due = np.flatnonzero(res.t_end <= t if inclusive else res.t_end < t)
    rnd.status[due] = np.where(res.arrives[due], ARRIVED, DROPPED)
    rnd.t_end[due] = res.t_end[due]
