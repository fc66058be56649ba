"""FedCS's greedy selection under a deadline, its time estimates, and its runs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

import simfl
from simfl import Fleet, Profile, Scenario, Streams, algorithms, dists, tasks
from simfl.outcome import ARRIVED, CANCELLED, DROPPED, LATE
from simfl.policies import FedCS
from simfl.policies.base import sample_uniform
from simfl.policies.fedcs import greedy_parallel, greedy_sequential
from tests.fake_view import FakeView, outcome


def arr(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float64)


def test_sequential_greedy_by_hand():
    # no downloads; compute 1, 2, 5; uploads 1 each; deadline 4
    # take 0: 0 + 1 + 1 = 2 (theta 2); take 1: 2 + 1 + (2 - 2) = 3 (theta 3);
    # device 2 would end at 3 + 1 + (5 - 3) = 6 > 4
    assert greedy_sequential(arr(0, 0, 0), arr(1, 2, 5), arr(1, 1, 1), 4.0, 3).tolist() == [0, 1]
    # scheduled uploads queue: three 1 s uploads after 1 s of compute take 4 s, not 2
    down, comp, up = arr(0, 0, 0), arr(1, 1, 1), arr(1, 1, 1)
    assert greedy_sequential(down, comp, up, 2.5, 3).tolist() == [0]
    assert greedy_sequential(down, comp, up, 4.0, 3).tolist() == [0, 1, 2]  # 2, 3, 4
    assert greedy_sequential(down, comp, up, 4.0, 2).tolist() == [0, 1]  # max_count
    assert greedy_parallel(down, comp, up, 2.5, 3).tolist() == [0, 1, 2]
    assert greedy_parallel(down, comp, up, 1.5, 3).tolist() == []


def test_sequential_greedy_with_distribution_times():
    # downloads 0.5, 2, 0; compute 1, 1, 3; uploads 1; deadline 5
    # step 1: ends max(0, t_D) + 0 + t_UL + t_UD = 2.5, 4, 4 -> device 0 (theta 2, T_D 0.5)
    # step 2: device 1: 2 + 2 + 1 = 5; device 2: 0.5 + 2 + 1 + (3 - 2) = 4.5 -> device 2
    # step 3: device 1: max(0.5, 2) + 4 + 1 + 0 = 7 > 5 -> stop
    got = greedy_sequential(arr(0.5, 2, 0), arr(1, 1, 3), arr(1, 1, 1), 5.0, 3)
    assert got.tolist() == [0, 2]
    # an estimate exactly at the deadline fits (simfl counts such an arrival in time)
    assert greedy_sequential(arr(0.5, 2, 0), arr(1, 1, 3), arr(1, 1, 1), 4.5, 3).tolist() == [0, 2]
    # on private links every device within the deadline alone fits, fastest first
    got = greedy_parallel(arr(0.5, 2, 0), arr(1, 1, 3), arr(1, 1, 1), 4.0, 3)
    assert got.tolist() == [0, 1, 2]  # totals 2.5, 4, 4


def test_plan_asks_a_fraction_and_selects_greedily():
    n = 10
    compute = arr(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
    view = FakeView(n_devices=n, round=3, expected=(np.zeros(n), compute, np.full(n, 1.0)))
    pol = FedCS(seconds=7.0, fraction=0.5)
    _, plan = pol.plan(pol.start(view), view)
    asked = sample_uniform(3, np.arange(n), 5, Streams(0))
    # scheduled uploads of 1 s: the asked, fastest first, while the queue ends by 7 s
    expected, theta = [], 0.0
    for d in asked:
        theta = theta + 1 + max(0.0, compute[d] - theta)
        if theta > 7.0:
            break
        expected.append(int(d))
    assert plan.cohort.tolist() == expected and plan.deadline == 7.0 and plan.quota is None
    # on private links: every asked device with 1 + compute <= 7
    _, plan = FedCS(seconds=7.0, fraction=0.5, uploads="parallel").plan(pol.start(view), view)
    assert plan.cohort.tolist() == [int(d) for d in asked if compute[d] <= 6]
    # max_count keeps the fastest
    _, plan = FedCS(seconds=7.0, fraction=0.5, uploads="parallel", max_count=1).plan(
        pol.start(view), view
    )
    assert plan.cohort.tolist() == [int(asked[0])]
    # nobody fits: the fastest asked device runs alone, so that the round takes time
    _, plan = FedCS(seconds=0.5, fraction=0.5).plan(pol.start(view), view)
    assert plan.cohort.tolist() == [int(asked.min())] and plan.deadline == 0.5


def test_only_online_devices_are_asked():
    mask = np.array([True, False] * 5)
    view = FakeView(n_devices=10, mask=mask)
    for r in range(10):
        view.round = r
        _, plan = FedCS(seconds=1.0, fraction=0.4).plan(FedCS(seconds=1.0).start(view), view)
        assert plan.cohort.size == 2 and mask[plan.cohort].all()  # floor(0.4 * 5)


def test_observed_estimates_count_late_jobs_and_shrink_to_the_report():
    n = 5
    reported = (arr(0.5, 0.5, 0.5, 0.5, 0.5), arr(2, 2, 1, 3, 3), arr(0.5, 0.5, 0.5, 0.5, 0.5))
    view = FakeView(n_devices=n, expected=reported)
    pol = FedCS(seconds=4.0, estimate="observed")
    state = pol.start(view)
    # device 0 arrived after 2 s; 1 was late at the 4 s deadline; 2 was cancelled after 1 s;
    # 3 dropped (nothing learnt); 4 never ran
    out = outcome([0, 1, 2, 3], [ARRIVED, LATE, CANCELLED, DROPPED], [2.0, 4.0, 1.0, 0.5])
    state = pol.observe(state, out, view)
    down, compute, up = pol.times(np.arange(n), state, view)
    # (reported 3 + 2) / 2 = 2.5; (3 + 4) / 1 = 7; (2 + 1) / 1 = 3; then as reported
    np.testing.assert_allclose(down, [0, 0, 0, 0.5, 0.5])
    np.testing.assert_allclose(compute, [2.0, 6.5, 2.5, 3.0, 3.0])
    np.testing.assert_allclose(up, [0.5] * 5)
    # a second arrival of device 1 after 1 s: (3 + 1 + 4) / 2 = 4
    state = pol.observe(state, outcome([1], [ARRIVED], [1.0]), view)
    assert pol.times(np.array([1]), state, view)[1].tolist() == [3.5]


def test_oracle_estimates_are_the_planned_durations():
    n = 3
    view = FakeView(
        n_devices=n,
        expected=(arr(1, 1, 1), arr(1, 1, 1), arr(0.5, 0.5, 3.0)),
        planned=arr(4.0, 1.0, 2.0),
    )
    pol = FedCS(seconds=3.0, fraction=1.0, estimate="oracle", uploads="parallel")
    down, compute, up = pol.times(np.arange(n), pol.start(view), view)
    np.testing.assert_allclose(down, [0, 0, 0])
    np.testing.assert_allclose(compute, [3.5, 0.5, 0.0])  # planned - reported upload, >= 0
    np.testing.assert_allclose(up, [0.5, 0.5, 3.0])
    _, plan = pol.plan(pol.start(view), view)
    assert plan.cohort.tolist() == [1, 2]  # totals 4, 1, 3


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"seconds": 0.0}, "FedCS.seconds"),
        ({"seconds": 1.0, "fraction": 0.0}, "FedCS.fraction"),
        ({"seconds": 1.0, "fraction": 1.5}, "FedCS.fraction"),
        ({"seconds": 1.0, "uploads": "queued"}, "FedCS.uploads"),
        ({"seconds": 1.0, "estimate": "guess"}, "FedCS.estimate"),
        ({"seconds": 1.0, "max_count": 0}, "FedCS.max_count"),
    ],
)
def test_bad_parameters_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        FedCS(**kwargs)


# ---------------------------------------------------------------- runs

BYTES = 1_000_000  # each way
# expected job times (download + compute + upload): fast 0.5 + 1 + 0.5 = 2 s, slow
# 0.5 + 4 + 2 = 6.5 s
FAST = Profile(compute=dists.Exponential(1.0), bandwidth_down=2e6, bandwidth_up=2e6)
SLOW = Profile(compute=dists.Exponential(4.0), bandwidth_down=2e6, bandwidth_up=5e5)


def scenario(policy: FedCS, algorithm: str = "timing", seed: int = 0) -> Scenario:
    task = None
    alg: algorithms.Algorithm = algorithms.TimingOnly(bytes_down=BYTES, bytes_up=BYTES)
    if algorithm == "fedrep":
        task = tasks.LinearRepresentation(d=20, k=2, samples_per_client=10, noise_std=1e-3)
        alg = algorithms.FedRep()
    fleet = Fleet.tiers((24, FAST), (16, SLOW))
    return Scenario(task=task, algorithm=alg, fleet=fleet, policy=policy, rounds=30, seed=seed)


def test_parallel_never_selects_a_device_whose_expected_time_exceeds_the_deadline():
    res = simfl.run(scenario(FedCS(seconds=4.0, fraction=0.5, uploads="parallel")), progress=False)
    jobs = res.clients
    assert len(jobs) > 0 and (jobs["device"] < 24).all()  # slow devices expect 6.5 s
    assert (res.rounds["n_selected"] == jobs.groupby("round").size()).all()
    # every asked fast device was selected: the cohort is the asked devices that fit
    for r, g in jobs.groupby("round"):
        asked = sample_uniform(r, np.arange(40), 20, Streams(0))
        assert g["device"].tolist() == [int(d) for d in asked if d < 24]
    assert ((jobs["t_end"] - jobs["t_start"]) <= 4.0 + 1e-12).all()  # late jobs are cut


def test_sequential_selects_a_subset_of_parallel_each_round():
    # the same devices are asked each round; a device the queued uploads let in fits alone
    seq = simfl.run(scenario(FedCS(seconds=5.0, fraction=0.5)), progress=False).clients
    par = simfl.run(scenario(FedCS(seconds=5.0, fraction=0.5, uploads="parallel")), progress=False)
    p = par.clients.groupby("round")["device"].apply(set)
    s = seq.groupby("round")["device"].apply(set)
    assert all(s[r] <= p[r] for r in s.index)
    assert sum(len(x) for x in s) < sum(len(x) for x in p)  # 0.5 s uploads queue up


def test_a_deadline_nobody_meets_still_moves_the_clock():
    # 1 s: no device expects to make it (fast: 2 s); each round runs the fastest asked alone
    sc = dataclasses.replace(scenario(FedCS(seconds=1.0, fraction=0.1)), rounds=None, max_time=60.0)
    res = simfl.run(sc, progress=False)
    assert res.meta["stop_reason"] == "max_time"
    rounds = res.rounds  # 1 s rounds; the 60th is cut short by the budget (not recorded)
    assert len(rounds) == 59 and (rounds["n_selected"] == 1).all()
    assert (rounds["duration"] == 1.0).all() and rounds["n_arrived"].sum() == 0


@pytest.mark.parametrize("estimate", ["reported", "observed", "oracle"])
def test_fedrep_runs_and_is_deterministic(estimate):
    pol = FedCS(seconds=3.0, fraction=0.3, uploads="parallel", estimate=estimate)
    a = simfl.run(scenario(pol, "fedrep", seed=2), progress=False)
    b = simfl.run(scenario(pol, "fedrep", seed=2), progress=False)
    pd.testing.assert_frame_equal(a.rounds, b.rounds, check_exact=True)
    pd.testing.assert_frame_equal(a.clients, b.clients, check_exact=True)
    assert a.meta["stop_reason"] == "rounds" and a.rounds["n_arrived"].sum() > 0
    if estimate == "oracle":  # exact durations on private links: nothing is ever late
        assert (a.clients["status"].astype(str) == "arrived").all()
