"""The run context every server loop shares, and the read-only view policies see.

Time and math are separate. The loops (:mod:`simfl.engine.sync`,
:mod:`simfl.engine.asynchronous`) decide *who* takes part, *when* each step happens and *what
arrives*; they never touch model parameters. When updates are to be aggregated, the algorithm
computes those updates only, in one batched call (:meth:`RunContext.updates`), and aggregates
them. Updates that would be discarded (late, dropped, cancelled) are never computed, yet their
time is simulated; ``run(..., lazy=False)`` computes them too and throws them away, and gives
identical results.

The stop rules live here, in one place, for every loop: ``rounds``, ``target`` and a diverged or
failed aggregation (checked after each aggregation), the stall rule (below), ``offline`` (no
device will ever be online again) and ``max_time`` (the clock reaches the budget; see
:func:`simfl.engine.run`).

Stall rule: an aggregation is *idle* when it applied no update; a run stops as ``stalled``
after :data:`STALL_ROUNDS` idle aggregations in a row. An aggregation that applied updates
changed the model, so it is never idle, however little it moved the clock: a run limited by
``rounds`` never depends on ``max_time`` beyond the time it ends (the same stop reason and the
same rows under any larger budget). Such a run is finite whatever happens: every aggregation,
idle or not, counts towards ``rounds``.

A run without ``rounds`` is ended only by the clock reaching ``max_time`` (or by ``target``,
``offline``, a failure), so the rule must also see a clock that cannot get there. Then an
aggregation is also idle when it advances the clock by less than :data:`STALL_SHARE` times
``max_time`` (at that pace the budget is more than ``1 / STALL_SHARE`` aggregations away, more
than any host plays), and a synchronous round that leaves the clock where it was stops the run
at once (every round after it would too: the budget is never reached). Asynchronous arrivals
may share an instant (jobs of equal durations), so there a zero advance is an ordinary idle
aggregation. A run stopped by this clock rule says so in ``meta["warnings"]``, with the advice
to give it ``rounds``. Every run therefore ends: by ``rounds``, or by ``max_time`` after at most
``STALL_ROUNDS / STALL_SHARE`` non-idle aggregations (each one moves the clock by
``STALL_SHARE * max_time``) with fewer than ``STALL_ROUNDS`` idle ones between them.
"""

from __future__ import annotations

import math
import traceback
from collections.abc import Callable, Generator
from typing import Any, TypeAlias

import numpy as np
import simpy
from numpy.typing import NDArray
from tqdm.auto import tqdm

from simfl.algorithms.base import Updates
from simfl.engine.flows import FlowNetwork, Links, ReferenceFlowNetwork
from simfl.engine.flows import applies as flow_rounds_apply
from simfl.engine.jobs import JobPlan, plan_jobs
from simfl.engine.live import DeviceRuntime
from simfl.engine.playback import Live, Planned, Playback, Resolved
from simfl.fleet import AvailabilityCursor
from simfl.fleet.energy import job_energy
from simfl.network import transfer_seconds
from simfl.outcome import ARRIVED, DROPPED
from simfl.policies.base import AsyncPolicy
from simfl.results import Recorder
from simfl.rng import Streams
from simfl.scenario import Scenario

__all__ = ["STALL_ROUNDS", "STALL_SHARE", "UPDATE_SLICE", "PolicyView", "Progress", "RunContext"]

#: What ``simfl.run(progress=...)`` takes: a bar (``True``), nothing, or a callable told the
#: share of the run done (0 to 1) after every aggregation.
Progress: TypeAlias = bool | Callable[[float], None]
#: The progress bar of a run limited only by ``max_time``: simulated seconds out of the budget.
_TIME_BAR = "{l_bar}{bar}| {n:.4g}/{total:.4g} simulated s [{elapsed}<{remaining}{postfix}]"

#: Cohorts larger than this compute their local updates in slices of this many clients.
UPDATE_SLICE = 512
#: Idle aggregations in a row after which a run stops as ``stalled``.
STALL_ROUNDS = 1000
#: In a run without ``rounds``, an aggregation advancing the clock by less than this share of
#: ``max_time`` is idle.
STALL_SHARE = 1e-9


class RunContext:
    """Everything one run shares: clock, streams, data, state, playback, records, stop rules.

    Loops use its primitives: :meth:`plan` to plan device jobs, :attr:`playback` to play them,
    :meth:`record_jobs` to record them, :meth:`updates` and :meth:`apply` to compute and
    aggregate updates, and :meth:`end_aggregation` to record the aggregation, evaluate and check
    the stop rules. Built by :func:`simfl.engine.run`.
    """

    def __init__(
        self,
        scenario: Scenario,
        *,
        lazy: bool,
        progress: Progress,
        on_error: str,
        batched: bool = True,
        reference_links: bool = False,
    ) -> None:
        self.scenario = scenario
        self.reference_links = reference_links
        self.lazy = lazy
        self.on_error = on_error
        self.env = simpy.Environment()
        self.streams = Streams(scenario.seed)
        self.fleet = scenario.fleet
        self.algorithm = scenario.algorithm
        task = scenario.task
        self.metrics: tuple[str, ...] = task.metrics if task is not None else ()
        self.goals: dict[str, str] = dict(task.goals) if task is not None else {}
        self.recorder = Recorder(self.metrics, energy=scenario.fleet.energy is not None)
        #: Number of aggregations so far (the index of the next one).
        self.round = 0
        self.stop_reason: str | None = None
        self.error: str | None = None
        self.idle_rounds = 0
        self._slow_rounds = 0  # idle rounds of the current stretch that applied updates
        self.bar = _bar(scenario, progress is True)
        #: Told the share of the run done after every aggregation (``run(progress=callable)``).
        self.report: Callable[[float], None] | None = (
            None if isinstance(progress, bool) else progress
        )
        self._shown = 0.0  # simulated seconds the time bar shows
        #: whether a bar or a callable follows the aggregations
        self.shows_progress = not self.bar.disable or self.report is not None
        self._max_rounds = math.inf if scenario.rounds is None else float(scenario.rounds)
        #: whether the stall rule looks at the clock (only ``max_time`` ends the run)
        self._clock_rules = scenario.rounds is None
        #: whether aggregations may share an instant (asynchronous arrivals)
        self._simultaneous = isinstance(scenario.policy, AsyncPolicy)
        #: What the run found worth a word (``meta["warnings"]``).
        self.warnings: list[str] = []
        fleet = scenario.fleet
        #: availability queries (None: every device always online)
        self.cursor = None if fleet.availability is None else AvailabilityCursor(fleet.availability)
        self._everyone = np.arange(fleet.size, dtype=np.int64)  # built once, not every round
        self._everyone.setflags(write=False)
        self.network: Links | None = None
        self.playback = self._playback(scenario, batched)
        #: Play synchronous rounds without job events where the playback is planned.
        self.batched = batched and self.playback.planned
        #: Play flat synchronous rounds without job events from their jobs' resolved events.
        self.resolved = isinstance(self.playback, Resolved)
        #: Play flat synchronous rounds on shared links without job processes (a clock).
        self.flow_rounds = (
            batched
            and scenario.network is not None
            and isinstance(self.playback, Live)
            and flow_rounds_apply(scenario.network.kind, self.network, self.playback.devices)
        )
        self.view = PolicyView(self)
        self.data: Any = None if task is None else task.build(scenario.fleet.size, self.streams)
        self.state: Any = self.algorithm.initial_state(self.data, self.streams)
        #: Metrics of the initial state (before round 0), kept in ``Results.meta``.
        self.initial_metrics: dict[str, float] = (
            self.algorithm.evaluate(self.state, self.data) if self.metrics else {}
        )

    def _playback(self, scenario: Scenario, batched: bool) -> Playback:
        """The run's job playback: planned unless devices go offline or share links.

        Availability on private links is resolved from the plans, unless ``batched`` is
        ``False`` (the straightforward path: every job a live process).
        """
        fleet = scenario.fleet
        if scenario.network is None and self.cursor is None:
            return Planned(self.env, fleet, None)
        links = None
        path_latency = None
        if scenario.network is not None:
            topology = scenario.network.build(
                fleet.bandwidth_down, fleet.bandwidth_up, fleet.latency
            )
            links_class = ReferenceFlowNetwork if self.reference_links else FlowNetwork
            self.network = links_class(self.env, topology)
            links = topology.device_links()
            path_latency = topology.path_latency
        devices = DeviceRuntime(self.env, self.cursor, fleet.offline, self.network, path_latency)
        if batched and self.network is None:
            return Resolved(self.env, fleet, devices)
        return Live(self.env, fleet, links, devices, self.network)

    # ----------------------------------------------------------------- jobs
    def plan(self, devices: NDArray[np.int64], *, key: int, stage: int) -> JobPlan:
        """Jobs of ``devices`` starting now, keyed by ``key`` (the round, for synchronous runs).

        Nothing starts: policies observe speeds this way before choosing (the draws are keyed,
        so starting the same jobs later reproduces them exactly).
        """
        return plan_jobs(
            self.fleet,
            devices,
            round=key,
            stage=stage,
            t_start=self.env.now,
            work=self.algorithm.work(self.state, devices),
            payload=self.algorithm.payload(self.state),
            streams=self.streams,
            links=self.playback.links,
        )

    def online(self) -> NDArray[np.int64]:
        """The devices online now, sorted (all of them without an availability)."""
        if self.cursor is None:
            return self._everyone
        return np.flatnonzero(self.cursor.online(self.env.now)).astype(np.int64)

    def wait_online(self) -> Generator[Any, Any, None]:
        """Wait until some device is online (stop the run as ``offline`` if none ever will be)."""
        while self.cursor is not None:
            t = self.cursor.next_online(self.env.now)
            if t <= self.env.now:
                return
            if math.isinf(t):
                self.stop("offline")
                return
            yield self.env.timeout(t - self.env.now)

    def record_jobs(
        self,
        plan: JobPlan,
        status: NDArray[np.int8],
        t_end: NDArray[np.float64],
        *,
        round: int | NDArray[np.int64],
        stage: int,
        staleness: NDArray[np.float64] | None = None,
        waits: bool = True,
    ) -> tuple[float, float]:
        """Append the rows of the jobs of ``plan``; return the bytes they moved down and up.

        ``waits``: whether the jobs' devices wait, after their job, for the aggregation
        happening now (synchronous rounds); it sets their idle energy
        (:mod:`simfl.fleet.energy`) when the fleet declares an energy model.
        """
        b_down, b_up = self.record_job_rows(
            plan, status, t_end, round=round, stage=stage, staleness=staleness, waits=waits
        )
        return float(b_down.sum()), float(b_up.sum())

    def record_job_rows(
        self,
        plan: JobPlan,
        status: NDArray[np.int8],
        t_end: NDArray[np.float64],
        *,
        round: int | NDArray[np.int64],
        stage: int,
        staleness: NDArray[np.float64] | None = None,
        waits: bool = True,
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """:meth:`record_jobs`, returning the bytes each job moved down and up."""
        n = plan.size
        down, comp, up, b_down, b_up = self.playback.split(plan, status, t_end)
        if staleness is None:
            staleness = np.where(status == ARRIVED, 0.0, np.nan)
        rounds = np.asarray(round, dtype=np.int64)
        starts = np.asarray(plan.t_start, dtype=np.float64)
        energy = {}
        if self.fleet.energy is not None:
            energy = self._job_energy(plan, status, t_end, comp, b_down, b_up, waits)
        self.recorder.add_jobs(
            {
                "round": np.full(n, rounds) if rounds.ndim == 0 else rounds,
                "stage": np.full(n, stage),
                "device": plan.devices,
                "status": status,
                "t_start": np.full(n, starts) if starts.ndim == 0 else starts,
                "t_end": t_end,
                "download": down,
                "compute": comp,
                "upload": up,
                "work": plan.work,
                "bytes_down": b_down,
                "bytes_up": b_up,
                "staleness": staleness,
                **energy,
            }
        )
        return b_down, b_up

    def _job_energy(
        self,
        plan: JobPlan,
        status: NDArray[np.int8],
        t_end: NDArray[np.float64],
        compute: NDArray[np.float64],
        b_down: NDArray[np.float64],
        b_up: NDArray[np.float64],
        waits: bool,
    ) -> dict[str, NDArray[np.float64]]:
        """The energy columns of the jobs of ``plan`` (see :mod:`simfl.fleet.energy`)."""
        assert self.fleet.energy is not None
        arrived = status == ARRIVED
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(plan.compute > 0, np.clip(compute / plan.compute, 0.0, 1.0), 0.0)
        share = np.where(arrived, 1.0, share)  # an arrived job did all its work
        idle = np.zeros(plan.size)
        if waits:
            idle = np.where(status == DROPPED, 0.0, np.maximum(self.env.now - t_end, 0.0))
        return job_energy(
            self.fleet.energy[plan.devices],
            work_done=plan.work * share,
            bytes_down=b_down,
            bytes_up=b_up,
            idle_seconds=idle,
        )

    # ----------------------------------------------------------------- math
    def updates(
        self,
        state: Any,
        clients: NDArray[np.int64],
        key: int,
        accepted: NDArray[np.bool_] | None = None,
        steps: NDArray[np.float64] | None = None,
    ) -> Updates:
        """The updates of ``clients[accepted]`` from ``state``, with data keyed by ``key``.

        ``steps`` (aligned with ``clients``) gives each client's local steps under partial
        work: the algorithm's ``partial_updates`` computes them. Lazy runs compute the accepted
        clients only. Eager runs also compute the discarded clients' updates, in a batch of
        their own, and throw them away: any side effect of discarded work would show as a
        difference between the two. (That a client's update does not depend on which clients
        share its batch is a property each algorithm's tests check directly; batched float
        kernels, e.g. in torch, may legitimately differ in the last bits with the batch size.)
        """
        if accepted is None:
            return self._local_updates(state, clients, key, steps)
        updates = self._local_updates(
            state, clients[accepted], key, None if steps is None else steps[accepted]
        )
        if not self.lazy and not accepted.all():
            rest = ~accepted
            self._local_updates(state, clients[rest], key, None if steps is None else steps[rest])
        return updates

    def discard(self, state: Any, clients: NDArray[np.int64], key: int) -> None:
        """Compute and throw away updates that will not be applied (eager runs only)."""
        if not self.lazy:
            self._local_updates(state, clients, key)

    def _local_updates(
        self,
        state: Any,
        clients: NDArray[np.int64],
        key: int,
        steps: NDArray[np.float64] | None = None,
    ) -> Updates:
        """The algorithm's updates of ``clients``, in slices of at most :data:`UPDATE_SLICE`.

        A client's update depends only on the state and its own data, so slicing changes
        nothing (for numpy algorithms, bit for bit: their tests check it) and keeps a large
        cohort's arrays in cache.
        """
        alg = self.algorithm

        def part(i: int, j: int) -> Updates:
            if steps is None:
                return alg.local_updates(state, self.data, clients[i:j], key, self.streams)
            return alg.partial_updates(
                state, self.data, clients[i:j], key, self.streams, steps[i:j]
            )

        if clients.size <= UPDATE_SLICE:
            if steps is None:  # the common path, without slicing copies
                return alg.local_updates(state, self.data, clients, key, self.streams)
            return part(0, clients.size)
        return Updates.concat(
            [part(i, i + UPDATE_SLICE) for i in range(0, clients.size, UPDATE_SLICE)]
        )

    def apply(self, row: dict[str, Any], compute: Callable[[], tuple[Any, Updates]]) -> None:
        """Run ``compute`` (which returns the new state and the updates it used) safely.

        A non-finite update marks ``row`` as ``diverged``; an exception marks it ``error`` (or
        re-raises with ``on_error="raise"``). Either way the state is left unchanged and the run
        stops after this aggregation. The mean ``loss`` of the updates becomes ``train_loss``.
        ``compute`` calls the algorithm's ``aggregate`` and then its ``background``.
        """
        try:
            # overflow is detected below and recorded as divergence, not warned about
            with np.errstate(over="ignore", invalid="ignore"):
                state, updates = compute()
            if not updates.finite():
                row["status"] = "diverged"
                self.stop("diverged")
                return
        except Exception:
            if self.on_error == "raise":
                raise
            row["status"] = "error"
            self.fail(traceback.format_exc())
            return
        self.state = state
        if updates.loss is not None and len(updates.loss):
            row["train_loss"] = float(np.mean(updates.loss))

    # ----------------------------------------------------------------- aggregations
    def end_aggregation(self, row: dict[str, Any]) -> None:
        """Record aggregation ``row``, then check the stop rules and evaluate if due."""
        row.setdefault("status", "ok")
        row.setdefault("duration", row["time"] - row["t_start"])
        self.recorder.add_round(row)
        self.count_aggregation(row["n_arrived"], row["time"] - row["t_start"])
        due = self.round % self.scenario.eval_every == 0 or self.stop_reason is not None
        if due and self.metrics and row["status"] in ("ok", "empty"):
            self._evaluate()
        self.show_progress()

    def count_aggregation(self, n_arrived: int, advance: float) -> None:
        """One more aggregation: the ``rounds`` and stall rules (see the module docstring).

        ``n_arrived``: the updates it applied. ``advance``: the simulated seconds since the
        previous aggregation. A loop that records its aggregations itself calls this (and
        :meth:`show_progress` where :attr:`shows_progress`) instead of :meth:`end_aggregation`.
        """
        self.round += 1
        if self.round >= self._max_rounds:
            self.stop("rounds")
        if n_arrived and not self._clock_rules:  # not idle: the common case, nothing to check
            self.idle_rounds = 0
            return
        idle = n_arrived == 0
        if self._clock_rules:  # only max_time ends the run: the clock must get there
            budget = self.scenario.max_time
            assert budget is not None  # a Scenario without rounds has a max_time
            if advance == 0 and not self._simultaneous:
                self._stall(bool(n_arrived), "a synchronous round took no time")
            slow = advance < STALL_SHARE * budget
            if slow and not idle:
                self._slow_rounds += 1  # idle by the clock alone
            idle = idle or slow
        if not idle:
            self.idle_rounds = self._slow_rounds = 0
            return
        self.idle_rounds += 1
        if self.idle_rounds >= STALL_ROUNDS:
            self._stall(
                self._slow_rounds > 0,
                f"{self._slow_rounds} of the last {STALL_ROUNDS} aggregations applied updates "
                f"but advanced the clock by less than {STALL_SHARE:g} x max_time",
            )

    def _stall(self, by_clock: bool, why: str) -> None:
        """Stop as ``stalled``; ``by_clock``: updates arrived (a warning says why it stopped)."""
        if by_clock and self.stop_reason is None:
            self.warnings.append(
                f"stalled although updates arrived: {why}, so max_time "
                f"({self.scenario.max_time:g} s) cannot be reached in a number of aggregations "
                f"a host can play; give the scenario a rounds limit to run on"
            )
        self.stop("stalled")

    def quiet_aggregations(self) -> int:
        """How many more aggregations, each applying an update, cannot fire a stop rule.

        A loop may count them in one step (:meth:`count_quiet`) instead of calling
        :meth:`count_aggregation` for each: the rules' state ends the same. None where the
        stall rule looks at the clock (no ``rounds``) or progress is shown.
        """
        if self._clock_rules or self.shows_progress:
            return 0
        return max(int(self._max_rounds) - self.round - 1, 0)

    def count_quiet(self, k: int) -> None:
        """Count ``k`` aggregations that :meth:`quiet_aggregations` allowed."""
        if k:
            self.round += k
            self.idle_rounds = self._slow_rounds = 0

    # ----------------------------------------------------------------- progress
    def done(self) -> float:
        """The share of the run done, in [0, 1]: rounds of ``rounds``, or time of ``max_time``.

        With both stop rules, the larger share (the run ends at whichever comes first).
        """
        sc = self.scenario
        by_rounds = 0.0 if sc.rounds is None else self.round / sc.rounds
        by_time = 0.0 if sc.max_time is None else float(self.env.now) / sc.max_time
        return min(1.0, max(by_rounds, by_time))

    def show_progress(self) -> None:
        """After an aggregation: move the bar and tell ``report`` (no recorded number changes).

        The bar counts rounds, or, for a run limited only by ``max_time``, simulated seconds
        out of ``max_time`` (so it has a total and an ETA).
        """
        if self.scenario.rounds is not None:
            self.bar.update(1)
        elif not self.bar.disable:
            now = min(float(self.env.now), float(self.bar.total))
            self.bar.update(now - self._shown)
            self._shown = now
        if self.report is not None:
            self.report(self.done())

    def close_progress(self) -> None:
        """Close the bar, a time bar moved to the clock where the run stopped."""
        if self.scenario.rounds is None and not self.bar.disable:
            self.bar.update(min(float(self.env.now), float(self.bar.total)) - self._shown)
        self.bar.close()

    @property
    def stopped(self) -> bool:
        """Whether a stop rule has fired (the loop should not start another round)."""
        return self.stop_reason is not None

    def stop(self, reason: str) -> None:
        """Ask the run to stop after the current aggregation (the first reason wins)."""
        if self.stop_reason is None:
            self.stop_reason = reason

    def fail(self, error: str) -> None:
        """Record a failure (a traceback) and stop the run as ``error``."""
        if self.error is None:
            self.error = error
        self.stop("error")

    def _evaluate(self) -> None:
        try:
            with np.errstate(over="ignore", invalid="ignore"):
                metrics = self.algorithm.evaluate(self.state, self.data)
        except Exception:
            if self.on_error == "raise":
                raise
            self.fail(traceback.format_exc())
            return
        self.recorder.set_metrics(metrics)
        if not all(math.isfinite(v) for v in metrics.values()):
            self.recorder.set_status("diverged")  # the round that produced the model diverged
            self.stop("diverged")
        target = self.scenario.target
        if target is not None and target.reached(metrics):
            self.stop("target")
        if not self.bar.disable:
            self.bar.set_postfix(
                {"t": f"{self.env.now:.4g}s", **{k: f"{v:.3g}" for k, v in metrics.items()}},
                refresh=False,
            )

    def client_metrics(self) -> tuple[dict[str, Any] | None, str | None]:
        """The final state's metrics per evaluated client (``meta["client_metrics"]``).

        Returns them (``None`` where the algorithm does not evaluate per client, the run has no
        task, or it failed) and the traceback of an exception raised while computing them
        (with ``on_error="record"``; it does not change the run's status: the run itself is
        complete).
        """
        if not self.metrics or self.error is not None:
            return None, None
        try:
            with np.errstate(over="ignore", invalid="ignore"):
                found = self.algorithm.evaluate_clients(self.state, self.data)
        except Exception:
            if self.on_error == "raise":
                raise
            return None, traceback.format_exc()
        if found is None:
            return None, None
        clients, values = found
        return {
            "clients": np.asarray(clients, dtype=np.int64).tolist(),
            "metrics": {k: np.asarray(v, dtype=np.float64).tolist() for k, v in values.items()},
        }, None

    def finish(self) -> None:
        """Evaluate the final state if it was not (after the loop recorded what was in flight)."""
        rec = self.recorder
        if not self.metrics or rec.n_rounds == 0 or self.error is not None:
            return
        if rec.last_round("status") in ("ok", "empty") and all(
            math.isnan(rec.last_round(m)) for m in self.metrics
        ):
            self._evaluate()


def _bar(scenario: Scenario, show: bool) -> Any:
    """The run's tqdm bar: over rounds, or over simulated seconds when only ``max_time`` ends it."""
    common: dict[str, Any] = {
        "desc": scenario.name,
        "disable": not show,
        "dynamic_ncols": True,
        "leave": True,
    }
    if scenario.rounds is None:
        return tqdm(total=scenario.max_time, unit="s", bar_format=_TIME_BAR, **common)
    return tqdm(total=scenario.rounds, unit="round", **common)


class PolicyView:
    """The read-only :class:`~simfl.policies.View` of a run that policies decide from."""

    __slots__ = ("_ctx",)

    def __init__(self, ctx: RunContext) -> None:
        self._ctx = ctx

    @property
    def round(self) -> int:  # noqa: D102
        return self._ctx.round

    @property
    def now(self) -> float:  # noqa: D102
        return float(self._ctx.env.now)

    @property
    def n_devices(self) -> int:  # noqa: D102
        return self._ctx.fleet.size

    @property
    def streams(self) -> Streams:  # noqa: D102
        return self._ctx.streams

    @property
    def goals(self) -> dict[str, str]:  # noqa: D102
        return self._ctx.goals

    def online(self) -> NDArray[np.int64]:  # noqa: D102
        return self._ctx.online()

    def online_mask(self) -> NDArray[np.bool_] | None:  # noqa: D102
        cursor = self._ctx.cursor
        return None if cursor is None else cursor.online(self._ctx.env.now)

    def is_online(self, device: int) -> bool:  # noqa: D102
        cursor = self._ctx.cursor
        return cursor is None or cursor.window(device, self._ctx.env.now)[0]

    def durations(self, devices: NDArray[np.int64], *, stage: int) -> NDArray[np.float64]:  # noqa: D102
        ctx = self._ctx
        return ctx.plan(devices, key=ctx.round, stage=stage).duration

    def expected_times(  # noqa: D102
        self, devices: NDArray[np.int64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
        ctx = self._ctx
        devices = np.asarray(devices, dtype=np.int64)
        fleet = ctx.fleet
        links = ctx.playback.links
        if links is None:
            latency, bw_down, bw_up = (
                fleet.latency[devices],
                fleet.bandwidth_down[devices],
                fleet.bandwidth_up[devices],
            )
        else:
            latency, bw_down, bw_up = (a[devices] for a in links)
        payload = ctx.algorithm.payload(ctx.state)
        compute = fleet.mean_compute[devices] * ctx.algorithm.work(ctx.state, devices)
        return (
            transfer_seconds(payload.down, bw_down, latency),
            np.asarray(compute, dtype=np.float64),
            transfer_seconds(payload.up, bw_up, latency),
        )

    def client_sizes(self) -> NDArray[np.float64] | None:  # noqa: D102
        sizes = getattr(self._ctx.data, "client_sizes", None)
        return None if sizes is None else np.asarray(sizes(), dtype=np.float64)

    def last(self, column: str) -> float:  # noqa: D102
        return float(self._ctx.recorder.last_round(column))
