"""Availability on private links resolved from the job plans equals the live job processes.

``run(..., batched=False)`` is the reference: every job a :class:`~simfl.engine.live`
process, stage by stage, pausing or aborting when its device goes offline. The default
resolves each job's events from its plan and its device's on-intervals
(:mod:`simfl.engine.offline`) and plays flat synchronous rounds without job events; the two
must give the same frames bit for bit, ties, deadlines, dropouts, partial work and ``max_time``
included.
"""

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simfl import Fleet, Scenario, algorithms, dists, policies, run
from simfl.engine.playbacks.resolved import ResolvedPlayback
from simfl.engine.players import LiveJobs
from simfl.fleet import Availability
from tests.helpers import linear_scenario

# the playback (and what it handed to the reference) differs between the two on purpose
SKIP = ("host_seconds", "batched", "scenario_repr", "playback", "playback_fallbacks")
TIES = dists.Empirical([0.5, 1.0, 1.0, 2.0])  # few values: jobs and spells end together
TRACE = Availability(
    [[(0.0, 3.0), (5.0, 6.0), (9.0, 30.0)], [(0.0, 1.5), (2.0, 30.0)], [(0.0, 30.0)]]
)


def scenario(av, offline, compute, policy, rounds=15, max_time=None, **fleet_kw):
    fleet = Fleet.homogeneous(av.size, compute=compute, **fleet_kw)
    return Scenario(
        task=None,
        algorithm=algorithms.TimingOnly(),
        fleet=fleet.with_availability(av, offline),
        policy=policy,
        rounds=rounds,
        max_time=max_time,
    )


def assert_same(sc):
    fast = run(sc, progress=False)
    slow = run(sc, progress=False, batched=False)
    pd.testing.assert_frame_equal(fast.rounds, slow.rounds, check_exact=True)
    pd.testing.assert_frame_equal(fast.clients, slow.clients, check_exact=True)
    assert slow.meta["playback"] == "reference" and not slow.meta["playback_fallbacks"]
    assert {k: v for k, v in fast.meta.items() if k not in SKIP} == {
        k: v for k, v in slow.meta.items() if k not in SKIP
    }
    return fast


def no_job_processes(monkeypatch):
    """Make starting live job processes fail: the run must resolve every job."""

    def refuse(*args, **kwargs):
        raise AssertionError("a live job process was started")

    monkeypatch.setattr(LiveJobs, "start", refuse)


# ----------------------------------------------------------------- hand-computed cases
def test_abort_hand_computed(monkeypatch):
    # jobs of 0.25 + 2.0 + 0.25 s; device 0 is on [0, 3), [5, 6), [9, 30); device 1 on
    # [0, 1.5), [2, 30); device 2 always
    sc = scenario(TRACE, "abort", dists.Constant(2.0), policies.WaitAll(), rounds=3, latency=0.25)
    no_job_processes(monkeypatch)
    jobs = run(sc, progress=False).clients.set_index(["round", "device"])
    cols = ["status", "t_start", "t_end", "download", "compute", "upload"]
    got = {k: tuple(v) for k, v in jobs[cols].iterrows()}
    assert got == {
        (0, 0): ("arrived", 0.0, 2.5, 0.25, 2.0, 0.25),
        (0, 1): ("dropped", 0.0, 1.5, 0.25, 1.25, 0.0),  # offline at 1.5 while computing
        (0, 2): ("arrived", 0.0, 2.5, 0.25, 2.0, 0.25),
        (1, 0): ("dropped", 2.5, 3.0, 0.25, 0.25, 0.0),
        (1, 1): ("arrived", 2.5, 5.0, 0.25, 2.0, 0.25),
        (1, 2): ("arrived", 2.5, 5.0, 0.25, 2.0, 0.25),
        (2, 0): ("dropped", 5.0, 6.0, 0.25, 0.75, 0.0),
        (2, 1): ("arrived", 5.0, 7.5, 0.25, 2.0, 0.25),
        (2, 2): ("arrived", 5.0, 7.5, 0.25, 2.0, 0.25),
    }
    assert (jobs["bytes_down"] >= 0).all()


def test_pause_hand_computed(monkeypatch):
    sc = scenario(TRACE, "pause", dists.Constant(2.0), policies.WaitAll(), rounds=3, latency=0.25)
    no_job_processes(monkeypatch)
    res = run(sc, progress=False)
    jobs = res.clients.set_index(["round", "device"])
    cols = ["status", "t_start", "t_end", "download", "compute", "upload"]
    got = {k: tuple(v) for k, v in jobs[cols].iterrows()}
    assert got == {
        (0, 0): ("arrived", 0.0, 2.5, 0.25, 2.0, 0.25),
        (0, 1): ("arrived", 0.0, 3.0, 0.25, 2.0, 0.25),  # paused over [1.5, 2)
        (0, 2): ("arrived", 0.0, 2.5, 0.25, 2.0, 0.25),
        # device 0 went off at 3.0 when round 1 started: not selected
        (1, 1): ("arrived", 3.0, 5.5, 0.25, 2.0, 0.25),
        (1, 2): ("arrived", 3.0, 5.5, 0.25, 2.0, 0.25),
        (2, 0): ("arrived", 5.5, 11.0, 0.25, 2.0, 0.25),  # 0.25 s of compute, paused 6 -> 9
        (2, 1): ("arrived", 5.5, 8.0, 0.25, 2.0, 0.25),
        (2, 2): ("arrived", 5.5, 8.0, 0.25, 2.0, 0.25),
    }
    assert res.rounds["time"].tolist() == [3.0, 5.5, 11.0]


def test_a_round_stopped_while_a_job_is_paused_records_its_busy_time(monkeypatch):
    # round 2 closes at its 4 s deadline (t = 9.5) while device 0 is paused (off 6 -> 9 ...
    # back at 9.0, computing again since): 0.25 + 0.5 s of compute by then
    sc = scenario(
        TRACE, "pause", dists.Constant(2.0), policies.Deadline(4.0), rounds=3, latency=0.25
    )
    assert_same(sc)
    no_job_processes(monkeypatch)
    jobs = run(sc, progress=False).clients.set_index(["round", "device"])
    late = jobs.loc[(2, 0)]
    assert late["status"] == "late" and late["t_end"] == 9.5
    assert (late["download"], late["compute"], late["upload"]) == (0.25, 0.75, 0.0)


# ----------------------------------------------------------------- ties: played live
@pytest.mark.parametrize(
    "policy",
    [
        policies.Deadline(1.0),  # every job ends exactly at the deadline
        policies.FastestK(k=2, overcommit=1.0),  # several jobs end at the quota's instant
    ],
    ids=["deadline", "quota"],
)
def test_rounds_whose_events_tie_at_the_close_equal_the_live_processes(policy):
    av = Availability.exponential(8, mean_on=5.0, mean_off=1.0, horizon=200.0, seed=2)
    fast = assert_same(scenario(av, "pause", dists.Constant(1.0), policy, rounds=8))
    assert len(fast.clients) > 0


@dataclasses.dataclass(frozen=True)
class FastestKWithDeadline(policies.FastestK):
    """Over-selection and a deadline: the quota's arrival can fall on the deadline."""

    deadline: float = 1.0

    def plan(self, state, view):
        state, plan = super().plan(state, view)
        return state, dataclasses.replace(plan, deadline=self.deadline)


def test_a_quota_arrival_exactly_at_the_deadline_equals_the_live_processes():
    # jobs of 1 s or 3 s: the first arrival often lands exactly on the 1 s deadline, where the
    # order of the events (the deadline's, the job's zero-second upload) decides the statuses
    av = Availability.always(6)
    policy = FastestKWithDeadline(k=1, overcommit=1.0, deadline=1.0)
    fast = assert_same(scenario(av, "abort", dists.Empirical([1.0, 3.0]), policy, rounds=10))
    assert set(fast.clients["status"]) == {"late"}  # the upload finishes after the deadline


def test_jobs_paused_for_ever_end_the_run_offline_alike():
    # churn: devices leave for good; paused jobs wait for them until nothing is left to happen
    av = Availability.churn(10, lifetime=dists.Exponential(mean=3.0), join_window=2.0, seed=1)
    sc = scenario(av, "pause", dists.Exponential(mean=1.0), policies.WaitAll(), rounds=30)
    fast = assert_same(sc)
    assert fast.meta["stop_reason"] == "offline"


def test_training_under_availability_equals_the_live_processes():
    base = linear_scenario(policy=policies.FastestK(k=10, overcommit=0.5), n=40, rounds=12)
    av = Availability.exponential(40, mean_on=0.8, mean_off=0.4, horizon=500.0, seed=5)
    for mode in ("abort", "pause"):
        fleet = base.fleet.with_availability(av, mode)
        sc = Scenario(
            task=base.task,
            algorithm=base.algorithm,
            fleet=fleet,
            policy=base.policy,
            rounds=base.rounds,
        )
        fast = assert_same(sc)
        assert fast.rounds["n_arrived"].sum() > 0
        assert set(fast.clients["status"]) > {"arrived"}  # jobs met their devices going off


# ----------------------------------------------------------------- the property
def _availability(kind: str, n: int, seed: int, trace: list[list[tuple[float, float]]]):
    if kind == "exponential":
        return Availability.exponential(n, mean_on=1.5, mean_off=1.0, horizon=300.0, seed=seed)
    if kind == "diurnal":
        return Availability.diurnal(
            n, mean_on=1.0, low=0.2, high=0.8, horizon=300.0, period=20.0, seed=seed
        )
    if kind == "correlated":  # devices go down together with their group: ties
        groups = Availability.exponential(3, mean_on=2.0, mean_off=1.0, horizon=300.0, seed=seed)
        return Availability.correlated(np.arange(n) % 3, groups)
    if kind == "churn":
        return Availability.churn(
            n, lifetime=dists.Exponential(mean=8.0), join_window=4.0, seed=seed
        )
    return Availability(trace, known_until=300.0)


POLICIES = [
    policies.WaitAll(count=5),
    policies.Deadline(1.5, count=6),
    policies.Deadline(2.0, count=6, partial=True),
    policies.FastestK(k=3, overcommit=1.0),
    FastestKWithDeadline(k=3, overcommit=1.0, deadline=1.5),
    policies.AdaptiveDeadline(fraction=0.5, initial=1.0),
    policies.FedAsync(concurrency=4),
    policies.FedBuff(buffer_size=3, concurrency=5),
]

N = 10
# on-intervals on a half-second grid, so that spells, jobs and deadlines meet exactly
_interval = st.tuples(st.integers(0, 60), st.integers(1, 12)).map(
    lambda a: (a[0] * 0.5, a[0] * 0.5 + a[1] * 0.5)
)
_trace = st.lists(st.lists(_interval, max_size=6), min_size=N, max_size=N)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["exponential", "diurnal", "churn", "correlated", "trace"]),
    trace=_trace,
    mode=st.sampled_from(["abort", "pause"]),
    compute=st.sampled_from([dists.Exponential(mean=1.0), TIES]),
    latency=st.sampled_from([0.0, 0.25]),
    dropout=st.sampled_from([0.0, 0.3]),
    policy=st.sampled_from(POLICIES),
    max_time=st.sampled_from([None, 9.0, 20.5]),
    seed=st.integers(0, 3),
)
def test_resolved_equals_live(kind, trace, mode, compute, latency, dropout, policy, max_time, seed):
    av = _availability(kind, N, seed, trace)
    sc = scenario(
        av,
        mode,
        compute,
        policy,
        rounds=12,
        max_time=max_time,
        latency=latency,
        dropout_rate=dropout,
    )
    assert_same(sc)


def test_resolved_playback_is_chosen_for_availability_on_private_links():
    from simfl.engine.context import RunContext
    from simfl.engine.playbacks import choose

    sc = scenario(TRACE, "abort", dists.Constant(1.0), policies.WaitAll())
    fast = RunContext(sc, lazy=True, progress=False, on_error="raise")
    slow = RunContext(sc, lazy=True, progress=False, on_error="raise")
    assert isinstance(choose(fast), ResolvedPlayback) and choose(fast).name == "resolved"
    assert choose(slow, batched=False).name == "reference" and isinstance(slow.jobs, LiveJobs)
    assert math.isinf(choose(fast).pending_until) and choose(fast).pending_until < 0
