"""The asynchronous loop: jobs in flight, arrivals buffered, staleness-weighted mixing.

The server keeps ``concurrency`` jobs in flight. Whenever one ends, it starts another on the
device the policy picks (:meth:`~simfl.policies.AsyncPolicy.pick`, which reads the policy
state: :meth:`~simfl.policies.AsyncPolicy.start` gives it when the run starts and
:meth:`~simfl.policies.AsyncPolicy.observe` the next one after each aggregation, from the
aggregation's :class:`~simfl.outcome.Outcome`; the loop keeps it). Each job downloads the
current model version; its update is computed (lazily, when it is about to be applied) from
*that* version, kept as a snapshot while a job still refers to it. An update's staleness is the
number of server versions created between its download and its application. Every
``policy.buffer()`` arrivals the updates not staler than ``policy.max_staleness`` are mixed into
the model by the policy's mixing rule (the math is the algorithm side's).

Records: one ``rounds`` row per aggregation (``n_selected`` and ``n_dropped`` count the jobs
started and dropped since the previous one; ``t_start`` is the previous aggregation's time); in
``clients`` a job's ``round`` is the version it downloaded and ``staleness`` is recorded for
every applied update. Updates in the buffer or in flight when the run ends are recorded
``cancelled``; updates staler than ``max_staleness`` are discarded as ``late``. A run stops as
``stalled`` after :data:`STALL_JOBS` jobs in a row end without an update arriving, and as
``offline`` when no job is in flight and no device will ever come online.

With server costs (:mod:`simfl.engine.server`) a job's update joins the buffer once the server
has handled it, and an aggregation takes the server's time before it is applied and recorded:
its ``time`` is when the new version exists. Meanwhile the server starts no job; the jobs that
end meanwhile (their updates received, handled in the order they ended) are taken up when it is
done, and the jobs started then start from the new version.

The policy observes every aggregation, empty ones included, once it is recorded: the jobs
dropped since the previous one, then the buffered ones (``arrived`` or ``late``). Jobs with no
aggregation after them (the drops of a stalled run; whatever ends or waits when the run stops)
are recorded but never observed.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from simfl.algorithms.base import Updates
from simfl.engine.jobs import JobPlan, concat_plans
from simfl.outcome import ARRIVED, CANCELLED, DROPPED, LATE, Outcome
from simfl.policies.base import AsyncPolicy

if TYPE_CHECKING:
    from simfl.engine.context import RunContext

__all__ = ["STALL_JOBS", "AsyncLoop"]

#: A run stops as "stalled" after this many jobs in a row end without an update arriving.
STALL_JOBS = 10_000


@dataclass(eq=False)
class _Job:
    device: int
    key: int  # the device's job index: keys its speed draw, dropout and data
    version: int  # the model version it downloaded
    plan: JobPlan
    proc: simpy.Process | None = None
    status: int = CANCELLED
    t_end: float = float("nan")
    staleness: float = float("nan")
    dropped: bool = False  # its device failed (known from its end, before the loop takes it up)


class AsyncLoop:
    """The server loop of an asynchronous policy (one per run; its state in its attributes)."""

    def __init__(self, run: RunContext, policy: AsyncPolicy[Any]) -> None:
        self.run = run
        self.policy = policy
        self.env = run.env
        self.inbox = simpy.Store(run.env)
        n = run.fleet.size
        self.busy = np.zeros(n, dtype=bool)
        self.job_index = np.zeros(n, dtype=np.int64)
        self.snapshots: dict[int, list[Any]] = {0: [run.state, 0]}  # version -> [state, refs]
        self.in_flight_jobs: dict[int, _Job] = {}
        self.buffer: list[_Job] = []
        self.ended: list[_Job] = []  # jobs that ended since the last aggregation
        self.n_started = 0
        self.started_since = 0
        self.last_time = 0.0
        self.drops_in_row = 0
        self.wake_at = math.nan
        self.state: Any = None  # the policy state (policy.start's, once the loop serves)

    @property
    def version(self) -> int:
        """The current model version (the number of aggregations so far)."""
        return self.run.round

    # ----------------------------------------------------------------- jobs
    def launch(self) -> None:
        """Start jobs until ``concurrency`` are in flight (or no idle device is online)."""
        run = self.run
        while len(self.in_flight_jobs) < self.policy.concurrency:
            device = self.policy.pick(self.state, run.view, self.busy, self.n_started)
            if device is None:
                self.wake_when_online()
                return
            self.busy[device] = True
            key = int(self.job_index[device])
            self.job_index[device] += 1
            plan = run.plan(np.array([device], dtype=np.int64), key=key, stage=0)
            job = _Job(device, key, self.version, plan)
            self.snapshots[self.version][1] += 1

            def arrive(_: int, job: _Job = job) -> None:
                job.t_end = self.env.now
                self.inbox.put(("arrive", job))

            def drop(_: int, job: _Job = job) -> None:
                job.t_end, job.dropped = self.env.now, True
                self.inbox.put(("drop", job))

            job.proc = run.jobs.start(plan, arrive, drop)[0]
            self.in_flight_jobs[id(job)] = job
            self.n_started += 1
            self.started_since += 1

    def wake_when_online(self) -> None:
        """Come back to :meth:`launch` when an offline device comes online."""
        cursor = self.run.cursor
        if cursor is None:
            return
        at = cursor.next_arrival(self.env.now)
        if math.isinf(at) or at == self.wake_at:
            if math.isinf(at) and not self.in_flight_jobs:
                self.run.stop("offline")
                self.inbox.put(("wake", None))
            return
        self.wake_at = at

        def wake() -> Any:
            yield self.env.timeout(at - self.env.now)
            self.inbox.put(("wake", None))

        self.env.process(wake())

    def release(self, job: _Job) -> None:
        """Forget the snapshot of ``job``'s version once nothing refers to it."""
        snap = self.snapshots[job.version]
        snap[1] -= 1
        if snap[1] == 0 and job.version != self.version:
            del self.snapshots[job.version]

    def record(self, jobs: list[_Job]) -> tuple[float, float]:
        """Record the rows of ``jobs``; return the bytes they moved down and up."""
        if not jobs:
            return 0.0, 0.0
        return self.run.record_jobs(
            concat_plans([j.plan for j in jobs]),
            np.array([j.status for j in jobs], dtype=np.int8),
            np.array([j.t_end for j in jobs]),
            round=np.array([j.version for j in jobs], dtype=np.int64),
            stage=0,
            staleness=np.array([j.staleness for j in jobs]),
            waits=False,
        )

    # ----------------------------------------------------------------- aggregation
    def outcome(self) -> Outcome:
        """The jobs of the aggregation now due: the drops since the last one, then the buffer."""
        jobs = self.ended + self.buffer
        return Outcome(
            round=self.version,
            stage=0,
            t_start=self.last_time,
            time=self.env.now,
            devices=np.array([j.device for j in jobs], dtype=np.int64),
            status=np.array([j.status for j in jobs], dtype=np.int8),
            job_start=np.array([j.plan.start(0) for j in jobs], dtype=np.float64),
            job_end=np.array([j.t_end for j in jobs], dtype=np.float64),
            staleness=np.array([j.staleness for j in jobs], dtype=np.float64),
        )

    def n_applicable(self) -> int:
        """The number of buffered updates not staler than ``max_staleness`` (to be applied)."""
        limit = self.policy.max_staleness
        if limit is None:
            return len(self.buffer)
        return sum(self.version - j.version <= limit for j in self.buffer)

    def aggregate(self) -> None:
        """Mix the buffered updates into the model, record the aggregation, observe it."""
        run, policy, alg = self.run, self.policy, self.run.algorithm
        version = self.version
        limit = policy.max_staleness
        applied = [j for j in self.buffer if limit is None or version - j.version <= limit]
        for job in self.buffer:
            job.status = ARRIVED if job in applied else LATE
            if job in applied:
                job.staleness = float(version - job.version)
        staleness = np.array([version - j.version for j in applied], dtype=np.int64)
        row: dict[str, Any] = {
            "round": version,
            "stage": 0,
            "t_start": self.last_time,
            "time": self.env.now,
            "status": "ok" if applied else "empty",
            "n_selected": self.started_since,
            "n_arrived": len(applied),
            "n_dropped": sum(j.status == DROPPED for j in self.ended),
            "n_late": len(self.buffer) - len(applied),
            "n_cancelled": 0,
            "staleness_mean": float(staleness.mean()) if applied else float("nan"),
        }
        outcome = self.outcome()
        if applied:
            state = run.state

            def compute() -> tuple[Any, Any]:
                parts = [
                    run.updates(
                        self.snapshots[j.version][0], np.array([j.device], dtype=np.int64), j.key
                    )
                    for j in applied
                ]
                updates = Updates.concat(parts)
                bases = [alg.shared(self.snapshots[j.version][0]) for j in applied]
                new = policy.mixer(staleness).apply(alg.shared(state), updates, bases)
                mixed = alg.with_shared(alg.keep_local(state, updates), new)
                return alg.background(mixed, run.data, outcome), updates

            run.apply(row, compute)
        row["bytes_down"], row["bytes_up"] = self.record(self.ended + self.buffer)
        for job in self.buffer:
            self.release(job)
        self.buffer, self.ended = [], []
        self.started_since = 0
        self.last_time = self.env.now
        run.end_aggregation(row)  # the version number moves on
        self.snapshots[self.version] = [run.state, 0]
        self.state = policy.observe(self.state, outcome, run.view)

    @property
    def in_flight(self) -> bool:
        """Whether jobs are in flight or updates wait in the buffer."""
        return bool(self.in_flight_jobs or self.buffer or self.ended)

    def abandon(self) -> None:
        """At the end of the run: jobs in flight and buffered updates are cancelled.

        Jobs that ended before the end of the run while the server aggregated (server costs),
        not yet taken up, keep their end: an update received is cancelled, a device that
        failed is dropped.
        """
        now = self.env.now
        for job in self.in_flight_jobs.values():
            if math.isnan(job.t_end):  # still running
                job.t_end = now
            elif job.dropped and job.t_end < now:
                job.status = DROPPED
            if job.proc is not None and job.proc.is_alive:
                job.proc.interrupt("end of run")
        for job in self.buffer:
            job.status = CANCELLED
        self.record(self.ended + self.buffer + list(self.in_flight_jobs.values()))
        self.in_flight_jobs.clear()
        self.buffer, self.ended = [], []

    def serve(self) -> Generator[Any, Any, None]:
        """The loop: keep jobs in flight, aggregate every ``buffer()`` arrivals."""
        run = self.run
        self.state = self.policy.start(run.view)
        self.launch()
        while run.stop_reason is None:
            kind, job = yield self.inbox.get()
            if kind == "wake":
                if run.stop_reason is None:
                    self.launch()
                continue
            del self.in_flight_jobs[id(job)]
            self.busy[job.device] = False
            if kind == "drop":
                job.status = DROPPED
                self.ended.append(job)
                run.discard(  # eager runs compute the discarded update too
                    self.snapshots[job.version][0], np.array([job.device], dtype=np.int64), job.key
                )
                self.release(job)
                self.drops_in_row += 1
                if self.drops_in_row >= STALL_JOBS:
                    run.stop("stalled")
            else:
                self.drops_in_row = 0
                self.buffer.append(job)
                if len(self.buffer) >= self.policy.buffer():
                    if run.server is not None:  # the new version exists once it is done
                        yield from run.server.aggregate(self.n_applicable())
                    self.aggregate()
            if run.stop_reason is None:
                self.launch()
