"""FedAsync and FedBuff: determinism, every update applied exactly once, staleness."""

import dataclasses

import numpy as np
import pandas as pd
import pytest

from simfl import algorithms, policies, run
from simfl.algorithms.base import Updates
from simfl.algorithms.mixing import BufferedMix, SequentialMix
from simfl.outcome import DROPPED, LATE
from simfl.policies import FedAsync, FedBuff
from tests.helpers import Ledger, linear_scenario, timing_scenario

ASYNC = [
    FedBuff(buffer_size=4, concurrency=6),
    FedAsync(concurrency=5),
    FedBuff(buffer_size=3, concurrency=8, max_staleness=2),
]


def ledger_run(policy, **kw):
    ledger = Ledger()
    sc = dataclasses.replace(
        timing_scenario(n=15, rounds=40, policy=policy, dropout_rate=0.3, **kw), algorithm=ledger
    )
    return run(sc, progress=False), ledger


@pytest.mark.parametrize("policy", ASYNC, ids=repr)
def test_every_arrived_update_is_applied_once_with_the_right_staleness(policy):
    res, ledger = ledger_run(policy)
    jobs, rounds = res.clients, res.rounds
    applied = jobs[jobs["status"] == "arrived"]
    # applied exactly once: each applied job was computed once, nothing else was
    assert len(ledger.computed) == len(applied) == int(rounds["n_arrived"].sum())
    keys = list(zip(applied["device"], applied["t_start"], strict=True))
    assert len(set(keys)) == len(keys)
    # each update was computed from the model version its device downloaded
    assert sorted((v, c) for v, c, _ in ledger.bases) == sorted(
        zip(applied["round"], applied["device"], strict=True)
    )
    times = rounds["time"].to_numpy()
    for _, job in applied.iterrows():
        # version downloaded = aggregations before the job started
        assert job["round"] == np.searchsorted(times, job["t_start"], side="right")
        # applied at the first aggregation at or after its arrival
        applied_at = np.searchsorted(times, job["t_end"], side="left")
        assert job["staleness"] == applied_at - job["round"]
    # aggregation bookkeeping
    assert (rounds["n_arrived"] <= policy.buffer()).all()
    if policy.max_staleness is not None:
        assert (applied["staleness"] <= policy.max_staleness).all()
        assert (jobs["status"] == "late").sum() == rounds["n_late"].sum()


@pytest.mark.parametrize("policy", ASYNC, ids=repr)
def test_concurrency_limit_is_respected(policy):
    res, _ = ledger_run(policy)
    jobs = res.clients
    starts = np.sort(jobs["t_start"].to_numpy())
    ends = jobs["t_end"].to_numpy()
    # jobs in flight just after each start
    in_flight = [((jobs["t_start"] <= t) & (ends > t)).sum() for t in starts]
    assert max(in_flight) <= policy.concurrency
    # a device never runs two jobs at once
    for _, g in jobs.sort_values("t_start").groupby("device"):
        assert (g["t_start"].to_numpy()[1:] >= g["t_end"].to_numpy()[:-1]).all()


@pytest.mark.parametrize("policy", ASYNC[:2], ids=repr)
def test_async_is_deterministic_and_lazy_equals_eager(policy):
    sc = linear_scenario(policy=policy, rounds=40, dropout_rate=0.2)
    a = run(sc, progress=False)
    b = run(sc, progress=False, lazy=False)
    pd.testing.assert_frame_equal(a.rounds, b.rounds, check_exact=True)
    pd.testing.assert_frame_equal(a.clients, b.clients, check_exact=True)
    c = run(dataclasses.replace(sc, seed=5), progress=False)
    assert not a.clients["t_end"].equals(c.clients["t_end"])


def test_sequential_mix_by_hand():
    mix = SequentialMix((0.5, 0.25))
    updates = Updates(np.array([3, 1]), {"x": np.array([[2.0, 0.0], [10.0, 8.0]])})
    out = mix.apply({"x": np.array([0.0, 4.0])}, updates, [{}, {}])
    # 0.5 (0, 4) + 0.5 (2, 0) = (1, 2); then 0.75 (1, 2) + 0.25 (10, 8)
    np.testing.assert_array_equal(out["x"], [3.25, 3.5])


def test_buffered_mix_by_hand():
    mix = BufferedMix(np.array([1.0, 0.5]), 0.25)
    updates = Updates(np.array([0, 1]), {"x": np.array([[3.0, 2.0], [1.0, 6.0]])})
    bases = [{"x": np.array([1.0, 1.0])}, {"x": np.array([0.0, 2.0])}]
    out = mix.apply({"x": np.array([1.0, 2.0])}, updates, bases)
    # deltas (2, 1) and (1, 4): (1, 2) + 0.25 ((2, 1) + 0.5 (1, 4)) = (1, 2) + 0.25 (2.5, 3)
    np.testing.assert_array_equal(out["x"], [1.625, 2.75])


def test_the_policies_compute_the_staleness_weights_only():
    fedasync = FedAsync(mixing=0.6, staleness_exponent=0.5).mixer(np.array([0, 3]))
    assert isinstance(fedasync, SequentialMix)
    np.testing.assert_allclose(fedasync.alphas, [0.6, 0.6 / 2.0], rtol=1e-15)
    fedbuff = FedBuff(buffer_size=2, server_lr=0.5).mixer(np.array([0, 3]))
    assert isinstance(fedbuff, BufferedMix)
    np.testing.assert_allclose(fedbuff.weights, [1.0, 0.5], rtol=1e-15)
    assert fedbuff.scale == 0.25  # server_lr / K
    # FedBuff's update of the paper: x + server_lr * mean_i w(s_i) (x_i - base_i)
    updates = Updates(np.array([0, 1]), {"x": np.array([[3.0, 2.0], [1.0, 6.0]])})
    bases = [{"x": np.array([1.0, 1.0])}, {"x": np.array([0.0, 2.0])}]
    out = fedbuff.apply({"x": np.array([1.0, 2.0])}, updates, bases)
    expected = np.array([1.0, 2.0]) + 0.5 * (
        (np.array([2.0, 1.0]) + 0.5 * np.array([1.0, 4.0])) / 2
    )
    np.testing.assert_allclose(out["x"], expected)
    one = Updates(np.array([0]), {"x": np.array([[10.0]])})
    out = FedAsync(mixing=0.6).mixer(np.array([3])).apply({"x": np.array([0.0])}, one, [{}])
    np.testing.assert_allclose(out["x"], [10.0 * 0.6 / 2.0])


def test_fedbuff_hands_the_algorithm_each_aggregations_staleness_and_failures():
    policy = FedBuff(buffer_size=3, concurrency=8, max_staleness=2)
    res, ledger = ledger_run(policy)
    outcomes = ledger.background_outcomes
    assert ledger.outcomes == []  # asynchronous policies mix; they never call aggregate
    rounds = res.rounds.set_index("round")
    assert len(outcomes) == (rounds["status"] == "ok").sum() > 0
    for o in outcomes:
        row = rounds.loc[o.round]
        assert row["status"] == "ok"
        assert (o.t_start, o.time) == (row["t_start"], row["time"])
        assert o.n_arrived == row["n_arrived"]
        assert o.count(LATE) == row["n_late"] and o.count(DROPPED) == row["n_dropped"]
        assert np.nanmean(o.staleness[o.arrived]) == row["staleness_mean"]
        assert np.isnan(o.staleness[~o.arrived]).all()
        assert (o.durations >= 0).all()
    assert sum(o.count(LATE) for o in outcomes) > 0
    assert sum(o.count(DROPPED) for o in outcomes) > 0
    jobs = res.clients
    applied = jobs[jobs["status"] == "arrived"]
    seen = sorted(
        (int(d), float(t), float(s))
        for o in outcomes
        for d, t, s in zip(
            o.devices[o.arrived], o.job_end[o.arrived], o.staleness[o.arrived], strict=True
        )
    )
    assert seen == sorted(
        zip(applied["device"], applied["t_end"], applied["staleness"], strict=True)
    )


def test_fedbuff_trains_linear_fedrep():
    res = run(
        linear_scenario(policy=FedBuff(buffer_size=5, concurrency=10), rounds=200), progress=False
    )
    assert res.rounds["distance"].iloc[-1] < 1e-3
    assert res.rounds["staleness_mean"].iloc[5:].mean() > 0


def test_run_end_cancels_in_flight_and_buffered_jobs():
    sc = dataclasses.replace(
        timing_scenario(n=10, policy=FedBuff(buffer_size=4, concurrency=6)),
        rounds=None,
        max_time=7.3,
    )
    res = run(sc, progress=False)
    jobs = res.clients
    assert res.meta["stop_reason"] == "max_time"
    assert (jobs["status"] == "cancelled").sum() >= 6  # at least the jobs in flight
    assert (jobs.loc[jobs["status"] == "cancelled", "t_end"] <= 7.3).all()
    assert jobs["staleness"][jobs["status"] != "arrived"].isna().all()


def test_all_dropping_fleet_stalls_instead_of_hanging():
    sc = timing_scenario(n=5, rounds=3, dropout_rate=1e6, policy=FedAsync(concurrency=2))
    res = run(sc, progress=False)
    assert res.meta["stop_reason"] == "stalled" and len(res.rounds) == 0


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: FedBuff(buffer_size=0), "FedBuff.buffer_size"),
        (lambda: FedBuff(server_lr=0.0), "FedBuff.server_lr"),
        (lambda: FedAsync(mixing=1.5), "FedAsync.mixing"),
        (lambda: FedAsync(concurrency=0), "FedAsync.concurrency"),
        (lambda: FedAsync(staleness_exponent=-1.0), "FedAsync.staleness_exponent"),
        (lambda: timing_scenario(n=5, policy=FedBuff(concurrency=6)), "FedBuff.concurrency"),
    ],
)
def test_invalid_async(build, field):
    with pytest.raises(ValueError, match=field):
        build()


def test_algorithms_without_shared_parameters_are_refused_by_async_policies():
    class NoAsync(algorithms.Algorithm):
        check = algorithms.TimingOnly.check
        initial_state = algorithms.TimingOnly.initial_state
        payload = algorithms.TimingOnly.payload
        local_updates = algorithms.TimingOnly.local_updates
        aggregate = algorithms.TimingOnly.aggregate
        evaluate = algorithms.TimingOnly.evaluate

    with pytest.raises(ValueError, match="does not support asynchronous"):
        dataclasses.replace(
            timing_scenario(policy=policies.FedBuff(concurrency=5)), algorithm=NoAsync()
        )
    assert dataclasses.replace(timing_scenario(), algorithm=NoAsync())  # sync policies take it
