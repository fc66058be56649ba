"""The fast shared links: :class:`FlowNetwork`, at ``O(log n)`` per flow event.

Whenever a flow starts, finishes, pauses or is cancelled, the rates of the active flows are
the max-min fair allocation; a flow completes when its remaining bytes reach zero at its
current rate. This network keeps each contended link's processor-sharing state
(:class:`~simfl.engine.flows.sharedlink.SharedLink`) instead of recomputing every rate, and
hands its flows over to the reference algorithm
(:class:`~simfl.engine.flows.reference.ReferenceFlowNetwork`) where they do not fit that
structure (see :mod:`simfl.engine.flows`).

Before its first byte moves a transfer pays its path's latency (handled by the job process).

Closed forms this reproduces (tests): ``n`` equal flows of ``S`` bytes starting together on a
link of capacity ``C`` all finish at ``n S / C``; two flows of sizes ``S1 < S2`` finish at
``2 S1 / C`` and ``(S1 + S2) / C``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy
from numpy.typing import NDArray

from simfl.engine.flows.calendar import Calendar
from simfl.engine.flows.links import Flow, Links, Route
from simfl.engine.flows.reference import ReferenceFlowNetwork
from simfl.engine.flows.sharedlink import SharedLink
from simfl.network.topology import Topology

__all__ = ["FleetPaths", "FlowNetwork"]


class FlowNetwork(Links):
    """The active flows and their max-min fair rates, at O(log n) per flow event (SimPy).

    Every finite resource that more than one device's path crosses (a server link, an edge's link to
    the cloud) is a :class:`~simfl.engine.flows.sharedlink.SharedLink`: processor sharing among its
    flows, each capped by the rest of its path (the device's own access link). A flow joins the
    deepest such link on its path; where there are two (a hierarchy with finite edge *and* cloud
    links), the edge's link is a child of the cloud's and one water-filling solves both levels.
    These are exactly the max-min fair rates of
    :class:`~simfl.engine.flows.reference.ReferenceFlowNetwork` (tested to a relative ``1e-9``), and
    a flow event costs ``O(log n)`` (times the number of edges, on a two-level hierarchy) instead of
    a pass over every flow; the links' next completions are kept in a heap
    (:class:`~simfl.engine.flows.calendar.Calendar`), so a network of many edge links is not scanned
    per event either. One SimPy timeout is pending per network (the next completion); an outdated
    one is ignored by its token. A flow round (:mod:`simfl.engine.flows.flowround`) drives the same
    links directly, without this class's flows and wake-ups. Every device's path is worked out for
    the whole fleet when the network is built (:func:`_fleet_paths`).

    Where the structure does not fit (three contended links on one path, in a graph
    topology; or two flows at once on one device's own link) the network plays the reference
    algorithm instead: from the start when the topology says so, else from the moment it
    happens, taking over every flow in progress (the *hand-over*: :attr:`handover` says why,
    :attr:`handover_at` when).

    Besides the :class:`~simfl.engine.flows.links.Links` interface, a flow round reads and
    drives the network's state directly through its public attributes: :attr:`calendar`,
    :attr:`free_link`, :attr:`fleet`, :attr:`flow_links`, :attr:`wake_at` and :attr:`token`,
    and the methods :meth:`path`, :meth:`shared_link` and :meth:`book_later`.
    """

    def __init__(self, env: simpy.Environment, topology: Topology) -> None:
        super().__init__(env, topology)
        self._contended = np.repeat(topology.shared, 2) & np.isfinite(self.capacity)
        self._capacity: list[float] = self.capacity.tolist()
        self._contended_list: list[bool] = self._contended.tolist()
        self._links: dict[int, SharedLink] = {}
        #: the link of the flows limited only by their own links (capacity ``inf``)
        self.free_link = SharedLink(math.inf)
        #: every SharedLink of the network and their next completions
        self.calendar = Calendar()
        self.calendar.add(self.free_link)
        self._users = [0] * self.capacity.size  # flows on each private finite resource
        self._active: dict[Flow, None] = {}  # in (re)admission order
        self._routes: dict[tuple[int, ...], Route] = {}
        #: bumped whenever the pending SimPy wake-up is out of date (the wake-up carries it)
        self.token = 0
        #: when the pending wake-up is due (``inf``: none): the calendar's earliest completion
        self.wake_at = math.inf
        #: the reference algorithm playing every flow since the hand-over (``None``: none yet;
        #: :attr:`handover` says why, :attr:`handover_at` when: when the network was built,
        #: where the topology asks for it from the start)
        self.reference: ReferenceFlowNetwork | None = None
        #: each device's path per (device, direction, local): its resources and its route
        self._starts: dict[tuple[int, str, bool], tuple[NDArray[np.int64], Route]] = {}
        #: every device's path per direction, worked out for the whole fleet at once (empty
        #: where the paths are worked out one device at a time)
        self.fleet: dict[str, FleetPaths] = {}
        #: what a flow over the contended resources ``(first, last)`` joins (:meth:`_nest`)
        self._joins: dict[tuple[int, int], int] = {}
        #: a pair of contended resources (``FleetPaths.pair``) -> the one its flows join, as
        #: flow rounds look it up (:mod:`simfl.engine.flows.flowround`)
        self.flow_links: dict[int, int] = {}
        #: flow rounds' transfers whose bytes ``carried`` does not hold yet (:meth:`book_later`)
        self._unbooked: list[tuple[list[Any], NDArray[np.int64]]] = []
        self._n_unbooked = 0
        if _nested(topology, self._contended):
            self.reference = ReferenceFlowNetwork(env, topology, self._carried)
            self.handover = "a path crosses more than two contended links"
            self.handover_at = float(env.now)
        else:
            self.fleet = _fleet_paths(topology, self.capacity, self._contended)

    def start(self, device: int, direction: str, size: float, *, local: bool = False) -> Flow:
        """Start moving ``size`` bytes now (as ``Links.start``; paths are kept, :meth:`path`)."""
        if self.reference is not None:
            return super().start(device, direction, size, local=local)
        known = self.path(device, direction, local)
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
            self._hand_over(
                "a flow's contended links nest deeper than one shared link under another"
                if contended == -2
                else "two flows at once on one device's own link"
            )
            return self.resume(flow)
        for r in private:
            self._users[r] += 1
        flow.cap = cap
        link = self.free_link if contended < 0 else self.shared_link(contended)
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

    def path(
        self, device: int, direction: str, local: bool = False
    ) -> tuple[NDArray[np.int64], Route]:
        """``device``'s resources in ``direction`` and its route, as :meth:`start` uses them.

        Worked out when first asked for (the link a flow joins is then made, and an edge's
        link attached to the cloud's, :meth:`_nest`), then kept.
        """
        key = (device, direction, local)
        known = self._starts.get(key)
        if known is None:
            known = self._starts[key] = self._path(device, direction, local)
        return known

    # ----------------------------------------------------------------- internals
    def _path(self, device: int, direction: str, local: bool) -> tuple[NDArray[np.int64], Route]:
        """``device``'s resources in ``direction`` (its access link alone if ``local``), routed.

        :meth:`Links.resources` in plain Python (a path is a few links: NumPy's per-call cost
        would dominate).
        """
        fleet = self.fleet.get(direction)
        if fleet is not None and not local:
            return self._fleet_path(fleet, device)
        links = self.topology.paths[device].tolist()
        up = 1 if direction == "up" else 0
        resources = [2 * link + up for link in (links[-1:] if local else links)]
        return np.array(resources, dtype=np.int64), self._route(resources)

    def _fleet_path(self, fleet: FleetPaths, device: int) -> tuple[NDArray[np.int64], Route]:
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
        upper, lower = (self.shared_link(r) for r in shared[-2:])
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

    def shared_link(self, resource: int) -> SharedLink:
        """The shared link of contended ``resource`` (made and filed when first asked for)."""
        link = self._links.get(resource)
        if link is None:
            link = self._links[resource] = SharedLink(float(self.capacity[resource]))
            self.calendar.add(link)
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
        t = self.calendar.earliest()
        if t == self.wake_at:
            return  # the pending wake-up is still the right one
        self.token += 1
        self.wake_at = t
        token = self.token
        if math.isfinite(t):
            event = self.env.timeout(max(t - float(self.env.now), 0.0))
            event.callbacks.append(lambda _: self._wake(token))

    def _wake(self, token: int) -> None:
        if token != self.token or self.reference is not None:
            return  # the flows changed since this completion was scheduled
        at, self.wake_at = self.wake_at, math.inf
        now = float(self.env.now)
        finished: list[Flow] = self.calendar.wake_up(at, now)  # type: ignore[assignment]
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
            paths = self.fleet[name]
            devices = where[sel]
            lo = paths.bounds[devices]
            lengths = paths.bounds[devices + 1] - lo
            rows = np.repeat(lo - np.cumsum(lengths) + lengths, lengths) + np.arange(lengths.sum())
            np.add.at(self._carried, paths.resources[rows], np.repeat(amount[sel], lengths))

    def _hand_over(self, reason: str) -> None:
        """Hand every flow in progress to the reference algorithm, for the rest of the run."""
        now = float(self.env.now)
        # ``carried`` with the flow rounds' bytes booked: the reference adds to the same array
        reference = ReferenceFlowNetwork(self.env, self.topology, self.carried, now)
        flows: list[Flow] = []
        for flow in list(self._active):
            assert flow.link is not None
            self._release(flow, flow.link.remove(flow, now))
            flows.append(flow)
        self.token += 1
        self.wake_at = math.inf
        self.reference = reference
        self.handover, self.handover_at = reason, now
        reference.take_over(flows)


@dataclass(frozen=True)
class FleetPaths:
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
) -> dict[str, FleetPaths]:
    """Every device's path and the parts of its route, per direction, in NumPy over the fleet.

    Empty where some path is empty or crosses two private finite resources (a graph
    topology): such paths are worked out one device at a time.
    """
    links, starts = topology.flat_paths
    if starts.size < 2 or not (np.diff(starts) > 0).all():
        return {}
    heads, where = starts[:-1], np.arange(links.size)
    out: dict[str, FleetPaths] = {}
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
        out[direction] = FleetPaths(
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
