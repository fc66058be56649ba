"""Two-level shared links (an edge's link under the cloud's) stay exact as their work is cut.

``SharedLink._rebalance_tree`` keeps each child's test as three numbers until that child
changes, and ``FlowNetwork`` re-solves each tree once per wake-up and routes each device once.
These hold the results to independent ones: progressive filling
(:func:`~simfl.engine.flows.maxmin.max_min_rates`) after every change of a many-child tree, and
the reference network (``ReferenceFlowNetwork``, relative ``1e-9``) on hierarchies with many
unequal edges, staggered starts, pauses and cancellations.
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from simfl.engine.flows import FlowNetwork, Member, SharedLink, max_min_rates, sharedlink
from simfl.network import Network
from tests.test_links_fast import FlowSpec, assert_same

INF = math.inf
EDGES = 6
DEVICES = 18

# ----------------------------------------------------------------- SharedLink trees
caps = st.one_of(st.just(INF), st.floats(0.5, 50.0))
# ("add", target: 0 the parent, k the k-th child; its cap) or ("remove", which member)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, EDGES), caps),
        st.tuples(st.just("remove"), st.integers(0, 10**6), st.just(0.0)),
    ),
    min_size=1,
    max_size=40,
)


def nested(parent: float, children: list[float]) -> tuple[SharedLink, list[SharedLink]]:
    """A link of capacity ``parent`` with links of ``children`` capacities attached below it."""
    top = SharedLink(parent)
    kids = [SharedLink(c) for c in children]
    for kid in kids:
        top.attach(kid)
    return top, kids


def expected_rates(
    parent: float, children: list[float], members: list[tuple[int, Member]]
) -> np.ndarray:
    """Progressive filling over (parent, children, one private resource per member)."""
    capacity = np.array([parent, *children, *(m.cap for _, m in members)])
    base = 1 + len(children)
    paths = [
        np.array([0, base + i] if k == 0 else [0, k, base + i]) for i, (k, _) in enumerate(members)
    ]
    return max_min_rates(paths, capacity)


@settings(max_examples=150, deadline=None)
@given(
    st.floats(5.0, 200.0),
    st.lists(st.floats(1.0, 80.0), min_size=EDGES, max_size=EDGES),
    ops,
)
def test_a_many_child_tree_gives_progressive_filling_after_every_change(parent_cap, caps, script):
    parent, children = nested(parent_cap, caps)
    links = [parent, *children]
    members: list[tuple[int, Member]] = []
    now = 0.0
    for kind, which, cap in script:
        now += 0.01
        if kind == "add":
            m = Member(1e12, cap=cap)
            links[which].add(m, m.size, now)
            members.append((which, m))
        elif members:
            k, m = members.pop(which % len(members))
            links[k].remove(m, now)
        got = np.array([links[k].rate(m) for k, m in members])
        want = expected_rates(parent_cap, caps, members)
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=0.0)
        # each link carries at most its capacity
        for k, link in enumerate(links):
            carried = sum(r for (j, _), r in zip(members, got, strict=True) if j == k or k == 0)
            assert carried <= link.capacity * (1 + 1e-9)


# ----------------------------------------------------------------- networks
def many_edges(access: list[float], edge: list[float], cloud: float):
    """``EDGES`` edge servers with unequal links (down twice up) under a shared cloud link."""
    g = nx.Graph()
    g.add_edge("server", "cloud", up=cloud, down=2 * cloud)
    for e, bw in enumerate(edge):
        g.add_edge("cloud", f"edge{e}", up=bw, down=2 * bw)
    for d, bw in enumerate(access):
        g.add_edge(f"edge{d % EDGES}", d, up=bw, down=3 * bw)
    return Network.from_graph(g).build(*(np.ones(len(access)),) * 2, np.zeros(len(access)))


@st.composite
def scripts(draw) -> list[FlowSpec]:
    n = draw(st.integers(1, DEVICES))
    devices = draw(st.permutations(range(DEVICES)))[:n]
    out: list[FlowSpec] = []
    for device in devices:
        pause_after = draw(st.one_of(st.none(), st.floats(0.01, 10.0)))
        pause_for = draw(st.one_of(st.none(), st.floats(0.0, 10.0))) if pause_after else None
        start = draw(st.one_of(st.just(0.0), st.floats(0.0, 20.0)))  # many start together
        local = draw(st.booleans())
        direction = draw(st.sampled_from(["up", "down"]))
        size = draw(st.floats(1.0, 500.0))
        out.append((device, direction, size, start, pause_after, pause_for, local))
    return out


@settings(max_examples=60, deadline=None)
@given(
    scripts(),
    st.lists(st.floats(1.0, 200.0), min_size=DEVICES, max_size=DEVICES),
    st.lists(st.floats(5.0, 300.0), min_size=EDGES, max_size=EDGES),
    st.floats(5.0, 600.0),
)
def test_hierarchies_with_many_unequal_edges_equal_the_reference(script, access, edge, cloud):
    assert_same(many_edges(access, edge, cloud), script)


def counting_solves(monkeypatch) -> list[float]:
    """Patch ``SharedLink._rebalance_tree`` to record the instant of every solve."""
    solved: list[float] = []
    tree = SharedLink._rebalance_tree

    def counted(self: SharedLink, now: float) -> None:
        solved.append(now)
        tree(self, now)

    monkeypatch.setattr(SharedLink, "_rebalance_tree", counted)
    return solved


@pytest.mark.pure_python
def test_a_wake_up_solves_each_tree_once(monkeypatch):
    # six edges under a shared cloud link, the cloud carrying no flow of its own: every
    # wake-up that finishes flows on several edges re-solves the up tree once, not per edge
    topo = many_edges([10.0 + d for d in range(DEVICES)], [30.0] * EDGES, 60.0)
    env = simpy.Environment()
    net = FlowNetwork(env, topo)
    solved = counting_solves(monkeypatch)
    wake = FlowNetwork._wake
    per_wake: list[int] = []

    def counted_wake(self: FlowNetwork, token: int) -> None:
        before = len(solved)
        wake(self, token)
        per_wake.append(len(solved) - before)

    monkeypatch.setattr(FlowNetwork, "_wake", counted_wake)
    flows = [net.start(d, "up", 100.0) for d in range(DEVICES)]  # equal sizes: ties finish
    env.run()
    assert all(f.done.triggered for f in flows)
    # the cloud binds from the sixth start on (caps 10..15 sum to 75 > 60): every start from
    # then re-solves the tree, the first five settle their edge alone (caps sum to 60)
    assert len(solved) - sum(per_wake) == DEVICES - 5
    assert max(per_wake) == 1  # each wake-up that finished flows re-solved the tree once
    assert sum(per_wake) >= 1


@pytest.mark.pure_python
def test_a_cloud_that_never_binds_never_solves_its_tree(monkeypatch):
    # the access links (10..27 up, three times that down) sum to 333 up: a cloud of 400 up
    # (800 down) never binds, so every edge is settled as a link on its own; the results
    # are still the reference network's, staggered starts, pauses and both directions
    access = [10.0 + d for d in range(DEVICES)]
    topo = many_edges(access, [30.0 + 5 * e for e in range(EDGES)], 400.0)
    solved = counting_solves(monkeypatch)
    script: list[FlowSpec] = [
        (
            d,
            "up" if d % 2 else "down",
            50.0 + 7 * d,
            0.5 * (d % 4),
            2.0 if d % 5 == 0 else None,
            1.0 if d % 5 == 0 else None,
            False,
        )
        for d in range(DEVICES)
    ]
    assert_same(topo, script)
    assert solved == []


@pytest.mark.pure_python
def test_saturated_edges_that_stay_saturated_are_settled_without_the_tree(monkeypatch):
    # edges 0-4 carry 5 each (any flow saturates them: their level is at most 5), edge 5
    # carries 1000 under a cloud of 60 that its three flows (cap 100 each) make bind at
    # level 20: each edge's first flow re-solves the tree (it turns saturated), its
    # second and third do not (the edge's level halves and thirds, below 20: saturated)
    topo = many_edges([100.0] * DEVICES, [5.0] * 5 + [1000.0], 60.0)
    env = simpy.Environment()
    net = FlowNetwork(env, topo)
    solved = counting_solves(monkeypatch)
    for d in (5, 11, 17):  # edge 5's devices
        net.start(d, "up", 1e6)
    per_start = []
    for d in [*range(5), *range(6, 11), *range(12, 17)]:  # edges 0-4, three rounds
        before = len(solved)
        net.start(d, "up", 1e6)
        per_start.append(len(solved) - before)
    assert per_start == [1] * 5 + [0] * 10
    cloud = next(link for link in net.calendar.links if link.children)
    assert all(child.saturated for child in cloud.children[1:])  # edges 0-4 (edge 5 first)


@pytest.mark.pure_python
def test_routes_are_computed_once_per_device_path():
    topo = many_edges([10.0] * DEVICES, [30.0] * EDGES, 60.0)
    env = simpy.Environment()
    net = FlowNetwork(env, topo)
    a = net.start(3, "up", 50.0)
    b = net.start(3, "down", 50.0)
    env.run()
    c = net.start(3, "up", 50.0)
    assert c.route is a.route and b.route is not a.route
    np.testing.assert_array_equal(c.resources, net.resources(3, "up"))
    np.testing.assert_array_equal(b.resources, net.resources(3, "down"))
    local = net.start(3, "up", 5.0, local=True)
    np.testing.assert_array_equal(local.resources, net.local_resources(3, "up"))
    env.run()
    assert net.carried[net.resources(3, "up")].tolist() == [100.0, 100.0, 105.0]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(1.0, 100.0), st.one_of(st.just(INF), st.floats(0.5, 20.0))),
        min_size=1,
        max_size=12,
    ),
    st.floats(5.0, 60.0),
    st.lists(st.floats(0.0, 3.0), min_size=1, max_size=6),
)
def test_due_says_whether_finished_would_take_a_member_out(flows, capacity, gaps):
    """``SharedLink.due(now)`` is ``finished(now)`` being non-empty, without changing the link.

    A wake-up skips ``finished`` on links not due (they are left as they are), so ``due``
    must agree with it exactly, at the link's own next completion (where something is due)
    and at other instants (where, mostly, nothing is).
    """
    link = SharedLink(capacity)
    members = [Member(size, cap=cap) for size, cap in flows]
    now = 0.0
    for m in members:
        link.add(m, m.size, now)
    for gap in gaps:
        for t in (link.next_at, now + gap):
            if not now <= t < INF:
                continue
            stale = any(
                heap and (heap[0][3].ver != heap[0][2] or heap[0][3].link is None)
                for heap in (link._by_key, link._by_end)
            )
            state = (link.clock, link.since, link.level, link.n_level, len(link.capped))
            due = link.due(t)
            assert state == (link.clock, link.since, link.level, link.n_level, len(link.capped))
            out = link.finished(t)
            assert due == (bool(out) or stale)  # a stale entry on top: due, to be safe
            link.settle(t)
            now = t


def _general_add(link: SharedLink, m: Member, remaining: float, now: float) -> None:
    """``SharedLink.add`` as its general path: advance, join the level, rebalance."""
    link._advance(now)
    m.link = link
    m.seq = next(sharedlink._seq)
    link._to_level(m, remaining)
    link._rebalance(now)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["add", "add", "finish", "remove"]),
            st.floats(1.0, 100.0),  # bytes (add), or which member (remove)
            st.floats(0.5, 20.0),  # its own cap
            st.floats(0.0, 2.0),  # time since the previous step
        ),
        min_size=1,
        max_size=30,
    )
)
def test_an_unlimited_link_admits_members_as_the_general_path_does(script):
    """An unlimited link (``capacity`` ``inf``) puts a new member straight into the capped
    class; the general path (join the level, then the rebalancing's move) gives the same
    state, float for float: remaining bytes, ends, next completion, finished members."""
    fast, slow = SharedLink(INF), SharedLink(INF)
    members: list[tuple[Member, Member]] = []
    now = 0.0
    for op, size, cap, gap in script:
        if op == "finish" and fast.next_at < INF:
            now = fast.next_at
            out_fast, out_slow = fast.finished(now), slow.finished(now)
            assert [members.index((a, b)) for a, b in members if a in out_fast] == [
                members.index((a, b)) for a, b in members if b in out_slow
            ]
            fast.settle(now)
            slow.settle(now)
            members = [(a, b) for a, b in members if a.link is not None]
        else:
            now += gap
            if op == "remove" and members:
                a, b = members.pop(int(size) % len(members))
                assert fast.remove(a, now) == slow.remove(b, now)
            elif op != "remove":
                a, b = Member(size, cap=cap), Member(size, cap=cap)
                fast.add(a, size, now)
                _general_add(slow, b, size, now)
                members.append((a, b))
        assert fast.next_at == slow.next_at
        assert (fast.level, fast.n_level, fast.capped_sum) == (
            slow.level,
            slow.n_level,
            slow.capped_sum,
        )
        for a, b in members:
            assert (a.capped, a.t0, a.rem0) == (b.capped, b.t0, b.rem0)
            assert fast.remaining(a, now) == slow.remaining(b, now)
