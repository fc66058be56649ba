"""The timing-only asynchronous loop gives exactly the frames of the SimPy reference loop."""

import dataclasses

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simfl import Fleet, Scenario, algorithms, dists, policies, run
from simfl.engine import async_timing, asynchronous
from simfl.engine.async_planned import PlannedAsyncLoop, chunk_sums
from simfl.engine.async_timing import TimingAsyncLoop
from simfl.engine.context import RunContext
from simfl.engine.playbacks import choose
from simfl.results import Recorder
from tests.helpers import linear_scenario, timing_scenario


def assert_same(sc: Scenario) -> pd.DataFrame:
    """Run ``sc`` on the timing loop and the SimPy loop; identical to the bit."""
    ctx = RunContext(sc, lazy=True, progress=False, on_error="record")
    assert choose(ctx).name == "planned-timing"
    fast = run(sc, progress=False)
    assert fast.meta["playback"] == "planned-timing"
    ref = run(sc, progress=False, batched=False)
    pd.testing.assert_frame_equal(fast.rounds, ref.rounds, check_exact=True)
    pd.testing.assert_frame_equal(fast.clients, ref.clients, check_exact=True)
    for key in ("stop_reason", "status", "sim_time", "error"):
        assert fast.meta[key] == ref.meta[key], key
    return fast.clients


@st.composite
def timing_scenarios(draw: st.DrawFn) -> Scenario:
    """Few devices (busy picks often), ties, dropouts, staleness limits, both stop rules."""
    n = draw(st.integers(2, 30))
    concurrency = draw(st.integers(1, n))
    max_staleness = draw(st.sampled_from([None, 0, 2]))
    if draw(st.booleans()):
        policy: policies.AsyncPolicy = policies.FedBuff(
            buffer_size=draw(st.integers(1, 6)),
            concurrency=concurrency,
            max_staleness=max_staleness,
        )
    else:
        policy = policies.FedAsync(concurrency=concurrency, max_staleness=max_staleness)
    compute = draw(
        st.sampled_from(
            [dists.Exponential(mean=1.0), dists.Constant(1.0), dists.Uniform(low=1.0, high=2.0)]
        )
    )
    fleet = Fleet.homogeneous(
        n,
        compute=compute,
        dropout_rate=draw(st.sampled_from([0.0, 0.3, 2.0])),
        bandwidth_down=draw(st.sampled_from([1e3, float("inf")])),
        bandwidth_up=2e3,
        latency=draw(st.sampled_from([0.0, 0.05])),
    )
    stop = draw(st.sampled_from(["rounds", "max_time", "both"]))
    return Scenario(
        task=None,
        algorithm=algorithms.TimingOnly(bytes_down=draw(st.sampled_from([0, 300])), bytes_up=50),
        fleet=fleet,
        policy=policy,
        rounds=draw(st.integers(1, 40)) if stop != "max_time" else None,
        max_time=draw(st.sampled_from([2.5, 8.0])) if stop != "rounds" else None,
        seed=draw(st.integers(0, 2**16)),
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(timing_scenarios(), st.sampled_from([1, 3, 16, 8192]))
def test_timing_loop_equals_the_simpy_loop(sc: Scenario, block: int) -> None:
    """Any block size (small ones end blocks and miss speculated job indices often)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(async_timing, "BLOCK", block)
        assert_same(sc)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(timing_scenarios(), st.sampled_from([1, 3, 16, 8192]))
def test_the_fedasync_loop_equals_the_simpy_loop(sc: Scenario, block: int) -> None:
    """FedAsync without a staleness limit plays a loop of its own (every job recorded as
    handled, the aggregations found at the end): the same frames."""
    assert isinstance(sc.policy, policies.AsyncPolicy)
    policy = policies.FedAsync(concurrency=sc.policy.concurrency)
    sc = dataclasses.replace(sc, policy=policy)
    loop = TimingAsyncLoop(RunContext(sc, lazy=True, progress=False, on_error="record"), policy)
    assert loop.single
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(async_timing, "BLOCK", block)
        assert_same(sc)


@pytest.mark.parametrize("policy", [policies.FedAsync(concurrency=3), policies.FedBuff(2, 3)])
def test_a_run_whose_every_job_drops_stalls_identically(policy: policies.AsyncPolicy) -> None:
    """``STALL_JOBS`` drops in a row (here 40) stop both loops as ``stalled``, alike."""
    sc = timing_scenario(n=6, policy=policy, rounds=5, dropout_rate=1e6)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(async_timing, "STALL_JOBS", 40)
        mp.setattr(asynchronous, "STALL_JOBS", 40)
        clients = assert_same(sc)
        assert run(sc, progress=False).meta["stop_reason"] == "stalled"
    assert (clients["status"] == "dropped").sum() == 40


@pytest.mark.parametrize(("block", "seed"), [(2, 0), (8192, 0), (8192, 3)])
@pytest.mark.parametrize("policy", [policies.FedAsync(concurrency=3), policies.FedBuff(2, 3)])
def test_a_job_whose_plan_overflows_mid_run_is_refused_identically(
    policy: policies.AsyncPolicy, block: int, seed: int
) -> None:
    """Jobs on the last device overflow (its rows in a block end before them): the run
    records the refusal where the reference does, after the jobs handled before it."""
    sc = timing_scenario(n=30, policy=policy, rounds=40, seed=seed)
    sc = dataclasses.replace(
        sc,
        algorithm=algorithms.TimingOnly(work_units=1e300),
        fleet=sc.fleet.with_scale([1.0] * 29 + [1e10]),
    )
    with pytest.MonkeyPatch.context() as mp, np.errstate(over="ignore"):
        mp.setattr(async_timing, "BLOCK", block)
        fast = run(sc, progress=False)
        ref = run(sc, progress=False, batched=False)
    pd.testing.assert_frame_equal(fast.rounds, ref.rounds, check_exact=True)
    pd.testing.assert_frame_equal(fast.clients, ref.clients, check_exact=True)
    assert fast.meta["status"] == ref.meta["status"] == "error"
    assert fast.meta["sim_time"] == ref.meta["sim_time"]
    last = fast.meta["error"].strip().splitlines()[-1]  # (the tracebacks' lines differ)
    assert last == ref.meta["error"].strip().splitlines()[-1]
    assert "job durations must be finite" in last
    assert len(fast.clients) > 10 and len(fast.rounds) > 5


@pytest.mark.parametrize("buffer", [1, 10])
def test_a_busy_fleet_plans_many_jobs_alone_and_stays_identical(buffer: int) -> None:
    """Concurrency close to the fleet size: most pre-drawn picks are busy."""
    sc = timing_scenario(
        n=12,
        policy=policies.FedBuff(buffer_size=buffer, concurrency=11),
        rounds=300 // buffer,
        dropout_rate=0.1,
    )
    clients = assert_same(sc)
    assert len(clients) > 300


def test_the_timing_loop_is_chosen_only_when_nothing_is_computed() -> None:
    sc = timing_scenario(n=10, policy=policies.FedBuff(buffer_size=2, concurrency=3))
    pol = sc.policy
    ctx = RunContext(sc, lazy=True, progress=False, on_error="record")
    assert choose(ctx).name == "planned-timing"
    assert type(choose(ctx).async_loop(ctx, pol)) is TimingAsyncLoop  # type: ignore[arg-type]
    eager = RunContext(sc, lazy=False, progress=False, on_error="record")
    assert choose(eager).name == "planned"
    assert type(choose(eager).async_loop(eager, pol)) is PlannedAsyncLoop  # type: ignore[arg-type]
    ref = RunContext(sc, lazy=True, progress=False, on_error="record")
    assert choose(ref, batched=False).name == "reference"
    fedavg = linear_scenario(algorithm=algorithms.FedAvg(local_steps=1), policy=pol, n=10)
    ctx = RunContext(fedavg, lazy=True, progress=False, on_error="record")
    assert choose(ctx).name == "planned"


def test_progress_is_reported_after_every_aggregation() -> None:
    sc = timing_scenario(n=15, policy=policies.FedAsync(concurrency=4), rounds=25)
    seen: list[float] = []
    res = run(sc, progress=seen.append)
    assert len(seen) == 25 == len(res.rounds)
    assert seen == [(k + 1) / 25 for k in range(25)]


def test_grouped_chunk_sums_equal_numpy_sums_bit_for_bit() -> None:
    rng = np.random.default_rng(4)
    sizes = rng.integers(0, 140, size=400)
    ends = np.cumsum(sizes)
    begins = ends - sizes
    values = rng.uniform(0, 1, int(ends[-1])) * 10.0 ** rng.integers(-8, 17, int(ends[-1]))
    got = chunk_sums(values, begins, ends)
    want = [float(values[a:b].sum()) for a, b in zip(begins, ends, strict=True)]
    assert got.tolist() == want


def test_round_columns_follow_the_rows() -> None:
    ints = ("stage", "n_selected", "n_arrived", "n_dropped", "n_late", "n_cancelled")
    rec = Recorder(())
    rec.add_round({"round": 0, "time": 1.0, "status": "ok", **dict.fromkeys(ints, 0)})
    tail = {c: np.array([0, 0]) for c in ints}
    rec.add_round_columns({"round": np.array([1, 2]), "status": np.array(["empty", "ok"]), **tail})
    assert rec.n_rounds == 3
    with pytest.raises(RuntimeError, match="add_round_columns"):
        rec.add_round({"round": 3})
    rounds = rec.results({}).rounds
    assert rounds["round"].tolist() == [0, 1, 2]
    assert rounds["status"].tolist() == ["ok", "empty", "ok"]
    assert rounds["time"].iloc[0] == 1.0 and rounds["time"].iloc[1:].isna().all()
    with pytest.raises(ValueError, match="different lengths"):
        Recorder(()).add_round_columns({"round": np.arange(2), "time": np.arange(3.0)})
