"""How one job unfolds in simulated time: from its plan alone, or live, stage by stage.

:class:`PlannedJobs`
    Private links and devices that are always online: nothing touches a job once it starts,
    so its whole fate follows from its plan (:func:`~simfl.engine.jobs.resolution`). A job
    started as a SimPy process needs one timeout, raced only by its failure clock (drawn up
    front because the hazard is memoryless). Where a stopped job stood follows from its plan
    too (:func:`~simfl.engine.jobs.planned_split`).
:class:`LiveJobs`
    Devices with on/off availability and/or a shared network: a transfer's duration depends
    on the other flows on its links (:mod:`simfl.engine.flows`), and a device going offline
    aborts or pauses its job; and any run with server costs (:mod:`simfl.engine.server`): the
    server's handling of the job's messages comes between its stages. The job's record is
    kept as it runs (:mod:`simfl.engine.live`).

Both start job processes that report ``on_arrive(j)`` or ``on_drop(j)`` and stop quietly when
interrupted, and both work out what each job spent and moved for the records (``split``).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import numpy as np
import simpy
from numpy.typing import NDArray

from simfl.engine.flows import FlowNetwork, Links, ReferenceFlowNetwork
from simfl.engine.jobs import JobPlan, bytes_moved, planned_split, resolution, time_split
from simfl.engine.live import DeviceRuntime
from simfl.engine.server import ServerClock
from simfl.fleet import AvailabilityCursor, Fleet
from simfl.outcome import ARRIVED
from simfl.scenario import Scenario

__all__ = ["Callback", "Jobs", "LiveJobs", "PlannedJobs", "Split", "build_jobs"]

Callback = Callable[[int], None]
Array = NDArray[np.float64]
#: Busy seconds per stage (download, compute, upload) and bytes moved (down, up) of each job.
Split = tuple[Array, Array, Array, Array, Array]


class PlannedJobs:
    """Private links, devices always online: each job is one race (see the module docstring)."""

    #: No shared network, no live job machinery.
    network: Links | None = None
    devices: DeviceRuntime | None = None

    def __init__(self, env: simpy.Environment, fleet: Fleet) -> None:
        self.env = env
        self.fleet = fleet
        #: (latency, down, up bandwidth) of each device's path; ``None``: its own links
        self.links: Any = None

    def start(
        self, plan: JobPlan, on_arrive: Callback, on_drop: Callback, *, local: bool = False
    ) -> list[simpy.Process]:
        """Start the SimPy process of every job of ``plan``."""
        if local:
            raise ValueError("edge-local jobs need a Scenario.network")
        env = self.env
        after, arrives = resolution(plan)
        return [
            env.process(_one_race(env, float(a), bool(ok), j, on_arrive, on_drop))
            for j, (a, ok) in enumerate(zip(after, arrives, strict=True))
        ]

    def split(self, plan: JobPlan, status: NDArray[np.int8], t_end: Array) -> Split:
        """Seconds per stage and bytes moved by every job of ``plan`` (all of them ended)."""
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


class LiveJobs:
    """Availability and/or shared links: jobs run stage by stage (see the module docstring).

    Parameters
    ----------
    env, fleet
        The run's environment and fleet.
    links
        (latency, down, up bandwidth) of each device's path through the network, or ``None``
        for private links.
    devices
        The live job processes (with the availability cursor and the offline mode).
    network
        The shared links (``None``: private links).
    """

    def __init__(
        self,
        env: simpy.Environment,
        fleet: Fleet,
        links: Any,
        devices: DeviceRuntime,
        network: Links | None,
    ) -> None:
        self.env = env
        self.fleet = fleet
        self.links = links
        self.devices: DeviceRuntime | None = devices
        self.network = network

    def start(
        self, plan: JobPlan, on_arrive: Callback, on_drop: Callback, *, local: bool = False
    ) -> list[simpy.Process]:
        """Start the SimPy process of every job of ``plan``."""
        if local and self.network is None:
            raise ValueError("edge-local jobs need a Scenario.network")
        env, devices = self.env, self.devices
        assert devices is not None
        return [
            env.process(devices.process(plan, j, on_arrive, on_drop, local))
            for j in range(plan.size)
        ]

    def split(self, plan: JobPlan, status: NDArray[np.int8], t_end: Array) -> Split:
        """Seconds per stage and bytes moved by every job of ``plan`` (all of them ended)."""
        if (status == ARRIVED).all():  # every stage done in busy spells, every byte moved
            spent = plan.spent
            return spent[:, 0], spent[:, 1], spent[:, 2], plan.size_down, plan.size_up
        assert self.devices is not None
        self.devices.finalize(plan)  # flows of jobs stopped without running their process
        down, comp, up = time_split(plan, t_end)
        b_down, b_up = bytes_moved(plan, self.fleet, down, up, self.links)
        return down, comp, up, b_down, b_up


#: Either way of playing one job.
Jobs = PlannedJobs | LiveJobs


def build_jobs(
    env: simpy.Environment,
    scenario: Scenario,
    cursor: AvailabilityCursor | None,
    reference_links: bool,
    server: ServerClock | None = None,
) -> Jobs:
    """How the run's jobs unfold: from their plans, or live (availability, shared links).

    Builds the run's shared network (the reference algorithm with ``reference_links``) and
    its live job processes where it has them. A run with server costs (``server``) plays its
    jobs live too: the server's handling of each job's messages stands between its stages.
    """
    fleet = scenario.fleet
    if scenario.network is None and cursor is None and server is None:
        return PlannedJobs(env, fleet)
    links: Any = None
    path_latency = None
    network: FlowNetwork | ReferenceFlowNetwork | None = None
    if scenario.network is not None:
        topology = scenario.network.build(fleet.bandwidth_down, fleet.bandwidth_up, fleet.latency)
        network = (ReferenceFlowNetwork if reference_links else FlowNetwork)(env, topology)
        links = topology.device_links()
        path_latency = topology.path_latency
    devices = DeviceRuntime(env, cursor, fleet.offline, network, path_latency, server)
    return LiveJobs(env, fleet, links, devices, network)


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
