"""SRPFL's participation schedule, its reduction to the wrapped algorithm, stage rules."""

import dataclasses

import numpy as np
import pandas as pd
import pytest

from simfl import Fleet, Streams, dists, policies, run
from simfl.policies import SRPFL, Plateau
from tests.helpers import Ledger, linear_scenario, timing_scenario


def test_schedule_with_fixed_speeds_waits_for_the_mth_fastest():
    # code setting: speeds fixed for the run, M = N = 100, n0 = 10, tau_r = 10
    sc = timing_scenario(n=100, rounds=60, policy=SRPFL(n0=10), redraw="run")
    res = run(sc, progress=False)
    speeds = np.sort(
        sc.fleet.compute_draws(np.arange(100), round=0, stage=0, streams=Streams(sc.seed))
    )
    r = res.rounds
    assert r["n_selected"].tolist() == [10] * 10 + [20] * 10 + [40] * 10 + [80] * 10 + [100] * 20
    assert r["stage"].tolist() == [0] * 10 + [1] * 10 + [2] * 10 + [3] * 10 + [4] * 20
    expected = speeds[r["n_selected"].to_numpy() - 1]  # the m-th fastest sets the round time
    slowest = res.clients.groupby("round")["compute"].max().to_numpy()
    np.testing.assert_array_equal(slowest, expected)
    np.testing.assert_allclose(r["duration"].to_numpy(), expected, rtol=1e-12)
    # the same fastest devices every round of a stage
    first = res.clients[res.clients["round"] == 0]["device"].to_numpy()
    order = np.argsort(
        sc.fleet.compute_draws(np.arange(100), round=0, stage=0, streams=Streams(sc.seed))
    )
    assert set(first) == set(order[:10])


def test_pool_per_stage_is_fixed_within_a_stage_and_resampled_between():
    sc = timing_scenario(n=50, rounds=30, policy=SRPFL(n0=4, count=20, rounds_per_stage=5))
    jobs = run(sc, progress=False).clients
    cohorts = [tuple(g["device"]) for _, g in jobs.groupby("round")]
    for stage in range(6):
        block = cohorts[5 * stage : 5 * stage + 5]
        assert len(set(block)) == 1  # one cohort per stage
    assert cohorts[0] != cohorts[5] and len(cohorts[5]) == 8 and len(cohorts[10]) == 16
    assert len(cohorts[15]) == 20 and len(cohorts[25]) == 20


@pytest.mark.parametrize("redraw", ["round", "run"])
def test_n0_at_least_n_reduces_exactly_to_wait_all(redraw):
    base = linear_scenario(
        rounds=25, n=30, redraw=redraw, dropout_rate=0.1, policy=policies.WaitAll()
    )
    srpfl = dataclasses.replace(base, policy=SRPFL(n0=30))
    a, b = run(base, progress=False), run(srpfl, progress=False)
    pd.testing.assert_frame_equal(a.rounds, b.rounds, check_exact=True)
    pd.testing.assert_frame_equal(a.clients, b.clients, check_exact=True)


def test_n0_at_least_pool_with_a_pool_per_round_is_wait_all_over_the_pool():
    base = linear_scenario(rounds=20, n=60, policy=policies.WaitAll(count=15))
    srpfl = dataclasses.replace(base, policy=SRPFL(n0=64, count=15, resample="round"))
    a, b = run(base, progress=False), run(srpfl, progress=False)
    pd.testing.assert_frame_equal(a.rounds, b.rounds, check_exact=True)
    pd.testing.assert_frame_equal(a.clients, b.clients, check_exact=True)


def test_pool_per_round_picks_that_rounds_fastest():
    sc = timing_scenario(n=40, rounds=12, policy=SRPFL(n0=5, count=20, resample="round"))
    res = run(sc, progress=False)
    for r, jobs in res.clients.groupby("round"):
        from simfl.policies.base import sample_uniform

        pool = sample_uniform(r, np.arange(40), 20, Streams(sc.seed))
        t = sc.fleet.compute_draws(pool, round=r, stage=r // 10, streams=Streams(sc.seed))
        m = 5 if r < 10 else 10
        assert set(jobs["device"]) == set(pool[np.argsort(t)[:m]])


def test_plateau_rule():
    rule = Plateau(window=2, tolerance=0.1, min_rounds=2, max_rounds=8)
    assert not rule.stalled([1.0, 0.5, 0.25], "min")  # too few values for two windows
    assert not rule.stalled([1.0, 0.8, 0.5, 0.4], "min")  # 0.9 -> 0.45: progress
    assert rule.stalled([1.0, 1.0, 0.98, 0.97], "min")  # 1.0 -> 0.975: under 10%
    assert rule.stalled([0.5, 0.5, 0.49, 0.5], "max")
    assert rule.stalled([1.0] * 8, "min")  # max_rounds
    assert not rule.stalled([float("nan")] * 4 + [1.0, 0.5], "min")  # NaNs are skipped


def test_adaptive_stage_rule_advances_when_progress_stalls():
    sc = linear_scenario(rounds=150, policy=SRPFL(n0=5, stage_rule=Plateau(max_rounds=40)))
    res = run(sc, progress=False)
    stages = res.rounds["stage"].to_numpy()
    assert stages[0] == 0 and stages[-1] >= 2
    assert (np.diff(stages) >= 0).all()
    lengths = np.bincount(stages)
    assert (lengths[:-1] <= 40).all() and (lengths[:-1] >= 2 * 3).all()
    assert res.rounds["distance"].iloc[-1] < 1e-3


def test_srpfl_never_looks_at_the_algorithm():
    # the same fleet and seed under two algorithms whose updates differ (TimingOnly computes
    # nothing; the Ledger reports a different loss per client): SRPFL's cohorts, stages and
    # every job's times are identical, so its schedule depends on the fleet alone
    sc = timing_scenario(n=20, rounds=12, policy=SRPFL(n0=2, rounds_per_stage=3))
    ledger = Ledger()
    timing = run(sc, progress=False)
    res = run(dataclasses.replace(sc, algorithm=ledger), progress=False)
    pd.testing.assert_frame_equal(res.clients, timing.clients, check_exact=True)
    cols = ["round", "stage", "time", "n_selected", "n_arrived"]
    pd.testing.assert_frame_equal(res.rounds[cols], timing.rounds[cols], check_exact=True)
    assert res.rounds["n_selected"].tolist() == [2] * 3 + [4] * 3 + [8] * 3 + [16] * 3
    assert len(ledger.aggregated) == int(res.rounds["n_arrived"].sum())


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: SRPFL(n0=0), "SRPFL.n0"),
        (lambda: SRPFL(rounds_per_stage=0), "SRPFL.rounds_per_stage"),
        (lambda: SRPFL(growth=1.0), "SRPFL.growth"),
        (lambda: SRPFL(resample="epoch"), "SRPFL.resample"),
        (lambda: SRPFL(fraction=0.0), "SRPFL.fraction"),
        (lambda: SRPFL(stage_rule="plateau"), "SRPFL.stage_rule"),
        (lambda: Plateau(window=0), "Plateau.window"),
        (lambda: Plateau(min_rounds=5, max_rounds=2), "Plateau.max_rounds"),
        (lambda: timing_scenario(n=10, policy=SRPFL(count=11)), "SRPFL.count"),
    ],
)
def test_invalid_srpfl(build, field):
    with pytest.raises(ValueError, match=field):
        build()


def test_fleet_stage_redraw_follows_srpfl_stages():
    fleet = Fleet.homogeneous(30, dists.Exponential(1.0), redraw="stage")
    sc = dataclasses.replace(
        timing_scenario(n=30, rounds=20, policy=SRPFL(n0=30, rounds_per_stage=5)), fleet=fleet
    )
    jobs = run(sc, progress=False).clients
    dev0 = jobs[jobs["device"] == 0]["compute"].to_numpy()
    assert len(set(dev0[:5])) == 1 and len(set(dev0[5:10])) == 1 and dev0[0] != dev0[5]


def test_per_device_means_from_a_distribution_as_in_the_srpfl_code():
    # the code's "random computation time": device i has mean lambda_i ~ U[1, 100]
    fleet = Fleet.homogeneous(8, dists.Exponential(1.0), scale=dists.Uniform(1.0, 100.0))
    sc = dataclasses.replace(timing_scenario(n=8, rounds=2000), fleet=fleet)
    jobs = run(sc, progress=False).clients
    # exact, by common random numbers: each job is the unit fleet's Exp(1) draw times its
    # device's mean, so device i's mean compute time is lambda_i exactly in expectation
    unit = run(timing_scenario(n=8, rounds=2000), progress=False).clients
    scale = fleet.scale[jobs["device"].to_numpy()]
    np.testing.assert_allclose(jobs["compute"], unit["compute"] * scale, rtol=1e-12)
    # and the unit draws are Exp(1): the pooled mean of 16,000 draws has SE 1/sqrt(16000) =
    # 0.79%; tolerance 2.6% = 3.29 SE (an unbiased stream passes with 99.9%); a 5% bias sits
    # 3.0 SE beyond it and fails with > 99.8% (checked: Exponential(1.05) fails)
    assert unit["compute"].mean() == pytest.approx(1.0, rel=0.026)
    assert fleet.scale.min() >= 1.0 and fleet.scale.max() <= 100.0
    assert np.ptp(fleet.scale) > 20  # the means do differ across devices
