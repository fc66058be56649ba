"""Every playback records what the reference records, bit for bit, on one shared set of runs.

For each scenario below, the playback :func:`~simfl.engine.playbacks.choose` picks (named in
``meta["playback"]``, checked against the table) gives the frames of
``simfl.run(..., batched=False)`` (every job a SimPy process) exactly, and its metadata but for
host time and the playback itself. Where links are shared, the fast links also agree with
``reference_links=True`` to a relative ``1e-9`` in times and bytes (the reference algorithm
recomputes every rate at every flow event; the two round differently).

The scenarios cover every policy family (synchronous wait-all, deadline and fastest-k with
over-selection; semi-asynchronous tiers; edge servers; asynchronous FedBuff, FedAsync and a
policy that learns as the run goes on), private links with devices always online, on/off
availability (jobs aborted and paused), a star and a hierarchy of shared links, a timing-only
algorithm and a learning one, with and without a ``max_time``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest

from simfl import Fleet, Results, Scenario, algorithms, dists, policies, run, tasks
from simfl.engine.context import RunContext
from simfl.engine.playbacks import PLAYBACKS, choose
from simfl.fleet import Availability
from simfl.network import Network
from simfl.outcome import Outcome
from simfl.policies.base import View

N = 8
#: few values: jobs, spells and rounds end together (ties exercise the closing rule)
TIES = dists.Empirical([0.5, 1.0, 1.0, 2.0])
#: device ``i``'s on-intervals: off for a while early, back, and a late gap
TRACE = Availability(
    [[(0.0, 2.0 + i % 3), (4.0 + i % 2, 9.0), (10.0 + i % 4, 80.0)] for i in range(N)]
)
# what differs between two playbacks of one run on purpose: host time, the flag, the playback
SKIP = ("host_seconds", "batched", "scenario_repr", "playback", "playback_fallbacks")
TIME_COLUMNS = ("time", "duration", "t_start", "t_end", "download", "compute", "upload", "wait")


class Learning(policies.FedBuff):
    """FedBuff that observes every aggregation (a policy whose picks may follow the run)."""

    def observe(self, state: Any, outcome: Outcome, view: View) -> Any:
        return state


def _scenario(
    policy: policies.Policy,
    *,
    links: str = "private",
    learning: bool = False,
    rounds: int = 6,
    max_time: float | None = None,
) -> Scenario:
    """A small run of ``policy`` on ``links`` (private, abort, pause, star, hier, star-pause)."""
    fleet = Fleet.homogeneous(
        N,
        compute=TIES,
        latency=0.05,
        dropout_rate=0.05,
        bandwidth_down=4e4,
        bandwidth_up=1e4,
    )
    if links in ("abort", "pause"):
        fleet = fleet.with_availability(TRACE, links)
    if links == "star-pause":
        fleet = fleet.with_availability(TRACE, "pause")
    network = None
    if links.startswith("star"):
        network = Network.star(server_up=2e4, server_down=8e4)
    elif links == "hier":
        network = Network.hierarchical(
            np.arange(N) % 2, edge_up=1.5e4, edge_down=6e4, server_up=2.5e4, server_down=1e5
        )
    if learning:
        task: tasks.LinearRepresentation | None = tasks.LinearRepresentation(
            d=6, k=2, samples_per_client=5, test_samples=20
        )
        algorithm: Any = algorithms.FedAvg()
    else:
        task, algorithm = None, algorithms.TimingOnly(bytes_down=2000, bytes_up=2000)
    return Scenario(
        task=task,
        algorithm=algorithm,
        fleet=fleet,
        policy=policy,
        rounds=rounds,
        max_time=max_time,
        network=network,
        seed=3,
    )


def _sync(kind: str) -> policies.SyncPolicy[Any]:
    if kind == "waitall":
        return policies.WaitAll(count=5)
    if kind == "deadline":
        return policies.Deadline(1.5, count=5)
    return policies.FastestK(3, overcommit=0.6)


#: name -> (scenario, the playback the table picks for it)
CASES: dict[str, tuple[Callable[[], Scenario], str]] = {}
for _kind in ("waitall", "deadline", "fastestk"):
    for _learning in (False, True):
        _tag = f"{_kind}-{'learning' if _learning else 'timing'}"
        for _links, _playback in (
            ("private", "planned"),
            ("abort", "resolved"),
            ("pause", "resolved"),
            ("star", "flows"),
            ("hier", "flows"),
        ):
            CASES[f"sync-{_tag}-{_links}"] = (
                lambda k=_kind, ln=_links, le=_learning: _scenario(_sync(k), links=ln, learning=le),
                _playback,
            )
CASES["sync-deadline-timing-star-pause"] = (
    lambda: _scenario(_sync("deadline"), links="star-pause"),
    "reference",
)
CASES["sync-waitall-timing-private-max_time"] = (
    lambda: _scenario(_sync("waitall"), rounds=50, max_time=7.0),
    "planned",
)
CASES["sync-fastestk-timing-pause-max_time"] = (
    lambda: _scenario(_sync("fastestk"), links="pause", rounds=50, max_time=9.0),
    "resolved",
)
CASES["sync-deadline-timing-star-max_time"] = (
    lambda: _scenario(_sync("deadline"), links="star", rounds=50, max_time=6.0),
    "flows",
)
for _learning in (False, True):
    _tag = "learning" if _learning else "timing"
    for _links, _playback in (
        ("private", "planned"),
        ("pause", "reference"),
        ("star", "reference"),
    ):
        CASES[f"tiered-{_tag}-{_links}"] = (
            lambda ln=_links, le=_learning: _scenario(
                policies.FedAT(tiers=2, count=2), links=ln, learning=le
            ),
            _playback,
        )
    CASES[f"edge-{_tag}-hier"] = (
        lambda le=_learning: _scenario(
            policies.EdgeAggregation(edge_deadline=3.0), links="hier", learning=le
        ),
        "reference",
    )
    for _name, _policy in (
        ("fedbuff", policies.FedBuff(buffer_size=2, concurrency=3)),
        ("fedbuff-stale", policies.FedBuff(buffer_size=2, concurrency=4, max_staleness=1)),
        ("fedasync", policies.FedAsync(concurrency=3)),
        ("learns", Learning(buffer_size=2, concurrency=3)),
    ):
        _planned = ("planned" if _learning else "planned-timing") if _name != "learns" else None
        for _links in ("private", "abort", "pause", "star"):
            CASES[f"async-{_name}-{_tag}-{_links}"] = (
                lambda p=_policy, ln=_links, le=_learning: _scenario(
                    p, links=ln, learning=le, rounds=12
                ),
                _planned if _links == "private" and _planned else "reference",
            )
CASES["async-fedbuff-timing-private-max_time"] = (
    lambda: _scenario(policies.FedBuff(buffer_size=2, concurrency=3), rounds=500, max_time=11.0),
    "planned-timing",
)


def _played(sc: Scenario, **kwargs: Any) -> Results:
    return run(sc, progress=False, on_error="raise", **kwargs)


def _assert_frames_close(fast: pd.DataFrame, ref: pd.DataFrame) -> None:
    """Times (and bytes of stopped transfers) to a relative 1e-9, everything else exact."""
    assert list(fast.columns) == list(ref.columns) and len(fast) == len(ref)
    for col in fast.columns:
        a, b = fast[col], ref[col]
        if pd.api.types.is_float_dtype(a.dtype):
            loose = col in TIME_COLUMNS or col.startswith(("bytes", "t_"))
            np.testing.assert_allclose(a, b, rtol=1e-9 if loose else 0.0, atol=0.0, err_msg=col)
        else:
            assert a.equals(b), col


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_chosen_playback_records_what_the_reference_records(name: str) -> None:
    build, playback = CASES[name]
    sc = build()
    fast = _played(sc)
    ref = _played(sc, batched=False)
    assert fast.meta["playback"] == playback
    assert ref.meta["playback"] == "reference" and ref.meta["playback_fallbacks"] == {}
    pd.testing.assert_frame_equal(fast.rounds, ref.rounds, check_exact=True)
    pd.testing.assert_frame_equal(fast.clients, ref.clients, check_exact=True)
    assert {k: v for k, v in fast.meta.items() if k not in SKIP} == {
        k: v for k, v in ref.meta.items() if k not in SKIP
    }
    assert len(fast.rounds) > 0
    if sc.network is not None:
        slow_links = _played(sc, reference_links=True)
        assert slow_links.meta["stop_reason"] == fast.meta["stop_reason"]
        _assert_frames_close(fast.rounds, slow_links.rounds)
        _assert_frames_close(fast.clients, slow_links.clients)


@pytest.mark.parametrize("name", sorted(CASES))
def test_choose_picks_the_first_row_of_the_table_that_applies(name: str) -> None:
    build, playback = CASES[name]
    ctx = RunContext(build(), lazy=True, progress=False, on_error="raise")
    chosen = choose(ctx)
    assert chosen.name == playback
    assert type(chosen) in [row[0] for row in PLAYBACKS]
    assert choose(ctx, batched=False).name == "reference"


def test_every_playback_of_the_table_is_covered() -> None:
    names = {row[0].name for row in PLAYBACKS}
    assert names == {playback for _, playback in CASES.values()}
    assert PLAYBACKS[-1][0].name == "reference" and PLAYBACKS[-1][1] is not None


def test_a_resolved_round_tied_at_its_close_is_counted_as_a_fallback() -> None:
    # every job takes 1 s and the trace ends spells at whole seconds: events tie at closes
    tied = Availability([[(0.0, 1.0), (2.0, 30.0)], [(0.0, 30.0)], [(0.0, 30.0)]])
    fleet = Fleet.homogeneous(3, compute=dists.Constant(1.0)).with_availability(tied, "pause")
    sc = Scenario(
        task=None,
        algorithm=algorithms.TimingOnly(),
        fleet=fleet,
        policy=policies.FastestK(1, overcommit=2.0),
        rounds=4,
    )
    fast = _played(sc)
    ref = _played(sc, batched=False)
    assert fast.meta["playback"] == "resolved"
    assert sum(fast.meta["playback_fallbacks"].values()) > 0
    pd.testing.assert_frame_equal(fast.clients, ref.clients, check_exact=True)
    assert math.isfinite(fast.meta["sim_time"])


def test_an_explicit_reference_run_is_what_nothing_faster_plays() -> None:
    sc = dataclasses.replace(
        _scenario(policies.FedBuff(buffer_size=2, concurrency=3)), policy=Learning(concurrency=3)
    )
    assert _played(sc).meta["playback"] == "reference"


def test_the_networks_hand_over_to_the_reference_links_is_recorded_as_a_fallback() -> None:
    import networkx as nx

    # devices 0 and 1 reach the server through c, b and a: three shared links on one path, more
    # than the fast links play, so the network hands its flows to the reference from the start
    g = nx.Graph([("server", "a"), ("a", "b"), ("b", "c")])
    for u, v, bw in (("server", "a", 50.0), ("a", "b", 40.0), ("b", "c", 30.0)):
        g.edges[u, v]["bandwidth"] = bw
    for i in range(4):
        g.add_edge("c" if i < 2 else "a", i, bandwidth=20.0)
    sc = Scenario(
        task=None,
        algorithm=algorithms.TimingOnly(),
        fleet=Fleet.homogeneous(4, compute=dists.Exponential(mean=1.0)),
        network=Network.from_graph(g),
        policy=policies.WaitAll(),
        rounds=3,
    )
    fast = _played(sc)
    assert fast.meta["playback_fallbacks"] == {"a path crosses more than two contended links": 1}
    ref = _played(sc, reference_links=True)
    assert ref.meta["playback_fallbacks"] == {}  # the reference links never hand over
    _assert_frames_close(fast.clients, ref.clients)
    _assert_frames_close(fast.rounds, ref.rounds)
