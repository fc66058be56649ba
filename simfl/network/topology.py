"""Network topologies: who is connected to whom, through which links, at what capacity.

A :class:`Network` is the scenario-level description (``Scenario(network=...)``); at run time it
is bound to the fleet (:meth:`Network.build`) into a :class:`Topology`: numbered links with a
latency and a capacity per direction, and every device's path to the server. Transfers follow
their path; those sharing a link share its capacity (see :mod:`simfl.engine.flows`).

Constructors:

* :meth:`Network.star`: every device has its own access link (the fleet's ``bandwidth_down``,
  ``bandwidth_up`` and ``latency`` columns) to the server, and the server has one ingress and
  one egress link shared by all transfers (``server_up``/``server_down`` bytes/s, ``inf``: not a
  bottleneck). This is where a whole cohort uploading at once contends.
* :meth:`Network.hierarchical`: devices to edge servers (``groups[i]`` is device ``i``'s edge)
  to the cloud; each edge has a shared uplink and downlink to the cloud.
* :meth:`Network.from_graph`: any networkx graph whose nodes are the devices ``0..n-1``, the
  node ``"server"`` and any others; edges carry ``latency`` (s) and ``bandwidth`` (bytes/s, both
  directions) or ``up``/``down`` (toward / away from the server). Device edges without a
  bandwidth take the fleet's columns. A transfer follows the lowest-latency path (fewest hops
  among ties), and its time is set by the links of that path.

The server-side direction of every link is the direction toward the server along the path tree.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any

import networkx as nx
import numpy as np
from numpy.typing import ArrayLike, NDArray

from simfl._checks import check_real
from simfl.dists import MAX_DRAW, MIN_BANDWIDTH

__all__ = ["SERVER", "Network", "Topology"]

#: Name of the server (cloud) node in every topology.
SERVER = "server"

Array = NDArray[np.float64]


@dataclass(frozen=True)
class Topology:
    """A network bound to a fleet: links, their capacities, and each device's path.

    ``down[l]``/``up[l]`` are link ``l``'s capacities away from / toward the server (bytes/s),
    ``latency[l]`` its one-way latency. ``paths[i]`` lists the links from the server to device
    ``i``; ``path_latency[i]`` sums their latencies. ``edge_of[i]`` is device ``i``'s edge node
    (its parent on the path; ``SERVER`` in a star).
    """

    down: Array
    up: Array
    latency: Array
    paths: tuple[NDArray[np.int64], ...]
    path_latency: Array
    edge_of: tuple[Any, ...]
    shared: NDArray[np.bool_]  # links on more than one device's path

    @property
    def n_links(self) -> int:
        """Number of links."""
        return int(self.down.size)

    def device_links(self) -> tuple[Array, Array, Array]:
        """Per device: path latency, and the smallest down and up capacity on its path.

        What a device's transfers would take with the network to themselves (used to plan and
        to rank devices by speed; shared links can make them slower).
        """
        links, starts = self.flat_paths
        down = np.minimum.reduceat(self.down[links], starts[:-1])
        up = np.minimum.reduceat(self.up[links], starts[:-1])
        return self.path_latency, down, up

    @functools.cached_property
    def flat_paths(self) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Every path end to end, and where each device's begins (worked out once).

        Device ``i``'s path is ``links[starts[i]:starts[i + 1]]``; every path has a link at
        least (a device is not the server), so per-device reductions over paths can use
        ``reduceat`` at ``starts[:-1]``.
        """
        sizes = np.array([p.size for p in self.paths], dtype=np.int64)
        links = np.concatenate(self.paths) if self.paths else np.zeros(0, dtype=np.int64)
        return links, np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


@dataclass(frozen=True, eq=False)
class Network:
    """How devices reach the server (see the module docstring)."""

    kind: str
    server_up: float = math.inf
    server_down: float = math.inf
    server_latency: float = 0.0
    groups: NDArray[np.int64] | None = None
    edge_up: float = math.inf
    edge_down: float = math.inf
    edge_latency: float = 0.0
    graph: Any = None

    # ----------------------------------------------------------------- constructors
    @classmethod
    def star(
        cls,
        *,
        server_up: float = math.inf,
        server_down: float = math.inf,
        server_latency: float = 0.0,
    ) -> Network:
        """Private device links to a server whose ingress/egress links all transfers share."""
        return cls(
            "star",
            server_up=_bandwidth("Network.server_up", server_up),
            server_down=_bandwidth("Network.server_down", server_down),
            server_latency=_latency("Network.server_latency", server_latency),
        )

    @classmethod
    def hierarchical(
        cls,
        groups: ArrayLike,
        *,
        edge_up: float = math.inf,
        edge_down: float = math.inf,
        edge_latency: float = 0.0,
        server_up: float = math.inf,
        server_down: float = math.inf,
        server_latency: float = 0.0,
    ) -> Network:
        """Devices -> edge servers (``groups[i]`` is device ``i``'s edge) -> cloud.

        ``edge_*`` are each edge's link to the cloud (shared by its devices' transfers),
        ``server_*`` the cloud's own ingress/egress link (shared by all).
        """
        g = np.asarray(groups)
        if g.ndim != 1 or g.size == 0 or g.dtype.kind not in "iu" or g.min() < 0:
            raise ValueError(
                "Network.hierarchical groups must be one non-negative integer edge index per device"
            )
        g = g.astype(np.int64)
        g.setflags(write=False)
        cloud = cls.star(
            server_up=server_up, server_down=server_down, server_latency=server_latency
        )
        return dataclasses.replace(
            cloud,
            kind="hierarchical",
            groups=g,
            edge_up=_bandwidth("Network.edge_up", edge_up),
            edge_down=_bandwidth("Network.edge_down", edge_down),
            edge_latency=_latency("Network.edge_latency", edge_latency),
        )

    @classmethod
    def from_graph(cls, graph: nx.Graph[Any]) -> Network:
        """Any networkx graph with a ``"server"`` node and the devices ``0..n-1`` as nodes.

        Every edge's ``latency`` (s) and ``bandwidth``, ``up`` or ``down`` (bytes/s) are
        checked here, as the fleet's columns are: a bandwidth in ``[MIN_BANDWIDTH, inf]``, a
        latency in ``[0, MAX_DRAW]`` (see :mod:`simfl.dists`), so that any payload crosses a
        link in finite time. A multigraph is refused (two links between the same nodes have no
        single path), and so is a directed graph (a link's two directions are its ``up`` and
        ``down``).

        Raises
        ------
        ValueError
            Naming the edge, the attribute, its value and the valid range.
        """
        if not isinstance(graph, nx.Graph):
            raise ValueError(f"Network.from_graph needs a networkx Graph, got {graph!r}")
        if graph.is_multigraph():
            parallel = next(
                ((u, v) for u, v in graph.edges() if graph.number_of_edges(u, v) > 1), None
            )
            where = (
                ""
                if parallel is None
                else f": nodes {parallel[0]!r} and {parallel[1]!r} have "
                f"{graph.number_of_edges(*parallel)} links"
            )
            raise ValueError(
                f"Network.from_graph needs a simple networkx Graph (at most one link between two "
                f"nodes), got a {type(graph).__name__}{where}; merge parallel links into one "
                f"edge with its 'bandwidth' (or 'up' and 'down') and 'latency'"
            )
        if graph.is_directed():
            raise ValueError(
                f"Network.from_graph needs an undirected networkx Graph (give each link's "
                f"'up' and 'down' bandwidths), got a {type(graph).__name__}"
            )
        if SERVER not in graph:
            raise ValueError(f"Network.from_graph: the graph needs a {SERVER!r} node")
        for u, v, attrs in graph.edges(data=True):
            _check_link(f"network link {u}-{v}", attrs)
        return cls("graph", graph=graph.copy())

    def __repr__(self) -> str:
        if self.kind == "star":
            return (
                f"Network.star(server_up={self.server_up:g}, "
                f"server_down={self.server_down:g}, server_latency={self.server_latency:g})"
            )
        if self.kind == "hierarchical":
            assert self.groups is not None
            return (
                f"Network.hierarchical({int(self.groups.max()) + 1} edges, "
                f"edge_up={self.edge_up:g}, server_up={self.server_up:g})"
            )
        return f"Network.from_graph({self.graph.number_of_nodes()} nodes)"

    # ----------------------------------------------------------------- binding
    def check(self, n_devices: int) -> None:
        """Raise ``ValueError`` naming the field if the network does not fit ``n_devices``."""
        if self.groups is not None and self.groups.size != n_devices:
            raise ValueError(
                f"Network.hierarchical groups must have one entry per device "
                f"({n_devices}), got {self.groups.size}"
            )
        if self.kind == "graph":
            missing = [i for i in range(n_devices) if i not in self.graph]
            if missing:
                raise ValueError(f"Network.from_graph: devices {missing[:5]} are not nodes")
            unreachable = [i for i in range(n_devices) if not nx.has_path(self.graph, SERVER, i)]
            if unreachable:
                raise ValueError(
                    f"Network.from_graph: devices {unreachable[:5]} cannot reach the server"
                )

    def build(self, down: Array, up: Array, latency: Array) -> Topology:
        """Bind to a fleet's access-link columns (bytes/s and seconds, one entry per device).

        A star or a hierarchy is a tree whose links and paths are known in advance: it is
        built in NumPy over the whole fleet (:func:`_tree`; 3 ms for 10,000 devices where
        binding its graph took 0.4 s), giving the same :class:`Topology`, link numbers and
        bits included, as binding its graph (:meth:`graph_of`, then the deterministic
        Dijkstra walk every :meth:`from_graph` network takes). A fleet column out of range
        still takes the graph's way, for its error naming the link.
        """
        self.check(down.size)
        if self.kind != "graph" and _valid_access(down, up, latency):
            return _tree(self, down, up, latency)
        return _bind(self.graph_of(down, up, latency), down.size)

    def graph_of(self, down: Array, up: Array, latency: Array) -> nx.Graph[Any]:
        """The network as a networkx graph bound to the fleet's access-link columns.

        Nodes: the devices ``0..n-1``, ``"server"`` and the inner nodes (``"hub"`` of a
        star; ``"cloud-link"`` and ``("edge", e)`` of a hierarchy); edges carry ``down``,
        ``up`` (bytes/s) and ``latency`` (s).
        """
        n = down.size
        graph: nx.Graph[Any] = nx.Graph()
        if self.kind == "graph":
            graph = self.graph.copy()
            for i in range(n):
                for nbr in graph.neighbors(i):
                    attrs = graph.edges[i, nbr]
                    attrs.setdefault("latency", float(latency[i]))
                    if "bandwidth" not in attrs and "up" not in attrs:
                        attrs["down"], attrs["up"] = float(down[i]), float(up[i])
        else:
            if self.kind == "star":
                parents: list[Any] = ["hub"] * n
                graph.add_edge(
                    SERVER,
                    "hub",
                    down=self.server_down,
                    up=self.server_up,
                    latency=self.server_latency,
                )
            else:
                assert self.groups is not None
                parents = [("edge", int(g)) for g in self.groups]
                graph.add_edge(
                    SERVER,
                    "cloud-link",
                    down=self.server_down,
                    up=self.server_up,
                    latency=self.server_latency,
                )
                for e in sorted(set(parents)):
                    graph.add_edge(
                        "cloud-link",
                        e,
                        down=self.edge_down,
                        up=self.edge_up,
                        latency=self.edge_latency,
                    )
            for i in range(n):
                graph.add_edge(
                    parents[i], i, down=float(down[i]), up=float(up[i]), latency=float(latency[i])
                )
        return graph


def _valid_access(down: Array, up: Array, latency: Array) -> bool:
    """Whether every access link passes :func:`_bind`'s checks.

    Bandwidths of at least ``MIN_BANDWIDTH`` (``inf`` allowed) and latencies in
    ``[0, MAX_DRAW]``.
    """
    finite = np.isfinite(latency) & (latency >= 0) & (latency <= MAX_DRAW)
    return bool((down >= MIN_BANDWIDTH).all() and (up >= MIN_BANDWIDTH).all() and finite.all())


def _tree(net: Network, down: Array, up: Array, latency: Array) -> Topology:
    """:func:`_bind` of a star's or a hierarchy's graph, in NumPy over the fleet.

    :func:`_bind` numbers links as it first meets them walking each device's path to the
    server, devices in order: device ``i``'s access link, then its edge's link if no earlier
    device has it, then the cloud's link (met at device 0). So device ``i``'s access link is
    number ``i`` plus the edges first met before it plus one (the cloud's link) for ``i > 0``.
    A path's latency is summed from the server down, starting from 0, as there.
    """
    n = down.size
    idx = np.arange(n, dtype=np.int64)
    if net.kind == "star":
        access = idx + (idx > 0)
        n_links = n + 1
        inner = [1]  # the hub's link to the server
        inner_values = [(net.server_down, net.server_up, net.server_latency)]
        paths_2d = np.stack([np.ones(n, dtype=np.int64), access], axis=1)
        path_latency = (0.0 + net.server_latency) + latency
        edge_of: tuple[Any, ...] = ("hub",) * n
        counts = np.ones(n_links, dtype=np.int64)
        counts[1] = n
    else:
        assert net.groups is not None
        groups = net.groups
        edges, first, inverse, sizes = np.unique(
            groups, return_index=True, return_inverse=True, return_counts=True
        )
        new = np.zeros(n, dtype=np.int64)
        new[first] = 1  # device i meets its edge's link first
        before = np.cumsum(new) - new  # edges first met by devices before i
        access = idx + before + (idx > 0)
        edge_link = access[first] + 1  # per edge (sorted), the number it gets when first met
        n_links = n + edges.size + 1
        inner = [2, *edge_link.tolist()]  # the cloud's link, then each edge's
        inner_values = [(net.server_down, net.server_up, net.server_latency)] + [
            (net.edge_down, net.edge_up, net.edge_latency)
        ] * edges.size
        paths_2d = np.stack([np.full(n, 2, dtype=np.int64), edge_link[inverse], access], axis=1)
        path_latency = ((0.0 + net.server_latency) + net.edge_latency) + latency
        edge_of = tuple(("edge", g) for g in groups.tolist())
        counts = np.ones(n_links, dtype=np.int64)
        counts[2] = n
        counts[edge_link] = sizes
    columns = []
    for f, fleet_column in enumerate((down, up, latency)):
        column = np.empty(n_links)
        column[access] = fleet_column
        column[inner] = [v[f] for v in inner_values]
        columns.append(column)
    return Topology(
        columns[0],
        columns[1],
        columns[2],
        tuple(paths_2d),
        np.asarray(path_latency, dtype=np.float64),
        edge_of,
        counts > 1,
    )


def _bandwidth(field: str, value: Any) -> float:
    """A link bandwidth (bytes/s) in ``[MIN_BANDWIDTH, inf]`` (see :mod:`simfl.dists`)."""
    return check_real(field, value, low=MIN_BANDWIDTH, allow_inf=True)


def _latency(field: str, value: Any) -> float:
    """A link latency (s) in ``[0, MAX_DRAW]`` (see :mod:`simfl.dists`)."""
    return check_real(field, value, low=0.0, high=MAX_DRAW)


def _check_link(field: str, attrs: dict[str, Any]) -> None:
    """Check the attributes of a graph edge ``field`` (``"network link u-v"``) it has.

    ``latency`` in ``[0, MAX_DRAW]`` s; ``bandwidth``, ``up`` and ``down`` in
    ``[MIN_BANDWIDTH, inf]`` bytes/s: any payload then crosses the link in finite time.
    """
    if "latency" in attrs:
        _latency(f"{field} latency", attrs["latency"])
    for name in ("bandwidth", "up", "down"):
        if name in attrs:
            _bandwidth(
                f"{field} {name} bandwidth" if name != "bandwidth" else f"{field} bandwidth",
                attrs[name],
            )


def _bind(graph: nx.Graph[Any], n: int) -> Topology:
    for u, v, attrs in graph.edges(data=True):
        lat = _latency(f"network link {u}-{v} latency", attrs.get("latency", 0.0))
        attrs["weight"] = (lat, 1)
    # lowest latency first, then fewest hops
    pred = _dijkstra(graph)[1]
    links: dict[frozenset[Any], int] = {}
    down: list[float] = []
    up: list[float] = []
    latency: list[float] = []

    def link(child: Any) -> int:
        parent = pred[child]
        key = frozenset((parent, child))
        if key not in links:
            links[key] = len(down)
            for column, value in zip((down, up, latency), _link(graph, parent, child), strict=True):
                column.append(value)
        return links[key]

    paths: list[NDArray[np.int64]] = []
    path_latency: list[float] = []
    edge_of: list[Any] = []
    for i in range(n):
        node: Any = i
        chain: list[int] = []
        while node != SERVER:
            chain.append(link(node))
            node = pred[node]
        chain.reverse()  # server -> device
        paths.append(np.asarray(chain, dtype=np.int64))
        path_latency.append(float(sum(latency[c] for c in chain)))
        edge_of.append(pred[i])
    counts = np.zeros(len(down), dtype=np.int64)
    for p in paths:
        counts[p] += 1
    return Topology(
        np.asarray(down),
        np.asarray(up),
        np.asarray(latency),
        tuple(paths),
        np.asarray(path_latency),
        tuple(edge_of),
        counts > 1,
    )


def _link(graph: nx.Graph[Any], parent: Any, child: Any) -> tuple[float, float, float]:
    """Downlink and uplink bandwidth (bytes/s) and latency (s) of the edge ``parent-child``."""
    attrs = graph.edges[parent, child]
    bw = attrs.get("bandwidth")
    d = attrs.get("down", bw if bw is not None else math.inf)
    u = attrs.get("up", bw if bw is not None else math.inf)
    for name, value in (("down", d), ("up", u)):
        _bandwidth(f"network link {parent}-{child} {name} bandwidth", value)
    return float(d), float(u), float(attrs.get("latency", 0.0))


def _dijkstra(graph: nx.Graph[Any]) -> tuple[dict[Any, Any], dict[Any, Any]]:
    """Shortest paths from the server by (latency, hops), deterministic among ties."""
    import heapq

    dist: dict[Any, tuple[float, int]] = {SERVER: (0.0, 0)}
    pred: dict[Any, Any] = {}
    heap: list[tuple[float, int, str, Any]] = [(0.0, 0, repr(SERVER), SERVER)]
    done: set[Any] = set()
    while heap:
        lat, hops, _, node = heapq.heappop(heap)
        if node in done:
            continue
        done.add(node)
        for nbr in sorted(graph.neighbors(node), key=repr):
            w = graph.edges[node, nbr]["weight"]
            cand = (lat + w[0], hops + w[1])
            if nbr not in dist or cand < dist[nbr]:
                dist[nbr] = cand
                pred[nbr] = node
                heapq.heappush(heap, (cand[0], cand[1], repr(nbr), nbr))
    return dist, pred
