"""Batched synchronous rounds (no job events) give exactly what one process per job gives.

``run(..., batched=False)`` is the straightforward path: every device job is a SimPy process.
The default plays a synchronous round's cohort out from its plan in one vectorised step. The
two must agree bit for bit, ties included: constant and few-valued durations make jobs finish
at the same instant, at the deadline and at ``max_time``.
"""

import dataclasses

import numpy as np
import pandas as pd
import pytest

from simfl import Fleet, Scenario, algorithms, dists, policies, run
from tests.helpers import Ledger, linear_scenario, timing_scenario

TIES = dists.Empirical([0.5, 1.0, 1.0, 2.0])  # few values: many jobs end at one instant


# host time differs; the repr of a Ledger shows what it logged (it runs twice)
# the playback (and what it handed to the reference) differs between the two on purpose
SKIP = ("host_seconds", "batched", "scenario_repr", "playback", "playback_fallbacks")


def assert_same(sc: Scenario, **kw) -> tuple:
    fast = run(sc, progress=False, **kw)
    slow = run(sc, progress=False, batched=False, **kw)
    pd.testing.assert_frame_equal(fast.rounds, slow.rounds, check_exact=True)
    pd.testing.assert_frame_equal(fast.clients, slow.clients, check_exact=True)
    assert slow.meta["playback"] == "reference" and not slow.meta["playback_fallbacks"]
    assert {k: v for k, v in fast.meta.items() if k not in SKIP} == {
        k: v for k, v in slow.meta.items() if k not in SKIP
    }
    return fast, slow


POLICIES = [
    policies.WaitAll(fraction=0.3),
    policies.Deadline(0.8, fraction=0.4),
    policies.Deadline(1.0, count=8),  # deadline equal to a common duration: ties at it
    policies.FastestK(k=3, overcommit=1.0),
    policies.FastestK(k=5),
    policies.AdaptiveDeadline(fraction=0.5, initial=1.0),
    policies.SRPFL(n0=2, rounds_per_stage=3),
]


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: repr(p)[:40])
@pytest.mark.parametrize("compute", [dists.Exponential(mean=1.0), TIES], ids=["exp", "ties"])
def test_batched_equals_processes_under_every_sync_policy(policy, compute):
    sc = timing_scenario(
        n=16, compute=compute, policy=policy, rounds=12, dropout_rate=0.3, latency=0.05
    )
    fast, _ = assert_same(sc)
    statuses = set(fast.clients["status"])
    assert "arrived" in statuses and len(statuses) > 1  # the cases are exercised


def test_ties_at_the_quota_are_broken_by_job_order():
    # every job takes exactly 1 s: the three lowest-numbered devices of the cohort arrive first
    sc = timing_scenario(
        n=8, compute=dists.Constant(1.0), policy=policies.FastestK(k=4, overcommit=1.0), rounds=2
    )
    fast, _ = assert_same(sc)
    first = fast.clients[fast.clients["round"] == 0].sort_values("device")
    assert list(first["status"]) == ["arrived"] * 4 + ["cancelled"] * 4
    assert (fast.rounds["time"] == [1.0, 2.0]).all()


def test_a_job_ending_exactly_at_the_deadline_is_in_time():
    sc = timing_scenario(
        n=6, compute=dists.Constant(1.0), policy=policies.Deadline(1.0, count=6), rounds=3
    )
    fast, _ = assert_same(sc)
    assert (fast.clients["status"] == "arrived").all()


@pytest.mark.parametrize("max_time", [2.0, 2.5, 3.0])
def test_a_run_ending_mid_round_or_at_its_close_records_alike(max_time):
    # rounds close at 1, 2, 3 s: max_time 2 and 3 fall exactly on a close, 2.5 inside a round
    sc = dataclasses.replace(
        timing_scenario(n=6, compute=dists.Constant(1.0), rounds=100, dropout_rate=0.2),
        max_time=max_time,
    )
    fast, _ = assert_same(sc)
    assert fast.meta["sim_time"] == max_time
    assert (fast.clients["status"] == "cancelled").any()


@pytest.mark.parametrize(
    "algorithm",
    [algorithms.FedRep(), algorithms.FedAvg(local_steps=2), Ledger()],
    ids=lambda a: a.name,
)
def test_batched_equals_processes_with_training(algorithm):
    sc = linear_scenario(
        algorithm,
        policies.Deadline(1.2, fraction=0.2),
        n=40,
        rounds=15,
        dropout_rate=0.3,
        latency=0.02,
        bandwidth_up=5e3,
    )
    assert_same(sc)


def test_partial_stages_and_bytes_match_when_stopped_mid_transfer():
    # slow uplinks: late jobs are stopped while uploading, dropped ones at every stage
    fleet = Fleet.homogeneous(
        20,
        compute=dists.Exponential(mean=0.5),
        bandwidth_down=2e3,
        bandwidth_up=500.0,  # uploads of a few tenths of a second
        latency=0.1,
        dropout_rate=0.5,
    )
    sc = dataclasses.replace(
        linear_scenario(algorithms.FedAvg(), policies.Deadline(1.5, count=10), rounds=10),
        fleet=fleet,
    )
    fast, _ = assert_same(sc)
    jobs = fast.clients
    late, dropped = jobs[jobs["status"] == "late"], jobs[jobs["status"] == "dropped"]
    full = jobs.loc[jobs["status"] == "arrived", "bytes_up"].max()
    assert ((late["upload"] > 0) & (late["bytes_up"] > 0) & (late["bytes_up"] < full)).any()
    assert (dropped["upload"] > 0).any() and (dropped["upload"] == 0).any()


def test_stopped_jobs_record_where_they_stood():
    # one job, 1 s download + 2 s compute + 1 s upload, stopped by a 2.5 s deadline
    fleet = Fleet.homogeneous(
        1, compute=dists.Constant(2.0), bandwidth_down=1.0, bandwidth_up=1.0, latency=0.0
    )

    @dataclasses.dataclass(frozen=True)
    class OneByte(Ledger):
        def payload(self, state):
            from simfl.network import Payload

            return Payload(1, 1)

    sc = Scenario(
        task=None,
        algorithm=OneByte(),
        fleet=fleet,
        policy=policies.Deadline(2.5, count=1),
        rounds=1,
    )
    fast, _ = assert_same(sc)
    job = fast.clients.iloc[0]
    assert job["status"] == "late"
    assert (job["download"], job["compute"], job["upload"]) == (1.0, 1.5, 0.0)
    assert (job["bytes_down"], job["bytes_up"]) == (1.0, 0.0)


def test_clock_lands_exactly_on_each_close():
    sc = timing_scenario(n=30, rounds=40, policy=policies.FastestK(k=7, overcommit=0.5))
    fast = run(sc, progress=False)
    arrivals = fast.clients[fast.clients["status"] == "arrived"].groupby("round")["t_end"].max()
    np.testing.assert_array_equal(fast.rounds["time"].to_numpy(), arrivals.to_numpy())


@pytest.mark.parametrize(
    "algorithm", [algorithms.FedRep(), algorithms.FedAvg(local_steps=2)], ids=lambda a: a.name
)
def test_large_cohorts_computed_in_slices_equal_one_batch(algorithm, monkeypatch):
    import simfl.engine.updates

    sc = linear_scenario(algorithm, policies.Deadline(3.0, count=1300), n=2000, rounds=3)
    sliced = run(sc, progress=False)
    slice_size = simfl.engine.updates.UPDATE_SLICE
    assert sliced.rounds["n_arrived"].min() > slice_size  # two slices or more
    monkeypatch.setattr(simfl.engine.updates, "UPDATE_SLICE", 10**9)
    whole = run(sc, progress=False)
    pd.testing.assert_frame_equal(sliced.rounds, whole.rounds, check_exact=True)
    np.testing.assert_array_equal(sliced.state.representation, whole.state.representation)
