"""A cloud link that binds: its tree solved without a pass over its edges, followers on its clock.

Under a binding parent, :meth:`SharedLink._rebalance_tree` keeps the sums that give the level and
four heaps of the children, and an unsaturated child's level members (a *follower*'s) are read off
the parent's follower clock, so a flow event takes in only the children that changed. These hold it
to independent results: progressive filling (:func:`~simfl.engine.flows.maxmin.max_min_rates`) after
every change of long scripts (many children, heaps compacted), the reference network
(``ReferenceFlowNetwork``, relative ``1e-9``) on a hierarchy of 40 edges and on a FedBuff run that
keeps the cloud binding throughout, the followers due at a wake-up against the followers' own
completions, the rounding fallback finishing a follower's member, and the work per event (children
taken in).
"""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simfl import policies, run
from simfl.engine.flows import Calendar, Member, SharedLink
from simfl.network import Network
from tests.test_links_fast import FlowSpec, assert_frames_close, assert_same
from tests.test_links_tree import expected_rates, nested

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analysis" / "perf"))
import links_throughput

INF = math.inf


def tree(parent: float, children: list[float]) -> tuple[SharedLink, list[SharedLink], Calendar]:
    """A parent link over ``children``, all filed on one calendar."""
    top, kids = nested(parent, children)
    calendar = Calendar()
    for link in (top, *kids):
        calendar.add(link)
    return top, kids, calendar


def assert_filling(top: SharedLink, kids: list[SharedLink], members: list[tuple[int, Member]]):
    """Every member's rate is progressive filling's (relative ``1e-9``)."""
    links = [top, *kids]
    want = expected_rates(top.capacity, [k.capacity for k in kids], members)
    got = np.array([links[k].rate(m) for k, m in members])
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=0.0)


def follower_times(
    top: SharedLink, members: list[tuple[int, Member]], now: float
) -> dict[SharedLink, float]:
    """Each follower's first level member's finishing time, from its bytes left and rate."""
    out: dict[SharedLink, float] = {}
    for _, m in members:
        link = m.link
        if link is not None and link.follows and not m.capped:
            t = now + link.remaining(m, now) / link.rate(m)
            out[link] = min(t, out.get(link, INF))
    return out


@settings(max_examples=40, deadline=None)
@given(
    st.integers(2, 5),
    st.lists(
        st.tuples(
            st.sampled_from(["add", "add", "add", "remove", "wake"]),
            st.integers(0, 10**6),
            st.one_of(st.just(INF), st.floats(0.5, 30.0)),
            st.floats(1.0, 50.0),
        ),
        min_size=150,
        max_size=300,
    ),
)
def test_long_scripts_on_a_binding_tree_stay_progressive_filling(n, script):
    # a parent of 20 over children of 8..20: it binds whenever a few flows run. Hundreds of
    # changes (adds, removes, the wake-ups that finish members) push the children's heap
    # entries past the compaction bound (4 n + 64), so the heaps are built again; after
    # every change the rates are progressive filling's, the followers due by a time are
    # exactly those whose first member finishes by then, and the parent's next completion
    # is the earliest of its own, its followers' and every child's
    play_on_a_tree(n, script)


def play_on_a_tree(n: int, script: list[tuple[str, int, float, float]]) -> bool:
    """Play ``script`` on a tree of ``n`` children, checked after every change; whether the
    children's heaps were compacted (built again smaller) on the way."""
    top, kids, calendar = tree(20.0, [8.0 + 12.0 * i / n for i in range(n)])
    links = [top, *kids]
    members: list[tuple[int, Member]] = []
    now, longest, compacted = 0.0, 0, False
    bound = 4 * n + 64
    for op, which, cap, size in script:
        heaps = (top._sat_own, top._uns_own, top._uns_low, top._uns_high, top._follow)
        before = [len(h) for h in heaps]
        # time moves on by 0.05 s, or to the next completion ("wake"); the completions on
        # the way are woken up for, as the engine does
        until = calendar.earliest() if op == "wake" else now + 0.05
        while calendar.earliest() <= until < INF:
            now = calendar.earliest()
            assert calendar.wake_up(now, now)
            members = [(k, m) for k, m in members if m.link is not None]
        if op != "wake":
            now = until
            if op == "remove" and members:
                k, m = members.pop(which % len(members))
                left = links[k].remove(m, now)
                assert -1e-9 * m.size <= left <= m.size * (1 + 1e-9)
            elif op != "remove":
                k = which % len(links)
                m = Member(size, cap=cap)
                links[k].add(m, size, now)
                members.append((k, m))
        assert_filling(top, kids, members)
        times = follower_times(top, members, now)
        assert set(times) == {k for k in kids if k.follows}
        for t in sorted(times.values())[:3]:  # due: finishing by t (up to rounding)
            due = top._due_followers(t)
            assert due == sorted(due, key=kids.index)
            for k, when in times.items():
                if when < t * (1 - 1e-12):
                    assert k in due
                elif when > t * (1 + 1e-12):
                    assert k not in due
        soonest = min([top.next_finish(), *times.values()])
        assert top.next_at == pytest.approx(soonest, rel=1e-12)
        assert calendar.earliest() == min(link.next_at for link in links)
        assert top.n_follow == sum(k.follows for k in kids)
        # the kept sums count each child as last taken in, which is as it is unless it
        # changed since (a child settled on its own: the solve takes it in again first)
        assert top.t_slope == sum(k.seen_slope for k in kids)
        assert top.t_fixed == pytest.approx(math.fsum(k.seen_fixed for k in kids), rel=1e-12)
        for k in kids:
            if not k.dirty:
                fixed = k.capacity if k.saturated else k.capped_sum
                assert (k.seen_fixed, k.seen_slope) == (fixed, 0 if k.saturated else k.n_level)
                assert not k.follows or (k.n_level and not k.saturated)
        heaps = (top._sat_own, top._uns_own, top._uns_low, top._uns_high, top._follow)
        after = [len(h) for h in heaps]
        longest = max(longest, *after)
        assert longest <= bound + 3  # compacted at the end of each solve
        compacted = compacted or any(
            b > bound // 2 and a < b // 2 for a, b in zip(after, before, strict=True)
        )
    return compacted


def test_a_long_script_compacts_the_heaps_and_stays_progressive_filling():
    # 2,000 changes on 3 children: far more entries are pushed than the bound (76) allows,
    # so the heaps are built again (some heap halves at once), and every check above holds
    rng = np.random.default_rng(5)
    ops = rng.choice(["add", "add", "add", "remove", "wake"], 2000)
    script = [
        (
            str(op),
            int(rng.integers(10**6)),
            INF if rng.random() < 0.3 else rng.uniform(0.5, 30.0),
            rng.uniform(1.0, 50.0),
        )
        for op in ops
    ]
    assert play_on_a_tree(3, script)


def hierarchy(edges: int, devices: int, cloud: float, seed: int):
    """``edges`` unequal edge links under a cloud link that binds; unequal access links."""
    rng = np.random.default_rng(seed)
    g = nx.Graph()
    g.add_edge("server", "cloud", up=cloud, down=2 * cloud)
    for e in range(edges):
        bw = float(rng.uniform(5.0, 40.0))
        g.add_edge("cloud", f"edge{e}", up=bw, down=2 * bw)
    for d in range(devices):
        bw = float(rng.uniform(1.0, 30.0))
        g.add_edge(f"edge{d % edges}", d, up=bw, down=3 * bw)
    return Network.from_graph(g).build(*(np.ones(devices),) * 2, np.zeros(devices))


@pytest.mark.parametrize("seed", [0, 1])
def test_forty_edges_under_a_binding_cloud_equal_the_reference(seed):
    # 160 devices on 40 edges (5..40 up each, 900 in all) under a cloud of 120 up: the cloud
    # binds for most of the run, so most edges follow it; staggered starts, both directions,
    # pauses and cancellations, against the reference links (every rate recomputed by
    # progressive filling at every flow event) at a relative 1e-9
    rng = np.random.default_rng(100 + seed)
    devices = 160
    script: list[FlowSpec] = []
    for d in range(devices):
        pause = float(rng.uniform(0.5, 5.0)) if d % 7 == 0 else None
        script.append(
            (
                d,
                "up" if d % 3 else "down",
                float(rng.uniform(20.0, 400.0)),
                float(rng.choice([0.0, 0.0, rng.uniform(0.0, 8.0)])),
                pause,
                (float(rng.uniform(0.0, 3.0)) if d % 2 else None) if pause else None,
                d % 11 == 0,
            )
        )
    assert_same(hierarchy(40, devices, 120.0, seed), script)


def test_the_rounding_fallback_finishes_a_followers_first_member():
    # three children that all follow a parent of 9 (each has two uncapped flows; the
    # parent's level 1.5 is below every child's own): the soonest completion is the member
    # with the fewest bytes, a follower's. A wake-up where nothing is within tolerance
    # (``now`` a little early) still finishes exactly that member, as it does on a link
    # alone, and what is left is progressive filling again
    top, kids, calendar = tree(9.0, [10.0, 12.0, 14.0])
    members: list[tuple[int, Member]] = []
    for i, size in enumerate([50.0, 40.0, 60.0, 30.0, 45.0, 55.0]):
        m = Member(size)
        kids[i % 3].add(m, size, 0.0)
        members.append((1 + i % 3, m))
    assert all(k.follows for k in kids) and top.n_follow == 3
    at = calendar.earliest()
    assert at == pytest.approx(30.0 / 1.5, rel=1e-12)
    assert top.next_at == at and all(k.next_at == INF for k in kids)
    done = calendar.wake_up(at, at * (1 - 1e-6))
    assert done == [members[3][1]]  # the 30-byte flow, on the first child
    members = [(k, m) for k, m in members if m.link is not None]
    assert_filling(top, kids, members)


@pytest.mark.pure_python
def test_a_flow_event_takes_in_only_the_children_that_change(monkeypatch):
    # 300 edges of 10 under a cloud of 300, each edge with two uncapped flows: the cloud
    # binds at level 0.5 and every edge follows it. A flow added to one edge, or one that
    # finishes, changes that edge alone (the level moves a little: no edge's class flips),
    # so its solve takes in one child and moves no other: not a pass over the 300
    top, kids, calendar = tree(300.0, [10.0] * 300)
    members = []
    for i, kid in enumerate(kids):
        for j in range(2):
            m = Member(1000.0 + i + 0.5 * j)
            kid.add(m, m.size, 0.0)
            members.append((1 + i, m))
    assert top.n_follow == 300 and top.level == pytest.approx(0.5)
    taken: list[SharedLink] = []
    take_in = SharedLink._take_in

    def counted(self: SharedLink, child: SharedLink, now: float) -> None:
        taken.append(child)
        take_in(self, child, now)

    monkeypatch.setattr(SharedLink, "_take_in", counted)
    m = Member(500.0)
    kids[7].add(m, m.size, 1.0)
    members.append((8, m))
    assert taken == [kids[7]]
    assert all(kid.follows for kid in kids)
    at = calendar.earliest()  # the new flow's end: 500 bytes at about 0.5, the others ~1000
    taken.clear()
    done = calendar.wake_up(at, at)
    assert done == [m]
    assert taken == [kids[7]]
    members = [(k, m) for k, m in members if m.link is not None]
    assert_filling(top, kids, members)


def test_an_asynchronous_run_under_a_binding_cloud_equals_the_reference():
    # FedBuff keeps 20 jobs running at all times on the benchmark's hierarchy whose cloud
    # binds (10 edges, three times the star's server link in all, the cloud half of it), so
    # edges follow the cloud for the whole run and its follower clock is never reset: the
    # frames equal the reference links' (times and bytes to a relative 1e-9, the rest exactly)
    scenario = dataclasses.replace(
        links_throughput.scenario(20, 60, "tight", 0, edges=10),
        policy=policies.FedBuff(buffer_size=10, concurrency=20),
    )
    fast = run(scenario, progress=False)
    ref = run(scenario, progress=False, reference_links=True)
    assert len(fast.clients) >= 600 and fast.meta["stop_reason"] == ref.meta["stop_reason"]
    assert_frames_close(fast.rounds, ref.rounds)
    assert_frames_close(fast.clients, ref.clients)
