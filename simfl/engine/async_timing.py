"""Timing-only asynchronous runs, played as columns of floats and ints.

When nothing is computed in a run (an :attr:`~simfl.algorithms.Algorithm.inert` algorithm with
:attr:`~simfl.algorithms.Algorithm.fixed_jobs`, such as
:class:`~simfl.algorithms.TimingOnly`; no task metrics; a lazy run), an asynchronous run on a
planned playback is pure timing: which device each job runs on, when it ends and whether it
arrives. None of it depends on the model, so :class:`TimingAsyncLoop` plans the schedule in
blocks and plays it with a loop over plain numbers. It handles the jobs in the same order as
:class:`~simfl.engine.async_planned.PlannedAsyncLoop` (whose helpers it shares) and the SimPy
reference :class:`~simfl.engine.asynchronous.AsyncLoop`, with the same keyed draws: the frames
are identical, bit for bit.

* **Blocks.** A job's download, upload and work depend only on its device: they are computed
  once for the whole fleet. For a block of job numbers the picks, compute and dropout draws
  are drawn vectorised (:class:`~simfl.engine.async_planned._Block`), and each job's
  resolution (``after``: seconds until it arrives or drops; ``arrives``) with them.
* **The loop** pops the next job to resolve from a heap of ``(instant, job number, device,
  arrives)``, starts the next job (read from its block by job number) and pushes it: per job,
  two list appends (start, model version). A job whose pre-drawn pick is busy, whose
  speculated job index missed, or whose plan is not finite is planned alone, as the reference
  plans every job (:meth:`TimingAsyncLoop._plan_one`).
* **Aggregations** append one tuple; :meth:`RunContext.count_aggregation
  <simfl.engine.context.RunContext.count_aggregation>` applies the stop rules. The rows of
  both frames are written once, at the end of the run.
"""

from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from simfl.engine.async_planned import PlannedAsyncLoop, _Block, _set_clock, chunk_sums
from simfl.engine.asynchronous import STALL_JOBS
from simfl.engine.jobs import JobPlan
from simfl.network import transfer_seconds
from simfl.outcome import ARRIVED, CANCELLED, DROPPED, LATE
from simfl.policies.base import AsyncPolicy

if TYPE_CHECKING:
    from simfl.engine.context import RunContext

__all__ = ["BLOCK", "TimingAsyncLoop"]

#: Job numbers planned together (larger than the planned loop's blocks: a block here costs a
#: few vectorised steps and nothing per model version).
BLOCK = 8192


class TimingAsyncLoop(PlannedAsyncLoop):
    """The asynchronous server loop of a timing-only planned run (see the module docstring)."""

    @staticmethod
    def applies(run: RunContext, policy: AsyncPolicy) -> bool:
        """Whether the run computes nothing and :class:`PlannedAsyncLoop` could play it."""
        alg = type(run.algorithm)
        return (
            PlannedAsyncLoop.applies(run, policy)
            and alg.inert
            and alg.fixed_jobs
            and run.lazy
            and not run.metrics
        )

    def __init__(self, run: RunContext, policy: AsyncPolicy) -> None:
        super().__init__(run, policy)
        fleet, alg = run.fleet, run.algorithm
        self.payload = alg.payload(run.state)
        # what a job costs on each device, whatever the draws (alg.fixed_jobs)
        self.work = np.asarray(alg.work(run.state, np.arange(fleet.size)), dtype=np.float64)
        self.down = transfer_seconds(self.payload.down, fleet.bandwidth_down, fleet.latency)
        self.up = transfer_seconds(self.payload.up, fleet.bandwidth_up, fleet.latency)
        # the blocks' picks, compute seconds and failure clocks, by job number
        self.picks: list[NDArray[np.int64]] = []
        self.computes: list[NDArray[np.float64]] = []
        self.fails: list[NDArray[np.float64]] = []
        self.alone: dict[int, tuple[int, float, float]] = {}  # job -> device, compute, fail
        #: the jobs in flight: (instant the job resolves, job number, device, arrives)
        self.flight: list[tuple[float, int, int, bool]] = []
        # per aggregation: its time, the jobs started by then, the end of its records
        self.agg_time: list[float] = []
        self.agg_started: list[int] = []
        self.agg_end: list[int] = []

    # ----------------------------------------------------------------- plans
    def _plan_block(self, first: int) -> tuple[list[int], list[int], list[float], list[bool]]:
        """Plan the block of job numbers from ``first``: picks, job indices, afters, arrivals.

        A job whose plan is not finite gets the job index -1 (it is planned alone, and refused).
        """
        block = _Block(self.run, self.policy, self.job_index, first, BLOCK)
        size = len(block.devices)
        self.status += [CANCELLED] * size  # until the job ends
        self.t_end += [math.nan] * size
        self.staleness += [math.nan] * size
        picks = np.asarray(block.devices, dtype=np.int64)
        with np.errstate(over="ignore", invalid="ignore"):
            compute = self.work[picks] * block.draws
            total = self.down[picks] + compute + self.up[picks]
        arrives = block.fail_after >= total
        after = np.where(arrives, total, block.fail_after)
        keys = np.where(np.isfinite(total), block.keys, -1)  # never a device's job index
        self.picks.append(picks)
        self.computes.append(compute)
        self.fails.append(block.fail_after)
        return block.devices, keys.tolist(), after.tolist(), arrives.tolist()

    def _plan_one(self, n: int, device: int, key: int) -> tuple[float, bool]:
        """Plan job ``n`` alone, as the reference plans every job: when it resolves, arrives.

        Its device, compute seconds and failure clock are kept for the records. A plan that
        is not finite is refused as :func:`~simfl.engine.jobs.plan_jobs` refuses it.
        """
        run, fleet = self.run, self.run.fleet
        # the keyed draws through the scalar path: the values of plan_jobs's, as 0-d arrays
        draws = fleet.compute_draws(device, round=key, stage=0, streams=run.streams)
        compute = float(self.work[device] * draws)
        rate = fleet.dropout_rate[device]
        fail_after = math.inf
        if rate > 0:
            u = run.streams.uniform("dropout", device, key)
            with np.errstate(divide="ignore"):
                fail_after = float(-np.log(u) / rate)
        total = float(self.down[device]) + compute + float(self.up[device])
        if not math.isfinite(total):
            run.plan(np.array([device], dtype=np.int64), key=key, stage=0)  # raises, naming it
        self.alone[n] = (device, compute, fail_after)
        arrives = fail_after >= total
        return (total if arrives else fail_after), arrives

    def _start_alone(self, n: int, device: int, now: float) -> tuple[float, int, int, bool]:
        """Job ``n``, whose pre-drawn plan does not hold, starting ``now``: its heap entry."""
        if self._busy[device]:
            picked = self.policy.pick(self.run.view, self.busy, n)
            assert picked is not None  # concurrency <= fleet size: an idle device exists
            device = picked
        after, arrives = self._plan_one(n, device, self.job_index[device])
        return now + after, n, device, arrives

    # ----------------------------------------------------------------- the loop
    def play(self) -> bool:
        """Handle the jobs as they resolve; aggregate every ``buffer()`` arrivals.

        Returns whether it stopped at ``max_time`` (the next job resolves at or after it).
        """
        run, heap, env = self.run, self.flight, self.env
        max_time = run.scenario.max_time
        budget = math.inf if max_time is None else float(max_time)
        size, concurrency = self.policy.buffer(), self.policy.concurrency
        busy, job_index, status = self._busy, self.job_index, self.status
        t_start, version_of, t_end = self.t_start, self.version_of, self.t_end
        buffer, ended = self.buffer, self.ended
        pop, push = heapq.heappop, heapq.heappush
        # the current block: its first job number, picks, job indices, afters, arrivals
        first, devices, keys = 0, list[int](), list[int]()
        afters, arrivals = list[float](), list[bool]()
        n, version, drops = self.n_started, run.round, self.drops_in_row
        t = float(env.now)
        try:
            while True:
                if len(heap) >= concurrency:  # the next job to resolve (else: filling up)
                    if heap[0][0] >= budget:  # events at the budget are not handled
                        return True
                    t, job, d, arrives = pop(heap)
                    busy[d] = 0
                    t_end[job] = t
                    if arrives:
                        drops = 0
                        buffer.append(job)
                        if len(buffer) >= size:
                            version = self._aggregate(t, n)
                            if run.stop_reason is not None:
                                return False
                    else:
                        status[job] = DROPPED
                        ended.append(job)
                        drops += 1
                        if drops >= STALL_JOBS:
                            run.stop("stalled")
                            return False
                # start job n: its pre-drawn plan, unless that no longer holds
                i = n - first
                if i >= len(devices):
                    first, i = n, 0
                    devices, keys, afters, arrivals = self._plan_block(n)
                d = devices[i]
                if busy[d] or job_index[d] != keys[i]:  # (keys[i] is -1 for a bad plan)
                    entry = self._start_alone(n, d, t)
                    d = entry[2]
                else:
                    entry = (t + afters[i], n, d, arrivals[i])
                busy[d] = 1
                job_index[d] += 1
                t_start.append(t)
                version_of.append(version)
                push(heap, entry)
                n += 1
        finally:  # also when interrupted: what was handled is recorded at its instant
            self.n_started = n
            self.drops_in_row = drops
            _set_clock(env, t)

    def _aggregate(self, t: float, started: int) -> int:
        """Close the aggregation of the buffer at ``t``; return the new model version.

        ``started``: the jobs started so far. Which updates are applied (and their staleness)
        is settled for all aggregations at the end (:meth:`_settle_all`); here only how many
        are, for the stop rules.
        """
        run, buffer, ended, records = self.run, self.buffer, self.ended, self.records
        limit = self.policy.max_staleness
        applied = len(buffer)
        if limit is not None:
            version, version_of = run.round, self.version_of
            applied = sum(version - version_of[job] <= limit for job in buffer)
        records += ended
        records += buffer
        self.agg_time.append(t)
        self.agg_started.append(started)
        self.agg_end.append(len(records))
        buffer.clear()
        ended.clear()
        last, self.last_time = self.last_time, t
        if run.shows_progress:
            _set_clock(self.env, t)
        run.count_aggregation(applied, t - last)
        return run.round

    # ----------------------------------------------------------------- the end
    @property
    def in_flight(self) -> bool:
        """Whether jobs are in flight or updates wait in the buffer."""
        return bool(self.flight or self.buffer or self.ended)

    def abandon(self) -> None:
        """At the end of the run: cancel what is in flight, record every job and aggregation."""
        if self.done:
            return
        self.done = True
        now = float(self.env.now)
        flying = sorted(entry[1] for entry in self.flight)
        for job in flying:
            self.t_end[job] = now
        aggregated = len(self.records)
        self.records += self.ended + self.buffer + flying  # the buffer stays CANCELLED
        self.flight.clear()
        self.buffer, self.ended = [], []
        if not self.records:
            return
        rec = np.array(self.records, dtype=np.int64)
        status = np.array(self.status, dtype=np.int8)
        staleness = np.array(self.staleness, dtype=np.float64)
        arrived, lag_sum = self._settle_all(rec[:aggregated], status, staleness)
        b_down, b_up = self._record_jobs(rec, status, staleness)
        self._record_rounds(arrived, lag_sum, b_down, b_up)

    def _settle_all(
        self, rec: NDArray[np.int64], status: NDArray[np.int8], staleness: NDArray[np.float64]
    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Mark every aggregated update arrived or late (in place); count them per aggregation.

        Returns, per aggregation, the number of updates applied and their staleness summed.
        Aggregation ``k`` recorded ``rec[end[k-1]:end[k]]``: the drops, then the buffer (its
        last ``buffer()`` jobs).
        """
        size, limit = self.policy.buffer(), self.policy.max_staleness
        ends = np.array(self.agg_end, dtype=np.int64)
        k = ends.size
        jobs = rec[(ends[:, None] - size + np.arange(size)).ravel()]
        lag = np.repeat(np.arange(k), size) - np.array(self.version_of, dtype=np.int64)[jobs]
        ok = np.ones(lag.size, dtype=bool) if limit is None else lag <= limit
        status[jobs] = np.where(ok, ARRIVED, LATE)
        staleness[jobs] = np.where(ok, lag, np.nan)
        arrived = ok.reshape(k, size).sum(axis=1)
        lag_sum = np.where(ok, lag, 0).reshape(k, size).sum(axis=1)
        return arrived, lag_sum

    def _record_jobs(
        self, rec: NDArray[np.int64], status: NDArray[np.int8], staleness: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Write the rows of the jobs ``rec``, in that order; the bytes each moved down and up."""
        n = self.n_started
        all_devices = np.concatenate([*self.picks, np.empty(0, np.int64)])[:n]
        compute = np.concatenate([*self.computes, np.empty(0)])[:n]
        fail = np.concatenate([*self.fails, np.empty(0)])[:n]
        for job, (device, comp, fail_after) in self.alone.items():
            all_devices[job], compute[job], fail[job] = device, comp, fail_after
        devices = all_devices[rec]
        starts = np.array(self.t_start, dtype=np.float64)[rec]
        m = rec.size
        plan = JobPlan(
            devices=devices,
            t_start=starts,
            download=self.down[devices],
            compute=compute[rec],
            upload=self.up[devices],
            fail_after=fail[rec],
            work=self.work[devices],
            size_down=np.full(m, float(self.payload.down)),
            size_up=np.full(m, float(self.payload.up)),
            progress=np.zeros(m, dtype=np.int8),
            spent=np.zeros((m, 3)),
            active_since=starts,
            moved=np.full((m, 2), np.nan),
        )
        return self.run.record_job_rows(
            plan,
            status[rec],
            np.array(self.t_end, dtype=np.float64)[rec],
            round=np.array(self.version_of, dtype=np.int64)[rec],
            stage=0,
            staleness=staleness[rec],
            waits=False,
        )

    def _record_rounds(
        self,
        arrived: NDArray[np.int64],
        lag_sum: NDArray[np.int64],
        b_down: NDArray[np.float64],
        b_up: NDArray[np.float64],
    ) -> None:
        """Write every aggregation row (bytes summed over its jobs as the reference sums)."""
        k = arrived.size
        if k == 0:
            return
        size = self.policy.buffer()
        time = np.array(self.agg_time, dtype=np.float64)
        t_start = np.r_[0.0, time[:-1]]
        ends = np.array(self.agg_end, dtype=np.int64)
        begins = np.r_[0, ends[:-1]]
        with np.errstate(invalid="ignore"):  # 0 / 0: no update applied
            stale = np.where(arrived > 0, lag_sum / arrived, np.nan)
        columns: dict[str, NDArray[Any]] = {
            "round": np.arange(k),
            "stage": np.zeros(k, dtype=np.int64),
            "t_start": t_start,
            "time": time,
            "duration": time - t_start,
            "status": np.where(arrived > 0, "ok", "empty"),
            "n_selected": np.diff(np.array(self.agg_started, dtype=np.int64), prepend=0),
            "n_arrived": arrived,
            "n_dropped": ends - begins - size,
            "n_late": size - arrived,
            "n_cancelled": np.zeros(k, dtype=np.int64),
            "bytes_down": chunk_sums(b_down, begins, ends),
            "bytes_up": chunk_sums(b_up, begins, ends),
            "staleness_mean": stale,
        }
        self.run.recorder.add_round_columns(columns)
