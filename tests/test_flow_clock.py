"""The flow round's wake-ups and the fleet's routes: the same results for less work.

A flow round keeps the network's next completion as one alarm that each change replaces, so
every wake-up finishes flows (the live job processes leave outdated SimPy timeouts behind,
ignored by their token), and its frames stay identical to the live processes' (here on a
contended star whose rates change at almost every flow event). Every device's path and route
is worked out for the whole fleet at once, equal to the ones worked out per device.
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pandas as pd
import pytest
import simpy

from simfl import Fleet, Scenario, algorithms, dists, policies, run
from simfl.engine.flows import FlowNetwork, flowround
from simfl.network import Network


def _contended_star(n: int = 40, rounds: int = 3) -> Scenario:
    up = np.random.default_rng(1).uniform(1e3, 1e4, n)
    fleet = Fleet(
        [dists.Exponential(mean=1.0)],
        np.zeros(n, dtype=np.int64),
        bandwidth_down=4.0 * up,
        bandwidth_up=up,
        latency=0.05,
    )
    return Scenario(
        task=None,
        algorithm=algorithms.TimingOnly(bytes_down=5_000, bytes_up=5_000),
        fleet=fleet,
        policy=policies.WaitAll(count=n // 2),
        rounds=rounds,
        network=Network.star(server_up=4e4, server_down=1e5),
        seed=3,
    )


@pytest.mark.pure_python
def test_a_flow_round_wakes_only_when_a_flow_finishes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every wake-up of the network in a flow round finishes flows; frames stay identical."""
    live_wakes: list[bool] = []  # whether each live wake-up was the current one
    wake = FlowNetwork._wake

    def counted(self: FlowNetwork, token: int) -> None:
        live_wakes.append(token == self.token)
        wake(self, token)

    round_wakes: list[int] = []  # flows finished by each wake-up of a flow round
    round_wake = flowround._Round._wake

    def finishing(self: flowround._Round, now: float) -> None:
        before = sum(len(link) for link in self.calendar.links)
        round_wake(self, now)  # takes finished flows off their links (and starts none)
        round_wakes.append(before - sum(len(link) for link in self.calendar.links))

    monkeypatch.setattr(FlowNetwork, "_wake", counted)
    monkeypatch.setattr(flowround._Round, "_wake", finishing)
    fast = run(_contended_star(), progress=False, on_error="raise")
    assert not live_wakes  # the flow round does not go through the network's own wake-ups
    live = run(_contended_star(), progress=False, on_error="raise", batched=False)
    # the live job processes leave outdated SimPy timeouts behind (ignored by their token)
    assert not all(live_wakes)
    # the flow round leaves none: every wake-up finishes flows (3 rounds x 20 jobs x 2 flows)
    assert round_wakes and min(round_wakes) >= 1
    assert sum(round_wakes) == 3 * 20 * 2
    assert len(round_wakes) == sum(live_wakes)
    pd.testing.assert_frame_equal(fast.rounds, live.rounds, check_exact=True)
    pd.testing.assert_frame_equal(fast.clients, live.clients, check_exact=True)


def _graph(cloud: float, edge: float) -> nx.Graph:
    """Three edges (one with an unlimited link) under a cloud link; one unlimited device."""
    g = nx.Graph()
    g.add_edge("server", "cloud", up=cloud, down=2 * cloud)
    for e in range(3):
        g.add_edge("cloud", f"edge{e}", up=edge if e else math.inf, down=2 * edge)
    for d in range(9):
        bw = math.inf if d == 4 else 10.0 + d
        g.add_edge(f"edge{d % 3}", d, up=bw, down=3 * bw)
    return g


@pytest.mark.parametrize(
    "network",
    [
        Network.star(server_up=50.0, server_down=80.0),
        Network.star(),
        Network.hierarchical(np.arange(9) % 3, edge_up=30.0, edge_down=60.0),
        Network.hierarchical(
            np.arange(9) % 3, edge_up=30.0, edge_down=60.0, server_up=70.0, server_down=90.0
        ),
        Network.from_graph(_graph(60.0, 30.0)),
        Network.from_graph(_graph(math.inf, 30.0)),
    ],
)
def test_fleet_routes_equal_the_routes_worked_out_per_device(network: Network) -> None:
    up = np.linspace(10.0, 20.0, 9)
    topology = network.build(4.0 * up, up, np.zeros(9))
    fleet = FlowNetwork(simpy.Environment(), topology)
    single = FlowNetwork(simpy.Environment(), topology)
    assert fleet.fleet and fleet.reference is None
    single.fleet = {}  # every path worked out one device at a time
    for device in [5, 0, 8, 3, 4, 1, 7, 2, 6]:  # edges attach in first-use order
        for direction in ("up", "down"):
            (a, route_a), (b, route_b) = (net.path(device, direction) for net in (fleet, single))
            np.testing.assert_array_equal(a, b)
            np.testing.assert_array_equal(a, fleet.resources(device, direction))
            assert route_a == route_b
    for res, link in fleet._links.items():
        other = single._links[res]
        assert [c.capacity for c in link.children] == [c.capacity for c in other.children]
        assert (link.parent is None) == (other.parent is None)


def test_a_flow_round_books_the_bytes_each_link_carried(monkeypatch: pytest.MonkeyPatch) -> None:
    """``FlowNetwork.carried`` after flow rounds equals the live processes' (booked per round).

    A flow round adds each flow's bytes to the resources on its path once, when the round ends;
    the live path adds them flow by flow, so the sums agree to rounding (relative 1e-12), and
    no resource carried more than its capacity allows over the run.
    """
    networks: list[FlowNetwork] = []
    init = FlowNetwork.__init__

    def kept(self: FlowNetwork, *args: object, **kwargs: object) -> None:
        init(self, *args, **kwargs)  # type: ignore[arg-type]
        networks.append(self)

    monkeypatch.setattr(FlowNetwork, "__init__", kept)
    scenario = _contended_star()
    fast = run(scenario, progress=False, on_error="raise")
    run(scenario, progress=False, on_error="raise", batched=False)
    assert len(networks) == 2
    fast_net, live_net = networks
    assert live_net.carried.sum() > 0
    np.testing.assert_allclose(fast_net.carried, live_net.carried, rtol=1e-12, atol=0.0)
    horizon = fast.meta["sim_time"]
    assert (fast_net.carried <= fast_net.capacity * horizon * (1 + 1e-9)).all()
    # every job arrived: each carried its bytes down and up through the server's links
    n_jobs = len(fast.clients)
    server_down, server_up = fast_net.resources(0, "down")[0], fast_net.resources(0, "up")[0]
    assert fast_net.carried[server_down] == pytest.approx(5_000 * n_jobs, rel=1e-12)
    assert fast_net.carried[server_up] == pytest.approx(5_000 * n_jobs, rel=1e-12)


def test_bytes_booked_for_later_are_all_in_carried_whenever_it_is_read() -> None:
    """``FlowNetwork.book_later`` keeps flow rounds' bytes until ``carried`` is read, and
    books them itself once 65,536 flows wait (bounded memory): none is lost either way."""
    from types import SimpleNamespace

    n = 50
    topo = Network.star(server_up=1e4, server_down=1e5).build(
        np.full(n, 1e4), np.full(n, 1e3), np.zeros(n)
    )
    net = FlowNetwork(simpy.Environment(), topo)
    devices = np.arange(n)[::-1].copy()  # job j is device n - 1 - j
    flows = [SimpleNamespace(job=j % n, stage=2 * (j % 2), delivered=1.0 + j % 7) for j in range(n)]
    net.book_later(flows, devices)
    expected = np.zeros_like(net.capacity)
    for f in flows:
        for r in net.resources(int(devices[f.job]), "up" if f.stage else "down"):
            expected[r] += f.delivered
    np.testing.assert_allclose(net.carried, expected, rtol=1e-12)  # read: booked
    assert net._unbooked == []
    many = flows * 1400  # 70,000 flows in one call: booked at once, before any read
    net.book_later(many, devices)
    assert net._unbooked == [] and net._n_unbooked == 0
    np.testing.assert_allclose(net.carried, 1401 * expected, rtol=1e-12)
