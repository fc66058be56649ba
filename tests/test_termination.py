"""The engine's termination rules, checked through the public API only.

Every run of a timing-only scenario must end, with everything it did recorded:

1. *offline*: when paused jobs wait for devices that never come back (churn, ``offline="pause"``)
   the run stops with ``meta["stop_reason"] == "offline"``; no exception escapes ``simfl.run``,
   every completed aggregation is in ``res.rounds`` and every started job in ``res.clients``
   (the jobs still paused are recorded ``cancelled``).
2. *stalled*: a run stopped by ``max_time`` only stops as ``"stalled"`` after
   :data:`STALL_ROUNDS` consecutive rounds in which nothing arrived or the clock advanced by less
   than :data:`STALL_FRACTION` times ``max_time``, or at once when a synchronous round leaves
   the clock where it was (``max_time`` would never be reached otherwise); it says so in
   ``meta["warnings"]`` when updates still arrived. A run with a ``rounds`` limit stalls only
   on :data:`STALL_ROUNDS` aggregations in a row that applied nothing: an aggregation that
   applied updates is progress, however little it moved the clock, so its stop reason and rows
   do not depend on ``max_time`` beyond the time it ends (a property test).
3. durations that would overflow are refused when the fleet is built (see
   :mod:`simfl.dists`), so a run never sees an infinite duration.
4. a property test over random, pathological, timing-only scenarios: ``simfl.run`` returns, the
   stop reason is one of the timing-only reasons, the number of rounds is bounded (see
   :func:`check_round_bound`) and every row is well formed.

The first two are where an event loop can hang or raise SimPy's "No scheduled events left"
error, and overflowing durations can crash a path. Every run goes through
:func:`run_guarded`, a wall-clock safety net (``SIGALRM``, Linux) that turns a hang into a
test failure.
"""

from __future__ import annotations

import dataclasses
import math
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import simfl
from simfl import Fleet, Scenario, dists, policies
from simfl.algorithms import TimingOnly
from simfl.fleet import Availability

#: The job statuses of ``res.clients["status"]``.
STATUSES = {"arrived", "late", "dropped", "cancelled"}
#: The stop reasons a timing-only run may end with (no target, no algorithm to fail).
TIMING_REASONS = {"rounds", "max_time", "stalled", "offline"}
#: The stall rule: this many consecutive rounds without progress stop a ``max_time`` run ...
STALL_ROUNDS = 1000
#: ... where a round makes progress if something arrived and the clock advanced by at least
#: this fraction of ``max_time``.
STALL_FRACTION = 1e-9
#: Seconds of host time one run may take before the safety net fails the test.
RUN_SECONDS = 20


class RunTookTooLong(BaseException):
    """Raised by the safety net when a run exceeds its wall-clock budget (a hang)."""


@contextmanager
def wall_clock_limit(seconds: int) -> Iterator[None]:
    """Raise :class:`RunTookTooLong` in the block after ``seconds`` of host time (Linux).

    The previous ``SIGALRM`` handler and alarm are restored on the way out.
    """

    def on_alarm(signum: int, frame: FrameType | None) -> None:
        raise RunTookTooLong(f"simfl.run did not return within {seconds} s (a hang?)")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def run_guarded(sc: Scenario, seconds: int = RUN_SECONDS, **kwargs: Any) -> simfl.Results:
    """``simfl.run(sc)`` (default ``on_error="record"``) under :func:`wall_clock_limit`."""
    with wall_clock_limit(seconds):
        return simfl.run(sc, progress=False, **kwargs)


def timing(fleet: Fleet, policy: policies.Policy, **stop: Any) -> Scenario:
    """A timing-only scenario (``task=None``, :class:`TimingOnly`)."""
    return Scenario(task=None, algorithm=TimingOnly(), fleet=fleet, policy=policy, **stop)


def is_async(policy: policies.Policy) -> bool:
    """Whether ``policy`` aggregates asynchronously (its rounds are single aggregations)."""
    return isinstance(policy, policies.AsyncPolicy)


def check_rows(res: simfl.Results, sc: Scenario) -> None:
    """The invariants every finished run keeps, whatever stopped it.

    No error; a timing-only stop reason; every clients row well formed (a known status, finite
    ``t_start <= t_end <= sim_time``); the arrivals counted in ``res.rounds`` are the arrived
    rows of ``res.clients``; and for a synchronous policy every recorded round has one clients
    row per selected device, whose statuses add up to the round's counts.
    """
    meta = res.meta
    assert meta["status"] != "error" and meta["error"] is None, meta["error"]
    assert meta["stop_reason"] in TIMING_REASONS
    sim_time = meta["sim_time"]
    assert math.isfinite(sim_time)
    rounds, clients = res.rounds, res.clients
    assert set(clients["status"].astype(str)) <= STATUSES
    t_start, t_end = clients["t_start"].to_numpy(), clients["t_end"].to_numpy()
    assert np.isfinite(t_start).all() and np.isfinite(t_end).all()
    assert (t_start <= t_end).all() and (t_end <= sim_time).all()
    if len(rounds):
        assert np.isfinite(rounds["time"]).all() and (rounds["time"] <= sim_time).all()
    arrived = clients["status"].astype(str) == "arrived"
    assert int(rounds["n_arrived"].sum()) == int(arrived.sum())
    if is_async(sc.policy):
        return
    status = clients["status"].astype(str)
    per_round = (
        pd.crosstab(clients["round"], status)
        .reindex(columns=sorted(STATUSES), fill_value=0)
        .reindex(rounds["round"], fill_value=0)  # a round without jobs counts zeros
    )
    for row, counts in zip(rounds.itertuples(), per_round.itertuples(index=False), strict=True):
        assert sum(counts) == row.n_selected, f"round {row.round}: a started job is missing"
        assert counts.arrived == row.n_arrived and counts.dropped == row.n_dropped
        assert counts.late == row.n_late and counts.cancelled == row.n_cancelled
    # jobs beyond the last recorded round belong to the one round left unfinished
    assert (clients["round"] <= len(rounds)).all()


NDArrayBool = np.ndarray[Any, np.dtype[np.bool_]]


def progress_rounds(rounds: pd.DataFrame, max_time: float) -> NDArrayBool:
    """Which rounds made progress by the stall rule, counted generously.

    A round makes progress when something arrived and the clock advanced by at least
    ``STALL_FRACTION * max_time``; the advance is measured from the previous aggregation (0 for
    the first round), which is at least the round's own duration, so no round the engine counts
    as progress is missed here.
    """
    time = rounds["time"].to_numpy(dtype=np.float64)
    advance = np.diff(time, prepend=0.0)
    return np.asarray(
        (rounds["n_arrived"].to_numpy() > 0) & (advance >= STALL_FRACTION * max_time),
        dtype=np.bool_,
    )


def check_round_bound(res: simfl.Results, sc: Scenario) -> None:
    """The number of recorded rounds is bounded by the stop rules.

    A ``rounds`` run records at most ``rounds`` aggregations. For a ``max_time`` run the bound
    comes from the stall rule: between two progress rounds (see :func:`progress_rounds`) there
    are at most ``STALL_ROUNDS - 1`` others (the ``STALL_ROUNDS``-th would stop the run), and at
    most ``STALL_ROUNDS`` after the last one, so with ``P`` progress rounds
    ``len(rounds) <= P + (STALL_ROUNDS - 1) * P + STALL_ROUNDS = STALL_ROUNDS * (P + 1)``.
    ``P`` itself is finite: each progress round moves the clock by ``STALL_FRACTION * max_time``
    towards ``max_time``, so ``P <= 1 / STALL_FRACTION``.
    """
    n = len(res.rounds)
    if sc.rounds is not None:
        assert n <= sc.rounds
        return
    assert sc.max_time is not None
    p = int(progress_rounds(res.rounds, sc.max_time).sum())
    assert p <= 1 / STALL_FRACTION
    assert n <= STALL_ROUNDS * (p + 1), f"{n} rounds with only {p} making progress"


def check_stalled(res: simfl.Results, sc: Scenario) -> None:
    """The run stopped as ``stalled`` by the rule: within ``STALL_ROUNDS + 1`` rounds here.

    Either its last round left the clock where it was, or its last ``STALL_ROUNDS`` rounds all
    failed to make progress.
    """
    assert res.meta["stop_reason"] == "stalled"
    rounds = res.rounds
    assert 1 <= len(rounds) <= STALL_ROUNDS + 1
    assert sc.max_time is not None
    last = rounds.iloc[-1]
    before = rounds["time"].iloc[-2] if len(rounds) >= 2 else 0.0
    clock_stuck = last["time"] == last["t_start"] or last["time"] == before
    tail = progress_rounds(rounds, sc.max_time)[-STALL_ROUNDS:]
    assert clock_stuck or (len(tail) == STALL_ROUNDS and not tail.any())


# ---------------------------------------------------------------- 1. devices that never return
LIFETIME = 10.0  # every device leaves for good at t = 10 s (joined at 0)
N_CHURN = 8


def churned_fleet(offline: str) -> Fleet:
    """8 devices with Exp(1) compute that all leave for good at ``LIFETIME``."""
    av = Availability.churn(N_CHURN, lifetime=dists.Constant(LIFETIME))
    return Fleet.homogeneous(N_CHURN, dists.Exponential(1.0)).with_availability(av, offline)


def check_offline(res: simfl.Results, sc: Scenario, *, every_device: bool) -> None:
    """An ``offline`` stop with every row kept (see :func:`check_rows`).

    With ``every_device`` (a cohort of all 8 devices each round) every round, the unfinished
    one included, has one clients row per device.
    """
    check_rows(res, sc)
    assert res.meta["stop_reason"] == "offline"
    rounds, clients = res.rounds, res.clients
    assert len(rounds) >= 1  # Exp(1) jobs: rounds complete before the devices leave
    # nothing can arrive once every device is gone
    assert (clients.loc[clients["status"].astype(str) == "arrived", "t_end"] <= LIFETIME).all()
    assert (clients["t_start"] <= LIFETIME).all()
    if every_device:
        counts = clients.groupby("round").size()
        unfinished = len(rounds) if (clients["round"] == len(rounds)).any() else None
        expected = list(range(len(rounds))) + ([] if unfinished is None else [unfinished])
        assert list(counts.index) == expected
        assert (counts == N_CHURN).all()


SYNC_OFFLINE_POLICIES = [
    pytest.param(policies.WaitAll(), True, id="wait-all"),
    pytest.param(policies.FastestK(k=N_CHURN), True, id="fastest-k"),
    pytest.param(policies.SRPFL(n0=2, rounds_per_stage=2), False, id="srpfl"),
]


@pytest.mark.parametrize(
    ("policy", "every_device"),
    [
        *SYNC_OFFLINE_POLICIES,
        pytest.param(policies.FedAsync(concurrency=4), False, id="fedasync"),
        pytest.param(policies.FedBuff(buffer_size=2, concurrency=4), False, id="fedbuff"),
    ],
)
def test_paused_jobs_of_devices_that_never_return_end_the_run_as_offline(policy, every_device):
    sc = timing(churned_fleet("pause"), policy, rounds=1000)
    res = run_guarded(sc)  # today: SimPy's "No scheduled events left" RuntimeError escapes
    check_offline(res, sc, every_device=every_device)
    # the jobs still paused when the devices left are kept, as cancelled
    clients = res.clients
    paused = clients[clients["status"].astype(str) == "cancelled"]
    assert len(paused) >= 1
    assert (paused["t_start"] < LIFETIME).all()
    if not is_async(policy):
        assert (paused["round"] == len(res.rounds)).all()  # the round that never finished


@pytest.mark.parametrize(
    "policy",
    [
        policies.WaitAll(),
        pytest.param(policies.FedBuff(buffer_size=2, concurrency=4), id="fedbuff"),
    ],
)
def test_with_a_time_budget_the_clock_does_not_jump_to_it_when_nothing_can_happen(policy):
    # the same paused jobs under max_time = 1e6 s: the run ends offline when the last event
    # happens (a device leaving at LIFETIME), not at the budget
    sc = timing(churned_fleet("pause"), policy, max_time=1e6)
    res = run_guarded(sc)
    check_offline(res, sc, every_device=False)
    assert res.meta["sim_time"] <= LIFETIME


@pytest.mark.parametrize(("policy", "every_device"), SYNC_OFFLINE_POLICIES)
def test_aborted_jobs_of_devices_that_never_return_end_the_run_as_offline(policy, every_device):
    # the same fleet in abort mode: the last round ends with the aborted (dropped) jobs, and the
    # next one finds nobody online, ever
    sc = timing(churned_fleet("abort"), policy, rounds=1000)
    res = run_guarded(sc)
    check_offline(res, sc, every_device=every_device)
    assert (res.clients["status"].astype(str) == "dropped").any()


def test_a_deadline_ends_the_round_of_paused_jobs_then_the_run_is_offline():
    sc = timing(churned_fleet("pause"), policies.Deadline(5.0), rounds=1000)
    res = run_guarded(sc)
    check_offline(res, sc, every_device=True)
    assert (res.clients["status"].astype(str) == "late").any()


# ---------------------------------------------------------------- 2. rounds of near-zero length
MAX_TIME = 100.0
SYNC_POLICIES = {
    "wait-all": policies.WaitAll(),
    "deadline": policies.Deadline(1.0),
    "fastest-k": policies.FastestK(k=3),
}
STALLING_FLEETS = {
    # every job drops at once (mean time to failure 1e-6 s): nothing ever arrives
    "dropout-1e6": Fleet.homogeneous(5, dists.Exponential(1.0), dropout_rate=1e6),
    # every round lasts 1e-300 s: max_time would take 1e302 rounds
    "compute-1e-300": Fleet.homogeneous(5, dists.Constant(1e-300)),
}


@pytest.mark.parametrize(
    ("fleet", "policy"),
    [
        *(
            pytest.param(fleet, policy, id=f"{fname}-{pname}")
            for fname, fleet in STALLING_FLEETS.items()
            for pname, policy in SYNC_POLICIES.items()
        ),
        # every job is late at a 1e-300 s deadline: nothing arrives, rounds last 1e-300 s
        pytest.param(
            Fleet.homogeneous(5, dists.Exponential(1.0)),
            policies.Deadline(1e-300),
            id="deadline-1e-300",
        ),
    ],
)
def test_rounds_of_near_zero_length_stop_as_stalled(fleet, policy):
    sc = timing(fleet, policy, max_time=MAX_TIME)
    res = run_guarded(sc)  # today: never returns
    check_rows(res, sc)
    check_stalled(res, sc)
    assert res.meta["sim_time"] < MAX_TIME


@pytest.mark.parametrize("policy", SYNC_POLICIES.values(), ids=SYNC_POLICIES.keys())
def test_a_round_that_leaves_the_clock_where_it_was_stops_the_run_at_once(policy):
    sc = timing(Fleet.homogeneous(5, dists.Constant(0.0)), policy, max_time=MAX_TIME)
    res = run_guarded(sc)
    check_rows(res, sc)
    check_stalled(res, sc)
    assert len(res.rounds) == 1 and res.meta["sim_time"] == 0.0


# ---------------------------------------------------------------- 2b. progress, not clock movement
@pytest.mark.parametrize(
    ("fleet", "policy", "rounds"),
    [
        # 10,000 jobs in flight: an aggregation every ~1e-4 s
        pytest.param(
            lambda: Fleet.homogeneous(20_000, dists.Exponential(1.0)),
            policies.FedAsync(concurrency=10_000),
            3000,
            id="fedasync-10000",
        ),
        pytest.param(
            lambda: Fleet.homogeneous(10, dists.Exponential(1.0)),
            policies.FedAsync(concurrency=10),
            1500,
            id="fedasync-10",
        ),
        pytest.param(
            lambda: Fleet.homogeneous(10, dists.Exponential(1.0)),
            policies.FedBuff(buffer_size=2, concurrency=10),
            1500,
            id="fedbuff-10",
        ),
        pytest.param(
            lambda: Fleet.homogeneous(10, dists.Exponential(1e-4)),
            policies.FastestK(k=3),
            1200,
            id="fastest-k-tiny-jobs",
        ),
    ],
)
@pytest.mark.parametrize("max_time", [1e6, 1e9])
def test_a_large_time_budget_does_not_stall_a_run_whose_updates_arrive(
    fleet, policy, rounds, max_time
):
    # each aggregation applies updates but moves the clock by less than 1e-9 x max_time: before,
    # the run stopped "stalled" after 1000 of them, while a smaller budget let it complete
    sc = timing(fleet(), policy, rounds=rounds, max_time=max_time)
    res = run_guarded(sc)
    check_rows(res, sc)
    assert res.meta["stop_reason"] == "rounds" and len(res.rounds) == rounds
    assert res.meta["warnings"] == []
    same = run_guarded(dataclasses.replace(sc, max_time=None))
    pd.testing.assert_frame_equal(res.rounds, same.rounds)
    pd.testing.assert_frame_equal(res.clients, same.clients)


def test_asynchronous_arrivals_at_one_instant_do_not_stall_a_time_limited_run():
    # five jobs of 1 s end together: four aggregations leave the clock where it was, an
    # ordinary thing for asynchronous arrivals (before: stalled after 2 rows)
    sc = timing(
        Fleet.homogeneous(5, dists.Constant(1.0)), policies.FedAsync(concurrency=5), max_time=100.0
    )
    res = run_guarded(sc)
    check_rows(res, sc)
    assert res.meta["stop_reason"] == "max_time" and res.meta["sim_time"] == 100.0
    assert len(res.rounds) == 5 * 99  # five arrivals at each of t = 1, ..., 99 s
    assert res.meta["warnings"] == []


@pytest.mark.parametrize(
    "policy", [policies.WaitAll(), policies.FedAsync(concurrency=3)], ids=["wait-all", "fedasync"]
)
def test_a_time_limited_run_stalled_by_the_clock_says_so(policy):
    # every round applies updates and lasts 1e-300 s: max_time = 100 s is 1e302 rounds away
    sc = timing(Fleet.homogeneous(5, dists.Constant(1e-300)), policy, max_time=MAX_TIME)
    res = run_guarded(sc)
    check_stalled(res, sc)
    assert (res.rounds["n_arrived"] > 0).all()
    (warning,) = res.meta["warnings"]
    assert warning.startswith("stalled although updates arrived") and "rounds limit" in warning
    assert "warning    stalled although updates arrived" in res.summary()


def test_a_stall_where_nothing_arrives_adds_no_clock_warning():
    sc = timing(STALLING_FLEETS["dropout-1e6"], policies.WaitAll(), max_time=MAX_TIME)
    res = run_guarded(sc)
    check_stalled(res, sc)
    assert not [w for w in res.meta["warnings"] if w.startswith("stalled")]


# ---------------------------------------------------------------- 3. overflowing durations
@pytest.mark.parametrize(
    ("fleet", "field"),
    [
        (lambda: Fleet.homogeneous(4, dists.Exponential(1e308)), r"Exponential\.mean"),
        (lambda: Fleet.homogeneous(4, dists.LogNormal(1000.0, 1.0)), r"LogNormal\.mu"),
        (lambda: Fleet.homogeneous(4, dists.Pareto(0.001, 1.0)), r"Pareto\.shape"),
        (lambda: Fleet.homogeneous(4, dists.Exponential(1.0), scale=1e308), r"Fleet\.scale"),
    ],
    ids=["exponential", "lognormal", "pareto", "scale"],
)
def test_overflowing_durations_are_refused_before_the_run(fleet, field):
    with pytest.raises(ValueError, match=field):
        timing(fleet(), policies.WaitAll(), rounds=3)


@pytest.mark.parametrize("batched", [True, False])
def test_huge_but_finite_durations_run_to_a_finite_clock(batched):
    sc = timing(Fleet.homogeneous(6, dists.Exponential(1e200)), policies.WaitAll(), rounds=5)
    res = run_guarded(sc, batched=batched)
    check_rows(res, sc)
    assert res.meta["stop_reason"] == "rounds" and len(res.rounds) == 5
    assert 0.0 < res.meta["sim_time"] < math.inf


# ---------------------------------------------------------------- 4. property test
# The scenarios are timing-only, with 1-20 devices; compute means from 1e-300 to 1e300 (those
# that construct); dropout hazards up to 1e6 per second (asynchronous policies: at most one
# per typical job, see timing_scenarios); no availability, churn (devices leave for good) or
# exponential on/off periods (which end at their horizon), in pause or abort mode; every policy
# family; and one of three stop rules:
#
# * "rounds": 1-30 aggregations;
# * "max_time": max_time = R * tau with R in [0.1, 30] and tau the shortest time scale of the
#   scenario (the 1% quantile of a job, the deadline, the mean time to the first failure in a
#   round), so that an ordinary run takes at most a few thousand rounds;
# * "stall": max_time = 1e15 * X with X a bound on how far one round can move the clock (the
#   largest job, the deadline, the last availability change). No round can then advance the
#   clock by STALL_FRACTION * max_time = 1e6 X (not even an asynchronous aggregation after the
#   engine's longest allowed run of 1e4 dropped jobs), so no round makes progress and the stall
#   rule must stop the run within STALL_ROUNDS (+ 1) rounds, unless the devices leave first
#   (then "offline": the engine never lets the clock jump to max_time while every job waits for
#   a device that never returns).
FAMILIES = ["constant", "exponential", "shifted", "lognormal", "pareto", "uniform"]
POLICY_FAMILIES = ["wait-all", "deadline", "fastest-k", "adaptive", "srpfl", "fedasync", "fedbuff"]


def power10(draw: st.DrawFn, low: float, high: float) -> float:
    """``10 ** x`` for ``x`` drawn uniformly in ``[low, high]``."""
    return float(10.0 ** draw(st.floats(low, high)))


def build(make: Any) -> Any:
    """``make()``, or reject the example if its parameters are refused (e.g. would overflow)."""
    try:
        return make()
    except ValueError:
        assume(False)


def compute_dist(draw: st.DrawFn) -> dists.Dist:
    """A compute distribution with a mean (or, without one, a scale) in [1e-300, 1e300]."""
    family = draw(st.sampled_from(FAMILIES))
    mean = power10(draw, -300.0, 300.0)
    if family == "constant":
        return build(lambda: dists.Constant(mean))
    if family == "exponential":
        return build(lambda: dists.Exponential(mean))
    if family == "shifted":
        f = draw(st.floats(0.0, 0.9))
        return build(lambda: dists.ShiftedExponential(mean * f, mean * (1.0 - f)))
    if family == "lognormal":
        cv = power10(draw, -1.0, 1.0)
        return build(lambda: dists.LogNormal.from_mean_std(mean, mean * cv))
    if family == "pareto":
        shape = draw(st.floats(0.05, 5.0))
        scale = mean * (shape - 1.0) / shape if shape > 1.0 else mean
        return build(lambda: dists.Pareto(shape, scale))
    f = draw(st.floats(0.0, 1.0))
    return build(lambda: dists.Uniform(mean * f, mean * (2.0 - f)))


@st.composite
def timing_scenarios(draw: st.DrawFn, *, pathological: bool) -> tuple[Scenario, str]:
    """A random timing-only scenario and its stop rule (see the comment above).

    Without ``pathological``, only what today's engine already ends: no availability and the
    "rounds" or "max_time" stop rules.
    """
    n = draw(st.integers(1, 20))
    dist = compute_dist(draw)
    typical = float(dist.ppf(0.5))  # the time scale of one job
    family = draw(st.sampled_from(POLICY_FAMILIES))
    rate = draw(st.one_of(st.just(0.0), st.builds(lambda x: 10.0**x, st.floats(-3.0, 6.0))))
    if family in ("fedasync", "fedbuff"):
        # an asynchronous run whose jobs nearly all drop is legitimately long (the engine
        # starts up to 1e4 jobs in a row before calling it stalled, seconds of host time):
        # keep a job's survival probability above exp(-1) / 2 or so
        rate = min(rate, 1.0 / typical)
    fleet = build(lambda: Fleet.homogeneous(n, dist, dropout_rate=rate))
    horizon = 0.0  # the last availability change
    kind = draw(st.sampled_from(["none", "churn", "exponential"])) if pathological else "none"
    if kind != "none" and typical * 1e3 < 1e290:
        if kind == "churn":
            life = build(lambda: dists.Exponential(typical * power10(draw, -1.0, 2.0)))
            join = typical * draw(st.floats(0.0, 5.0))
            av = Availability.churn(
                n, lifetime=life, join_window=join, seed=draw(st.integers(0, 2**32))
            )
        else:
            av = Availability.exponential(
                n,
                mean_on=typical * power10(draw, -0.5, 1.5),
                mean_off=typical * power10(draw, -1.0, 1.0),
                horizon=typical * power10(draw, 0.0, 2.0),
                seed=draw(st.integers(0, 2**32)),
            )
        fleet = fleet.with_availability(av, draw(st.sampled_from(["pause", "abort"])))
        horizon = av.horizon

    count = draw(st.integers(1, n))
    deadline = typical * power10(draw, -3.0, 3.0)
    policy: policies.Policy
    if family == "wait-all":
        policy = policies.WaitAll(count=count)
    elif family == "deadline":
        policy = policies.Deadline(deadline, count=count)
    elif family == "fastest-k":
        k = draw(st.integers(1, count))
        policy = policies.FastestK(k=k, overcommit=count / k - 1.0)
    elif family == "adaptive":
        initial = draw(st.sampled_from([None, deadline]))
        policy = policies.AdaptiveDeadline(
            quantile=draw(st.floats(0.5, 1.0)), count=count, initial=initial
        )
    elif family == "srpfl":
        policy = policies.SRPFL(n0=count, rounds_per_stage=draw(st.integers(1, 5)))
    elif family == "fedasync":
        policy = policies.FedAsync(concurrency=count)
    else:
        policy = policies.FedBuff(buffer_size=draw(st.integers(1, 5)), concurrency=count)

    rules = ["rounds", "max_time", "stall"] if pathological else ["rounds", "max_time"]
    stop = draw(st.sampled_from(rules))
    if stop == "stall":
        reach = max(dist.max_draw, deadline, horizon)
        if reach * 1e15 > 1e300:
            stop = "max_time"
        else:
            max_time = 1e15 * reach
    if stop == "max_time":
        tau = min([float(dist.ppf(0.01)), deadline, math.inf if rate == 0 else 1.0 / (n * rate)])
        max_time = tau * power10(draw, -1.0, math.log10(30.0))
    seed = draw(st.integers(0, 2**32))
    if stop == "rounds":
        rounds = draw(st.integers(1, 30))
        return build(lambda: timing(fleet, policy, rounds=rounds, seed=seed)), stop
    assume(0.0 < max_time < math.inf)
    return build(lambda: timing(fleet, policy, max_time=max_time, seed=seed)), stop


def check_property(sc: Scenario, stop: str) -> None:
    """``simfl.run`` returns, with a valid stop reason, a bounded round count and sound rows."""
    res = run_guarded(sc)
    check_rows(res, sc)
    check_round_bound(res, sc)
    reason = res.meta["stop_reason"]
    if stop == "rounds":
        assert reason in {"rounds", "stalled", "offline"}
    elif stop == "max_time":
        assert reason in {"max_time", "stalled", "offline"}
    else:  # no round can make progress (see above): the stall rule, or the devices left
        ended = sc.fleet.availability is not None
        assert reason in ({"stalled", "offline"} if ended else {"stalled"})
        assert len(res.rounds) <= STALL_ROUNDS + 1


PROPERTY_SETTINGS = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,  # the same examples on every machine: reproducible in CI
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@PROPERTY_SETTINGS
@given(timing_scenarios(pathological=False))
def test_every_ordinary_timing_run_ends_with_its_rows(case):
    check_property(*case)


@PROPERTY_SETTINGS
@given(timing_scenarios(pathological=True))
def test_every_pathological_timing_run_ends_with_its_rows(case):
    check_property(*case)


@st.composite
def rounds_scenarios(draw: st.DrawFn) -> Scenario:
    """A scenario of :func:`timing_scenarios` ended by ``rounds`` (and no ``max_time``).

    Half of them play just over :data:`STALL_ROUNDS` aggregations, so that a stall rule
    looking at the clock would have had the time to fire.
    """
    sc, stop = draw(timing_scenarios(pathological=True))
    assume(stop == "rounds")
    if draw(st.booleans()):
        sc = dataclasses.replace(sc, rounds=draw(st.integers(STALL_ROUNDS, STALL_ROUNDS + 50)))
    return sc


@settings(PROPERTY_SETTINGS, max_examples=20)
@given(rounds_scenarios())
def test_a_rounds_run_does_not_depend_on_max_time_beyond_its_end(sc):
    # a run that ends at time T by a rule other than max_time ends the same way, with the same
    # rows, under any budget beyond T
    res = run_guarded(sc)
    check_rows(res, sc)
    end, reason = res.meta["sim_time"], res.meta["stop_reason"]
    assert reason != "max_time"
    for budget in (2.0 * end, 1e6, 1e9, 1e300):
        try:  # a budget beyond the horizon of the fleet's availability is refused
            longer = dataclasses.replace(sc, max_time=budget)
        except ValueError:
            continue
        if not end < budget < math.inf:
            continue
        again = run_guarded(longer)
        assert again.meta["stop_reason"] == reason, f"max_time={budget:g}"
        assert again.meta["sim_time"] == end
        pd.testing.assert_frame_equal(again.rounds, res.rounds)
        pd.testing.assert_frame_equal(again.clients, res.clients)
