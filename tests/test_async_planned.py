"""The event-free asynchronous loop gives exactly the frames of the SimPy reference loop."""

import dataclasses

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simfl import Fleet, Scenario, Target, algorithms, dists, policies, run
from simfl.algorithms.base import Updates
from simfl.engine import async_planned
from simfl.engine.async_planned import PlannedAsyncLoop
from simfl.engine.asynchronous import AsyncLoop
from simfl.engine.context import RunContext
from simfl.engine.playbacks import choose
from simfl.policies import FedAsync, FedBuff
from tests.helpers import Ledger, linear_scenario, timing_scenario


def assert_same(sc: Scenario, **kw: object) -> tuple[object, object]:
    """Run ``sc`` on both loops; the frames must be identical to the bit."""
    fast = run(sc, progress=False, **kw)
    ref = run(sc, progress=False, batched=False, **kw)
    pd.testing.assert_frame_equal(fast.rounds, ref.rounds, check_exact=True)
    pd.testing.assert_frame_equal(fast.clients, ref.clients, check_exact=True)
    for key in ("stop_reason", "status", "sim_time"):
        assert fast.meta[key] == ref.meta[key], key
    return fast, ref


@st.composite
def async_scenarios(draw: st.DrawFn) -> Scenario:
    n = draw(st.integers(2, 25))
    concurrency = draw(st.integers(1, n))
    max_staleness = draw(st.sampled_from([None, 0, 1, 3]))
    if draw(st.booleans()):
        policy: policies.AsyncPolicy = FedBuff(
            buffer_size=draw(st.integers(1, 5)),
            concurrency=concurrency,
            max_staleness=max_staleness,
        )
    else:
        policy = FedAsync(concurrency=concurrency, max_staleness=max_staleness)
    # Constant compute on equal devices makes many jobs end at the same instant (ties)
    compute = draw(
        st.sampled_from(
            [
                dists.Exponential(mean=1.0),
                dists.Constant(1.0),
                dists.Constant(0.0),  # jobs that end where they start
                dists.Uniform(low=1.0, high=2.0),
            ]
        )
    )
    dropout = draw(st.sampled_from([0.0, 0.2, 1.5]))
    stop = draw(st.sampled_from(["rounds", "max_time", "both"]))
    rounds = draw(st.integers(1, 30)) if stop != "max_time" else None
    max_time = draw(st.sampled_from([3.0, 7.5, 20.0])) if stop != "rounds" else None
    fleet = Fleet.homogeneous(n, compute=compute, dropout_rate=dropout, latency=0.0)
    return Scenario(
        task=None,
        algorithm=algorithms.TimingOnly(),
        fleet=fleet,
        policy=policy,
        rounds=rounds,
        max_time=max_time,
        seed=draw(st.integers(0, 2**16)),
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(async_scenarios())
def test_fast_path_equals_the_simpy_loop(sc: Scenario) -> None:
    assert_same(sc)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(async_scenarios(), st.integers(1, 40))
def test_small_blocks_and_windows_change_nothing(sc: Scenario, block: int) -> None:
    """Blocks of pre-drawn picks end and speculative job indices miss often: still identical."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(async_planned, "BLOCK", block)
        mp.setattr(async_planned, "WINDOW", max(1, block // 3))
        assert_same(dataclasses.replace(sc, algorithm=Ledger()))


POLICIES = [
    FedBuff(buffer_size=4, concurrency=10),
    FedAsync(concurrency=6, max_staleness=2),
    FedBuff(buffer_size=3, concurrency=30, max_staleness=1),
]


@pytest.mark.parametrize("policy", POLICIES, ids=repr)
@pytest.mark.parametrize(
    "algorithm",
    [algorithms.FedRep(local_steps=2), algorithms.FedAvg(local_steps=2)],
    ids=["fedrep", "fedavg"],
)
def test_linear_training_is_identical(policy: policies.AsyncPolicy, algorithm: object) -> None:
    sc = linear_scenario(algorithm=algorithm, policy=policy, n=40, rounds=25, dropout_rate=0.1)
    fast, _ = assert_same(dataclasses.replace(sc, eval_every=3))
    assert fast.rounds["n_arrived"].sum() > 0
    applied = fast.rounds["n_arrived"] > 0
    assert np.isfinite(fast.rounds["train_loss"][applied]).all()


def test_target_stop_and_eager_runs_are_identical() -> None:
    sc = linear_scenario(policy=FedBuff(buffer_size=2, concurrency=8), n=30)
    sc = dataclasses.replace(sc, rounds=None, max_time=500.0, target=Target("distance", below=0.3))
    fast, _ = assert_same(sc)
    assert fast.meta["stop_reason"] == "target"
    fleet = Fleet.homogeneous(30, compute=dists.Exponential(mean=1.0), dropout_rate=0.3)
    assert_same(dataclasses.replace(sc, fleet=fleet), lazy=False)


def test_energy_columns_are_identical() -> None:
    fleet = Fleet.homogeneous(20, compute=dists.Exponential(mean=1.0), dropout_rate=0.3)
    table = np.tile([[1.0, 1e-6, 1e-6, 0.1]], (20, 1))
    sc = timing_scenario(n=20, policy=FedBuff(buffer_size=3, concurrency=7), rounds=30)
    sc = dataclasses.replace(sc, fleet=fleet.with_energy(table))
    fast, _ = assert_same(sc)
    assert "energy" in " ".join(fast.clients.columns)


def test_the_fast_loop_is_chosen_only_for_planned_runs_with_the_base_pick() -> None:
    class MyPick(FedBuff):
        def pick(self, state, view, busy, n_started):  # type: ignore[no-untyped-def]
            return int(np.flatnonzero(~busy)[0])

    sc = timing_scenario(n=10, policy=FedBuff(buffer_size=2, concurrency=3))
    ctx = RunContext(sc, lazy=True, progress=False, on_error="record")
    assert isinstance(choose(ctx).async_loop(ctx, sc.policy), PlannedAsyncLoop)  # type: ignore[arg-type]
    ref = RunContext(sc, lazy=True, progress=False, on_error="record")
    assert choose(ref, batched=False).name == "reference"
    mine = MyPick(buffer_size=2, concurrency=3)
    ctx = RunContext(
        dataclasses.replace(sc, policy=mine), lazy=True, progress=False, on_error="record"
    )
    assert choose(ctx).name == "reference"
    res = run(dataclasses.replace(sc, policy=mine), progress=False)
    first = res.clients[res.clients["t_start"] == 0.0]
    assert sorted(first["device"]) == [0, 1, 2]  # the subclass's pick was used
    assert AsyncLoop  # the reference loop (used above) stays importable


def test_default_job_updates_match_one_at_a_time() -> None:
    """The base job_updates gives each job's update from its own state and key, in order."""
    sc = linear_scenario(n=12)
    ctx = RunContext(sc, lazy=True, progress=False, on_error="record")
    alg, data, streams = sc.algorithm, ctx.data, ctx.streams
    s0 = ctx.state
    s1 = alg.with_shared(s0, {"representation": s0.representation[::-1].copy()})
    states = [s0, s1, s0, s1, s0]
    clients = np.array([3, 4, 5, 3, 7], dtype=np.int64)
    keys = [0, 1, 0, 1, 2]
    got = alg.job_updates(states, data, clients, keys, streams)
    one = Updates.concat(
        [
            alg.local_updates(s, data, clients[i : i + 1], k, streams)
            for i, (s, k) in enumerate(zip(states, keys, strict=True))
        ]
    )
    np.testing.assert_array_equal(got.clients, clients)
    for name in one.params:
        np.testing.assert_array_equal(got.params[name], one.params[name])
    np.testing.assert_array_equal(got.loss, one.loss)


@pytest.mark.parametrize("policy", [FedBuff(buffer_size=3, concurrency=5), FedAsync(concurrency=4)])
def test_failures_are_recorded_identically(policy: policies.AsyncPolicy) -> None:
    """An algorithm raising mid-run, and a job too long to plan, end both loops alike."""
    sc = timing_scenario(n=12, policy=policy, rounds=30, dropout_rate=0.2)
    fast, _ = assert_same(dataclasses.replace(sc, algorithm=Ledger(fail_at=2)))
    assert fast.meta["status"] == "error" and "boom" in fast.meta["error"]
    huge = dataclasses.replace(
        sc,
        algorithm=algorithms.TimingOnly(work_units=1e300),
        fleet=Fleet.homogeneous(12, compute=dists.Exponential(mean=1e10)),
    )
    with np.errstate(over="ignore"):
        fast, _ = assert_same(huge)
    assert "job durations must be finite" in fast.meta["error"]
