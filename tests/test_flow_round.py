"""Synchronous rounds on shared links played without job processes equal the live path.

``simfl.engine.flows.flowround`` plays a flat synchronous round on the fast links with a clock of
its own (no SimPy process per job). Its frames must be *identical* to the live job processes'
(``run(..., batched=False)``) over random stars and hierarchies, unequal and equal access
links (ties), latencies, WaitAll / Deadline / FastestK, dropouts (both offline modes) and
runs cut by ``max_time``; and close (relative ``1e-9``) to the reference links.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from simfl import Fleet, Scenario, algorithms, dists, policies, run
from simfl.engine.playbacks.base import Playback
from simfl.network import Network

TIME_COLUMNS = ("time", "duration", "t_start", "t_end", "download", "compute", "upload", "wait")
CLOCK = ("time", "t_start", "t_end")  # times on the run's clock
DURATIONS = ("duration", "download", "compute", "upload", "wait")  # differences of two


def assert_frames_equal(a: pd.DataFrame, b: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(a, b, check_exact=True)


def assert_frames_close(fast: pd.DataFrame, ref: pd.DataFrame) -> None:
    assert list(fast.columns) == list(ref.columns) and len(fast) == len(ref)
    for col in fast.columns:
        a, b = fast[col], ref[col]
        if pd.api.types.is_float_dtype(a.dtype):
            loose = col in TIME_COLUMNS or col.startswith(("bytes", "t_"))
            # bytes moved by a stopped transfer are a difference (size - bytes left): where a
            # flow stopped a hair short of done, both sides hold rounding remainders (~1e-12
            # of a 2 kB flow), equal only to 1e-9 of the transfers' scale, not of themselves
            # likewise a phase's length is a difference of two times (a job cancelled at the
            # run's end as its compute began: compute = 7.5 - (7.5 - 8.9e-16) against 0.0), equal
            # only to 1e-9 of the run's time scale (its latest time)
            scale = 0.0
            if col.startswith("bytes") and len(b):
                scale = np.nanmax(np.abs(b.to_numpy()))
            elif col in DURATIONS and len(b):
                scale = np.nanmax(np.abs(ref[[c for c in CLOCK if c in ref]].to_numpy()))
            np.testing.assert_allclose(
                a, b, rtol=1e-9 if loose else 0.0, atol=1e-9 * scale, err_msg=col
            )
        else:
            assert a.equals(b), col


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    """A small network scenario; bandwidths and compute from small sets, to provoke ties."""
    n = draw(st.integers(3, 10))
    up = np.array(draw(st.lists(st.sampled_from([1e3, 2e3, 5e3, 1e4]), min_size=n, max_size=n)))
    latency = draw(st.sampled_from([0.0, 0.05, 0.5]))
    rate = draw(st.sampled_from([0.0, 0.0, 0.02, 0.2]))
    compute = draw(st.sampled_from([dists.Constant(1.0), dists.Exponential(mean=1.0)]))
    fleet = Fleet(
        [compute],
        np.zeros(n, dtype=np.int64),
        bandwidth_down=4.0 * up,
        bandwidth_up=up,
        latency=latency,
        dropout_rate=rate,
        offline=draw(st.sampled_from(["abort", "pause"])),
    )
    server = draw(st.sampled_from([2e3, 5e3, 2e4, math.inf]))
    if draw(st.booleans()):
        network = Network.star(server_up=server, server_down=4.0 * server)
    else:
        edges = draw(st.integers(1, 3))
        cloud = draw(st.sampled_from([3e3, math.inf]))
        network = Network.hierarchical(
            np.arange(n) % edges,
            edge_up=server,
            edge_down=2.0 * server,
            server_up=cloud,
            server_down=4.0 * cloud,
        )
    m = draw(st.integers(1, n))
    kind = draw(st.sampled_from(["waitall", "deadline", "fastestk"]))
    if kind == "waitall":
        policy: policies.SyncPolicy = policies.WaitAll(count=m)
    elif kind == "deadline":
        policy = policies.Deadline(draw(st.sampled_from([1.0, 2.5, 6.0])), count=m)
    else:
        over = draw(st.sampled_from([0.0, 0.5, 1.0]))
        policy = policies.FastestK(max(1, int(m / (1.0 + over))), overcommit=over)
    size = draw(st.sampled_from([0, 2_000, 10_000]))
    return Scenario(
        task=None,
        algorithm=algorithms.TimingOnly(bytes_down=size, bytes_up=size),
        fleet=fleet,
        policy=policy,
        rounds=4,
        max_time=draw(st.sampled_from([None, None, 3.0, 7.5])),
        network=network,
        seed=draw(st.integers(0, 3)),
    )


def played(scenario: Scenario, **kwargs: object):
    return run(scenario, progress=False, on_error="raise", **kwargs)


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_flow_rounds_equal_the_live_processes_exactly(scenario):
    fast = played(scenario)
    live = played(scenario, batched=False)
    assert fast.meta["stop_reason"] == live.meta["stop_reason"]
    assert fast.meta["sim_time"] == live.meta["sim_time"]
    assert_frames_equal(fast.rounds, live.rounds)
    assert_frames_equal(fast.clients, live.clients)


@settings(max_examples=40, deadline=None)
@given(scenarios())
def test_flow_rounds_are_close_to_the_reference_links(scenario):
    fast = played(scenario)
    ref = played(scenario, reference_links=True)
    # two events within 1e-9 of each other at a round's close may be taken in either order
    assume(fast.clients["status"].equals(ref.clients["status"]))
    assert fast.meta["stop_reason"] == ref.meta["stop_reason"]
    assert_frames_close(fast.rounds, ref.rounds)
    assert_frames_close(fast.clients, ref.clients)


def test_flat_rounds_on_a_star_play_without_job_processes(monkeypatch):
    """The clock plays every round (no job process is started) and the numbers are real."""

    def no_processes(*args: object, **kwargs: object) -> None:
        raise AssertionError("a job process was started")

    monkeypatch.setattr(Playback, "processes", no_processes)
    n = 6
    fleet = Fleet(
        [dists.Constant(1.0)],
        np.zeros(n, dtype=np.int64),
        bandwidth_down=np.full(n, 1e9),
        bandwidth_up=np.full(n, 1e9),
    )
    scenario = Scenario(
        task=None,
        algorithm=algorithms.TimingOnly(bytes_down=1000, bytes_up=1000),
        fleet=fleet,
        policy=policies.WaitAll(count=n),
        rounds=2,
        network=Network.star(server_up=1000.0, server_down=1000.0),
    )
    res = played(scenario)
    assert res.meta["playback"] == "flows"
    # n equal flows of S bytes on a link of C: all finish at n S / C (closed form), twice
    assert res.rounds["duration"].tolist() == pytest.approx([6.0 + 1.0 + 6.0] * 2, rel=1e-12)
    assert (res.clients["status"] == "arrived").all()
