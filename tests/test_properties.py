"""Invariants over random small scenarios (hypothesis)."""

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simfl import Fleet, Scenario, algorithms, dists, policies, run
from tests.helpers import Ledger

positive = st.floats(0.05, 5.0)
DISTS = st.one_of(
    st.builds(dists.Constant, st.floats(0.0, 3.0)),
    st.builds(dists.Exponential, positive),
    st.builds(dists.ShiftedExponential, st.floats(0.0, 1.0), positive),
    st.builds(dists.LogNormal, st.floats(-1.0, 1.0), st.floats(0.1, 1.5)),
    st.builds(dists.Pareto, st.floats(1.1, 4.0), positive),
    st.builds(dists.Uniform, st.just(0.0), positive),
    st.builds(dists.Empirical, st.lists(st.floats(0.0, 4.0), min_size=1, max_size=5)),
)


def fleets(draw, redraw):
    return Fleet.homogeneous(
        draw(st.integers(1, 8)),
        compute=draw(DISTS),
        bandwidth_down=draw(st.sampled_from([math.inf, 100.0, 5000.0])),
        bandwidth_up=draw(st.sampled_from([math.inf, 50.0, 2000.0])),
        latency=draw(st.floats(0.0, 0.5)),
        dropout_rate=draw(st.sampled_from([0.0, 0.1, 1.0, 5.0])),
        redraw=redraw,
    )


@st.composite
def scenarios(draw):
    redraw = draw(st.sampled_from(["round", "stage", "run"]))
    fleet = fleets(draw, redraw) + fleets(draw, redraw)  # two tiers
    count = draw(st.integers(1, fleet.size))
    kind = draw(st.sampled_from(["wait", "deadline", "fastest"]))
    if kind == "wait":
        policy = policies.WaitAll(count=count)
    elif kind == "deadline":
        policy = policies.Deadline(draw(st.floats(0.05, 6.0)), count=count)
    else:
        k = draw(st.integers(1, count))
        policy = policies.FastestK(k=k, overcommit=count / k - 1.0)
    return Scenario(
        task=None,
        algorithm=Ledger(),
        fleet=fleet,
        policy=policy,
        rounds=draw(st.integers(1, 6)),
        seed=draw(st.integers(0, 2**32)),
    )


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_invariants(sc):
    algo = sc.algorithm
    res = run(sc, progress=False)
    rounds, jobs = res.rounds, res.clients
    assert res.ok and len(rounds) == sc.rounds

    # the simulated clock never goes back
    times = rounds["time"].to_numpy()
    assert (np.diff(times) >= 0).all()
    assert (rounds["t_start"].iloc[1:].to_numpy() == times[:-1]).all()
    assert (jobs["t_end"] >= jobs["t_start"]).all()

    # every job ends in exactly one known status, one row per selected device
    assert jobs["status"].notna().all()
    assert (jobs.groupby("round").size().to_numpy() == rounds["n_selected"].to_numpy()).all()
    counts = jobs.groupby(["round", "status"], observed=False).size().unstack()
    for status, column in [
        ("arrived", "n_arrived"),
        ("dropped", "n_dropped"),
        ("late", "n_late"),
        ("cancelled", "n_cancelled"),
    ]:
        assert (counts[status].to_numpy() == rounds[column].to_numpy()).all()

    # exactly the arrived jobs are aggregated: no dropped, late or cancelled one
    arrived = jobs[jobs["status"] == "arrived"]
    assert sorted(algo.aggregated) == sorted(zip(arrived["round"], arrived["device"], strict=True))

    policy = sc.policy
    for r, row in rounds.iterrows():
        mine = jobs[jobs["round"] == r]
        acc = mine[mine["status"] == "arrived"]
        ended = mine[mine["status"].isin(["arrived", "dropped"])]
        assert (mine["t_end"] <= row["time"]).all()
        if isinstance(policy, policies.Deadline):
            # arrivals never come after the deadline
            assert (acc["t_end"] <= row["t_start"] + policy.seconds).all()
        if row["n_late"] > 0:
            assert row["time"] == row["t_start"] + policy.seconds
        elif row["n_arrived"] == row["n_selected"]:
            assert row["time"] == acc["t_end"].max()  # every awaited job arrived
        elif row["n_cancelled"] > 0:
            assert row["time"] == acc["t_end"].max()  # quota reached: last accepted arrival
            assert row["n_arrived"] == min(policy.k, row["n_selected"])
        else:
            assert row["time"] == ended["t_end"].max()  # all resolved, some by dropping
        # time split adds up to the time the job took
        spent = mine["download"] + mine["compute"] + mine["upload"]
        np.testing.assert_allclose(spent, mine["t_end"] - mine["t_start"], atol=1e-9)

    # determinism
    again = run(sc, progress=False)
    assert again.rounds.equals(rounds) and again.clients.equals(jobs)


def test_timing_only_algorithm_payloads_move_bytes():
    sc = Scenario(
        task=None,
        algorithm=algorithms.TimingOnly(bytes_down=10, bytes_up=20),
        fleet=Fleet.homogeneous(3, dists.Constant(1.0), bandwidth_up=10.0),
        policy=policies.WaitAll(),
        rounds=2,
    )
    res = run(sc, progress=False)
    assert (res.clients["bytes_up"] == 20).all() and (res.clients["upload"] == 2.0).all()
