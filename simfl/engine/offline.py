"""Jobs on private links under on/off availability, resolved from their plans without events.

Without a shared network, availability is the only thing that touches a running job, so its
whole history follows from its plan and its device's on-intervals: in ``"abort"`` mode a job
arrives if its device stays online for the whole planned duration (and its failure clock does
not run out first), else it is dropped at the first offline instant (or the failure instant);
in ``"pause"`` mode busy time accrues only while the device is online, and so does the failure
clock.

:func:`resolve` works out every event the :class:`~simfl.engine.live.DeviceRuntime` process of
each job would see (its start, the end of every busy spell, every return online) with the very
same floating-point operations, so the records match that process bit for bit: the time of
each event and the job's record just after it (busy seconds per stage, stages completed, start
of the current busy spell). Jobs that stay online and do not fail (most of them) are resolved in
one vectorised step; the others are replayed one by one, segment by segment.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from simfl.engine.jobs import JobPlan
from simfl.fleet import AvailabilityCursor

__all__ = ["Resolution", "resolve"]

Array = NDArray[np.float64]
#: One event of a job: its time, the busy seconds per stage, stages completed, busy since.
_Event = tuple[float, float, float, float, int, float]


@dataclass(frozen=True)
class Resolution:
    """The events of every job of a plan, as the live job processes would see them.

    Attributes
    ----------
    t_end
        When each job resolves (arrives or is dropped); ``inf`` for a job paused on a device
        that never comes back.
    arrives
        Whether each job arrives (rather than being dropped or paused for ever).
    times
        ``(n, k)`` times of each job's events, in order (its start first), ``inf``-padded.
    spent, progress, active
        The job's record just after each event: busy seconds per stage ``(n, k, 3)``, stages
        completed ``(n, k)`` and the start of the busy spell in progress ``(n, k)`` (NaN while
        paused or once resolved).
    """

    t_end: Array
    arrives: NDArray[np.bool_]
    times: Array
    spent: Array
    progress: NDArray[np.int8]
    active: Array

    def state_at(self, t: float, inclusive: bool) -> tuple[Array, NDArray[np.int8], Array]:
        """Each job's record after its events before ``t`` (``inclusive``: at ``t`` too).

        Returns
        -------
        spent, progress, active
            As the job's :class:`~simfl.engine.jobs.JobPlan` record would hold them.
        """
        if self.t_end.max() < t or (inclusive and self.t_end.max() == t):  # all resolved
            return self.spent[:, -1], self.progress[:, -1], self.active[:, -1]
        seen = (self.times <= t) if inclusive else (self.times < t)
        last = seen.sum(axis=1) - 1  # every job has its start event at or before t
        rows = np.arange(self.times.shape[0])
        return self.spent[rows, last], self.progress[rows, last], self.active[rows, last]

    def next_after(self, t: float) -> Array:
        """The time of each job's first event after ``t`` (``inf``: none)."""
        later: Array = np.where(self.times > t, self.times, math.inf).min(axis=1)
        return later


def resolve(plan: JobPlan, cursor: AvailabilityCursor, pause: bool) -> Resolution:
    """The events of the jobs of ``plan`` (all starting at ``plan.t_start``, now).

    ``cursor`` answers the availability queries (it is only advanced to the start time) and
    ``pause`` is the fleet's offline mode (``False``: abort).
    """
    if not isinstance(plan.t_start, (int, float)):
        raise ValueError("resolve takes the jobs of one cohort, all starting at one time")
    n, t0 = plan.size, float(plan.t_start)
    av = cursor.av
    p, on_from, off = cursor.current(plan.devices, t0)
    online = on_from <= t0
    d, c, u, f = plan.download, plan.compute, plan.upload, plan.fail_after
    # the three busy spells of a job that stays online and does not fail, as the live process
    # computes them: each stage ends within the on-interval and before the failure instant
    e1 = t0 + d
    e2 = e1 + c
    e3 = e2 + u
    simple = (
        online
        & (e1 <= np.minimum(off, t0 + f))
        & (e1 < off)
        & (e2 <= np.minimum(off, e1 + (f - d)))
        & (e2 < off)
        & (e3 <= np.minimum(off, e2 + (f - (d + c))))
    )
    hard = np.flatnonzero(~simple)
    replays = [
        _replay(
            t0,
            (float(d[j]), float(c[j]), float(u[j])),
            float(f[j]),
            int(p[j]),
            int(cursor.hi[plan.devices[j]]),
            av.starts,
            av.ends,
            pause,
        )
        for j in hard
    ]
    k = max([4, *(len(ev) for ev, _ in replays)])
    times = np.full((n, k), math.inf)
    spent = np.zeros((n, k, 3))
    progress = np.full((n, k), 3, dtype=np.int8)
    active = np.full((n, k), math.nan)
    # the simple jobs: start, download done, compute done, upload done (arrived)
    times[:, 0], times[:, 1], times[:, 2], times[:, 3] = t0, e1, e2, e3
    spent[:, 1:, 0] = d[:, None]
    spent[:, 2:, 1] = c[:, None]
    spent[:, 3:, 2] = u[:, None]
    progress[:, :3] = np.arange(3, dtype=np.int8)
    active[:, 0], active[:, 1], active[:, 2] = t0, e1, e2
    t_end = e3.copy()
    arrives = np.ones(n, dtype=bool)
    for j, (events, outcome) in zip(hard, replays, strict=True):
        m = len(events)
        rec = np.array(events)
        times[j] = math.inf
        times[j, :m] = rec[:, 0]
        spent[j, :m] = rec[:, 1:4]
        spent[j, m:] = rec[-1, 1:4]
        progress[j, :m] = rec[:, 4]
        progress[j, m:] = rec[-1, 4]
        active[j, :m] = rec[:, 5]
        active[j, m:] = math.nan
        arrives[j] = outcome == "arrived"
        t_end[j] = rec[-1, 0] if outcome != "stuck" else math.inf
    return Resolution(t_end, arrives, times, spent, progress, active)


def _replay(
    t0: float,
    stages: tuple[float, float, float],
    fail: float,
    p: int,
    hi: int,
    starts: Array,
    ends: Array,
    pause: bool,
) -> tuple[list[_Event], str]:
    """One job, event by event, exactly as :meth:`DeviceRuntime.process` plays it.

    Returns its events (time and record after it) and how it ends: ``"arrived"``,
    ``"dropped"`` or ``"stuck"`` (paused on a device that never comes back).
    """
    now = t0
    spent = [0.0, 0.0, 0.0]
    progress = 0
    used = 0.0  # busy seconds so far (the failure clock)
    events: list[_Event] = []

    def window(t: float) -> tuple[bool, float, float]:
        nonlocal p
        while p < hi and ends[p] <= t:
            p += 1
        if p >= hi:
            return False, t, math.inf
        if starts[p] <= t:
            return True, float(ends[p]), t
        return False, t, float(starts[p])

    def note(active: float) -> None:
        events.append((now, spent[0], spent[1], spent[2], progress, active))

    s, left = 0, stages[0]
    while True:  # the top of the stage's loop, while the event at ``now`` is processed
        online, off_at, on_at = window(now)
        if not online:
            if not pause:
                note(math.nan)
                return events, "dropped"
        else:
            began = now
            fail_at = began + (fail - used)
            stop = min(off_at, fail_at)
            done = began + left <= stop
            step = left if done else stop - began
            note(began)
            now = began + step  # the busy spell's timeout fires
            used += step
            spent[s] += step
            if done:
                progress += 1
                s += 1
                if s == 3:
                    note(math.nan)
                    return events, "arrived"
                left = stages[s]
                continue
            left -= step
            if stop == fail_at or not pause:
                note(math.nan)
                return events, "dropped"
            on_at = window(now)[2]
        # paused until the device is back online
        note(math.nan)
        if math.isinf(on_at):
            return events, "stuck"
        now = now + (on_at - now)
