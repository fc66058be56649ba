"""The SimPy engine: the run context every server process shares, and the device job process.

Time and math are separate. Server processes (synchronous rounds in :mod:`simfl.rounds`,
asynchronous ones in :mod:`simfl.policies.asynchronous`, or a policy's own) decide *who* takes
part, *when* each step happens and *what arrives*; they never touch model parameters. When
updates are to be aggregated, the algorithm computes those updates only, in one batched call
(:meth:`RunContext.updates`), and aggregates them. Updates that would be discarded (late,
dropped, cancelled) are never computed, yet their time is simulated; ``run(..., lazy=False)``
computes them too and throws them away, and gives identical results.

A device job reads like the protocol::

    download -> compute -> upload     (each stage raced by the device's failure clock)
"""

from __future__ import annotations

import math
import time
import traceback
from collections.abc import Callable, Generator
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import numpy as np
import simpy
from numpy.typing import NDArray
from tqdm.auto import tqdm

from simfl._checks import check_choice
from simfl.algorithms.base import Updates
from simfl.device_jobs import DeviceRuntime, fast_job
from simfl.fleet import AvailabilityCursor
from simfl.flows import FlowNetwork
from simfl.jobs import (
    ARRIVED,
    JobPlan,
    bytes_moved,
    plan_jobs,
    planned_split,
    resolution,
    time_split,
)
from simfl.results import Recorder, Results
from simfl.rng import Streams
from simfl.scenario import Scenario

__all__ = ["RunContext", "run", "simfl_version"]

Callback = Callable[[int], None]

#: Cohorts larger than this compute their local updates in slices of this many clients.
UPDATE_SLICE = 512


class RunContext:
    """Everything one run shares: clock, streams, data, state, records, stop rules.

    Server processes use its primitives: :meth:`plan` and :meth:`start_jobs` to run device jobs,
    :meth:`record_jobs` to record them, :meth:`updates` and :meth:`apply` to compute and
    aggregate updates, and :meth:`end_aggregation` to record the aggregation, evaluate and check
    the stop rules. Built by :func:`run`.
    """

    def __init__(
        self,
        scenario: Scenario,
        *,
        lazy: bool,
        progress: bool,
        on_error: str,
        batched: bool = True,
    ) -> None:
        self.scenario = scenario
        self.lazy = lazy
        #: Play synchronous rounds on private links without job events (see :mod:`simfl.rounds`).
        self.batched = batched
        self.on_error = on_error
        self.env = simpy.Environment()
        self.streams = Streams(scenario.seed)
        self.fleet = scenario.fleet
        self.algorithm = scenario.algorithm
        task = scenario.task
        self.metrics: tuple[str, ...] = task.metrics if task is not None else ()
        self.recorder = Recorder(self.metrics)
        #: Number of aggregations so far (the index of the next one).
        self.round = 0
        self.stop_reason: str | None = None
        self.error: str | None = None
        #: Called at the end of the run to record whatever the server still has in flight.
        self.abandon: Callable[[], None] | None = None
        self.bar = tqdm(
            total=scenario.rounds,
            desc=scenario.name,
            unit="round",
            disable=not progress,
            dynamic_ncols=True,
            leave=True,
        )
        fleet = scenario.fleet
        #: availability queries (None: every device always online)
        self.cursor = None if fleet.availability is None else AvailabilityCursor(fleet.availability)
        self._everyone = np.arange(fleet.size, dtype=np.int64)  # built once, not every round
        self._everyone.setflags(write=False)
        self.network: FlowNetwork | None = None
        self.links: tuple[Any, Any, Any] | None = None
        path_latency = None
        if scenario.network is not None:
            topology = scenario.network.build(
                fleet.bandwidth_down, fleet.bandwidth_up, fleet.latency
            )
            self.network = FlowNetwork(self.env, topology)
            self.links = topology.device_links()
            path_latency = topology.path_latency
        self.devices: DeviceRuntime | None = None
        if self.cursor is not None or self.network is not None:
            self.devices = DeviceRuntime(
                self.env, self.cursor, fleet.offline, self.network, path_latency
            )
        self.data: Any = None if task is None else task.build(scenario.fleet.size, self.streams)
        self.state: Any = self.algorithm.initial_state(self.data, self.streams)
        #: Metrics of the initial state (before round 0), kept in ``Results.meta``.
        self.initial_metrics: dict[str, float] = (
            self.algorithm.evaluate(self.state, self.data) if self.metrics else {}
        )

    # ----------------------------------------------------------------- jobs
    def plan(self, devices: NDArray[np.int64], *, key: int, stage: int) -> JobPlan:
        """Jobs of ``devices`` starting now, keyed by ``key`` (the round, for synchronous runs).

        Nothing starts: policies use this to observe speeds before choosing (the draws are
        keyed, so starting the same jobs later reproduces them exactly).
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
            links=self.links,
        )

    def online(self) -> NDArray[np.int64]:
        """The devices online now, sorted (all of them without an availability)."""
        if self.cursor is None:
            return self._everyone
        return np.flatnonzero(self.cursor.online(self.env.now)).astype(np.int64)

    def wait_online(self) -> Generator[Any, Any, None]:
        """Wait until some device is online (stop the run if none ever will be)."""
        while self.cursor is not None:
            t = self.cursor.next_online(self.env.now)
            if t <= self.env.now:
                return
            if math.isinf(t):
                self.stop("offline")
                return
            yield self.env.timeout(t - self.env.now)

    def start_jobs(
        self, plan: JobPlan, on_arrive: Callback, on_drop: Callback, *, local: bool = False
    ) -> list[simpy.Process]:
        """Start the SimPy process of every job of ``plan``.

        ``local``: transfers go only as far as each device's edge server (needs a network).
        """
        env = self.env
        if local:
            if self.devices is None or self.network is None:
                raise ValueError("edge-local jobs need a Scenario.network")
            devices = self.devices
            return [
                env.process(devices.process(plan, j, on_arrive, on_drop, True))
                for j in range(plan.size)
            ]
        if self.devices is None:
            after, arrives = resolution(plan)
            return [
                env.process(fast_job(env, float(a), bool(ok), j, on_arrive, on_drop))
                for j, (a, ok) in enumerate(zip(after, arrives, strict=True))
            ]
        devices = self.devices
        return [env.process(devices.process(plan, j, on_arrive, on_drop)) for j in range(plan.size)]

    def record_jobs(
        self,
        plan: JobPlan,
        status: NDArray[np.int8],
        t_end: NDArray[np.float64],
        *,
        round: int | NDArray[np.int64],
        stage: int,
        staleness: NDArray[np.float64] | None = None,
    ) -> tuple[float, float]:
        """Append the rows of the jobs of ``plan``; return the bytes they moved down and up."""
        n = plan.size
        if self.devices is None and (status == ARRIVED).all():
            # every stage done, every byte moved: nothing to work out
            down, comp, up = plan.download, plan.compute, plan.upload
            b_down, b_up = plan.size_down, plan.size_up
        elif self.devices is None:
            down, comp, up, progress = planned_split(plan, status, t_end)
            b_down, b_up = bytes_moved(plan, self.fleet, down, up, self.links, progress)
        else:
            self.devices.finalize(plan)  # flows of jobs stopped without running their process
            down, comp, up = time_split(plan, t_end)
            b_down, b_up = bytes_moved(plan, self.fleet, down, up, self.links)
        if staleness is None:
            staleness = np.where(status == ARRIVED, 0.0, np.nan)
        rounds = np.asarray(round, dtype=np.int64)
        starts = np.asarray(plan.t_start, dtype=np.float64)
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
            }
        )
        return float(b_down.sum()), float(b_up.sum())

    # ----------------------------------------------------------------- math
    def updates(
        self,
        state: Any,
        clients: NDArray[np.int64],
        key: int,
        accepted: NDArray[np.bool_] | None = None,
    ) -> Updates:
        """The updates of ``clients[accepted]`` from ``state``, with data keyed by ``key``.

        Lazy runs compute the accepted clients only. Eager runs also compute the discarded
        clients' updates, in a batch of their own, and throw them away: any side effect of
        discarded work would show as a difference between the two. (That a client's update does
        not depend on which clients share its batch is a property each algorithm's tests check
        directly; batched float kernels, e.g. in torch, may legitimately differ in the last bits
        with the batch size.)
        """
        if accepted is None:
            return self._local_updates(state, clients, key)
        updates = self._local_updates(state, clients[accepted], key)
        if not self.lazy and not accepted.all():
            self._local_updates(state, clients[~accepted], key)
        return updates

    def _local_updates(self, state: Any, clients: NDArray[np.int64], key: int) -> Updates:
        """The algorithm's updates of ``clients``, in slices of at most :data:`UPDATE_SLICE`.

        A client's update depends only on the state and its own data, so slicing changes
        nothing (for numpy algorithms, bit for bit: their tests check it) and keeps a large
        cohort's arrays in cache.
        """
        alg = self.algorithm
        if clients.size <= UPDATE_SLICE:
            return alg.local_updates(state, self.data, clients, key, self.streams)
        parts = [
            alg.local_updates(state, self.data, clients[i : i + UPDATE_SLICE], key, self.streams)
            for i in range(0, clients.size, UPDATE_SLICE)
        ]
        return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}

    def apply(self, row: dict[str, Any], compute: Callable[[], tuple[Any, Updates]]) -> None:
        """Run ``compute`` (which returns the new state and the updates it used) safely.

        A non-finite update marks ``row`` as ``diverged``; an exception marks it ``error`` (or
        re-raises with ``on_error="raise"``). Either way the state is left unchanged and the run
        stops after this aggregation. The mean ``loss`` of the updates becomes ``train_loss``.
        """
        try:
            # overflow is detected below and recorded as divergence, not warned about
            with np.errstate(over="ignore", invalid="ignore"):
                state, updates = compute()
            if not all(np.isfinite(v).all() for v in updates.values()):
                row["status"] = "diverged"
                self.stop("diverged")
                return
        except Exception:
            if self.on_error == "raise":
                raise
            row["status"] = "error"
            self.error = traceback.format_exc()
            self.stop("error")
            return
        self.state = state
        if "loss" in updates and len(updates["loss"]):
            row["train_loss"] = float(np.mean(updates["loss"]))

    # ----------------------------------------------------------------- aggregations
    def end_aggregation(self, row: dict[str, Any]) -> None:
        """Record aggregation ``row``, then check the stop rules and evaluate if due."""
        row.setdefault("status", "ok")
        row.setdefault("duration", row["time"] - row["t_start"])
        self.recorder.add_round(row)
        self.round += 1
        sc = self.scenario
        if sc.rounds is not None and self.round >= sc.rounds:
            self.stop("rounds")
        if sc.rounds is None and row["time"] == row["t_start"] and self.stop_reason is None:
            self.stop("stalled")  # the clock cannot advance: max_time would never be reached
        due = self.round % sc.eval_every == 0 or self.stop_reason is not None
        if due and self.metrics and row["status"] in ("ok", "empty"):
            self._evaluate()
        self.bar.update(1)

    @property
    def stopped(self) -> bool:
        """Whether a stop rule has fired (the server should not start another round)."""
        return self.stop_reason is not None

    def stop(self, reason: str) -> None:
        """Ask the run to stop after the current aggregation (the first reason wins)."""
        if self.stop_reason is None:
            self.stop_reason = reason

    def _evaluate(self) -> None:
        try:
            with np.errstate(over="ignore", invalid="ignore"):
                metrics = self.algorithm.evaluate(self.state, self.data)
        except Exception:
            if self.on_error == "raise":
                raise
            self.error = traceback.format_exc()
            self.stop("error")
            return
        self.recorder.set_metrics(metrics)
        if not all(math.isfinite(v) for v in metrics.values()):
            self.stop("diverged")
        target = self.scenario.target
        if target is not None and target.reached(metrics):
            self.stop("target")
        if not self.bar.disable:
            self.bar.set_postfix(
                {"t": f"{self.env.now:.4g}s", **{k: f"{v:.3g}" for k, v in metrics.items()}},
                refresh=False,
            )

    def finish(self) -> None:
        """Record what is still in flight; evaluate the final state if it was not."""
        if self.abandon is not None:
            self.abandon()
            self.abandon = None
        rec = self.recorder
        if not self.metrics or rec.n_rounds == 0 or self.error is not None:
            return
        if rec.last_round("status") in ("ok", "empty") and all(
            math.isnan(rec.last_round(m)) for m in self.metrics
        ):
            self._evaluate()


def simfl_version() -> str:
    """The installed simfl version (``"unknown"`` when running from a bare source tree)."""
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
    batched: bool = True,
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
    batched
        Play synchronous rounds whose devices have private links and are always online
        without job events: each round's outcome follows from its job plan in one vectorised
        step (default). ``False`` plays every job as a SimPy process, the straightforward
        path; the results are identical.
    """
    if not isinstance(scenario, Scenario):
        raise ValueError(f"simfl.run needs a simfl.Scenario, got {scenario!r}")
    check_choice("run on_error", on_error, ("record", "raise"))
    started = time.perf_counter()
    if not isinstance(batched, bool):
        raise ValueError(f"run batched must be True or False, got {batched!r}")
    ctx = RunContext(scenario, lazy=lazy, progress=progress, on_error=on_error, batched=batched)
    env = ctx.env
    server = env.process(scenario.policy.serve(ctx))
    until: simpy.Event = server
    if scenario.max_time is not None:
        until = server | env.timeout(scenario.max_time)
    status = "ok"
    try:
        env.run(until=until)
    except KeyboardInterrupt:
        ctx.stop("interrupted")
        status = "interrupted"
    finally:
        ctx.bar.close()
    if ctx.abandon is not None:
        ctx.stop("max_time")
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
        "batched": batched,
        "stop_reason": ctx.stop_reason or "max_time",
        "status": status,
        "error": ctx.error,
        "sim_time": float(env.now),
        "host_seconds": time.perf_counter() - started,
        "simfl_version": simfl_version(),
    }
    return ctx.recorder.results(meta, ctx.state)
