"""The SimPy engine: a server process and one process per device job.

Time and math are separate. The processes here decide *who* takes part, *when* each step
happens and *what arrives* before the server aggregates; they never touch model parameters. When
a round closes, the algorithm computes the local updates of the accepted clients only, in one
batched call, and aggregates them. Updates that would be discarded (late, dropped, cancelled)
are never computed, yet their time is simulated; ``run(..., lazy=False)`` computes them too and
throws them away, and gives identical results.

A device job reads like the protocol::

    download -> compute -> upload     (each stage raced by the device's failure clock)

and the synchronous server loop like a round::

    cohort = policy.select(...); start jobs; wait for quota / all resolved / deadline;
    close the round (running jobs become late or cancelled); aggregate; evaluate.
"""

from __future__ import annotations

import math
import time
import traceback
from collections.abc import Generator
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy
from numpy.typing import NDArray
from tqdm.auto import tqdm

from simfl._checks import check_choice
from simfl.algorithms.base import Updates
from simfl.jobs import (
    ARRIVED,
    CANCELLED,
    DROPPED,
    LATE,
    RUNNING,
    JobPlan,
    bytes_moved,
    plan_jobs,
    time_split,
)
from simfl.results import Recorder, Results
from simfl.rng import Streams
from simfl.scenario import Scenario

if TYPE_CHECKING:
    from simfl.policies.base import SyncPolicy

__all__ = ["RoundState", "RunContext", "device_job", "run", "sync_server"]


class RoundState:
    """Book-keeping of one synchronous round while its jobs run."""

    __slots__ = (
        "closed",
        "done",
        "env",
        "n_arrived",
        "n_resolved",
        "plan",
        "procs",
        "quota",
        "round",
        "stage",
        "status",
        "t_end",
    )

    def __init__(
        self, env: simpy.Environment, plan: JobPlan, *, quota: int, round: int, stage: int
    ) -> None:
        self.env = env
        self.plan = plan
        self.quota = quota
        self.round = round
        self.stage = stage
        self.status = np.full(plan.size, RUNNING, dtype=np.int8)
        self.t_end = np.full(plan.size, math.nan)
        self.n_arrived = 0
        self.n_resolved = 0
        self.closed = False
        self.done = env.event()
        self.procs: list[simpy.Process] = []

    def arrive(self, j: int) -> None:
        """Job ``j``'s update reached the server."""
        if self.closed:
            return  # arrived at the very instant the round closed, after it: not accepted
        self.status[j] = ARRIVED
        self.t_end[j] = self.env.now
        self.n_arrived += 1
        self._resolved()

    def drop(self, j: int) -> None:
        """Job ``j``'s device failed."""
        if self.closed:
            return
        self.status[j] = DROPPED
        self.t_end[j] = self.env.now
        self._resolved()

    def _resolved(self) -> None:
        self.n_resolved += 1
        if self.n_arrived >= self.quota or self.n_resolved == self.plan.size:
            self.closed = True
            self.done.succeed()

    def close(self, status: int) -> None:
        """Stop every job still running now, recording it with ``status``."""
        self.closed = True
        running = np.flatnonzero(self.status == RUNNING)
        self.status[running] = status
        self.t_end[running] = self.env.now
        for j in running:
            proc = self.procs[j]
            if proc.is_alive:
                proc.interrupt(status)


def _busy(env: simpy.Environment, seconds: float, fail_at: float) -> Generator[Any, Any, bool]:
    """Spend ``seconds`` busy; return False if the device fails first."""
    if env.now + seconds > fail_at:
        yield env.timeout(max(fail_at - env.now, 0.0))
        return False
    yield env.timeout(seconds)
    return True


def device_job(env: simpy.Environment, rnd: RoundState, j: int) -> Generator[Any, Any, None]:
    """The job of the ``j``-th device of a round: download, compute, upload.

    A failure (drawn when the job starts, see :mod:`simfl.jobs`) ends it as ``dropped``; the
    server interrupts it if the round closes first.
    """
    plan = rnd.plan
    fail_at = plan.t_start + float(plan.fail_after[j])
    try:
        survived = (
            (yield from _busy(env, float(plan.download[j]), fail_at))
            and (yield from _busy(env, float(plan.compute[j]), fail_at))
            and (yield from _busy(env, float(plan.upload[j]), fail_at))
        )
        if survived:
            rnd.arrive(j)
        else:
            rnd.drop(j)
    except simpy.Interrupt:
        pass  # the round closed: the server has recorded this job as late or cancelled


def sync_server(run: RunContext, policy: SyncPolicy) -> Generator[Any, Any, None]:
    """The server process of synchronous policies, one round per loop."""
    env = run.env
    while run.stop_reason is None:
        r = run.round
        cohort = policy.select(r, run.fleet.size, run.streams)
        rnd = run.start_round(cohort, quota=policy.quota(cohort.size), stage=policy.stage(r))
        deadline = policy.deadline(r)
        if deadline is None:
            yield rnd.done
        else:
            yield rnd.done | env.timeout(deadline)
        run.close_round(rnd, LATE if not rnd.closed else CANCELLED)


class RunContext:
    """Everything one run shares: clock, streams, state, records. Built by :func:`run`."""

    def __init__(self, scenario: Scenario, *, lazy: bool, progress: bool, on_error: str) -> None:
        self.scenario = scenario
        self.lazy = lazy
        self.on_error = on_error
        self.env = simpy.Environment()
        self.streams = Streams(scenario.seed)
        self.fleet = scenario.fleet
        self.algorithm = scenario.algorithm
        task = scenario.task
        self.metrics: tuple[str, ...] = task.metrics if task is not None else ()
        self.recorder = Recorder(self.metrics)
        self.round = 0
        self.stop_reason: str | None = None
        self.error: str | None = None
        self.current: RoundState | None = None
        self.bar = tqdm(
            total=scenario.rounds,
            desc=scenario.name,
            unit="round",
            disable=not progress,
            dynamic_ncols=True,
            leave=True,
        )
        self.data: Any = None if task is None else task.build(scenario.fleet.size, self.streams)
        self.state: Any = self.algorithm.initial_state(self.data, self.streams)
        #: Metrics of the initial state (before round 0), kept in ``Results.meta``.
        self.initial_metrics: dict[str, float] = (
            self.algorithm.evaluate(self.state, self.data) if self.metrics else {}
        )

    # ----------------------------------------------------------------- rounds
    def start_round(self, cohort: NDArray[np.int64], *, quota: int, stage: int) -> RoundState:
        """Plan and start the jobs of ``cohort`` now."""
        plan = plan_jobs(
            self.fleet,
            cohort,
            round=self.round,
            stage=stage,
            t_start=self.env.now,
            work=self.algorithm.work(self.state, cohort),
            payload=self.algorithm.payload(self.state),
            streams=self.streams,
        )
        rnd = RoundState(self.env, plan, quota=quota, round=self.round, stage=stage)
        rnd.procs = [self.env.process(device_job(self.env, rnd, j)) for j in range(plan.size)]
        self.current = rnd
        return rnd

    def close_round(self, rnd: RoundState, running_status: int) -> None:
        """Close ``rnd`` now: stop running jobs, record them, aggregate, evaluate, check stops."""
        rnd.close(running_status)
        self.current = None
        self._record_jobs(rnd)
        row = self._aggregate(rnd)
        self.recorder.add_round(row)
        self.round += 1
        sc = self.scenario
        if sc.rounds is not None and self.round >= sc.rounds:
            self._stop("rounds")
        if sc.rounds is None and row["duration"] == 0.0 and self.stop_reason is None:
            self._stop("stalled")  # the clock cannot advance: max_time would never be reached
        due = self.round % sc.eval_every == 0 or self.stop_reason is not None
        if due and self.metrics and row["status"] in ("ok", "empty"):
            self._evaluate()
        self.bar.update(1)

    def abandon(self) -> None:
        """Record the jobs of a round cut short by the end of the run as cancelled.

        Jobs still running stop now; updates already received are never aggregated, so they
        are cancelled too (their ``t_end`` stays the arrival time). Dropped jobs stay dropped.
        """
        rnd = self.current
        if rnd is None:
            return
        received = rnd.status == ARRIVED
        rnd.close(CANCELLED)
        rnd.status[received] = CANCELLED
        self._record_jobs(rnd)
        self.current = None

    def _stop(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason

    def _record_jobs(self, rnd: RoundState) -> None:
        plan = rnd.plan
        n = plan.size
        down, comp, up = time_split(plan, rnd.status, rnd.t_end)
        b_down, b_up = bytes_moved(plan, self.fleet, down, up)
        self.recorder.add_jobs(
            {
                "round": np.full(n, rnd.round),
                "stage": np.full(n, rnd.stage),
                "device": plan.devices,
                "status": rnd.status,
                "t_start": np.full(n, plan.t_start),
                "t_end": rnd.t_end,
                "download": down,
                "compute": comp,
                "upload": up,
                "work": plan.work,
                "bytes_down": b_down,
                "bytes_up": b_up,
            }
        )

    def _aggregate(self, rnd: RoundState) -> dict[str, Any]:
        plan, status = rnd.plan, rnd.status
        accepted = status == ARRIVED
        down, _, up = time_split(plan, status, rnd.t_end)
        b_down, b_up = bytes_moved(plan, self.fleet, down, up)
        row: dict[str, Any] = {
            "round": rnd.round,
            "stage": rnd.stage,
            "t_start": plan.t_start,
            "time": self.env.now,
            "duration": self.env.now - plan.t_start,
            "status": "ok",
            "n_selected": plan.size,
            "n_arrived": int(accepted.sum()),
            "n_dropped": int((status == DROPPED).sum()),
            "n_late": int((status == LATE).sum()),
            "n_cancelled": int((status == CANCELLED).sum()),
            "bytes_down": float(b_down.sum()),
            "bytes_up": float(b_up.sum()),
        }
        if not accepted.any():
            row["status"] = "empty"
            return row
        try:
            # overflow is detected below and recorded as divergence, not warned about
            with np.errstate(over="ignore", invalid="ignore"):
                updates = self._updates(plan, accepted)
                if not all(np.isfinite(v).all() for v in updates.values()):
                    row["status"] = "diverged"
                    self._stop("diverged")
                    return row
                self.state = self.algorithm.aggregate(self.state, updates, rnd.round)
        except Exception:
            if self.on_error == "raise":
                raise
            row["status"] = "error"
            self.error = traceback.format_exc()
            self._stop("error")
            return row
        if "loss" in updates:
            row["train_loss"] = float(np.mean(updates["loss"]))
        return row

    def _updates(self, plan: JobPlan, accepted: NDArray[np.bool_]) -> Updates:
        alg, r = self.algorithm, self.round
        if self.lazy:
            return alg.local_updates(self.state, self.data, plan.devices[accepted], r, self.streams)
        everything = alg.local_updates(self.state, self.data, plan.devices, r, self.streams)
        return {name: value[accepted] for name, value in everything.items()}

    def _evaluate(self) -> None:
        try:
            with np.errstate(over="ignore", invalid="ignore"):
                metrics = self.algorithm.evaluate(self.state, self.data)
        except Exception:
            if self.on_error == "raise":
                raise
            self.error = traceback.format_exc()
            self._stop("error")
            return
        self.recorder.set_metrics(metrics)
        if not all(math.isfinite(v) for v in metrics.values()):
            self._stop("diverged")
        target = self.scenario.target
        if target is not None and target.reached(metrics):
            self._stop("target")
        self.bar.set_postfix(
            {"t": f"{self.env.now:.4g}s", **{k: f"{v:.3g}" for k, v in metrics.items()}},
            refresh=False,
        )

    def finish(self) -> None:
        """Evaluate the final state if the last round was not evaluated."""
        rec = self.recorder
        if not self.metrics or rec.n_rounds == 0 or rec.last_round("status") not in ("ok", "empty"):
            return
        if all(math.isnan(rec.last_round(m)) for m in self.metrics) and self.error is None:
            self._evaluate()


def _version() -> str:
    try:
        return version("simfl")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "unknown"


def run(
    scenario: Scenario,
    *,
    progress: bool = True,
    lazy: bool = True,
    on_error: str = "record",
) -> Results:
    """Simulate ``scenario`` and return its :class:`~simfl.results.Results`.

    Deterministic: the same scenario (including its seed) gives identical DataFrames.

    Parameters
    ----------
    scenario
        What to run.
    progress
        Show a progress bar on stderr.
    lazy
        Compute only the updates that are aggregated (default). ``False`` computes every started
        job's update and discards the rest; the results are identical, only slower.
    on_error
        ``"record"`` (default): an exception in the algorithm or task ends the run, is stored in
        ``meta["error"]`` and everything computed so far is returned. ``"raise"``: re-raise it.
    """
    if not isinstance(scenario, Scenario):
        raise ValueError(f"simfl.run needs a simfl.Scenario, got {scenario!r}")
    check_choice("run on_error", on_error, ("record", "raise"))
    started = time.perf_counter()
    ctx = RunContext(scenario, lazy=lazy, progress=progress, on_error=on_error)
    env = ctx.env
    server = env.process(scenario.policy.serve(ctx))
    until: simpy.Event = server
    if scenario.max_time is not None:
        until = server | env.timeout(scenario.max_time)
    status = "ok"
    try:
        env.run(until=until)
    except KeyboardInterrupt:
        ctx._stop("interrupted")
        status = "interrupted"
    finally:
        ctx.bar.close()
    if ctx.current is not None:
        ctx.abandon()
        ctx._stop("max_time")
    ctx.finish()
    if ctx.error is not None:
        status = "error"
    meta: dict[str, Any] = {
        "scenario": scenario.name,
        "scenario_repr": repr(scenario),
        "seed": scenario.seed,
        "n_devices": scenario.fleet.size,
        "algorithm": scenario.algorithm.name,
        "policy": scenario.policy.name,
        "metrics": list(ctx.metrics),
        "initial_metrics": ctx.initial_metrics,
        "lazy": lazy,
        "stop_reason": ctx.stop_reason or "max_time",
        "status": status,
        "error": ctx.error,
        "sim_time": float(env.now),
        "host_seconds": time.perf_counter() - started,
        "simfl_version": _version(),
    }
    return ctx.recorder.results(meta, ctx.state)
