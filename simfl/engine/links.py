"""Shared links: transfers that share a link share its capacity, max-min fairly.

Every transfer is a *flow* of ``size`` bytes over the links of its path, in one direction (down:
server to device; up: device to server). Each direction of a link is a resource of capacity
``down[l]`` or ``up[l]`` bytes/s. Whenever a flow starts, finishes, pauses or is cancelled, the
rates of all active flows are recomputed as the max-min fair allocation (progressive filling:
raise every rate together; a resource that fills freezes the flows through it): on a single
link this is processor sharing, each of the ``n`` active flows getting ``C / n``. A flow then
completes when its remaining bytes reach zero at its current rate.

Before its first byte moves a transfer pays its path's latency (handled by the job process).

Closed forms this reproduces (tests): ``n`` equal flows of ``S`` bytes starting together on a
link of capacity ``C`` all finish at ``n S / C``; two flows of sizes ``S1 < S2`` finish at
``2 S1 / C`` and ``(S1 + S2) / C``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import simpy
from numpy.typing import NDArray

from simfl.network.flows import max_min_rates
from simfl.network.topology import Topology

__all__ = ["Flow", "FlowNetwork"]

_TOL = 1e-9  # relative: a flow with less than this share of its bytes left is complete


class Flow:
    """One transfer over a path (see :class:`FlowNetwork`)."""

    __slots__ = ("delivered", "done", "rate", "remaining", "resources", "size")

    def __init__(self, env: simpy.Environment, resources: NDArray[np.int64], size: float) -> None:
        self.resources = resources
        self.size = float(size)
        self.remaining = float(size)
        self.delivered = 0.0
        self.rate = 0.0
        self.done = env.event()


class FlowNetwork:
    """The active flows of a run and their max-min fair rates (SimPy)."""

    def __init__(self, env: simpy.Environment, topology: Topology) -> None:
        self.env = env
        self.topology = topology
        # resource 2 * l is link l downward, 2 * l + 1 upward
        self.capacity = np.empty(2 * topology.n_links)
        self.capacity[0::2] = topology.down
        self.capacity[1::2] = topology.up
        self.flows: list[Flow] = []
        self._last = 0.0
        self._token = 0
        #: bytes delivered per resource so far (for checks: never above capacity x time)
        self.carried = np.zeros(self.capacity.size)

    def resources(self, device: int, direction: str) -> NDArray[np.int64]:
        """Resource indices of ``device``'s path in ``direction`` (``"down"`` or ``"up"``)."""
        path = self.topology.paths[device]
        return 2 * path + (1 if direction == "up" else 0)

    def local_resources(self, device: int, direction: str) -> NDArray[np.int64]:
        """Resource of ``device``'s access link only (its last hop), in ``direction``."""
        return self.resources(device, direction)[-1:]

    def upper_resources(self, device: int, direction: str) -> NDArray[np.int64]:
        """Resources of ``device``'s path above its access link (its edge to the server)."""
        return self.resources(device, direction)[:-1]

    def start(self, device: int, direction: str, size: float, *, local: bool = False) -> Flow:
        """Start moving ``size`` bytes now; ``flow.done`` succeeds when they have arrived.

        ``local=True`` uses only the device's access link (a transfer to or from its edge).
        """
        res = (self.local_resources if local else self.resources)(device, direction)
        return self.start_on(res, size)

    def start_on(self, resources: NDArray[np.int64], size: float) -> Flow:
        """Start a flow over explicit resources (e.g. an edge server's link to the cloud)."""
        flow = Flow(self.env, resources, size)
        self.resume(flow)
        return flow

    def resume(self, flow: Flow) -> None:
        """(Re)admit a flow to the network."""
        self._advance()
        if (
            flow.remaining <= _TOL * max(flow.size, 1.0)
            or np.isinf(self.capacity[flow.resources]).all()
        ):
            flow.delivered += flow.remaining
            self.carried[flow.resources] += flow.remaining
            flow.remaining = 0.0
            flow.remaining = 0.0
            flow.done.succeed()
            return
        self.flows.append(flow)
        self._reschedule()

    def stop(self, flow: Flow) -> float:
        """Take a flow out (cancelled or paused); return the bytes it has delivered."""
        self._advance()
        if flow in self.flows:
            self.flows.remove(flow)
            self._reschedule()
        return flow.delivered

    def _advance(self) -> None:
        now = self.env.now
        dt = now - self._last
        if dt > 0:
            for f in self.flows:
                moved = min(f.remaining, f.rate * dt) if math.isfinite(f.rate) else f.remaining
                f.remaining -= moved
                f.delivered += moved
                self.carried[f.resources] += moved
        self._last = now

    def _reschedule(self) -> None:
        rates = max_min_rates([f.resources for f in self.flows], self.capacity)
        for f, r in zip(self.flows, rates, strict=True):
            f.rate = float(r)
        self._token += 1
        if not self.flows:
            return
        with np.errstate(divide="ignore"):
            times = np.array([f.remaining / f.rate if f.rate > 0 else math.inf for f in self.flows])
        delay = float(times.min())
        if math.isfinite(delay):
            self.env.process(self._wake(self._token, delay))

    def _wake(self, token: int, delay: float) -> Any:
        yield self.env.timeout(delay)
        if token != self._token:
            return  # the flows changed since this completion was scheduled
        self._advance()
        finished = [f for f in self.flows if f.remaining <= _TOL * max(f.size, 1.0)]
        if not finished:  # rounding: the soonest flow is a hair short; finish it anyway
            finished = [min(self.flows, key=lambda f: f.remaining / max(f.rate, 1e-300))]
        for f in finished:
            self.carried[f.resources] += f.remaining
            f.delivered += f.remaining
            f.remaining = 0.0
            self.flows.remove(f)
            f.done.succeed()
        self._reschedule()
