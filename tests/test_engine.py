"""Run-level behaviour: determinism, statuses, stop rules, failures recorded not raised."""

import dataclasses
import math
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pytest

from simfl import Fleet, Scenario, Target, algorithms, dists, policies, run
from simfl.outcome import CANCELLED, DROPPED, LATE, STATUSES
from simfl.tasks.base import Task
from tests.helpers import Ledger, linear_scenario, timing_scenario


def frames_equal(a, b):
    pd.testing.assert_frame_equal(a.rounds, b.rounds, check_exact=True)
    pd.testing.assert_frame_equal(a.clients, b.clients, check_exact=True)


def test_same_seed_identical_frames_different_seed_different():
    sc = linear_scenario(
        policy=policies.Deadline(1.0, fraction=0.2),
        rounds=15,
        dropout_rate=0.2,
        latency=0.01,
        bandwidth_up=1e4,
    )
    a, b = run(sc, progress=False), run(sc, progress=False)
    frames_equal(a, b)
    c = run(dataclasses.replace(sc, seed=1), progress=False)
    assert not a.clients["t_end"].equals(c.clients["t_end"])
    assert not a.rounds["distance"].equals(c.rounds["distance"])


def test_contract_columns():
    res = run(linear_scenario(rounds=3), progress=False)
    assert list(res.rounds.columns[:15]) == [
        "round",
        "stage",
        "t_start",
        "time",
        "duration",
        "status",
        "n_selected",
        "n_arrived",
        "n_dropped",
        "n_late",
        "n_cancelled",
        "bytes_down",
        "bytes_up",
        "staleness_mean",
        "train_loss",
    ]
    assert list(res.rounds.columns[15:]) == ["distance", "test_mse"]
    assert list(res.clients.columns) == [
        "round",
        "stage",
        "device",
        "status",
        "t_start",
        "t_end",
        "download",
        "compute",
        "upload",
        "work",
        "bytes_down",
        "bytes_up",
        "staleness",
    ]
    assert list(res.clients["status"].cat.categories) == ["arrived", "late", "dropped", "cancelled"]
    assert res.meta["status"] == "ok" and res.meta["stop_reason"] == "rounds"
    assert res.state is not None and res.state.representation.shape == (20, 2)


def test_round_where_every_device_drops_is_recorded_and_the_run_goes_on():
    # hazard so high that every job fails almost at once; WaitAll must not hang
    sc = timing_scenario(n=10, rounds=5, dropout_rate=1e6, policy=policies.WaitAll(count=4))
    ledger = Ledger()
    res = run(dataclasses.replace(sc, algorithm=ledger), progress=False)
    assert len(res.rounds) == 5
    assert (res.rounds["status"] == "empty").all()
    assert (res.rounds["n_dropped"] == 4).all() and (res.rounds["n_arrived"] == 0).all()
    assert (res.clients["status"] == "dropped").all()
    assert ledger.computed == [] and ledger.aggregated == []
    assert res.rounds["time"].is_monotonic_increasing


def test_empty_rounds_keep_the_model_and_training_resumes():
    # tier of always-dropping devices: rounds that pick only them are empty
    sc = linear_scenario(n=4, rounds=40, policy=policies.WaitAll(count=1))
    fleet = Fleet.homogeneous(2, dists.Exponential(1.0)) + Fleet.homogeneous(
        2, dists.Exponential(1.0), dropout_rate=1e6
    )
    res = run(dataclasses.replace(sc, fleet=fleet), progress=False)
    empty = res.rounds["status"] == "empty"
    assert empty.any() and (~empty).any()
    # an empty round leaves the representation unchanged
    r = res.rounds
    for i in np.flatnonzero(empty.to_numpy())[:3]:
        if i > 0:
            assert r["distance"].iloc[i] == r["distance"].iloc[i - 1]


def test_max_time_stops_and_abandons_the_round_in_flight():
    sc = dataclasses.replace(timing_scenario(n=10), rounds=None, max_time=25.0)
    res = run(sc, progress=False)
    assert res.meta["stop_reason"] == "max_time"
    assert res.meta["sim_time"] == 25.0
    assert (res.rounds["time"] <= 25.0).all()
    last = res.clients[res.clients["round"] == res.clients["round"].max()]
    assert last["round"].iloc[0] == len(res.rounds)  # the abandoned round has no row
    assert set(last["status"]) <= {"cancelled", "dropped"}
    assert (last["t_end"] <= 25.0).all()


def test_target_stops_the_run():
    sc = dataclasses.replace(linear_scenario(rounds=200), target=Target("distance", below=1e-2))
    res = run(sc, progress=False)
    assert res.meta["stop_reason"] == "target"
    assert res.rounds["distance"].iloc[-1] <= 1e-2
    assert (res.rounds["distance"].iloc[:-1] > 1e-2).all()
    assert len(res.rounds) < 200


def test_eval_every_and_final_evaluation():
    res = run(dataclasses.replace(linear_scenario(rounds=7), eval_every=3), progress=False)
    evaluated = res.rounds["distance"].notna().to_numpy()
    assert evaluated.tolist() == [False, False, True, False, False, True, True]


def test_zero_time_rounds_with_only_a_time_budget_stop_instead_of_hanging():
    sc = dataclasses.replace(
        timing_scenario(n=3, compute=dists.Constant(0.0)), rounds=None, max_time=10.0
    )
    res = run(sc, progress=False)
    assert res.meta["stop_reason"] == "stalled" and len(res.rounds) == 1


def test_exception_mid_run_is_recorded_and_nothing_is_lost():
    sc = dataclasses.replace(timing_scenario(n=5, rounds=10), algorithm=Ledger(fail_at=3))
    res = run(sc, progress=False)
    assert res.meta["status"] == "error" and res.meta["stop_reason"] == "error"
    assert "boom in round 3" in res.meta["error"]
    assert res.rounds["status"].tolist() == ["ok", "ok", "ok", "error"]
    assert len(res.clients) == 4 * 5
    with pytest.raises(RuntimeError, match="boom"):
        run(sc, progress=False, on_error="raise")


def test_divergence_is_recorded():
    sc = linear_scenario(algorithm=algorithms.FedAvg(step_size=50.0, local_steps=3), rounds=50)
    res = run(sc, progress=False)
    assert res.meta["stop_reason"] == "diverged"
    assert res.rounds["status"].iloc[-1] == "diverged" or not np.isfinite(
        res.rounds["test_mse"].iloc[-1]
    )
    assert len(res.rounds) < 50 and (res.rounds["status"].iloc[:-1] == "ok").all()
    # whichever way it was found, the divergence is visible
    assert res.rounds["status"].iloc[-1] == "diverged"
    assert res.meta["status"] == "diverged" and not res.ok
    assert "diverged   the run stopped" in res.summary()


class _LossTask(Task):
    """A task reporting one metric, ``loss`` (smaller is better); its data are nothing."""

    metrics: ClassVar[tuple[str, ...]] = ("loss",)
    goals: ClassVar[dict[str, str]] = {"loss": "min"}

    def build(self, n_clients: int, streams: Any) -> None:
        return None


@dataclasses.dataclass(frozen=True)
class _BlowsUpAfterTwo(Ledger):
    """Finite updates, but the metric of the model after the third aggregation is infinite."""

    def evaluate(self, state: Any, data: Any) -> dict[str, float]:
        return {"loss": 1.0 / (1 + len(state)) if len(state) < 3 else math.inf}


def test_divergence_found_only_by_a_metric_marks_its_round_and_the_run():
    sc = dataclasses.replace(timing_scenario(n=5, rounds=10), task=_LossTask())
    sc = dataclasses.replace(sc, algorithm=_BlowsUpAfterTwo())
    res = run(sc, progress=False)
    assert res.meta["stop_reason"] == "diverged" and res.meta["status"] == "diverged"
    assert res.rounds["status"].tolist() == ["ok", "ok", "diverged"]
    assert res.rounds["loss"].tolist()[:2] == [0.5, 1 / 3] and math.isinf(res.rounds["loss"][2])
    assert not res.ok
    summary = res.summary()
    assert "stopped by: diverged   status: diverged" in summary
    assert "bad rounds 1 " in summary and "diverged   the run stopped" in summary
    assert len(res.clients) == 3 * 5  # nothing computed is lost


def test_adding_a_device_does_not_change_the_other_devices_draws():
    a = run(timing_scenario(n=12, rounds=20, dropout_rate=0.3), progress=False).clients
    b = run(timing_scenario(n=13, rounds=20, dropout_rate=0.3), progress=False).clients
    b = b[b["device"] < 12].reset_index(drop=True)
    assert np.array_equal(a["compute"][a.status == "arrived"], b["compute"][a.status == "arrived"])
    assert np.array_equal(a["status"], b["status"])


def test_timing_does_not_depend_on_the_algorithm():
    # same fleet, same policy, same seed: FedRep and FedAvg see the same jobs (equal payloads
    # would give equal times; here the network is free)
    a = run(linear_scenario(rounds=10), progress=False).clients
    b = run(linear_scenario(algorithms.FedAvg(), rounds=10), progress=False).clients
    pd.testing.assert_frame_equal(
        a.drop(columns=["bytes_down", "bytes_up"]),
        b.drop(columns=["bytes_down", "bytes_up"]),
        check_exact=True,
    )


def test_fastest_k_cancels_the_rest_and_records_their_partial_time():
    sc = timing_scenario(n=10, rounds=5, policy=policies.FastestK(k=3, overcommit=1.0))
    res = run(sc, progress=False)
    for _, jobs in res.clients.groupby("round"):
        arrived = jobs[jobs.status == "arrived"]
        cancelled = jobs[jobs.status == "cancelled"]
        assert len(arrived) == 3 and len(cancelled) == 3
        assert (cancelled["t_end"] == arrived["t_end"].max()).all()
        assert (cancelled["compute"] < cancelled["t_end"] - cancelled["t_start"] + 1e-12).all()


def test_run_rejects_non_scenarios():
    with pytest.raises(ValueError, match="Scenario"):
        run("scenario.py", progress=False)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="on_error"):
        run(timing_scenario(), on_error="ignore")


def test_scenario_repr_and_replace():
    sc = timing_scenario()
    other = dataclasses.replace(sc, seed=3)
    assert type(other) is Scenario and other.seed == 3 and sc.seed == 0  # sc is unchanged
    assert other == dataclasses.replace(sc, seed=3) and other != sc
    assert other.fleet is sc.fleet and other.policy is sc.policy  # the rest is shared
    # replace re-validates: a bad field fails at construction, naming the field
    with pytest.raises(ValueError, match=r"Scenario\.seed"):
        dataclasses.replace(sc, seed=-1)
    assert "TimingOnly" in repr(sc)


def test_size_weighted_sampling_with_replacement_repeats_updates():
    ledger = Ledger()
    sc = dataclasses.replace(
        linear_scenario(
            n=20, rounds=6, policy=policies.WaitAll(count=30, weights="size", replace=True)
        ),
        algorithm=ledger,
    )
    res = run(sc, progress=False)
    for r, jobs in res.clients.groupby("round"):
        votes = [c for rr, c in ledger.aggregated if rr == r]
        assert len(votes) == 30  # one vote per draw
        assert set(votes) == set(jobs["device"]) and len(jobs) == jobs["device"].nunique() < 30
    assert (res.rounds["n_selected"] < 30).all()


class _SizelessTask(Task):
    """A task whose bound data do not report client sizes."""

    def build(self, n_clients: int, streams: Any) -> object:
        return object()


def test_size_weighted_sampling_needs_client_sizes():
    size_weighted = policies.WaitAll(count=3, weights="size")
    with pytest.raises(ValueError, match=r"client_sizes\(\); Scenario\.task is None"):
        timing_scenario(n=10, rounds=2, policy=size_weighted)  # refused before anything runs
    sc = dataclasses.replace(
        timing_scenario(n=10, rounds=2), task=_SizelessTask(), policy=size_weighted
    )
    with pytest.raises(ValueError, match="client_sizes"):  # known only once the data are built
        run(sc, progress=False, on_error="raise")
    with pytest.raises(ValueError, match=r"WaitAll\.replace=True needs"):
        policies.WaitAll(count=3, replace=True)


def _check_outcomes_against_results(ledger, res):
    rounds = res.rounds.set_index("round")
    jobs = res.clients
    assert len(ledger.outcomes) == (rounds["status"] == "ok").sum() > 0
    assert [o.round for o in ledger.background_outcomes] == [o.round for o in ledger.outcomes]
    for o, after in zip(ledger.outcomes, ledger.background_outcomes, strict=True):
        assert after is o  # background sees the aggregation's own outcome
        row = rounds.loc[o.round]
        assert (o.t_start, o.time, o.stage) == (row["t_start"], row["time"], row["stage"])
        assert o.n_arrived == row["n_arrived"] > 0
        assert o.count(DROPPED) == row["n_dropped"] and o.count(LATE) == row["n_late"]
        assert o.count(CANCELLED) == row["n_cancelled"] and o.devices.size == row["n_selected"]
        mine = jobs[jobs["round"] == o.round]
        np.testing.assert_array_equal(o.devices, mine["device"])
        assert [STATUSES[s] for s in o.status] == list(mine["status"].astype(str))
        np.testing.assert_array_equal(o.job_start, mine["t_start"])
        np.testing.assert_array_equal(o.job_end, mine["t_end"])
        np.testing.assert_array_equal(o.staleness, mine["staleness"])
        # the updates are the arrived jobs' rows, a device drawn twice counted twice
        rows = [c for r, c in ledger.aggregated if r == o.round]
        counts = np.ones(o.devices.size, dtype=np.int64) if o.repeats is None else o.repeats
        assert sorted(rows) == sorted(np.repeat(o.devices[o.arrived], counts[o.arrived]))


def test_the_algorithm_sees_dropouts_and_stragglers():
    ledger = Ledger()
    sc = timing_scenario(n=20, rounds=15, policy=policies.Deadline(1.0, count=8), dropout_rate=0.5)
    res = run(dataclasses.replace(sc, algorithm=ledger), progress=False)
    _check_outcomes_against_results(ledger, res)
    assert sum(o.count(DROPPED) for o in ledger.outcomes) > 0
    assert sum(o.count(LATE) for o in ledger.outcomes) > 0
    assert all(o.repeats is None for o in ledger.outcomes)


def test_the_algorithm_sees_repeats_and_cancelled_jobs():
    ledger = Ledger()
    policy = policies.WaitAll(count=12, weights="size", replace=True)
    sc = linear_scenario(ledger, policy, n=8, rounds=6, dropout_rate=0.2)
    res = run(sc, progress=False)
    _check_outcomes_against_results(ledger, res)
    assert any(o.repeats is not None and (o.repeats > 1).any() for o in ledger.outcomes)
    over = timing_scenario(n=20, rounds=6, policy=policies.FastestK(k=4, overcommit=0.5))
    ledger = Ledger()
    res = run(dataclasses.replace(over, algorithm=ledger), progress=False)
    _check_outcomes_against_results(ledger, res)
    assert sum(o.count(CANCELLED) for o in ledger.outcomes) > 0
