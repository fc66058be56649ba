"""The fast shared links equal the reference algorithm (times and bytes to a relative 1e-9).

``FlowNetwork`` keeps one processor-sharing state per contended link (``SharedLink``, O(log n)
per flow event); ``ReferenceFlowNetwork`` recomputes every rate over every flow at every flow
event (progressive filling). Random star and hierarchical topologies with unequal access
links, random starts, pauses, resumptions and cancellations must give the same completion
times and delivered bytes; whole network scenarios the same frames.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import networkx as nx
import numpy as np
import pandas as pd
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from simfl import run
from simfl.engine.flows import FlowNetwork, Member, ReferenceFlowNetwork, SharedLink
from simfl.network import Network

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analysis"))
import fingerprints

N = 8  # devices
INF = math.inf

# one flow of a script: device, direction, size, start, pause after (s; None: never),
# pause length (s; None: cancelled instead), local (access link only)
FlowSpec = tuple[int, str, float, float, float | None, float | None, bool]


def play(cls: type, topo, script: list[FlowSpec]) -> tuple[np.ndarray, np.ndarray, object]:
    """Play ``script`` on a network of class ``cls``: completion times and delivered bytes."""
    env = simpy.Environment()
    net = cls(env, topo)
    n = len(script)
    times, delivered = np.full(n, np.nan), np.full(n, np.nan)

    def go(i: int, spec: FlowSpec):
        device, direction, size, at, pause_after, pause_for, local = spec
        yield env.timeout(at)
        flow = net.start(device, direction, size, local=local)
        if pause_after is not None and not flow.done.triggered:
            yield flow.done | env.timeout(pause_after)
            if not flow.done.triggered:
                net.stop(flow)
                if pause_for is None:  # cancelled
                    delivered[i] = flow.delivered
                    return
                yield env.timeout(pause_for)
                net.resume(flow)
        yield flow.done
        times[i], delivered[i] = env.now, flow.delivered

    for i, spec in enumerate(script):
        env.process(go(i, spec))
    env.run()
    return times, delivered, net


def assert_same(topo, script: list[FlowSpec], *, fast: bool = True) -> None:
    t_ref, b_ref, ref = play(ReferenceFlowNetwork, topo, script)
    t_fast, b_fast, net = play(FlowNetwork, topo, script)
    np.testing.assert_array_equal(np.isnan(t_fast), np.isnan(t_ref))
    np.testing.assert_allclose(t_fast, t_ref, rtol=1e-9, atol=0.0)
    np.testing.assert_allclose(b_fast, b_ref, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(net.carried, ref.carried, rtol=1e-9, atol=1e-6)
    assert ref.handover is None and ref.handover_at is None  # the reference never hands over
    if fast:  # the fast structures played it, not the reference fallback
        assert net.reference is None and net.handover is None and net.handover_at is None
    else:  # the network says why it handed over (for the run's record of fallbacks)
        assert net.reference is None or net.handover is not None


def star(server_up: float, server_down: float, access: list[float]):
    a = np.asarray(access)
    return Network.star(server_up=server_up, server_down=server_down).build(
        3.0 * a, a, np.zeros(a.size)
    )


def hierarchy(access: list[float], edge: float, server: float):
    a = np.asarray(access)
    groups = np.arange(a.size) % 3
    net = Network.hierarchical(
        groups, edge_up=edge, edge_down=2 * edge, server_up=server, server_down=2 * server
    )
    return net.build(3.0 * a, a, np.zeros(a.size))


sizes = st.floats(1.0, 500.0)
starts = st.floats(0.0, 30.0)
pauses = st.one_of(st.none(), st.floats(0.01, 10.0))


@st.composite
def scripts(draw, *, distinct: bool, local: bool = False) -> list[FlowSpec]:
    n = draw(st.integers(1, N))
    devices = draw(st.permutations(range(N)))[:n] if distinct else None
    out: list[FlowSpec] = []
    for i in range(n):
        device = devices[i] if devices is not None else draw(st.integers(0, N - 1))
        pause_after = draw(pauses)
        pause_for = draw(st.one_of(st.none(), st.floats(0.0, 10.0))) if pause_after else None
        out.append(
            (
                device,
                draw(st.sampled_from(["up", "down"])),
                draw(sizes),
                draw(starts),
                pause_after,
                pause_for,
                local and draw(st.booleans()),
            )
        )
    return out


access_links = st.lists(st.floats(1.0, 200.0), min_size=N, max_size=N)


@settings(max_examples=80, deadline=None)
@given(
    scripts(distinct=True),
    st.floats(5.0, 400.0),
    st.one_of(st.just(INF), st.floats(5.0, 400.0)),
    access_links,
)
def test_star_with_unequal_access_links_equals_the_reference(script, up, down, access):
    assert_same(star(up, down, access), script)


@settings(max_examples=80, deadline=None)
@given(
    scripts(distinct=True, local=True),
    st.floats(5.0, 300.0),
    st.floats(5.0, 300.0),
    st.sampled_from(["edges", "cloud", "both"]),
    access_links,
)
def test_hierarchies_equal_the_reference(script, edge, cloud, finite, access):
    # finite edge links under an unlimited cloud link, the other way round, or both finite
    # (two nested levels: each edge's link a child of the cloud's)
    edge_cap = INF if finite == "cloud" else edge
    cloud_cap = INF if finite == "edges" else cloud
    assert_same(hierarchy(access, edge_cap, cloud_cap), script)


@settings(max_examples=25, deadline=None)
@given(scripts(distinct=False, local=True), st.floats(5.0, 300.0), access_links)
def test_two_flows_on_one_access_link_fall_back_exactly(script, cap, access):
    # a device may have two flows at once: its own link is then shared as well
    assert_same(hierarchy(access, cap, INF), script, fast=False)
    assert_same(hierarchy(access, cap, 2 * cap), script, fast=False)


def test_three_contended_levels_play_the_reference_from_the_start():
    # devices 0 and 1 reach the server through c, b and a: three shared links
    g = nx.Graph([("server", "a"), ("a", "b"), ("b", "c")])
    for u, v, bw in (("server", "a", 50.0), ("a", "b", 40.0), ("b", "c", 30.0)):
        g.edges[u, v]["bandwidth"] = bw
    for i in range(4):
        g.add_edge("c" if i < 2 else "a", i, bandwidth=20.0)
    topo = Network.from_graph(g).build(np.full(4, 20.0), np.full(4, 20.0), np.zeros(4))
    net = FlowNetwork(simpy.Environment(), topo)
    assert net.reference is not None
    assert net.handover == "a path crosses more than two contended links"
    assert net.handover_at == 0.0
    script: list[FlowSpec] = [(i, "up", 100.0, 0.0, None, None, False) for i in range(4)]
    assert_same(topo, script, fast=False)


def test_a_second_flow_on_one_access_link_hands_over_to_the_reference_mid_run():
    topo = star(100.0, INF, [10.0] * N)
    # device 0 starts two uploads, the second while the first is still under way
    script: list[FlowSpec] = [
        (0, "up", 50.0, 0.0, None, None, False),
        (1, "up", 50.0, 0.0, None, None, False),
        (0, "up", 20.0, 1.0, None, None, False),
    ]
    times, _, net = play(FlowNetwork, topo, script)
    assert net.reference is not None
    assert net.handover == "two flows at once on one device's own link"
    assert net.handover_at == 1.0  # when the second flow started
    # 1 s at 10 each (10 bytes moved), then device 0's link is shared by two flows: 5 each
    # until the 20-byte one is done (4 s), then 10 again: 40 - 20 = 20 bytes left, at 10: 2 s
    np.testing.assert_allclose(times, [7.0, 5.0, 5.0], rtol=1e-12)


def test_water_filling_by_hand():
    link = SharedLink(12.0)
    a, b, c = Member(60.0, cap=1.0), Member(60.0, cap=3.0), Member(60.0, cap=INF)
    for m in (a, b, c):
        link.add(m, m.size, 0.0)
    # the level solves min(1, L) + min(3, L) + L = 12: L = 8
    assert [link.rate(m) for m in (a, b, c)] == [1.0, 3.0, 8.0]
    assert link.next_finish() == pytest.approx(60.0 / 8.0)
    assert link.finished(7.5) == [c]
    link.settle(7.5)
    # now the level is 12 - 1 = 11 > 3: both are capped by their own links
    assert [link.rate(m) for m in (a, b)] == [1.0, 3.0]
    assert link.remaining(b, 7.5) == pytest.approx(60.0 - 22.5)
    left = link.remove(b, 10.0)
    assert left == pytest.approx(60.0 - 30.0)
    assert len(link) == 1 and link.rate(a) == 1.0


# ----------------------------------------------------------------- whole scenarios
NETWORK_CASES = [
    "star-deadline",
    "star-fedbuff",
    "graph-fastestk",
    "hier-edge",
    "hier-edge-diurnal-pause",
    "hier-flat-waitall",
    "avail-diurnal-adaptive-star",
    "avail-exp-maxtime-star",
]
TIME_COLUMNS = ("time", "duration", "t_start", "t_end", "download", "compute", "upload", "wait")


def assert_frames_close(fast: pd.DataFrame, ref: pd.DataFrame) -> None:
    """Times (and bytes of stopped transfers) to a relative 1e-9, everything else exact."""
    assert list(fast.columns) == list(ref.columns) and len(fast) == len(ref)
    for col in fast.columns:
        a, b = fast[col], ref[col]
        if pd.api.types.is_float_dtype(a.dtype):
            loose = col in TIME_COLUMNS or col.startswith("bytes") or col.startswith("t_")
            rtol = 1e-9 if loose else 0.0
            np.testing.assert_allclose(a, b, rtol=rtol, atol=0.0, err_msg=col)
        else:
            assert a.equals(b), col


@pytest.mark.parametrize("name", NETWORK_CASES)
def test_network_scenarios_give_the_reference_frames(name):
    scenario, kwargs = fingerprints.catalogue()[name]()
    fleet = scenario.fleet
    topo = scenario.network.build(fleet.bandwidth_down, fleet.bandwidth_up, fleet.latency)
    assert FlowNetwork(simpy.Environment(), topo).reference is None  # the fast path plays it
    fast = run(scenario, progress=False, **kwargs)
    ref = run(scenario, progress=False, reference_links=True, **kwargs)
    assert fast.meta["stop_reason"] == ref.meta["stop_reason"]
    assert_frames_close(fast.rounds, ref.rounds)
    assert_frames_close(fast.clients, ref.clients)


def test_reference_links_flag_is_checked():
    scenario, _ = fingerprints.catalogue()["star-deadline"]()
    with pytest.raises(ValueError, match="reference_links"):
        run(scenario, progress=False, reference_links="yes")
