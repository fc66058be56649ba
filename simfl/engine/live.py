"""Live device jobs: download, compute, upload, stage by stage, for the ``Live`` playback.

Devices with on/off availability and/or a shared network: a transfer's duration depends on the
other flows on its links (:mod:`simfl.engine.flows`), and a device going offline aborts the job
or pauses it (its failure clock pauses too). With server costs (:mod:`simfl.engine.server`) the
server's handling of the model it sends and of the update it receives frames the job's stages.

:class:`DeviceRuntime` keeps the job's record in its :class:`~simfl.engine.jobs.JobPlan` (stages
completed, busy seconds per stage, bytes moved); jobs report ``on_arrive(j)`` or
``on_drop(j)``, and stop quietly when the server interrupts them (a round closing, the run
ending).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from typing import Any

import numpy as np
import simpy
from numpy.typing import NDArray

from simfl.engine.flows import Flow, Links
from simfl.engine.jobs import JobPlan
from simfl.engine.server import ServerClock
from simfl.fleet import AvailabilityCursor

__all__ = ["DeviceRuntime"]

Callback = Callable[[int], None]


class DeviceRuntime:
    """Job processes for devices that go offline and/or share links (one per run).

    Parameters
    ----------
    env
        The run's environment.
    cursor
        Availability queries (``None``: always online).
    offline
        ``"abort"`` or ``"pause"``: what a job does when its device goes offline.
    network
        The shared network (``None``: private links, durations as planned).
    path_latency
        Latency of every device's path (used with a network).
    server
        The server's costs (``None``: the server takes no time): it handles each job's
        outgoing message before the download and its update after the upload.
    """

    def __init__(
        self,
        env: simpy.Environment,
        cursor: AvailabilityCursor | None,
        offline: str,
        network: Links | None,
        path_latency: NDArray[np.float64] | None,
        server: ServerClock | None = None,
    ) -> None:
        self.env = env
        self.server = server
        self.cursor = cursor
        self.offline = offline
        self.network = network
        self.path_latency = path_latency
        self.live: dict[tuple[int, int], Flow] = {}  # (id(plan), j) -> its flow in progress

    # ----------------------------------------------------------------- availability
    def _window(self, device: int) -> tuple[bool, float, float]:
        if self.cursor is None:
            return True, math.inf, self.env.now
        return self.cursor.window(device, self.env.now)

    def _wait_online(self, plan: JobPlan, j: int, next_on: float) -> Generator[Any, Any, None]:
        """Paused until the device is back (forever if it never is: the server stops it)."""
        plan.active_since[j] = math.nan
        if math.isinf(next_on):
            yield self.env.event()  # never triggered
        yield self.env.timeout(next_on - self.env.now)
        plan.active_since[j] = self.env.now

    @staticmethod
    def _finished(flow: Flow) -> bool:
        return bool(flow.done.triggered)

    # ----------------------------------------------------------------- stages
    def _timed(
        self, plan: JobPlan, j: int, s: int, seconds: float, clock: list[float]
    ) -> Generator[Any, Any, bool]:
        """Stay busy ``seconds`` in stage ``s`` (pausing or aborting while offline).

        ``clock`` is ``[busy seconds used, busy seconds until the device fails]``. Busy time is
        added to ``plan.spent`` segment by segment; ``plan.active_since`` marks the start of
        the segment not yet added (so a job stopped mid-segment is recorded exactly).
        """
        env = self.env
        device = int(plan.devices[j])
        left = seconds
        while True:
            online, off_at, on_at = self._window(device)
            if not online:
                if self.offline == "abort":
                    return False
                yield from self._wait_online(plan, j, on_at)
                continue
            began = env.now
            plan.active_since[j] = began
            fail_at = began + (clock[1] - clock[0])
            stop = min(off_at, fail_at)
            done = began + left <= stop
            yield env.timeout(left if done else stop - began)
            used = left if done else stop - began
            clock[0] += used
            plan.spent[j, s] += used
            plan.active_since[j] = env.now
            if done:
                return True
            left -= used
            if stop == fail_at or self.offline == "abort":
                return False
            yield from self._wait_online(plan, j, self._window(device)[2])

    def _transfer(
        self, plan: JobPlan, j: int, s: int, clock: list[float], local: bool
    ) -> Generator[Any, Any, bool]:
        """Move the stage's bytes over the shared network (after the path's latency).

        ``local``: only over the device's access link (to or from its edge server).
        """
        env, net = self.env, self.network
        assert net is not None and self.path_latency is not None
        device = int(plan.devices[j])
        if local:
            access = int(net.topology.paths[device][-1])
            latency = float(net.topology.latency[access])
        else:
            latency = float(self.path_latency[device])
        size = float(plan.size_down[j] if s == 0 else plan.size_up[j])
        if not (yield from self._timed(plan, j, s, latency, clock)):
            plan.moved[j, s // 2] = 0.0
            return False
        flow = net.start(device, "down" if s == 0 else "up", size, local=local)
        key = (id(plan), j)
        self.live[key] = flow  # an interrupted job's flow is stopped by finalize()
        while not self._finished(flow):
            off_at = self._window(device)[1]
            began = env.now
            plan.active_since[j] = began
            fail_at = began + (clock[1] - clock[0])
            limit = min(off_at, fail_at)
            if math.isinf(limit):
                yield flow.done
            else:
                yield flow.done | env.timeout(limit - began)
            clock[0] += env.now - began
            plan.spent[j, s] += env.now - began
            plan.active_since[j] = env.now
            if self._finished(flow):
                break
            net.stop(flow)
            if env.now >= fail_at or self.offline == "abort":
                del self.live[key]
                plan.moved[j, s // 2] = flow.delivered
                return False
            yield from self._wait_online(plan, j, self._window(device)[2])
            net.resume(flow)
        del self.live[key]
        return True

    def process(
        self, plan: JobPlan, j: int, on_arrive: Callback, on_drop: Callback, local: bool = False
    ) -> Generator[Any, Any, None]:
        """The ``j``-th job of ``plan``: download, compute, upload (``local``: to its edge).

        With server costs (not to an edge server) the server first handles the message it
        sends (the device waits, not busy), and the update arrives once the server has handled
        it after the upload.
        """
        # busy seconds used so far, and the busy seconds after which the device fails
        clock = [0.0, float(plan.fail_after[j])]
        server = None if local else self.server
        try:
            if server is not None:
                plan.active_since[j] = math.nan  # waiting for the model: not busy
                yield from server.send(float(plan.size_down[j]))
                plan.active_since[j] = self.env.now
            for s in range(3):
                if s != 1 and self.network is not None:
                    ok = yield from self._transfer(plan, j, s, clock, local)
                else:
                    stage = (plan.download, plan.compute, plan.upload)[s]
                    ok = yield from self._timed(plan, j, s, float(stage[j]), clock)
                if not ok:
                    plan.active_since[j] = math.nan
                    on_drop(j)
                    return
                plan.progress[j] += 1
                plan.active_since[j] = self.env.now
            if server is not None:
                yield from server.receive(float(plan.size_up[j]))
        except simpy.Interrupt:
            self.finalize(plan, (j,))
            return
        plan.active_since[j] = math.nan
        on_arrive(j)

    def finalize(self, plan: JobPlan, rows: Any = None) -> None:
        """Stop the flows of stopped jobs and note the bytes they had delivered."""
        if self.network is None or not self.live:
            return
        for j in range(plan.size) if rows is None else rows:
            flow = self.live.pop((id(plan), j), None)
            if flow is not None:
                s = int(plan.progress[j])
                plan.moved[j, s // 2] = self.network.stop(flow)
