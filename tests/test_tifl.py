"""TiFL's decisions on hand-built views (profiling, tiers, adaptive choice) and its runs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

import simfl
from simfl import Fleet, Profile, Scenario, algorithms, dists, tasks
from simfl.outcome import ARRIVED, DROPPED, LATE
from simfl.policies import TiFL, TiFLState
from simfl.policies.tifl import change_probs
from tests.fake_view import FakeView, outcome

# profiled durations of devices 0..6; device 6 is late (dropout tier)
DURATIONS = [5.0, 1.0, 3.0, 2.0, 9.0, 4.0, 10.0]
STATUS = [ARRIVED] * 6 + [LATE]


def profiled(pol: TiFL, view: FakeView) -> TiFLState:
    """The state after one profiling round with :data:`DURATIONS`."""
    state, plan = pol.plan(pol.start(view), view)
    assert plan.cohort.tolist() == list(range(7))
    out = outcome(list(range(7)), STATUS, DURATIONS, loss=[1.0] * 6 + [float("nan")])
    return pol.observe(state, out, view)


def test_profiling_round_asks_every_unprofiled_online_device():
    pol = TiFL(profile_deadline=8.0)
    view = FakeView(n_devices=7, mask=np.array([True] * 6 + [False]))
    state, plan = pol.plan(pol.start(view), view)
    assert plan.cohort.tolist() == [0, 1, 2, 3, 4, 5]
    assert (plan.deadline, plan.stage, plan.speed_epoch, plan.quota) == (8.0, 0, 0, None)
    out = outcome([0, 1, 2, 3, 4, 5], [ARRIVED, LATE, DROPPED] + [ARRIVED] * 3, [1.0] * 6)
    state = pol.observe(state, out, view)
    assert state.profiled.tolist() == [1] * 6 + [0]
    assert state.dropout.tolist() == [False, True, True, False, False, False, False]
    # device 6 comes online: it is profiled next, alone
    state, plan = pol.plan(state, FakeView(n_devices=7, round=1))
    assert plan.cohort.tolist() == [6] and state.tier_of is None
    # two profiling jobs each (sync_rounds = 2): the same devices again, less the dropouts
    twice = dataclasses.replace(pol, profile_rounds=2)
    state, _ = twice.plan(twice.start(view), view)
    state = twice.observe(state, out, view)
    state, plan = twice.plan(state, dataclasses.replace(view, round=1))
    assert plan.cohort.tolist() == [0, 3, 4, 5] and state.tier_of is None
    state = twice.observe(state, outcome([0, 3, 4, 5], [ARRIVED] * 4, [1.0] * 4), view)
    state, plan = twice.plan(state, dataclasses.replace(view, round=2))
    assert state.tier_of is not None and plan.stage >= 1  # device 6 is offline: tiers now
    # profile_count draws that many of the unprofiled
    _, plan = TiFL(profile_count=3).plan(pol.start(view), FakeView(n_devices=7))
    assert plan.cohort.size == 3 and plan.deadline is None


def test_tiers_are_equal_groups_by_observed_duration():
    pol = TiFL(count=2, tiers=3)
    view = FakeView(n_devices=7, round=1)
    state = profiled(pol, view)
    state, plan = pol.plan(state, view)
    # sorted: 1 (d1), 2 (d3), 3 (d2), 4 (d5), 5 (d0), 9 (d4); d6 dropped out
    assert state.tier_of is not None
    assert state.tier_of.tolist() == [2, 0, 1, 0, 2, 1, -1]
    tiers = {0: {1, 3}, 1: {2, 5}, 2: {0, 4}}
    assert set(plan.cohort.tolist()) == tiers[plan.stage - 1]
    assert plan.speed_epoch == 0 and plan.deadline is None
    # every round one tier; each of the three comes up; device 6 never does
    seen = set()
    for r in range(2, 40):
        state, plan = pol.plan(state, FakeView(n_devices=7, round=r))
        assert set(plan.cohort.tolist()) == tiers[plan.stage - 1]
        seen.add(plan.stage - 1)
    assert seen == {0, 1, 2}
    # 7 tiers asked for, 6 devices profiled: 6 tiers of one
    state, _ = TiFL(tiers=7).plan(profiled(TiFL(tiers=7), view), view)
    assert state.tier_of is not None and state.tier_of.tolist() == [4, 0, 2, 1, 5, 3, -1]


def test_only_online_members_are_drawn_and_empty_tiers_are_skipped():
    pol = TiFL(count=5, tiers=3, deadline=2.5)
    state = profiled(pol, FakeView(n_devices=7))
    mask = np.array([False, False, True, False, True, True, True])  # tier 0 all offline
    for r in range(1, 30):
        state, plan = pol.plan(state, FakeView(n_devices=7, round=r, mask=mask))
        assert plan.stage in (2, 3) and plan.deadline == 2.5
        assert plan.cohort.tolist() == ([2, 5] if plan.stage == 2 else [4])
    # only the dropout device online: an empty round
    only6 = np.array([False] * 6 + [True])
    state, plan = pol.plan(state, FakeView(n_devices=7, round=30, mask=only6))
    assert plan.cohort.size == 0 and state.current == -1


def test_change_probs_ranks_the_least_accurate_tier_first():
    np.testing.assert_allclose(
        change_probs(np.array([0.5, 0.9, 0.7]), np.ones(3, bool)), [1 / 6, 3 / 6, 2 / 6]
    )
    # only tiers with credits: n = 2, D = 3
    np.testing.assert_allclose(
        change_probs(np.array([0.5, 0.9, 0.7]), np.array([True, True, False])), [1 / 3, 2 / 3, 0]
    )
    # a tier never measured ranks least accurate; ties share their probabilities
    np.testing.assert_allclose(
        change_probs(np.array([0.5, np.nan, 0.7]), np.ones(3, bool)), [1 / 6, 3 / 6, 2 / 6]
    )
    np.testing.assert_allclose(
        change_probs(np.array([0.5, 0.5, 0.7]), np.ones(3, bool)), [1 / 4, 1 / 4, 1 / 2]
    )
    np.testing.assert_allclose(change_probs(np.full(4, np.nan), np.ones(4, bool)), [1 / 4] * 4)


def play(pol: TiFL, state: TiFLState, r: int, loss: float) -> TiFLState:
    """Plan round ``r`` on 7 devices and observe every job arriving with ``loss``."""
    view = FakeView(n_devices=7, round=r)
    state, plan = pol.plan(state, view)
    n = plan.cohort.size
    out = outcome(plan.cohort.tolist(), [ARRIVED] * n, [1.0] * n, loss=[loss] * n, round=r)
    return pol.observe(state, out, view)


def test_adaptive_probabilities_change_when_the_tier_did_not_improve():
    pol = TiFL(count=2, tiers=3, selection="adaptive", interval=2)
    state = profiled(pol, FakeView(n_devices=7))
    state = play(pol, state, 1, 0.8)  # first tiered round: since = 1
    state = play(pol, state, 2, 0.8)
    assert state.since == 1
    np.testing.assert_allclose(state.probs, [1 / 3] * 3)
    # round 3 is a checkpoint (3 - 1 = 2): the last tier has loss 0.8 vs NaN -> change
    losses = state.tier_loss.copy()
    state = play(pol, state, 3, 0.5)
    np.testing.assert_allclose(state.probs, change_probs(losses, np.ones(3, bool)))
    np.testing.assert_array_equal(state.checkpoint, losses)
    # until round 5 nothing changes; there, the tier of round 4 improved -> keep
    state = dataclasses.replace(state, tier_loss=np.array([0.1, 0.1, 0.1]))
    state = dataclasses.replace(state, checkpoint=np.array([0.9, 0.9, 0.9]))
    before = state.probs.copy()
    state = play(pol, state, 4, 0.1)
    state = play(pol, state, 5, 0.1)
    np.testing.assert_array_equal(state.probs, before)
    # uniform selection never changes them
    uni = TiFL(count=2, tiers=3, interval=1)
    s = profiled(uni, FakeView(n_devices=7))
    for r in range(1, 6):
        s = play(uni, s, r, 1.0 + r)
    np.testing.assert_array_equal(s.probs, [1 / 3] * 3)


def test_credits_bound_each_tier_then_are_ignored():
    pol = TiFL(count=2, tiers=3, credits=2)
    state = profiled(pol, FakeView(n_devices=7))
    tiers = []
    for r in range(1, 7):
        state, plan = pol.plan(state, FakeView(n_devices=7, round=r))
        tiers.append(plan.stage - 1)
    assert sorted(tiers) == [0, 0, 1, 1, 2, 2]  # two each, then all are spent
    assert state.credits is not None and state.credits.tolist() == [0, 0, 0]
    state, plan = pol.plan(state, FakeView(n_devices=7, round=7))
    assert plan.cohort.size == 2  # credits ignored once every tier has spent them


def test_retiering_uses_the_durations_observed_since():
    pol = TiFL(count=2, tiers=3, retier_every=2)
    view = FakeView(n_devices=7, round=1)
    state = profiled(pol, view)
    state, _ = pol.plan(state, view)
    # devices 1 and 3 (tier 0) turn slow: 2 more jobs of 20 s each
    slow = outcome([1, 3], [ARRIVED] * 2, [20.0, 20.0], round=1)
    state = pol.observe(state, slow, view)
    state = pol.observe(state, slow, view)
    state, _ = pol.plan(state, FakeView(n_devices=7, round=2))
    assert state.tier_of is not None and state.tier_of.tolist() == [2, 0, 1, 0, 2, 1, -1]
    state, _ = pol.plan(state, FakeView(n_devices=7, round=3))  # 2 rounds on: re-tier
    # means: d0 5, d1 41/3, d2 3, d3 14, d4 9, d5 4 -> 3, 4 | 5, 9 | 13.7, 14
    assert state.tier_of is not None and state.tier_of.tolist() == [1, 2, 0, 2, 1, 0, -1]
    assert state.tiered_at == 3


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"count": 0}, "TiFL.count"),
        ({"tiers": 0}, "TiFL.tiers"),
        ({"selection": "greedy"}, "TiFL.selection"),
        ({"interval": 0}, "TiFL.interval"),
        ({"credits": 0}, "TiFL.credits"),
        ({"deadline": -1.0}, "TiFL.deadline"),
        ({"profile_count": 0}, "TiFL.profile_count"),
        ({"profile_rounds": 0}, "TiFL.profile_rounds"),
        ({"profile_deadline": 0.0}, "TiFL.profile_deadline"),
        ({"retier_every": 0}, "TiFL.retier_every"),
    ],
)
def test_bad_parameters_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TiFL(**kwargs)


# ---------------------------------------------------------------- runs


def scenario(algorithm: str, policy: TiFL, seed: int = 0) -> Scenario:
    fleet = Fleet.tiers(
        (20, Profile(compute=dists.Exponential(1.0))),
        (20, Profile(compute=dists.Exponential(5.0))),
        redraw="run",
    )
    task = None
    alg: algorithms.Algorithm = algorithms.TimingOnly()
    if algorithm == "fedrep":
        task = tasks.LinearRepresentation(d=20, k=2, samples_per_client=10, noise_std=1e-3)
        alg = algorithms.FedRep()
    return Scenario(task=task, algorithm=alg, fleet=fleet, policy=policy, rounds=40, seed=seed)


@pytest.mark.parametrize("algorithm", ["timing", "fedrep"])
def test_each_round_draws_from_one_tier_of_the_profiling_round(algorithm):
    pol = TiFL(count=4, tiers=4, profile_deadline=12.0, selection="adaptive", interval=3)
    res = simfl.run(scenario(algorithm, pol), progress=False)
    jobs, rounds = res.clients, res.rounds
    # round 0 profiles all 40; the tiers follow from its frame alone
    first = jobs[jobs["round"] == 0]
    assert len(first) == 40 and rounds["stage"].iloc[0] == 0
    arrived = first[first["status"].astype(str) == "arrived"]
    dropout = set(first["device"]) - set(arrived["device"])
    assert dropout  # a 12 s profiling deadline drops some Exp(5) devices
    order = arrived.assign(d=arrived["t_end"] - arrived["t_start"]).sort_values(["d", "device"])
    tiers = [set(g) for g in np.array_split(order["device"].to_numpy(), 4)]
    later = jobs[jobs["round"] > 0]
    assert not set(later["device"]) & dropout
    stages = rounds.set_index("round")["stage"]
    for r, g in later.groupby("round"):
        assert set(g["device"]) <= tiers[stages[r] - 1] and len(g) == 4
    assert set(stages.iloc[1:]) == {1, 2, 3, 4}
    # the fastest tier's rounds are the shortest on average
    mean = rounds.iloc[1:].groupby("stage")["duration"].mean()
    assert mean[1] < mean[4]


def test_same_seed_same_frames():
    pol = TiFL(count=4, tiers=3, selection="adaptive", interval=2, credits=20, retier_every=5)
    a = simfl.run(scenario("fedrep", pol, seed=5), progress=False)
    b = simfl.run(scenario("fedrep", pol, seed=5), progress=False)
    pd.testing.assert_frame_equal(a.rounds, b.rounds, check_exact=True)
    pd.testing.assert_frame_equal(a.clients, b.clients, check_exact=True)
