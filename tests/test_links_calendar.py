"""The links' calendar and a parent's kept sum of its children's takes (no pass over all links).

A network's :class:`~simfl.engine.flows.calendar.Calendar` must give exactly what the pass over
every link gave (the earliest ``next_at``; the links with ``next_at <= at``, in filing order),
and :meth:`SharedLink._fits` exactly the loop over the children it replaces, to the bit, at
and near the boundary too. Networks of many edge links then play exactly as the live job
processes and to a relative ``1e-9`` of the reference links.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simfl import Fleet, Scenario, algorithms, dists, policies
from simfl.engine.flows import Calendar, Member, SharedLink
from simfl.network import Network
from tests.test_flow_round import assert_frames_close, assert_frames_equal, played
from tests.test_links_tree import nested

INF = math.inf
TIMES = st.one_of(st.just(INF), st.sampled_from([0.0, 1.0, 2.0, 2.5]), st.floats(0.0, 10.0))


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 12),
    st.lists(
        st.tuples(st.sampled_from(["set", "set", "earliest", "due"]), st.integers(0, 11), TIMES),
        max_size=60,
    ),
)
def test_the_calendar_is_the_pass_over_every_link(n, script):
    calendar = Calendar()
    links = [SharedLink(1.0) for _ in range(n)]
    for link in links:
        calendar.add(link)
    assert calendar.links == links
    for op, which, t in script:
        if op == "set":
            links[which % n]._next(t)
        elif op == "earliest":
            assert calendar.earliest() == min(link.next_at for link in links)
        elif t < INF:  # a completion's time (wake-ups are only scheduled for finite ones)
            want = [link for link in links if link.next_at <= t]
            assert calendar.due(t) == want  # in filing order, each link once
            # their entries left the heap; they are filed again, changed or not
            assert calendar.earliest() == min(link.next_at for link in links)
    assert calendar.earliest() == min(link.next_at for link in links)


def _loop(parent: SharedLink) -> bool:
    """What ``_fits`` replaces: the children's takes summed left to right."""
    fixed = parent.capped_sum
    for child in parent.children:
        fixed += child.capacity if child.n_level else child.capped_sum
    return not fixed > parent.capacity


# capacities and caps in eighths: sums are exact, so the boundary (takes summing to the
# parent's capacity exactly) is hit often; and a capacity a hair off it
CAPS = st.integers(1, 40).map(lambda k: k / 8.0)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(CAPS, min_size=1, max_size=8),
    st.sampled_from([0.0, 1e-12, -1e-12, 0.5]),
    st.lists(
        st.tuples(st.sampled_from(["add", "add", "remove"]), st.integers(0, 8), CAPS),
        max_size=40,
    ),
)
def test_a_parents_kept_sum_answers_as_the_loop(child_caps, offset, script):
    # the parent's capacity is the children's sum (+ an offset): every child saturated puts
    # the sum on the boundary, or a relative 1e-12 off it, where the kept sum must defer
    parent, children = nested(
        sum(child_caps) * (1.0 + offset) if offset != 0.5 else 3.0, child_caps
    )
    links = [parent, *children]
    members: list[tuple[SharedLink, Member]] = []
    now = 0.0
    for op, which, cap in script:
        now += 0.125
        if op == "add":
            link = links[which % len(links)]
            m = Member(1e9, cap=cap)
            link.add(m, m.size, now)
            members.append((link, m))
        elif members:
            link, m = members.pop(which % len(members))
            link.remove(m, now)
        assert parent._fits() == _loop(parent)


def _many_edges(edges: int, cloud: float, rate: float, policy: policies.SyncPolicy) -> Scenario:
    n = 3 * edges
    up = np.random.default_rng(edges).choice([1e3, 2e3, 5e3], n)
    fleet = Fleet(
        [dists.Exponential(mean=1.0)],
        np.zeros(n, dtype=np.int64),
        bandwidth_down=4.0 * up,
        bandwidth_up=up,
        latency=0.05,
        dropout_rate=rate,
    )
    network = Network.hierarchical(
        np.arange(n) % edges,
        edge_up=4e3,
        edge_down=8e3,
        server_up=cloud,
        server_down=2.0 * cloud,
    )
    return Scenario(
        task=None,
        algorithm=algorithms.TimingOnly(bytes_down=2_000, bytes_up=2_000),
        fleet=fleet,
        policy=policy,
        rounds=3,
        network=network,
        seed=edges,
    )


def test_many_edges_play_as_the_live_processes_and_the_reference():
    # 150 edges (three devices each) under a cloud link that binds (2e4 up for 100 flows of
    # caps 1e3..5e3) or not (inf); flow rounds exactly the live processes, close to the
    # reference links
    for cloud, rate, policy in (
        (2e4, 0.0, policies.WaitAll(count=100)),
        (INF, 0.1, policies.FastestK(60, overcommit=0.5)),
        (6e4, 0.05, policies.Deadline(4.0, count=120)),
    ):
        sc = _many_edges(150, cloud, rate, policy)
        fast, live = played(sc), played(sc, batched=False)
        assert_frames_equal(fast.rounds, live.rounds)
        assert_frames_equal(fast.clients, live.clients)
        ref = played(sc, reference_links=True)
        assert fast.clients["status"].equals(ref.clients["status"])
        assert_frames_close(fast.rounds, ref.rounds)
        assert_frames_close(fast.clients, ref.clients)
