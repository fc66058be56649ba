"""Asynchronous policies learn: a policy state threaded by the loop, observed per aggregation."""

from __future__ import annotations

import dataclasses
import runpy
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pytest
from numpy.typing import NDArray

import simfl.engine as engine
from simfl import Fleet, Profile, Scenario, algorithms, dists, policies, run
from simfl.engine import asynchronous
from simfl.engine.async_planned import PlannedAsyncLoop
from simfl.engine.async_timing import TimingAsyncLoop
from simfl.engine.asynchronous import AsyncLoop
from simfl.engine.context import RunContext
from simfl.engine.playbacks import Playback, choose
from simfl.outcome import STATUSES, Outcome
from simfl.policies import View
from tests.helpers import linear_scenario, timing_scenario

ROOT = Path(__file__).resolve().parents[1]

#: one observed aggregation: (round, view.round, view.last("time"), outcome)
Seen = tuple[tuple[int, int, float, Outcome], ...]


@dataclasses.dataclass(frozen=True)
class Recording(policies.FedBuff):
    """FedBuff whose state is every outcome it observed (and what the view said then)."""

    name: ClassVar[str] = "recording"

    def start(self, view: View) -> Seen:
        return ()

    def observe(self, state: Seen, outcome: Outcome, view: View) -> Seen:
        return (*state, (outcome.round, view.round, view.last("time"), outcome))


@dataclasses.dataclass(frozen=True)
class Watching(policies.FedBuff):
    """FedBuff that only overrides observe (its picks are FedBuff's: it ignores its state)."""

    name: ClassVar[str] = "watching"

    def observe(self, state: None, outcome: Outcome, view: View) -> None:
        return state


@dataclasses.dataclass(frozen=True)
class Starting(policies.FedBuff):
    """FedBuff that only overrides start."""

    name: ClassVar[str] = "starting"

    def start(self, view: View) -> int:
        return 0


@dataclasses.dataclass(frozen=True)
class Rotating(policies.FedBuff):
    """Picks device ``(first + observed aggregations) % n`` if idle (FedBuff's pick if not)."""

    first: int = 3
    name: ClassVar[str] = "rotating"

    def start(self, view: View) -> int:
        return self.first

    def pick(self, state: int, view: View, busy: NDArray[np.bool_], n_started: int) -> int | None:
        device = state % view.n_devices
        return device if not busy[device] else super().pick(state, view, busy, n_started)

    def observe(self, state: int, outcome: Outcome, view: View) -> int:
        return state + 1


def _capturing(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Keep every server loop the engine builds (to read its final policy state)."""
    loops: list[Any] = []
    build: Callable[[RunContext, Playback], Any] = engine._loop

    def keep(ctx: RunContext, playback: Playback) -> Any:
        loops.append(build(ctx, playback))
        return loops[-1]

    monkeypatch.setattr(engine, "_loop", keep)
    return loops


def _example() -> Any:
    """The SkipLateAsync class of docs/examples/skip_late_async.py."""
    return runpy.run_path(str(ROOT / "docs" / "examples" / "skip_late_async.py"))["SkipLateAsync"]


def _chosen(sc: Scenario) -> type:
    ctx = RunContext(sc, lazy=True, progress=False, on_error="record")
    return type(engine._loop(ctx, choose(ctx)))


# ---------------------------------------------------------------- which loop plays it


def test_a_policy_that_learns_is_played_by_the_reference_loop() -> None:
    sc = timing_scenario(n=10, policy=policies.FedBuff(buffer_size=2, concurrency=3))
    assert _chosen(sc) is TimingAsyncLoop
    linear = linear_scenario(policy=policies.FedBuff(buffer_size=2, concurrency=3), n=10)
    assert _chosen(linear) is PlannedAsyncLoop
    for policy in (
        Recording(buffer_size=2, concurrency=3),
        Watching(buffer_size=2, concurrency=3),
        Starting(buffer_size=2, concurrency=3),
        Rotating(buffer_size=2, concurrency=3),
    ):
        for scenario in (sc, linear):
            ctx = RunContext(
                dataclasses.replace(scenario, policy=policy),
                lazy=True,
                progress=False,
                on_error="record",
            )
            assert choose(ctx).name == "reference"
            assert type(engine._loop(ctx, choose(ctx))) is AsyncLoop


@pytest.mark.parametrize("make", [timing_scenario, linear_scenario])
def test_observing_alone_changes_nothing_recorded(make: Callable[..., Scenario]) -> None:
    """A policy that only observes picks as FedBuff does: the reference loop playing it records
    what the fast loop records for FedBuff, bit for bit."""
    kw = {"buffer_size": 3, "concurrency": 5, "max_staleness": 2}
    sc = make(n=12, rounds=25, dropout_rate=0.2, policy=policies.FedBuff(**kw))
    plain = run(sc, progress=False)
    mine = run(dataclasses.replace(sc, policy=Watching(**kw)), progress=False)
    assert plain.meta["stop_reason"] == mine.meta["stop_reason"] == "rounds"
    pd.testing.assert_frame_equal(
        plain.rounds.drop(columns="duration"), mine.rounds.drop(columns="duration")
    )
    pd.testing.assert_frame_equal(plain.clients, mine.clients, check_exact=True)


# ---------------------------------------------------------------- what it observes


@pytest.mark.parametrize(
    ("buffer_size", "max_staleness", "dropout_rate"), [(1, 0, 0.3), (3, 1, 0.5), (4, None, 0.0)]
)
def test_observe_sees_each_aggregation_once_with_its_jobs(
    monkeypatch: pytest.MonkeyPatch,
    buffer_size: int,
    max_staleness: int | None,
    dropout_rate: float,
) -> None:
    loops = _capturing(monkeypatch)
    policy = Recording(buffer_size=buffer_size, concurrency=6, max_staleness=max_staleness)
    sc = timing_scenario(n=10, policy=policy, rounds=40, seed=2, dropout_rate=dropout_rate)
    res = run(sc, progress=False)
    assert res.ok and res.meta["stop_reason"] == "rounds"
    (loop,) = loops
    assert isinstance(loop, AsyncLoop)
    seen: Seen = loop.state
    rounds, clients = res.rounds, res.clients
    # once per aggregation, in order, after its row is recorded (view.last reads it)
    assert [s[0] for s in seen] == rounds["round"].tolist() == list(range(40))
    assert [s[1] for s in seen] == list(range(1, 41))
    assert [s[2] for s in seen] == rounds["time"].tolist()
    outcomes = [s[3] for s in seen]
    for out, (_, row) in zip(outcomes, rounds.iterrows(), strict=True):
        assert out.time == row["time"] and out.t_start == row["t_start"]
        assert out.n_arrived == row["n_arrived"]
        assert out.count(1) == row["n_late"] and out.count(2) == row["n_dropped"]
    if max_staleness == 0:  # every buffered update discarded: empty aggregations observed too
        assert (rounds["status"] == "empty").any()
    # the observed jobs are the recorded ones, in the order recorded, with the same statuses;
    # the rest ended after the last aggregation (drops) or were still running or buffered
    observed = pd.DataFrame(
        {
            "device": np.concatenate([o.devices for o in outcomes]),
            "t_start": np.concatenate([o.job_start for o in outcomes]),
            "t_end": np.concatenate([o.job_end for o in outcomes]),
        }
    )
    m = len(observed)
    head = clients.iloc[:m].reset_index(drop=True)
    pd.testing.assert_frame_equal(head[list(observed)], observed, check_exact=True)
    statuses = [STATUSES[s] for o in outcomes for s in o.status.tolist()]
    assert head["status"].tolist() == statuses
    last = rounds["time"].iloc[-1]
    rest = clients.iloc[m:]
    assert set(rest["status"]) <= {"dropped", "cancelled"}
    assert (rest.loc[rest["status"] == "dropped", "t_end"] > last).all()
    ended = clients[(clients["status"] != "cancelled") & (clients["t_end"] <= last)]
    assert len(ended) == m  # every job that ended by the last aggregation, exactly once
    if dropout_rate:
        assert "dropped" in statuses


def test_a_stalled_run_observes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every job drops: no aggregation, so no observe; the drops are recorded all the same."""
    loops = _capturing(monkeypatch)
    monkeypatch.setattr(asynchronous, "STALL_JOBS", 30)
    policy = Recording(buffer_size=2, concurrency=3)
    res = run(timing_scenario(n=6, policy=policy, rounds=5, dropout_rate=1e6), progress=False)
    assert res.meta["stop_reason"] == "stalled" and len(res.rounds) == 0
    assert (res.clients["status"] == "dropped").sum() == 30
    assert loops[0].state == ()


def test_the_state_reaches_the_picks() -> None:
    """One job at a time, one arrival per aggregation: job j starts on (first + j) % n."""
    policy = Rotating(buffer_size=1, concurrency=1, first=3)
    res = run(timing_scenario(n=7, policy=policy, rounds=20), progress=False)
    jobs = res.clients.sort_values("t_start")
    assert len(jobs) == 20  # the 20th aggregation stops the run: no job starts after it
    assert jobs["device"].tolist() == [(3 + j) % 7 for j in range(20)]


def test_an_error_in_observe_is_recorded() -> None:
    @dataclasses.dataclass(frozen=True)
    class Broken(policies.FedBuff):
        def observe(self, state: None, outcome: Outcome, view: View) -> None:
            raise RuntimeError("observe failed")

    res = run(timing_scenario(n=5, policy=Broken(buffer_size=2, concurrency=2)), progress=False)
    assert res.meta["status"] == "error" and "observe failed" in res.meta["error"]
    assert len(res.rounds) == 1  # the aggregation it observed is recorded


# ---------------------------------------------------------------- the docs example


def _tiers(policy: policies.Policy, rounds: int = 150, seed: int = 3) -> Scenario:
    fast, slow = Profile(compute=dists.Exponential(0.5)), Profile(compute=dists.Exponential(4.0))
    return Scenario(
        task=None,
        algorithm=algorithms.TimingOnly(),
        fleet=Fleet.tiers((30, fast), (10, slow)),
        policy=policy,
        rounds=rounds,
        seed=seed,
    )


def _strike_times(res: Any, late_after: float, strikes: int) -> dict[int, float]:
    """When each device struck out, replayed from the frames alone.

    The clients rows are recorded aggregation by aggregation (its drops, then its buffer), each
    aggregation's count being ``n_arrived + n_late + n_dropped``: a device's strike counts from
    the time of the aggregation that holds its late job.
    """
    clients, rounds = res.clients, res.rounds
    count: dict[int, int] = {}
    out: dict[int, float] = {}
    row = 0
    for _, agg in rounds.iterrows():
        size = int(agg["n_arrived"] + agg["n_late"] + agg["n_dropped"])
        jobs = clients.iloc[row : row + size]
        row += size
        late = (jobs["status"] == "late") | (
            (jobs["status"] == "arrived") & (jobs["t_end"] - jobs["t_start"] > late_after)
        )
        for device in jobs.loc[late, "device"].tolist():
            count[device] = count.get(device, 0) + 1
            if count[device] == strikes:
                out[device] = float(agg["time"])
    return out


@pytest.mark.parametrize(("strikes", "max_staleness"), [(2, None), (2, 8)])
def test_the_example_never_picks_a_device_after_it_struck_out(
    strikes: int, max_staleness: int | None
) -> None:
    skip_late = _example()
    late_after = 3.0
    policy = skip_late(
        buffer_size=4,
        concurrency=8,
        max_staleness=max_staleness,
        late_after=late_after,
        strikes=strikes,
    )
    res = run(_tiers(policy), progress=False)
    assert res.ok and res.meta["stop_reason"] == "rounds"
    if max_staleness is not None:
        assert (res.clients["status"] == "late").any()
    struck = _strike_times(res, late_after, strikes)
    assert len(struck) < 40  # (never all of them: the strikes always count)
    assert sum(d >= 30 for d in struck) >= 5, struck  # slow devices (mean 4 s) strike out
    jobs = res.clients
    for device, at in struck.items():
        # a job starts on a device only before the aggregation that gave it its last strike
        starts = jobs.loc[jobs["device"] == device, "t_start"]
        assert (starts < at).all() and len(starts) >= strikes, device
    # until the first strike, its picks are FedBuff's
    plain = run(_tiers(dataclasses.replace(policy, strikes=10**6)), progress=False)
    plain_fedbuff = run(
        _tiers(policies.FedBuff(buffer_size=4, concurrency=8, max_staleness=max_staleness)),
        progress=False,
    )
    pd.testing.assert_frame_equal(plain.clients, plain_fedbuff.clients, check_exact=True)
    first = min(struck.values())

    def started_before(clients: pd.DataFrame) -> pd.DataFrame:
        early = clients.loc[clients["t_start"] < first, ["t_start", "device"]]
        return early.sort_values(["t_start", "device"]).reset_index(drop=True)

    assert len(started_before(jobs)) > 10
    pd.testing.assert_frame_equal(
        started_before(jobs), started_before(plain.clients), check_exact=True
    )


def test_the_example_stops_using_the_slow_tier() -> None:
    """The demo of docs/examples/skip_late_async.py: FedBuff keeps about a fifth of its jobs on
    the slow tier, the example none once the slow devices have struck out."""
    found = runpy.run_path(str(ROOT / "docs" / "examples" / "skip_late_async.py"))
    slow_share, skip_late = found["slow_share"], found["SkipLateAsync"]
    plain = slow_share(policies.FedBuff(4, concurrency=8), rounds=150)
    learned = slow_share(skip_late(4, concurrency=8, late_after=3.0), rounds=150)
    assert min(plain) > 0.1
    assert learned[0] < plain[0] and learned[1] < 0.02


def test_the_example_goes_on_when_every_device_struck_out() -> None:
    """Every job is late: once all devices struck out, the strikes are ignored (no stall)."""
    skip_late = _example()
    policy = skip_late(buffer_size=2, concurrency=3, late_after=1e-9, strikes=1)
    res = run(timing_scenario(n=5, policy=policy, rounds=30), progress=False)
    assert res.ok and res.meta["stop_reason"] == "rounds" and len(res.rounds) == 30
    assert res.clients["device"].nunique() == 5


def test_the_example_is_deterministic() -> None:
    skip_late = _example()
    policy = skip_late(buffer_size=4, concurrency=8, late_after=3.0)
    a, b = (
        run(_tiers(policy, rounds=60), progress=False),
        run(_tiers(policy, rounds=60), progress=False),
    )
    pd.testing.assert_frame_equal(
        a.rounds.drop(columns="duration"), b.rounds.drop(columns="duration")
    )
    pd.testing.assert_frame_equal(a.clients, b.clients, check_exact=True)
    other = run(_tiers(policy, rounds=60, seed=4), progress=False)
    assert not other.clients.equals(a.clients)


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"late_after": 0.0}, "SkipLateAsync.late_after"),
        ({"late_after": -1.0}, "SkipLateAsync.late_after"),
        ({"late_after": float("nan")}, "SkipLateAsync.late_after"),
        ({"late_after": True}, "SkipLateAsync.late_after"),
        ({"strikes": 0}, "SkipLateAsync.strikes"),
        ({"strikes": 1.5}, "SkipLateAsync.strikes"),
        ({"buffer_size": 0}, "FedBuff.buffer_size"),
    ],
)
def test_the_example_refuses_bad_knobs(kw: dict[str, Any], field: str) -> None:
    skip_late = _example()
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        skip_late(**kw)
