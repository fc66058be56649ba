"""Shared links: transfers that share a link share its capacity, max-min fairly.

Every transfer is a *flow* of ``size`` bytes over the links of its path, in one direction (down:
server to device; up: device to server). Each direction of a link is a resource of capacity
``down[l]`` or ``up[l]`` bytes/s. Whenever a flow starts, finishes, pauses or is cancelled, the
rates of the active flows are the max-min fair allocation (progressive filling: raise every
rate together; a resource that fills freezes the flows through it): on a single link this is
processor sharing, each of the ``n`` active flows getting ``C / n``. A flow then completes when
its remaining bytes reach zero at its current rate.

Two implementations (``simfl.run(..., reference_links=True)`` picks the second):
:class:`FlowNetwork`, the default, keeps each contended link's processor-sharing state
(:mod:`simfl.network.sharing`) and costs ``O(log n)`` per flow event on stars and
hierarchies; :class:`ReferenceFlowNetwork` recomputes every rate over every flow at every
event (the straightforward algorithm the tests hold the fast one to).

Before its first byte moves a transfer pays its path's latency (handled by the job process).

Closed forms this reproduces (tests): ``n`` equal flows of ``S`` bytes starting together on a
link of capacity ``C`` all finish at ``n S / C``; two flows of sizes ``S1 < S2`` finish at
``2 S1 / C`` and ``(S1 + S2) / C``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy
from numpy.typing import NDArray

from simfl.network.flows import max_min_rates
from simfl.network.sharing import Calendar, Member, SharedLink
from simfl.network.topology import Topology

__all__ = ["Flow", "FlowNetwork", "Links", "ReferenceFlowNetwork"]


#: a flow's place in a :class:`FlowNetwork`: (its shared link's resource, or -1 for none and -2
#: for none that fits; its own cap; its private finite resources)
Route = tuple[int, float, tuple[int, ...]]


class Flow(Member):
    """One transfer over a path (see :class:`FlowNetwork`)."""

    __slots__ = ("delivered", "done", "rate", "remaining", "resources", "route")

    def __init__(self, env: simpy.Environment, resources: NDArray[np.int64], size: float) -> None:
        super().__init__(size)
        self.resources = resources
        self.remaining = float(size)
        self.delivered = 0.0
        self.rate = 0.0
        self.done = env.event()
        #: its place in a :class:`FlowNetwork` (shared resource, own cap, private resources)
        self.route: Route | None = None


class Links(ABC):
    """Shared links of a run (both implementations): resources, paths, starting flows."""

    def __init__(self, env: simpy.Environment, topology: Topology) -> None:
        self.env = env
        self.topology = topology
        # resource 2 * l is link l downward, 2 * l + 1 upward
        self.capacity = np.empty(2 * topology.n_links)
        self.capacity[0::2] = topology.down
        self.capacity[1::2] = topology.up
        self._carried = np.zeros(self.capacity.size)

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


class ReferenceFlowNetwork(Links):
    """The active flows and their max-min fair rates, recomputed over all of them (SimPy).

    The straightforward implementation: every flow event advances every flow and recomputes
    every rate by progressive filling (:func:`~simfl.network.flows.max_min_rates`). It is
    the reference the fast :class:`FlowNetwork` is tested against, and what it falls back to
    where a flow crosses two contended links.
    """

    def __init__(self, env: simpy.Environment, topology: Topology) -> None:
        super().__init__(env, topology)
        self.flows: list[Flow] = []
        self._last = 0.0
        self._token = 0

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


class FlowNetwork(Links):
    """The active flows and their max-min fair rates, at O(log n) per flow event (SimPy).

    Every finite resource that more than one device's path crosses (a server link, an edge's
    link to the cloud) is a :class:`~simfl.network.sharing.SharedLink`: processor sharing
    among its flows, each capped by the rest of its path (the device's own access link). A
    flow joins the deepest such link on its path; where there are two (a hierarchy with
    finite edge *and* cloud links), the edge's link is a child of the cloud's and one
    water-filling solves both levels. These are exactly the max-min fair rates of
    :class:`ReferenceFlowNetwork` (tested to a relative ``1e-9``), and a flow event costs
    ``O(log n)`` (times the number of edges, on a two-level hierarchy) instead of a pass
    over every flow; the links' next completions are kept in a heap
    (:class:`~simfl.network.sharing.Calendar`), so a network of many edge links is not
    scanned per event either. One SimPy timeout is pending per network (the next
    completion); an outdated one is ignored by its token. A flow round
    (:mod:`simfl.engine.flowround`) drives the same links directly, without this class's
    flows and wake-ups. Every device's path is worked out for the whole fleet when the
    network is built (:func:`_fleet_paths`).

    Where the structure does not fit (three contended links on one path, in a graph
    topology; or two flows at once on one device's own link) the network plays the reference
    algorithm instead: from the start when the topology says so, else from the moment it
    happens, taking over every flow in progress.
    """

    def __init__(self, env: simpy.Environment, topology: Topology) -> None:
        super().__init__(env, topology)
        self._contended = np.repeat(topology.shared, 2) & np.isfinite(self.capacity)
        self._capacity: list[float] = self.capacity.tolist()
        self._contended_list: list[bool] = self._contended.tolist()
        self._links: dict[int, SharedLink] = {}
        self._free = SharedLink(math.inf)  # flows limited only by their own links
        #: every SharedLink of the network and their next completions
        self._calendar = Calendar()
        self._calendar.add(self._free)
        self._users = [0] * self.capacity.size  # flows on each private finite resource
        self._active: dict[Flow, None] = {}  # in (re)admission order
        self._routes: dict[tuple[int, ...], Route] = {}
        self._token = 0
        self._wake_at = math.inf
        self.reference: ReferenceFlowNetwork | None = None
        #: each device's path per (device, direction, local): its resources and its route
        self._starts: dict[tuple[int, str, bool], tuple[NDArray[np.int64], Route]] = {}
        #: every device's path per direction, worked out for the whole fleet at once
        self._fleet: dict[str, _FleetPaths] = {}
        #: what a flow over the contended resources ``(first, last)`` joins (:meth:`_nest`)
        self._joins: dict[tuple[int, int], int] = {}
        #: a pair of contended resources (``_FleetPaths.pair``) -> the one its flows join, as
        #: flow rounds look it up (:mod:`simfl.engine.flowround`)
        self.flow_links: dict[int, int] = {}
        #: flow rounds' transfers whose bytes ``carried`` does not hold yet (:meth:`book_later`)
        self._unbooked: list[tuple[list[Any], NDArray[np.int64]]] = []
        self._n_unbooked = 0
        if _nested(topology, self._contended):
            self.reference = ReferenceFlowNetwork(env, topology)
            self.reference._carried = self._carried
        else:
            self._fleet = _fleet_paths(topology, self.capacity, self._contended)

    def start(self, device: int, direction: str, size: float, *, local: bool = False) -> Flow:
        """Start moving ``size`` bytes now (see :meth:`Links.start`; paths are cached)."""
        if self.reference is not None:
            return super().start(device, direction, size, local=local)
        key = (device, direction, local)
        known = self._starts.get(key)
        if known is None:
            known = self._starts[key] = self._path(device, direction, local)
        flow = Flow(self.env, known[0], size)
        flow.route = known[1]
        self.resume(flow)
        return flow

    # ----------------------------------------------------------------- flows
    def resume(self, flow: Flow) -> None:
        """(Re)admit a flow to the network."""
        if self.reference is not None:
            return self.reference.resume(flow)
        if flow.route is None:
            flow.route = self._route(flow.resources.tolist())
        contended, cap, private = flow.route
        if flow.done_by(flow.remaining) or (contended < 0 and math.isinf(cap)):
            self._settle(flow, 0.0)
            flow.done.succeed()
            return None
        if contended == -2 or any(self._users[r] for r in private):
            self._fall_back()
            return self.resume(flow)
        for r in private:
            self._users[r] += 1
        flow.cap = cap
        link = self._free if contended < 0 else self._link(contended)
        link.add(flow, flow.remaining, float(self.env.now))
        self._active[flow] = None
        self._reschedule()
        return None

    def stop(self, flow: Flow) -> float:
        """Take a flow out (cancelled or paused); return the bytes it has delivered."""
        if self.reference is not None:
            return self.reference.stop(flow)
        link = flow.link
        if link is not None:
            self._release(flow, link.remove(flow, float(self.env.now)))
            self._reschedule()
        return flow.delivered

    # ----------------------------------------------------------------- internals
    def _path(self, device: int, direction: str, local: bool) -> tuple[NDArray[np.int64], Route]:
        """``device``'s resources in ``direction`` (its access link alone if ``local``), routed.

        :meth:`Links.resources` in plain Python (a path is a few links: NumPy's per-call cost
        would dominate).
        """
        fleet = self._fleet.get(direction)
        if fleet is not None and not local:
            return self._fleet_path(fleet, device)
        links = self.topology.paths[device].tolist()
        up = 1 if direction == "up" else 0
        resources = [2 * link + up for link in (links[-1:] if local else links)]
        return np.array(resources, dtype=np.int64), self._route(resources)

    def _fleet_path(self, fleet: _FleetPaths, device: int) -> tuple[NDArray[np.int64], Route]:
        """:meth:`_path` from the fleet's arrays: the same resources and route.

        The link a flow joins is still worked out (:meth:`_nest`) when a device first
        starts one, so edges attach to the cloud's link in the same order.
        """
        key = (fleet.first[device], fleet.last[device])
        contended = self._joins.get(key)
        if contended is None:
            first, last = key
            shared = [] if first < 0 else [first] if first == last else [first, last]
            contended = self._joins[key] = self._nest(shared)
        own = fleet.own[device]
        route = (contended, fleet.cap[device], () if own < 0 else (own,))
        return fleet.resources[fleet.starts[device] : fleet.starts[device + 1]], route

    def _route(self, resources: list[int]) -> Route:
        """(its shared link's resource, -1 for none, -2 for none that fits; cap; private).

        A flow joins the deepest contended resource on its path; with two (an edge's link
        and the cloud's), the upper one becomes that link's parent.
        """
        key = tuple(resources)
        route = self._routes.get(key)
        if route is None:
            capacity, contended = self._capacity, self._contended_list
            shared: list[int] = []
            private: list[int] = []
            cap = math.inf
            for r in resources:
                c = capacity[r]
                if c == math.inf:
                    continue
                if contended[r]:
                    shared.append(r)
                else:
                    private.append(r)
                    cap = min(cap, c)
            route = self._routes[key] = (self._nest(shared), cap, tuple(private))
        return route

    def _nest(self, shared: list[int]) -> int:
        """The resource a flow over contended ``shared`` (server side first) joins."""
        if len(shared) <= 1:
            return shared[0] if shared else -1
        upper, lower = (self._link(r) for r in shared[-2:])
        if (
            len(shared) > 2
            or lower.children
            or upper.parent is not None
            or lower.parent not in (None, upper)
        ):
            return -2  # deeper than two levels, or another nesting: not for SharedLink
        if lower.parent is None:
            upper.attach(lower)
        return shared[-1]

    def _link(self, resource: int) -> SharedLink:
        link = self._links.get(resource)
        if link is None:
            link = self._links[resource] = SharedLink(float(self.capacity[resource]))
            self._calendar.add(link)
        return link

    def _settle(self, flow: Flow, left: float) -> None:
        """Book the bytes ``flow`` moved since it was last touched; ``left`` remain."""
        moved = flow.remaining - left
        flow.delivered += moved
        carried = self._carried
        for r in flow.resources.tolist():  # a few resources: cheaper than fancy indexing
            carried[r] += moved
        flow.remaining = left

    def _release(self, flow: Flow, left: float) -> None:
        """``flow`` has left its shared link with ``left`` bytes to go."""
        self._settle(flow, left)
        assert flow.route is not None
        for r in flow.route[2]:
            self._users[r] -= 1
        del self._active[flow]

    def _reschedule(self) -> None:
        t = self._calendar.earliest()
        if t == self._wake_at:
            return  # the pending wake-up is still the right one
        self._token += 1
        self._wake_at = t
        token = self._token
        if math.isfinite(t):
            event = self.env.timeout(max(t - float(self.env.now), 0.0))
            event.callbacks.append(lambda _: self._wake(token))

    def _wake(self, token: int) -> None:
        if token != self._token or self.reference is not None:
            return  # the flows changed since this completion was scheduled
        at, self._wake_at = self._wake_at, math.inf
        now = float(self.env.now)
        finished: list[Flow] = SharedLink.wake_up(self._calendar, at, now)  # type: ignore[assignment]
        finished.sort(key=lambda f: f.seq)
        for f in finished:
            self._release(f, 0.0)
            f.done.succeed()
        self._reschedule()

    def book_later(self, flows: list[Any], devices: NDArray[np.int64]) -> None:
        """Book the bytes a flow round's finished ``flows`` moved when ``carried`` is next read.

        Each flow has ``job`` (its device is ``devices[job]``), ``stage`` (``stage // 2`` its
        direction: 0 down, 1 up, as a job plan's ``moved`` columns) and ``delivered``. Booking
        many rounds at once costs a few array operations per direction, not per round.
        """
        self._unbooked.append((flows, devices))
        self._n_unbooked += len(flows)
        if self._n_unbooked > 1 << 16:  # bounded memory: book every 65,536 flows at the latest
            self._book_pending()

    def _book_pending(self) -> None:
        """Add the bytes of every flow :meth:`book_later` kept to each resource on its path."""
        if not self._unbooked:
            return
        device: list[int] = []
        up: list[bool] = []
        moved: list[float] = []
        for flows, devices in self._unbooked:
            ids = devices.tolist()
            device += [ids[f.job] for f in flows]
            up += [f.stage // 2 == 1 for f in flows]
            moved += [f.delivered for f in flows]
        self._unbooked.clear()
        self._n_unbooked = 0
        where, is_up, amount = np.array(device, dtype=np.int64), np.array(up), np.array(moved)
        for name, sel in (("down", ~is_up), ("up", is_up)):
            if not sel.any():
                continue
            paths = self._fleet[name]
            devices = where[sel]
            lo = paths.bounds[devices]
            lengths = paths.bounds[devices + 1] - lo
            rows = np.repeat(lo - np.cumsum(lengths) + lengths, lengths) + np.arange(lengths.sum())
            np.add.at(self._carried, paths.resources[rows], np.repeat(amount[sel], lengths))

    def _fall_back(self) -> None:
        """Hand every flow in progress to the reference algorithm, for the rest of the run."""
        reference = ReferenceFlowNetwork(self.env, self.topology)
        reference._carried = self.carried  # with the flow rounds' bytes booked
        reference._last = float(self.env.now)
        for flow in list(self._active):
            assert flow.link is not None
            self._release(flow, flow.link.remove(flow, float(self.env.now)))
            reference.flows.append(flow)
        self._token += 1
        self._wake_at = math.inf
        self.reference = reference
        reference._reschedule()


@dataclass(frozen=True)
class _FleetPaths:
    """Every device's path in one direction (device ``i``: ``starts[i]:starts[i + 1]``).

    ``first``/``last``: its first and last contended resource (``-1``: none); ``own``: its one
    private finite resource (``-1``: none) and ``cap`` that resource's capacity (``inf``).
    ``pair`` numbers the pair ``(first, last)`` and ``caps`` and ``bounds`` are ``cap`` and
    ``starts`` as arrays (a flow round takes its jobs' rows at once).
    """

    resources: NDArray[np.int64]
    starts: list[int]
    first: list[int]
    last: list[int]
    own: list[int]
    cap: list[float]
    pair: NDArray[np.int64]
    caps: NDArray[np.float64]
    bounds: NDArray[np.int64]


def _fleet_paths(
    topology: Topology, capacity: NDArray[np.float64], contended: NDArray[np.bool_]
) -> dict[str, _FleetPaths]:
    """Every device's path and the parts of its route, per direction, in NumPy over the fleet.

    Empty where some path is empty or crosses two private finite resources (a graph
    topology): such paths are worked out one device at a time.
    """
    links, starts = topology.flat_paths
    if starts.size < 2 or not (np.diff(starts) > 0).all():
        return {}
    heads, where = starts[:-1], np.arange(links.size)
    out: dict[str, _FleetPaths] = {}
    for up, direction in enumerate(("down", "up")):
        resources = 2 * links + up
        caps = capacity[resources]
        shared = contended[resources]
        private = np.isfinite(caps) & ~shared
        if (np.add.reduceat(private.astype(np.int64), heads) > 1).any():
            return {}
        first = np.minimum.reduceat(np.where(shared, where, links.size), heads)
        last = np.maximum.reduceat(np.where(shared, where, -1), heads)
        own = np.maximum.reduceat(np.where(private, resources, -1), heads)
        first_r = np.where(last >= 0, resources[np.minimum(first, links.size - 1)], -1)
        last_r = np.where(last >= 0, resources[np.maximum(last, 0)], -1)
        cap = np.minimum.reduceat(np.where(private, caps, np.inf), heads)
        out[direction] = _FleetPaths(
            resources,
            starts.tolist(),
            first_r.tolist(),
            last_r.tolist(),
            own.tolist(),
            cap.tolist(),
            (first_r + 1) * (capacity.size + 1) + (last_r + 1),
            cap,
            starts,
        )
    return out


def _nested(topology: Topology, contended: NDArray[np.bool_]) -> bool:
    """Whether some path crosses more than two contended resources in one direction."""
    links, starts = topology.flat_paths
    return any(
        bool((np.add.reduceat(contended[2 * links + d].astype(np.int64), starts[:-1]) > 2).any())
        for d in (0, 1)
    )
