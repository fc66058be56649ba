"""What a run's shared links offer the engine: :class:`Links`, and the :class:`Flow` it moves.

Every transfer is a *flow* of ``size`` bytes over the links of its path, in one direction
(down: server to device; up: device to server). Each direction of a link is a resource of
capacity ``down[l]`` or ``up[l]`` bytes/s (resource ``2 l`` down, ``2 l + 1`` up). Two
implementations play them: :class:`~simfl.engine.flows.network.FlowNetwork` (the fast one)
and :class:`~simfl.engine.flows.reference.ReferenceFlowNetwork`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np
import simpy
from numpy.typing import NDArray

from simfl.engine.flows.sharedlink import Member
from simfl.network.topology import Topology

__all__ = ["Flow", "Links", "Route"]


#: a flow's place in a :class:`~simfl.engine.flows.network.FlowNetwork`: (its shared link's
#: resource, or -1 for none and -2 for none that fits; its own cap; its private finite
#: resources)
Route = tuple[int, float, tuple[int, ...]]


class Flow(Member):
    """One transfer over a path (see :class:`~simfl.engine.flows.network.FlowNetwork`)."""

    __slots__ = ("delivered", "done", "rate", "remaining", "resources", "route")

    def __init__(self, env: simpy.Environment, resources: NDArray[np.int64], size: float) -> None:
        super().__init__(size)
        self.resources = resources
        self.remaining = float(size)
        self.delivered = 0.0
        self.rate = 0.0
        self.done = env.event()
        #: its place in a ``FlowNetwork`` (shared resource, own cap, private resources)
        self.route: Route | None = None


class Links(ABC):
    """Shared links of a run (both implementations): resources, paths, starting flows."""

    def __init__(
        self,
        env: simpy.Environment,
        topology: Topology,
        carried: NDArray[np.float64] | None = None,
    ) -> None:
        self.env = env
        self.topology = topology
        # resource 2 * l is link l downward, 2 * l + 1 upward
        self.capacity = np.empty(2 * topology.n_links)
        self.capacity[0::2] = topology.down
        self.capacity[1::2] = topology.up
        #: bytes delivered per resource (``carried`` given: the array it adds to, shared)
        self._carried = np.zeros(self.capacity.size) if carried is None else carried
        #: why the flows were handed over to the reference algorithm (``None``: they were
        #: not; only the fast network hands over, see :mod:`simfl.engine.flows`)
        self.handover: str | None = None
        #: the simulated instant of that hand-over (``None``: none)
        self.handover_at: float | None = None

    @property
    def carried(self) -> NDArray[np.float64]:
        """Bytes delivered per resource so far (for checks: never above capacity x time)."""
        self._book_pending()
        return self._carried

    def _book_pending(self) -> None:
        """Add to ``carried`` the bytes booked for later (none here)."""
        return

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

    @abstractmethod
    def resume(self, flow: Flow) -> None:
        """(Re)admit a flow to the network."""

    @abstractmethod
    def stop(self, flow: Flow) -> float:
        """Take a flow out (cancelled or paused); return the bytes it has delivered."""
