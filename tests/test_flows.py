"""Shared links: max-min fair rates and the closed forms of processor sharing."""

import dataclasses
import math

import networkx as nx
import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from simfl import Fleet, Scenario, algorithms, dists, policies, run
from simfl.engine.flows import FlowNetwork, max_min_rates
from simfl.network import Network


def one_link(capacity: float, n_devices: int = 8):
    """A star whose only finite resource is the server's ingress and egress link."""
    topo = Network.star(server_up=capacity, server_down=capacity).build(
        np.full(n_devices, math.inf), np.full(n_devices, math.inf), np.zeros(n_devices)
    )
    env = simpy.Environment()
    return env, FlowNetwork(env, topo)


def finish_times(env, net, flows):
    """Start (device, size, start time) flows upward; return their completion times."""
    done = {}

    def go(i, device, size, at):
        yield env.timeout(at)
        f = net.start(device, "up", size)
        yield f.done
        done[i] = env.now

    for i, (device, size, at) in enumerate(flows):
        env.process(go(i, device, size, at))
    env.run()
    return [done[i] for i in range(len(flows))]


def test_max_min_rates_by_hand():
    cap = np.array([10.0, 4.0, 1.0, math.inf])
    # three flows share resource 0; flow 2 is also limited by its own resource 2 (capacity 1)
    flows = [np.array([0]), np.array([0, 1]), np.array([0, 2])]
    rates = max_min_rates(flows, cap)
    # flow 2 is capped at 1 and flow 1 at 4 (its own links); flow 0 gets the rest, 10 - 5
    np.testing.assert_allclose(rates, [5.0, 4.0, 1.0])
    assert max_min_rates([np.array([3])], cap)[0] == math.inf
    np.testing.assert_allclose(max_min_rates([np.array([0])] * 4, cap), [2.5] * 4)


@pytest.mark.parametrize("n", [1, 2, 5])
def test_n_equal_flows_finish_at_n_s_over_c(n):
    env, net = one_link(100.0)
    times = finish_times(env, net, [(i, 300.0, 0.0) for i in range(n)])
    np.testing.assert_allclose(times, [n * 300.0 / 100.0] * n, rtol=1e-12)


def test_two_unequal_flows():
    env, net = one_link(50.0)
    t1, t2 = finish_times(env, net, [(0, 100.0, 0.0), (1, 250.0, 0.0)])
    assert t1 == pytest.approx(2 * 100.0 / 50.0, rel=1e-12)
    assert t2 == pytest.approx((100.0 + 250.0) / 50.0, rel=1e-12)


def test_a_late_flow_gets_the_processor_sharing_share():
    s, c, late = 100.0, 10.0, 4.0
    env, net = one_link(c)
    ta, tb = finish_times(env, net, [(0, s, 0.0), (1, s, late)])
    assert ta == pytest.approx(2 * s / c - late, rel=1e-12)  # alone, then half the link
    assert tb == pytest.approx(2 * s / c, rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 5), st.floats(1.0, 500.0), st.floats(0.0, 20.0)),
        min_size=1,
        max_size=12,
    ),
    st.floats(5.0, 100.0),
    st.lists(st.floats(1.0, 200.0), min_size=6, max_size=6),
)
def test_links_never_carry_more_than_capacity_times_time(flows, server, access):
    topo = Network.star(server_up=server).build(np.full(6, math.inf), np.array(access), np.zeros(6))
    env = simpy.Environment()
    net = FlowNetwork(env, topo)
    times = finish_times(env, net, flows)
    horizon = max(times)
    assert (net.carried <= net.capacity * horizon * (1 + 1e-9) + 1e-6).all()
    # every flow delivered exactly its bytes; none finished faster than its bottleneck allows
    total = sum(size for _, size, _ in flows)
    server_up = 2 * int(topo.paths[0][0]) + 1  # resource: the server link, upward
    assert net.carried[server_up] == pytest.approx(total, rel=1e-9)  # it carried every byte
    for (device, size, at), t in zip(flows, times, strict=True):
        assert t - at >= size / min(server, access[device]) * (1 - 1e-9)


def test_cohort_uploading_at_once_contends_for_the_server_link():
    n, size, cap = 8, 2_000, 1_000.0
    sc = Scenario(
        task=None,
        algorithm=algorithms.TimingOnly(bytes_up=size),
        fleet=Fleet.homogeneous(n, compute=dists.Constant(0.5)),
        policy=policies.WaitAll(),
        rounds=3,
        network=Network.star(server_up=cap),
    )
    res = run(sc, progress=False)
    # all n uploads start together after the 0.5 s compute and share the link
    np.testing.assert_allclose(res.rounds["duration"], 0.5 + n * size / cap, rtol=1e-12)
    np.testing.assert_allclose(res.clients["upload"], n * size / cap, rtol=1e-12)
    assert (res.clients["bytes_up"] == size).all()
    # without the shared link the same round takes 0.5 s
    free = run(dataclasses.replace(sc, network=None), progress=False)
    np.testing.assert_allclose(free.rounds["duration"], 0.5)


def test_hierarchical_paths_share_only_their_edge():
    groups = np.array([0, 0, 0, 1])
    topo = Network.hierarchical(groups, edge_up=10.0).build(
        np.full(4, math.inf), np.full(4, math.inf), np.zeros(4)
    )
    edge_links = {int(p[1]) for p in topo.paths}
    assert len(edge_links) == 2  # two edge-to-cloud links
    assert topo.paths[0][1] == topo.paths[2][1] != topo.paths[3][1]
    env = simpy.Environment()
    net = FlowNetwork(env, topo)
    times = finish_times(env, net, [(0, 10.0, 0.0), (1, 10.0, 0.0), (2, 10.0, 0.0), (3, 10.0, 0.0)])
    np.testing.assert_allclose(times, [3.0, 3.0, 3.0, 1.0], rtol=1e-12)


def test_graph_topology_follows_the_lowest_latency_path():
    g = nx.Graph()
    g.add_edge("server", "a", latency=0.1, bandwidth=100.0)
    g.add_edge("server", "b", latency=0.5, bandwidth=1e6)
    g.add_edge("a", 0, latency=0.1, bandwidth=10.0)
    g.add_edge("b", 0, latency=0.1, bandwidth=10.0)
    topo = Network.from_graph(g).build(np.full(1, 1.0), np.full(1, 1.0), np.zeros(1))
    assert topo.path_latency[0] == pytest.approx(0.2)
    latency, down, up = topo.device_links()
    assert latency[0] == pytest.approx(0.2) and down[0] == 10.0 and up[0] == 10.0


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: Network.star(server_up=0.0), "Network.server_up"),
        (lambda: Network.star(server_latency=-1.0), "Network.server_latency"),
        (lambda: Network.hierarchical([0, -1]), "Network.hierarchical groups"),
        (lambda: Network.from_graph(nx.Graph([(0, 1)])), "server"),
        (
            lambda: Scenario(
                task=None,
                algorithm=algorithms.TimingOnly(),
                fleet=Fleet.homogeneous(3, dists.Constant(1.0)),
                policy=policies.WaitAll(),
                rounds=1,
                network=Network.hierarchical([0, 1]),
            ),
            "one entry per device",
        ),
        (
            lambda: Scenario(
                task=None,
                algorithm=algorithms.TimingOnly(),
                fleet=Fleet.homogeneous(3, dists.Constant(1.0)),
                policy=policies.WaitAll(),
                rounds=1,
                network="star",
            ),
            "Scenario.network",
        ),
    ],
)
def test_invalid_networks(build, field):
    with pytest.raises(ValueError, match=field):
        build()
