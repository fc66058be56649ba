"""The simulator against closed-form queueing results (timing-only runs, zero network)."""

import dataclasses
import math

import numpy as np
import pytest

from simfl import algorithms, dists, policies, run
from tests.helpers import timing_scenario


def harmonic(n: int) -> float:
    return sum(1.0 / j for j in range(1, n + 1))


def test_wait_all_round_lasts_h_n():
    # 20 i.i.d. Exp(1) devices, all selected: E[max] = H_20
    res = run(timing_scenario(n=20, rounds=4000), progress=False)
    expected = harmonic(20)
    assert expected == pytest.approx(3.5977, abs=5e-5)
    # SE (theory): sd sqrt(sum_{j<=20} 1/j^2) = 1.263 over 4000 independent rounds = 0.56% of
    # H_20; tolerance 2% = 3.6 SE; a 5% error is 9.0 SE away: power P(Z > 3.6 - 9.0) ~ 1
    assert res.rounds["duration"].mean() == pytest.approx(expected, rel=0.02)
    assert (res.clients["status"] == "arrived").all()


def test_fastest_k_round_lasts_h_n_minus_h_n_minus_k():
    # 20 started, keep the first 5: E[5th order statistic] = H_20 - H_15
    policy = policies.FastestK(k=5, overcommit=3.0)
    res = run(timing_scenario(n=20, policy=policy, rounds=6000), progress=False)
    expected = harmonic(20) - harmonic(15)
    assert expected == pytest.approx(0.2795, abs=5e-5)
    # SE (theory): sd sqrt(sum_{j=16..20} 1/j^2) = 0.125 over 6000 rounds = 0.58% of the mean;
    # tolerance 2% = 3.45 SE; a 5% error is 8.6 SE away: power ~ 1
    assert res.rounds["duration"].mean() == pytest.approx(expected, rel=0.02)
    assert (res.rounds["n_arrived"] == 5).all() and (res.rounds["n_cancelled"] == 15).all()


@pytest.mark.parametrize("deadline", [0.5, 1.0, 2.0])
def test_deadline_arrival_fraction_is_one_minus_exp(deadline):
    res = run(
        timing_scenario(n=20, policy=policies.Deadline(deadline), rounds=2000), progress=False
    )
    arrived = (res.clients["status"] == "arrived").mean()
    # SE (theory, binomial over 40,000 independent jobs): 0.62%, 0.38%, 0.20% of p for the
    # three deadlines; tolerance 2% >= 3.2 SE; a 5% error is >= 8 SE away: power ~ 1
    assert arrived == pytest.approx(1.0 - math.exp(-deadline), rel=0.02)
    assert set(res.clients["status"].unique()) <= {"arrived", "late"}


def test_payload_adds_exactly_size_over_bandwidth_plus_latency():
    size, bw_down, bw_up, lat, comp = 4000, 1000.0, 250.0, 0.3, 2.0
    sc = timing_scenario(
        n=3,
        compute=dists.Constant(comp),
        rounds=3,
        bandwidth_down=bw_down,
        bandwidth_up=bw_up,
        latency=lat,
    )
    sc = dataclasses.replace(sc, algorithm=algorithms.TimingOnly(bytes_down=size, bytes_up=size))
    res = run(sc, progress=False)
    jobs = res.clients
    assert (jobs["download"] == lat + size / bw_down).all()  # 4.3 s
    assert (jobs["upload"] == lat + size / bw_up).all()  # 16.3 s
    assert (jobs["compute"] == comp).all()
    assert (jobs["bytes_down"] == size).all() and (jobs["bytes_up"] == size).all()
    np.testing.assert_allclose(res.rounds["duration"], 4.3 + 2.0 + 16.3, rtol=1e-14)
    np.testing.assert_allclose(res.rounds["time"], [22.6, 45.2, 67.8], rtol=1e-14)
    assert (res.rounds["bytes_down"] == 3 * size).all()


def test_dropout_hazard_survival_is_exponential():
    # a job of fixed length L survives a hazard h with probability exp(-h L)
    length, hazard = 2.0, 0.3
    res = run(
        timing_scenario(n=20, compute=dists.Constant(length), dropout_rate=hazard, rounds=1500),
        progress=False,
    )
    survived = (res.clients["status"] == "arrived").mean()
    # SE (theory, binomial over 30,000 jobs): 0.52% of exp(-hL); tolerance 2% = 3.8 SE; a 5%
    # error is 9.6 SE away: power ~ 1
    assert survived == pytest.approx(math.exp(-hazard * length), rel=0.02)
    dropped = res.clients[res.clients["status"] == "dropped"]
    # time to failure is Exp(h) truncated to [0, L]: compare the conditional mean
    h, ell = hazard, length
    cond_mean = 1 / h - ell * math.exp(-h * ell) / (1 - math.exp(-h * ell))
    # SE (theory): that law's sd 0.572 over ~13,500 dropped jobs = 0.55% of the mean 0.901;
    # tolerance 3% = 5.5 SE; a 5% error is 9.2 SE away: power P(Z > 5.5 - 9.2) > 99.9%
    assert (dropped["t_end"] - dropped["t_start"]).mean() == pytest.approx(cond_mean, rel=0.03)
