"""Policies are decisions: their plan/observe/pick methods on hand-built views, no engine."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

import simfl
from simfl import Fleet, Scenario, algorithms, dists, policies
from simfl.outcome import ARRIVED, DROPPED, LATE, Outcome
from tests.fake_view import FakeView


def outcome(status: list[int], durations: list[float], devices: list[int] | None = None) -> Outcome:
    n = len(status)
    return Outcome(
        round=0,
        stage=0,
        t_start=0.0,
        time=max(durations),
        devices=np.arange(n, dtype=np.int64) if devices is None else np.array(devices),
        status=np.array(status, dtype=np.int8),
        job_start=np.zeros(n),
        job_end=np.array(durations, dtype=np.float64),
        staleness=np.where(np.array(status) == ARRIVED, 0.0, np.nan),
    )


def test_stateless_plans():
    view = FakeView()
    _, plan = policies.WaitAll(count=4).plan(None, view)
    assert plan.cohort.size == 4 and (np.diff(plan.cohort) > 0).all()
    assert plan.quota is None and plan.deadline is None
    _, plan = policies.Deadline(2.5, count=3).plan(None, view)
    assert plan.deadline == 2.5 and plan.cohort.size == 3
    _, plan = policies.FastestK(k=3, overcommit=1.0).plan(None, view)
    assert plan.cohort.size == 6 and plan.quota == 3
    # only online devices are drawn
    view = FakeView(mask=np.array([True, False] * 5))
    _, plan = policies.WaitAll(count=4).plan(None, view)
    assert set(plan.cohort.tolist()) <= {0, 2, 4, 6, 8}
    _, plan = policies.EdgeAggregation(count=2, edge_deadline=3.0, deadline=9.0).plan(None, view)
    assert (plan.edge_deadline, plan.deadline) == (3.0, 9.0)


def test_adaptive_deadline_learns_from_outcomes():
    pol = policies.AdaptiveDeadline(quantile=0.5, window=2, initial=None, backoff=2.0)
    view = FakeView()
    state = pol.start(view)
    state, plan = pol.plan(state, view)
    assert plan.deadline is None  # the first round measures the fleet
    # arrived in 1, 2, 3 s; a dropout says nothing about speed
    state = pol.observe(state, outcome([ARRIVED, ARRIVED, ARRIVED, DROPPED], [1, 2, 3, 0.5]), view)
    assert pol.plan(state, view)[1].deadline == 2.0  # the median
    # a round where all were late: +inf observations push the median to inf -> back off
    state = pol.observe(state, outcome([LATE] * 4, [2, 2, 2, 2]), view)
    assert state.deadline == 4.0
    # [0.5, 0.7, inf x 4]: the median is still unknown -> back off again
    state = pol.observe(state, outcome([ARRIVED] * 2, [0.5, 0.7], [0, 1]), view)
    assert state.deadline == 8.0
    # the window (2 rounds) forgets the all-late round: median of [0.5, 0.7, 1, 1]
    state = pol.observe(state, outcome([ARRIVED] * 2, [1.0, 1.0], [0, 1]), view)
    assert len(state.history) == 2 and state.deadline == 0.7


def test_srpfl_picks_the_fastest_and_moves_on():
    speeds = np.array([5.0, 1.0, 4.0, 2.0, 3.0, 9.0, 8.0, 7.0])
    view = FakeView(n_devices=8, planned=speeds, last_row={"train_loss": 1.0})
    pol = policies.SRPFL(n0=2, rounds_per_stage=2)
    state = pol.start(view)
    state, plan = pol.plan(state, view)
    assert plan.cohort.tolist() == [1, 3]  # the two fastest of the whole pool
    assert (plan.stage, plan.speed_epoch) == (0, 0)
    state = pol.observe(state, outcome([ARRIVED] * 2, [1, 2], [1, 3]), view)
    state, plan = pol.plan(state, view)
    assert plan.cohort.tolist() == [1, 3] and state.in_stage == 1  # the stage keeps its cohort
    state = pol.observe(state, outcome([ARRIVED] * 2, [1, 2], [1, 3]), view)
    assert (state.level, state.epoch, state.in_stage, state.cohort) == (1, 1, 0, None)
    state, plan = pol.plan(state, view)
    assert plan.cohort.tolist() == [1, 2, 3, 4] and plan.stage == 1  # 2 * 2 fastest


def test_async_pick_never_starts_a_busy_or_offline_device():
    pol = policies.FedBuff(buffer_size=2, concurrency=4)
    mask = np.array([True, True, False, True, False, True, True, True])
    view = FakeView(n_devices=8, mask=mask)
    busy = np.array([False, True, False, False, False, True, True, False])
    picks = {pol.pick(None, view, busy, n) for n in range(200)}
    assert picks == {0, 3, 7}
    assert pol.pick(None, view, ~mask | busy | True, 0) is None
    assert pol.pick(None, FakeView(n_devices=3), np.ones(3, dtype=bool), 0) is None


# ---------------------------------------------------------------- the engine's side of errors


@dataclass(frozen=True)
class BigWork(algorithms.TimingOnly):
    """Timing-only, with so much work per job that a finite draw overflows the duration."""

    def work(self, state: Any, clients: NDArray[np.int64]) -> NDArray[np.float64]:
        return np.full(clients.shape, 1e300)


@pytest.mark.filterwarnings("ignore:overflow encountered in multiply:RuntimeWarning")
@pytest.mark.parametrize("batched", [True, False])
def test_overflowing_durations_are_recorded_the_same_on_both_paths(batched: bool):
    sc = Scenario(
        task=None,
        algorithm=BigWork(),
        fleet=Fleet.homogeneous(10, compute=dists.Constant(1e10)),
        policy=policies.WaitAll(count=3),
        rounds=5,
    )
    res = simfl.run(sc, progress=False, batched=batched)
    assert res.meta["stop_reason"] == "error" and res.meta["status"] == "error"
    assert "job durations must be finite" in res.meta["error"]
    assert res.meta["sim_time"] == 0.0 and len(res.rounds) == 0
    with pytest.raises(ValueError, match="job durations must be finite"):
        simfl.run(sc, progress=False, batched=batched, on_error="raise")


@dataclass(frozen=True)
class FailsLater(policies.WaitAll):
    """A policy that raises on its fourth round."""

    def plan(self, state: None, view: Any) -> tuple[None, policies.RoundPlan]:
        if view.round == 3:
            raise RuntimeError("policy bug")
        return super().plan(state, view)


def test_a_failing_policy_is_recorded_with_every_row():
    sc = Scenario(
        task=None,
        algorithm=algorithms.TimingOnly(),
        fleet=Fleet.homogeneous(10, compute=dists.Exponential(1.0)),
        policy=FailsLater(count=3),
        rounds=10,
    )
    res = simfl.run(sc, progress=False)
    assert res.meta["stop_reason"] == "error" and "policy bug" in res.meta["error"]
    assert len(res.rounds) == 3 and len(res.clients) == 9
    with pytest.raises(RuntimeError, match="policy bug"):
        simfl.run(sc, progress=False, on_error="raise")


def test_an_empty_cohort_closes_the_round_at_once():
    @dataclass(frozen=True)
    class Nobody(policies.WaitAll):
        def plan(self, state: None, view: Any) -> tuple[None, policies.RoundPlan]:
            return None, policies.RoundPlan(np.zeros(0, dtype=np.int64))

    sc = Scenario(
        task=None,
        algorithm=algorithms.TimingOnly(),
        fleet=Fleet.homogeneous(5, compute=dists.Exponential(1.0)),
        policy=Nobody(),
        max_time=10.0,
    )
    res = simfl.run(sc, progress=False)
    # the clock cannot advance: the stall rule stops the run after the first empty round
    assert res.meta["stop_reason"] == "stalled" and len(res.rounds) == 1
    assert res.rounds["status"].iloc[0] == "empty" and len(res.clients) == 0


def test_srpfl_observed_speeds_rank_by_mean_arrived_durations():
    pol = policies.SRPFL(n0=2, rounds_per_stage=1, speeds="observed")
    view = FakeView(n_devices=6, last_row={"train_loss": 1.0})
    state = pol.start(view)
    # stage 0: nothing observed, every device ties at 0: the first two of the pool by id
    state, plan = pol.plan(state, view)
    np.testing.assert_array_equal(plan.cohort, [0, 1])
    # observe: device 0 took 5 s, device 1 arrived in 1 s; a dropped job teaches nothing
    seen = outcome([ARRIVED, ARRIVED, DROPPED], [5.0, 1.0, 0.5], devices=[0, 1, 2])
    state = pol.observe(state, seen, view)
    np.testing.assert_array_equal(state.seen[0], [5.0, 1.0, 0, 0, 0, 0])
    np.testing.assert_array_equal(state.seen[1], [1, 1, 0, 0, 0, 0])
    # stage 1 (4 participants): the unobserved 2-5 rank first (mean 0), then 1 (1 s), then 0
    view.round = 1
    state, plan = pol.plan(state, view)
    np.testing.assert_array_equal(plan.cohort, [2, 3, 4, 5])
    # a second observation of device 0 averages: (5 + 3) / 2 = 4 s
    state = pol.observe(state, outcome([ARRIVED], [3.0], devices=[0]), view)
    assert state.seen[0][0] / state.seen[1][0] == 4.0
    with pytest.raises(ValueError, match=r"SRPFL\.speeds"):
        policies.SRPFL(speeds="guess")
