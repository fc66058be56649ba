"""Oort's decisions on hand-built views (utilities, penalty, cut-off, pacer) and its runs."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest

import simfl
from simfl import Fleet, Profile, Scenario, algorithms, dists, tasks
from simfl.outcome import ARRIVED, CANCELLED, DROPPED, LATE
from simfl.policies import Exploration, Oort, OortState, Pacer
from simfl.policies.observed import Observations
from tests.fake_view import FakeView, outcome

NO_EXPLORATION = Exploration(factor=0.0, floor=0.0)


def explored_state(
    utility: list[float], last: list[float], last_round: list[int], percentile: float = 50.0
) -> OortState:
    """A state in which every device has arrived once: its utility, duration and round."""
    n = len(utility)
    seen = Observations.empty(n)
    seen = dataclasses.replace(
        seen, count=np.ones(n, dtype=np.int64), last=np.array(last, dtype=np.float64)
    )
    return OortState(
        seen=seen,
        utility=np.array(utility, dtype=np.float64),
        last_round=np.array(last_round, dtype=np.int64),
        percentile=percentile,
    )


def test_exploration_schedule_decays_to_its_floor():
    e = Exploration()
    assert (e.factor, e.decay, e.floor) == (0.9, 0.98, 0.2)
    assert e.epsilon(0) == 0.9
    assert e.epsilon(10) == pytest.approx(0.9 * 0.98**10)  # 0.7354
    assert e.epsilon(100) == 0.2  # 0.9 * 0.98**100 = 0.119 < floor


def test_pacer_relaxes_only_when_the_last_window_collected_less():
    p = Pacer(start=10.0, step=5.0, window=2)
    assert p.relaxed((5.0, 5.0, 4.0, 4.0), 10.0, 4) == 15.0  # 8 < 10
    assert p.relaxed((4.0, 4.0, 5.0, 5.0), 10.0, 4) == 10.0  # 10 > 8
    assert p.relaxed((5.0, 5.0, 5.0, 5.0), 10.0, 4) == 10.0  # equal is not less
    assert p.relaxed((5.0, 5.0, 4.0), 10.0, 3) == 10.0  # fewer than 2W rounds
    assert p.relaxed((5.0, 5.0, 4.0, 4.0), 10.0, 5) == 10.0  # only every W rounds
    assert p.relaxed((5.0, 5.0, 4.0, 4.0), 98.0, 8) == 100.0  # capped at 100


def test_pacer_in_observe_checks_every_window_only():
    pol = Oort(pacer=Pacer(start=10.0, step=5.0, window=2))
    view = FakeView(n_devices=1)
    state = pol.start(view)
    percentiles = []
    for r, loss in enumerate([10.0, 9.0, 8.0, 7.0, 6.0, 5.0, 4.0]):
        state = pol.observe(state, outcome([0], [ARRIVED], [1.0], loss=[loss], round=r), view)
        percentiles.append(state.percentile)
    # after 4 rounds 8 + 7 < 10 + 9; after 6, 6 + 5 < 8 + 7; never after an odd count
    assert percentiles == [10.0, 10.0, 10.0, 15.0, 15.0, 20.0, 20.0]
    assert state.history == (7.0, 6.0, 5.0, 4.0)  # the last 2W rounds


def test_preferred_duration_is_a_percentile_and_the_penalty_only_hits_slower_devices():
    times = np.arange(1.0, 11.0)  # 1..10 s
    assert Oort.preferred(times, 10.0) == 2.0  # sorted[int(10 * 0.10)]
    assert Oort.preferred(times, 95.0) == 10.0
    assert Oort.preferred(times, 100.0) == math.inf
    penalty = Oort(penalty=2.0).speed_penalty(np.array([1.0, 2.0, 4.0, 8.0]), 2.0)
    np.testing.assert_allclose(penalty, [1.0, 1.0, 0.25, 1 / 16])


def test_round_times_are_observed_then_reported_and_raised_by_lower_bounds():
    # devices 0, 1 arrived (3 s, 1 s); 2 never ran; 1 then ran 5 s without arriving; 3 was
    # cancelled after 0.5 s, below its reported 2 s
    seen = Observations.empty(4).seen(outcome([0, 1], [ARRIVED, ARRIVED], [3.0, 1.0]))
    seen = seen.seen(outcome([1, 3], [LATE, CANCELLED], [5.0, 0.5]))
    state = dataclasses.replace(Oort().start(FakeView(n_devices=4)), seen=seen)
    reported = np.array([9.0, 9.0, 4.0, 2.0])
    view = FakeView(n_devices=4, expected=(np.zeros(4), reported, np.zeros(4)))
    np.testing.assert_array_equal(Oort.round_times(state, view), [3.0, 5.0, 4.0, 2.0])


def test_utilities_are_normalised_plus_the_staleness_bonus():
    state = explored_state([2.0, 4.0, 6.0, math.nan], [1.0] * 4, [1, 1, 2, 0])
    got = Oort.utilities(state, np.array([0, 1, 2]), 3)
    low, spread = 2 * 0.999, 6 - 2 * 0.999  # clip at sorted[int(3 * 0.98)] = 6: no effect
    norm = (np.array([2.0, 4.0, 6.0]) - low) / spread
    bonus = np.sqrt(0.1 * math.log(3) / np.array([1, 1, 2]))
    np.testing.assert_allclose(got, norm + bonus, rtol=1e-14)
    # the clip: with 60 utilities the top one counts as the 58th (sorted[int(60 * 0.98)])
    state = explored_state([*range(1, 60), 1000.0], [1.0] * 60, [1] * 60)
    got = Oort.utilities(state, np.arange(60), 2)
    assert (
        got[-1]
        == got[-2]
        == pytest.approx((59 - 0.999) / (1000 - 0.999) + math.sqrt(0.1 * math.log(2)))
    )


def test_the_speed_penalty_turns_the_choice_to_a_fast_client():
    # utilities 1..4, device 3 the best but 8x slower than T (the median duration, 1 s)
    state = explored_state([1.0, 2.0, 3.0, 4.0], [1.0, 1.0, 1.0, 8.0], [1] * 4, percentile=50.0)
    view = FakeView(n_devices=4, round=1)
    pol = Oort(count=1, overcommit=0.0, exploration=NO_EXPLORATION)
    # scores: (norm + 0.263) * penalty = 0.264, 0.597, 0.930, 1.263 / 64: only 2 within 95%
    for r in range(1, 6):
        _, plan = pol.plan(state, dataclasses.replace(view, round=r))
        assert plan.cohort.tolist() == [2] and plan.quota == 1
    _, plan = dataclasses.replace(pol, penalty=0.0).plan(state, view)
    assert plan.cohort.tolist() == [3]  # no penalty: the highest utility


def test_exploitation_samples_only_the_clients_within_the_cutoff():
    # utilities 10, 9.8, 9.7 and five of 1; scores 1.263, 1.241, 1.230, 0.263: the 2nd best
    # times 0.95 is 1.179, so devices 0, 1, 2 are admitted and 2 of them are drawn
    state = explored_state([10.0, 9.8, 9.7, 1, 1, 1, 1, 1], [1.0] * 8, [1] * 8, 100.0)
    pol = Oort(count=2, overcommit=0.0, exploration=NO_EXPLORATION)
    drawn = set()
    for r in range(1, 40):
        _, plan = pol.plan(state, FakeView(n_devices=8, round=r))
        assert plan.cohort.size == 2 and set(plan.cohort.tolist()) <= {0, 1, 2}
        drawn |= set(plan.cohort.tolist())
    assert drawn == {0, 1, 2}
    # a lower cut-off admits everyone
    wide = dataclasses.replace(pol, cutoff=0.1)
    seen = set()
    for r in range(1, 80):
        seen |= set(wide.plan(state, FakeView(n_devices=8, round=r))[1].cohort.tolist())
    assert seen == set(range(8))


def test_first_round_explores_an_overcommitted_cohort():
    pol = Oort(count=4, overcommit=0.5)  # 6 started, 4 aggregated
    view = FakeView(n_devices=10)
    state = pol.start(view)
    _, plan = pol.plan(state, view)
    assert plan.cohort.size == 6 and plan.quota == 4 and plan.deadline is None
    assert (np.diff(plan.cohort) > 0).all()
    # exploration prefers fast devices: reported times 1 s (0-4) and 100 s (5-9), T = 1 s
    slow = np.where(np.arange(10) < 5, 1.0, 100.0)
    view = FakeView(n_devices=10, expected=(np.zeros(10), slow, np.zeros(10)))
    _, plan = dataclasses.replace(pol, count=2, overcommit=1.0).plan(state, view)
    assert set(plan.cohort.tolist()) <= set(range(5))  # weights 1 vs 1e-4


def test_exploration_and_exploitation_split_the_cohort():
    # devices 0-3 explored, 4-9 not; round 10: eps = 0.9 * 0.98**10 = 0.735
    # n = 8: floor(8 * 0.265) = 2 exploited, 6 explored
    state = explored_state([1.0] * 10, [1.0] * 10, [1] * 10)
    state = dataclasses.replace(
        state,
        seen=dataclasses.replace(state.seen, count=np.array([1] * 4 + [0] * 6)),
        utility=np.array([1.0] * 4 + [math.nan] * 6),
    )
    pol = Oort(count=8, overcommit=0.0)
    _, plan = pol.plan(state, FakeView(n_devices=10, round=10))
    assert plan.cohort.size == 8
    assert np.isin(plan.cohort, [0, 1, 2, 3]).sum() == 2
    # with no unexplored device online, eps is 0: everything is exploited
    mask = np.array([True] * 4 + [False] * 6)
    _, plan = pol.plan(state, FakeView(n_devices=10, round=10, mask=mask))
    assert plan.cohort.tolist() == [0, 1, 2, 3] and plan.quota == 4


def test_observe_learns_size_times_loss_and_bounds_the_others():
    pol = Oort(pacer=Pacer(window=1, start=10.0, step=5.0))
    sizes = np.array([10.0, 20.0, 30.0, 40.0])
    view = FakeView(n_devices=4, sizes=sizes)
    state = pol.start(view)
    out = outcome(
        [0, 1, 2, 3],
        [ARRIVED, ARRIVED, CANCELLED, DROPPED],
        [1.0, 2.0, 2.5, 0.3],
        loss=[0.5, 0.25, math.nan, math.nan],
        round=4,
    )
    state = pol.observe(state, out, view)
    np.testing.assert_array_equal(state.utility[:2], [5.0, 5.0])
    assert np.isnan(state.utility[2:]).all()
    assert state.last_round.tolist() == [5, 5, 0, 0]
    assert state.seen.count.tolist() == [1, 1, 0, 0]
    assert state.seen.bound.tolist() == [0.0, 0.0, 2.5, 0.3]
    assert state.history == (10.0,) and state.percentile == 10.0
    # the next round collects less: the pacer (W = 1) relaxes T
    out = outcome([0], [ARRIVED], [1.0], loss=[0.1], round=5)
    state = pol.observe(state, out, view)
    assert state.history == (10.0, 1.0) and state.percentile == 15.0
    np.testing.assert_array_equal(state.utility[:2], [1.0, 5.0])
    # an algorithm that reports no loss: utility 1 per arrival
    state = pol.observe(pol.start(view), outcome([2], [ARRIVED], [1.0]), view)
    assert state.utility[2] == 1.0 and state.history == (1.0,)


def test_blacklist_drops_the_most_used_devices_up_to_30_percent():
    pol = Oort(blacklist=2)
    count = np.array([5, 4, 3, 3, 0, 0, 0, 0, 0, 0])
    assert np.flatnonzero(pol.blacklisted(count)).tolist() == [0, 1, 2]  # cap: 3 of 10
    assert np.flatnonzero(pol.blacklisted(np.array([3, 0, 0, 3] + [0] * 6))).tolist() == [0, 3]
    assert not Oort().blacklisted(count).any()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"count": 0}, "Oort.count"),
        ({"overcommit": -0.1}, "Oort.overcommit"),
        ({"deadline": 0.0}, "Oort.deadline"),
        ({"penalty": -1.0}, "Oort.penalty"),
        ({"cutoff": 0.0}, "Oort.cutoff"),
        ({"cutoff": 1.5}, "Oort.cutoff"),
        ({"blacklist": 0}, "Oort.blacklist"),
        ({"pacer": 3}, "Oort.pacer"),
        ({"exploration": 0.5}, "Oort.exploration"),
    ],
)
def test_bad_parameters_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Oort(**kwargs)


def test_bad_schedules_are_refused():
    with pytest.raises(ValueError, match=r"Exploration\.decay"):
        Exploration(decay=0.0)
    with pytest.raises(ValueError, match=r"Exploration\.floor"):
        Exploration(floor=1.5)
    with pytest.raises(ValueError, match=r"Pacer\.window"):
        Pacer(window=0)
    with pytest.raises(ValueError, match=r"Pacer\.start"):
        Pacer(start=0.0)
    with pytest.raises(ValueError, match=r"Oort\.count \* \(1 \+ Oort\.overcommit\) = 13"):
        Scenario(
            task=None,
            algorithm=algorithms.TimingOnly(),
            fleet=Fleet.homogeneous(12, dists.Exponential(1.0)),
            policy=Oort(count=10),
            rounds=3,
        )


# ---------------------------------------------------------------- runs


FAST, SLOW = 30, 10


def scenario(algorithm: str, seed: int = 0) -> Scenario:
    fleet = Fleet.tiers(
        (FAST, Profile(compute=dists.Exponential(1.0))),
        (SLOW, Profile(compute=dists.Exponential(10.0))),
    )
    task = None
    alg: algorithms.Algorithm = algorithms.TimingOnly()
    if algorithm == "fedrep":
        task = tasks.LinearRepresentation(d=20, k=2, samples_per_client=10, noise_std=1e-3)
        alg = algorithms.FedRep()
    policy = Oort(count=5, exploration=Exploration(decay=0.9))
    return Scenario(task=task, algorithm=alg, fleet=fleet, policy=policy, rounds=80, seed=seed)


@pytest.mark.parametrize("algorithm", ["timing", "fedrep"])
def test_runs_explore_every_device_and_then_prefer_fast_ones(algorithm):
    res = simfl.run(scenario(algorithm), progress=False)
    jobs, rounds = res.clients, res.rounds
    assert res.meta["stop_reason"] == "rounds"
    assert (rounds["n_selected"] == 7).all() and (rounds["n_arrived"] == 5).all()
    assert set(jobs["device"]) == set(range(FAST + SLOW))  # every device tried
    late = jobs[jobs["round"] >= 40]
    share = float((late["device"] >= FAST).mean())
    assert share < 0.5 * SLOW / (FAST + SLOW)  # well below the uniform share, 0.25
    # the round closes at the 5th arrival: jobs still running are cancelled
    status = jobs["status"].astype(str)
    assert set(status) == {"arrived", "cancelled"}


def test_same_seed_same_frames_and_another_seed_differs():
    a = simfl.run(scenario("fedrep", seed=3), progress=False)
    b = simfl.run(scenario("fedrep", seed=3), progress=False)
    pd.testing.assert_frame_equal(a.rounds, b.rounds, check_exact=True)
    pd.testing.assert_frame_equal(a.clients, b.clients, check_exact=True)
    c = simfl.run(scenario("fedrep", seed=4), progress=False)
    assert not a.clients["device"].equals(c.clients["device"])
