"""Job playback, chosen once per run: how planned device jobs unfold in simulated time.

:class:`Planned`
    Private links and devices that are always online: nothing touches a job once it starts, so
    its whole fate follows from its plan (:func:`~simfl.engine.jobs.resolution`). A job needs
    at most one timeout (raced only by its failure clock, drawn up front because the hazard is
    memoryless), and synchronous rounds need none at all (:mod:`simfl.engine.sync` plays a
    cohort out in one vectorised step). Where a stopped job stood follows from its plan too
    (:func:`~simfl.engine.jobs.planned_split`).
:class:`Live`
    Devices with on/off availability and/or a shared network: a transfer's duration depends on
    the other flows on its links (:mod:`simfl.engine.flows`), and a device going offline aborts
    or pauses its job. The job's record is kept as it runs (:mod:`simfl.engine.live`).
:class:`Resolved`
    On/off availability on private links: availability is then the only thing touching a
    running job, so its whole history follows from its plan and its device's on-intervals
    (:func:`~simfl.engine.offline.resolve`, bit for bit what :class:`Live` records).
    Synchronous rounds are played from it without job events (:mod:`simfl.engine.sync`);
    jobs started one by one (asynchronous, semi-asynchronous and edge loops) run as in
    :class:`Live`, which stays the reference (``simfl.run(..., batched=False)``).

Both start job processes that report ``on_arrive(j)`` or ``on_drop(j)`` and stop quietly when
interrupted, and both work out what each job spent and moved for the records (:meth:`split`).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator
from typing import Any

import numpy as np
import simpy
from numpy.typing import NDArray

from simfl.engine.flows import Links
from simfl.engine.jobs import JobPlan, bytes_moved, planned_split, resolution, time_split
from simfl.engine.live import DeviceRuntime
from simfl.engine.offline import Resolution, resolve
from simfl.fleet import Fleet
from simfl.outcome import ARRIVED

__all__ = ["Live", "Planned", "Playback", "Resolved", "Split"]

Callback = Callable[[int], None]
Array = NDArray[np.float64]
#: Busy seconds per stage (download, compute, upload) and bytes moved (down, up) of each job.
Split = tuple[Array, Array, Array, Array, Array]


class Playback(ABC):
    """How the jobs of a run are played (one instance per run)."""

    #: Whether every job's fate follows from its plan (no availability, no shared links).
    planned: bool

    def __init__(self, env: simpy.Environment, fleet: Fleet, links: Any) -> None:
        self.env = env
        self.fleet = fleet
        #: (latency, down, up bandwidth) of each device's path, or ``None`` for private links
        self.links = links

    @abstractmethod
    def start(
        self, plan: JobPlan, on_arrive: Callback, on_drop: Callback, *, local: bool = False
    ) -> list[simpy.Process]:
        """Start the SimPy process of every job of ``plan``."""

    @abstractmethod
    def split(self, plan: JobPlan, status: NDArray[np.int8], t_end: Array) -> Split:
        """Seconds per stage and bytes moved by every job of ``plan`` (all of them ended)."""


class Planned(Playback):
    """Private links, devices always online: each job is one race (see the module docstring)."""

    planned = True

    def start(  # noqa: D102
        self, plan: JobPlan, on_arrive: Callback, on_drop: Callback, *, local: bool = False
    ) -> list[simpy.Process]:
        if local:
            raise ValueError("edge-local jobs need a Scenario.network")
        env = self.env
        after, arrives = resolution(plan)
        return [
            env.process(_one_race(env, float(a), bool(ok), j, on_arrive, on_drop))
            for j, (a, ok) in enumerate(zip(after, arrives, strict=True))
        ]

    def split(self, plan: JobPlan, status: NDArray[np.int8], t_end: Array) -> Split:  # noqa: D102
        arrived = status == ARRIVED
        whole = plan.download, plan.compute, plan.upload, plan.size_down, plan.size_up
        if arrived.all():  # every stage done, every byte moved
            return whole
        # an arrived job's split is its plan: only the others are worked out
        rest = np.flatnonzero(~arrived)
        part = plan.take(rest)
        down, comp, up, progress = planned_split(part, status[rest], t_end[rest])
        b_down, b_up = bytes_moved(part, self.fleet, down, up, self.links, progress)
        split = (down, comp, up, b_down, b_up)
        out = [a.copy() for a in whole]
        for a, v in zip(out, split, strict=True):
            a[rest] = v
        return out[0], out[1], out[2], out[3], out[4]


class Live(Playback):
    """Availability and/or shared links: jobs run stage by stage (see the module docstring)."""

    planned = False

    def __init__(
        self,
        env: simpy.Environment,
        fleet: Fleet,
        links: Any,
        devices: DeviceRuntime,
        network: Links | None,
    ) -> None:
        super().__init__(env, fleet, links)
        self.devices = devices
        self.network = network

    def start(  # noqa: D102
        self, plan: JobPlan, on_arrive: Callback, on_drop: Callback, *, local: bool = False
    ) -> list[simpy.Process]:
        if local and self.network is None:
            raise ValueError("edge-local jobs need a Scenario.network")
        env, devices = self.env, self.devices
        return [
            env.process(devices.process(plan, j, on_arrive, on_drop, local))
            for j in range(plan.size)
        ]

    def split(self, plan: JobPlan, status: NDArray[np.int8], t_end: Array) -> Split:  # noqa: D102
        if (status == ARRIVED).all():  # every stage done in busy spells, every byte moved
            spent = plan.spent
            return spent[:, 0], spent[:, 1], spent[:, 2], plan.size_down, plan.size_up
        self.devices.finalize(plan)  # flows of jobs stopped without running their process
        down, comp, up = time_split(plan, t_end)
        b_down, b_up = bytes_moved(plan, self.fleet, down, up, self.links)
        return down, comp, up, b_down, b_up


class Resolved(Live):
    """Availability on private links: jobs resolved from their plans (see the module docstring).

    Parameters
    ----------
    env, fleet
        The run's environment and fleet.
    devices
        The live job processes (with the availability cursor and the offline mode), for jobs
        started one by one and for rounds whose events tie at their closing instant.
    """

    def __init__(self, env: simpy.Environment, fleet: Fleet, devices: DeviceRuntime) -> None:
        if devices.cursor is None or devices.network is not None:
            raise ValueError("Resolved playback needs an availability and private links")
        super().__init__(env, fleet, None, devices, None)
        self.cursor = devices.cursor
        #: The latest pending event a stopped job left in the schedule (see :meth:`leave`).
        self.pending_until = -math.inf

    def resolve(self, plan: JobPlan) -> Resolution:
        """The events of the jobs of ``plan``, which start now."""
        return resolve(plan, self.cursor, self.devices.offline == "pause")

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


def landing_delay(now: float, t: float) -> float:
    """A delay ``d >= 0`` with ``now + d == t`` in floating point (so the clock lands on ``t``)."""
    d = t - now
    for _ in range(8):
        reached = now + d
        if reached == t:
            return d
        d = float(np.nextafter(d, math.inf if reached < t else -math.inf))
    raise AssertionError(f"cannot land the clock on {t!r} from {now!r}")  # pragma: no cover


def delay_below(now: float, t: float) -> float:
    """The largest delay ``d >= 0`` with ``now + d <= t`` in floating point (``t >= now``).

    ``now + d`` may fall a few units in the last place short of ``t`` (when no delay lands on
    ``t`` exactly); from there ``t - (now + d)`` is exact, so a second delay lands on ``t``.
    """
    d = t - now
    while d > 0.0 and now + d > t:
        d = float(np.nextafter(d, -math.inf))
    return d


def _one_race(
    env: simpy.Environment,
    after: float,
    arrives: bool,
    j: int,
    on_arrive: Callback,
    on_drop: Callback,
) -> Generator[Any, Any, None]:
    """Job ``j`` on private links, its device always online: one timeout.

    Nothing contends with its stages, so the job is a single race between its planned duration
    and its failure clock (``after`` and ``arrives`` come from
    :func:`~simfl.engine.jobs.resolution`).
    """
    try:
        yield env.timeout(after)
    except simpy.Interrupt:
        return  # stopped by the server, which records the job
    if arrives:
        on_arrive(j)
    else:
        on_drop(j)
