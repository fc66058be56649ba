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
    the other flows on its links (:mod:`simfl.engine.links`), and a device going offline aborts
    or pauses its job. The job's record is kept as it runs (:mod:`simfl.engine.live`).

Both start job processes that report ``on_arrive(j)`` or ``on_drop(j)`` and stop quietly when
interrupted, and both work out what each job spent and moved for the records (:meth:`split`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Generator
from typing import Any

import numpy as np
import simpy
from numpy.typing import NDArray

from simfl.engine.jobs import JobPlan, bytes_moved, planned_split, resolution, time_split
from simfl.engine.links import Links
from simfl.engine.live import DeviceRuntime
from simfl.fleet import Fleet
from simfl.outcome import ARRIVED

__all__ = ["Live", "Planned", "Playback", "Split"]

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
        if (status == ARRIVED).all():  # every stage done, every byte moved
            return plan.download, plan.compute, plan.upload, plan.size_down, plan.size_up
        down, comp, up, progress = planned_split(plan, status, t_end)
        b_down, b_up = bytes_moved(plan, self.fleet, down, up, self.links, progress)
        return down, comp, up, b_down, b_up


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
        self.devices.finalize(plan)  # flows of jobs stopped without running their process
        down, comp, up = time_split(plan, t_end)
        b_down, b_up = bytes_moved(plan, self.fleet, down, up, self.links)
        return down, comp, up, b_down, b_up


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
