"""The reference algorithm: every rate recomputed over every flow at every flow event.

Whenever a flow starts, finishes, pauses or is cancelled, every active flow is advanced at its
rate and the rates are computed again by progressive filling
(:func:`~simfl.engine.flows.maxmin.max_min_rates`); the flow finishing first then schedules
one SimPy wake-up. It is the definition the fast
:class:`~simfl.engine.flows.network.FlowNetwork` is tested against (to a relative ``1e-9``),
what ``simfl.run(..., reference_links=True)`` plays, and what the fast network hands its flows
over to where they do not fit its shared links.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import simpy
from numpy.typing import NDArray

from simfl.engine.flows.links import Flow, Links
from simfl.engine.flows.maxmin import max_min_rates
from simfl.network.topology import Topology

__all__ = ["ReferenceFlowNetwork"]


class ReferenceFlowNetwork(Links):
    """The active flows and their max-min fair rates, recomputed over all of them (SimPy).

    The straightforward implementation: every flow event advances every flow and recomputes
    every rate by progressive filling (:func:`~simfl.engine.flows.maxmin.max_min_rates`). It
    is the reference the fast :class:`~simfl.engine.flows.network.FlowNetwork` is tested
    against, and what that network hands its flows over to where they do not fit its shared
    links (:meth:`take_over`).

    Parameters
    ----------
    env, topology
        The run's clock and its links.
    carried
        The array of bytes delivered per resource to add to (shared with the network handing
        over; ``None``: a new one).
    since
        When the flows it takes over were last advanced (the hand-over's instant).
    """

    def __init__(
        self,
        env: simpy.Environment,
        topology: Topology,
        carried: NDArray[np.float64] | None = None,
        since: float = 0.0,
    ) -> None:
        super().__init__(env, topology, carried)
        self.flows: list[Flow] = []
        self._last = since
        self._token = 0

    def take_over(self, flows: list[Flow]) -> None:
        """Carry on ``flows`` (in progress, taken off another network now) from here."""
        self.flows.extend(flows)
        self._reschedule()

    def resume(self, flow: Flow) -> None:
        """(Re)admit a flow to the network."""
        self._advance()
        if flow.remaining <= flow.tol or np.isinf(self.capacity[flow.resources]).all():
            flow.delivered += flow.remaining
            self._carried[flow.resources] += flow.remaining
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
                self._carried[f.resources] += moved
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
        finished = [f for f in self.flows if f.remaining <= f.tol]
        if not finished:  # rounding: the soonest flow is a hair short; finish it anyway
            finished = [min(self.flows, key=lambda f: f.remaining / max(f.rate, 1e-300))]
        for f in finished:
            self._carried[f.resources] += f.remaining
            f.delivered += f.remaining
            f.remaining = 0.0
            self.flows.remove(f)
            f.done.succeed()
        self._reschedule()
