"""Stars and hierarchies are built in NumPy: the same Topology as binding their graph.

``Network.build`` builds a star or a hierarchy over the whole fleet at once
(``topology._tree``); the straightforward way, kept for ``Network.from_graph``, binds the
networkx graph by a deterministic Dijkstra walk (``topology._bind`` of ``Network.graph_of``).
Both must give the same topology bit for bit: links numbered alike, the same capacities and
latencies, the same paths, path latencies (signed zeros included), edges and shared flags.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simfl.network import Network
from simfl.network import topology as topo_mod


def assert_same(a: topo_mod.Topology, b: topo_mod.Topology) -> None:
    for name in ("down", "up", "latency", "path_latency", "shared"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and x.shape == y.shape, name
        assert x.tobytes() == y.tobytes(), name  # bit for bit (the sign of zero too)
    assert len(a.paths) == len(b.paths)
    for p, q in zip(a.paths, b.paths, strict=True):
        assert p.dtype == q.dtype == np.int64 and p.tolist() == q.tolist()
    assert a.edge_of == b.edge_of
    for x, y in zip(a.device_links(), b.device_links(), strict=True):
        assert x.tobytes() == y.tobytes()


def by_graph(net: Network, down, up, latency) -> topo_mod.Topology:
    return topo_mod._bind(net.graph_of(down, up, latency), down.size)


values = st.sampled_from([1e3, 2.5e4, 1e6, math.inf])
latencies = st.sampled_from([0.0, -0.0, 0.003, 0.05, 1.0])


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_trees_equal_their_graphs_bound(data):
    n = data.draw(st.integers(1, 25))
    down = np.array(data.draw(st.lists(values, min_size=n, max_size=n)))
    up = np.array(data.draw(st.lists(values, min_size=n, max_size=n)))
    latency = np.array(data.draw(st.lists(latencies, min_size=n, max_size=n)))
    server = {
        "server_up": data.draw(values),
        "server_down": data.draw(values),
        "server_latency": data.draw(latencies),
    }
    if data.draw(st.booleans()):
        net = Network.star(**server)
    else:
        groups = data.draw(st.lists(st.integers(0, 6), min_size=n, max_size=n))
        net = Network.hierarchical(
            np.array(groups, dtype=np.int64),
            edge_up=data.draw(values),
            edge_down=data.draw(values),
            edge_latency=data.draw(latencies),
            **server,
        )
    built = net.build(down, up, latency)
    assert_same(built, by_graph(net, down, up, latency))


def test_a_large_hierarchy_equals_its_graph_bound():
    rng = np.random.default_rng(3)
    n = 3000
    up = rng.uniform(1e5, 1e6, n)
    latency = rng.choice([0.0, 0.01, 0.02], n)
    net = Network.hierarchical(rng.integers(0, 40, n), edge_up=3e5, server_up=1e6)
    assert_same(net.build(4 * up, up, latency), by_graph(net, 4 * up, up, latency))


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        ("down", 0.0, "network link hub-2 down bandwidth"),
        ("up", math.nan, "network link hub-2 up bandwidth"),
        ("latency", -1.0, "network link hub-2 latency"),
        ("latency", math.inf, "network link hub-2 latency"),
    ],
)
def test_an_access_link_out_of_range_gets_the_graphs_error(column, value, message):
    cols = {"down": np.full(4, 1e6), "up": np.full(4, 1e6), "latency": np.zeros(4)}
    cols[column][2] = value
    with pytest.raises(ValueError, match=message):
        Network.star(server_up=1e6).build(cols["down"], cols["up"], cols["latency"])
