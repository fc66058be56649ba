"""Asynchronous runs without job events, where the playback is planned.

On private links with devices always online (the ``planned`` playback) a job's
whole fate follows from its plan (:func:`~simfl.engine.jobs.resolution`), so the asynchronous
server loop needs no SimPy process per job: :class:`PlannedAsyncLoop` keeps a heap of the
instants at which the jobs in flight resolve and handles them in the order the SimPy loop
(:class:`~simfl.engine.asynchronous.AsyncLoop`, the reference, still used for live playback
and with ``simfl.run(..., batched=False)``) handles them: by time, ties in the order the jobs
started (their timeouts were created in that order, and SimPy fires equal-time events first in,
first out). Everything recorded is identical, row for row and bit for bit. It plays the
policies whose picks can be drawn ahead and that learn nothing while the run goes on
(:mod:`simfl.engine.playbacks.choose`): FedAsync, FedBuff and their variants that only weigh
otherwise; a policy with a state, or its own :meth:`~simfl.policies.AsyncPolicy.pick`, is
played by the reference loop.

What makes it fast:

* picks: the first draw of :meth:`~simfl.policies.AsyncPolicy.pick`'s rejection sampling is
  drawn for a block of job numbers at once (:meth:`~simfl.policies.AsyncPolicy.first_picks`);
  only a pick landing on a busy device asks the policy;
* plans: the keyed compute and dropout draws of a block of (device, job index) pairs are drawn
  vectorised, speculatively (a device's job index is known once the jobs before it are
  picked; a speculation that turns out wrong is planned alone, as the reference plans every
  job); work and payload (which may depend on the model) are applied per model version, to
  the part of the block still ahead;
* records: job rows are kept as job numbers and written in one step at the end of the run
  (the aggregation rows' byte counts are filled in then);
* updates: an aggregation's updates are computed in one call,
  :meth:`~simfl.algorithms.Algorithm.job_updates` (one job at a time by default, as the
  reference computes them; batched where an algorithm's numbers do not depend on the batch,
  as the linear algorithms' per-job products do); the jobs of every block are announced to
  the algorithm (:meth:`~simfl.algorithms.Algorithm.prepare_jobs`), which may draw their data
  ahead in one batch (their devices and keys are known before their model versions);
  an :attr:`~simfl.algorithms.Algorithm.inert` algorithm's (timing only) are neither computed
  nor mixed: its aggregation would change neither the state nor the row.

The loop is the run's only SimPy process and creates no event per job: it lands the clock
(:func:`~simfl.engine.clock.land`) on the instant it handles only where something reads the
clock (an aggregation, a policy's pick, a job planned alone) and where it stops.
"""

from __future__ import annotations

import contextlib
import heapq
import math
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from simfl.algorithms.base import Algorithm, Updates
from simfl.engine.asynchronous import STALL_JOBS
from simfl.engine.clock import land
from simfl.engine.jobs import JobPlan, failure_clocks, resolution
from simfl.network import transfer_seconds
from simfl.outcome import ARRIVED, CANCELLED, DROPPED, LATE, Outcome
from simfl.policies.base import AsyncPolicy

if TYPE_CHECKING:
    from simfl.engine.context import RunContext

__all__ = ["BLOCK", "PlannedAsyncLoop"]

#: Job numbers whose picks and keyed draws are drawn together.
BLOCK = 1024
#: Jobs of a block planned together for one model version (work and payload may change with
#: the model, so a new version re-plans the part of the block still ahead, this much of it;
#: all of it at once for an algorithm with :attr:`~simfl.algorithms.Algorithm.fixed_jobs`).
WINDOW = 64

_PLAN_FIELDS = ("download", "compute", "upload", "fail_after", "work", "size_down", "size_up")


class _Block:
    """Picks and keyed draws of job numbers ``first .. first + len(devices) - 1``."""

    __slots__ = ("devices", "draws", "fail_after", "first", "keys")

    def __init__(
        self,
        run: RunContext,
        policy: AsyncPolicy[Any],
        job_index: list[int],
        first: int,
        size: int,
    ) -> None:
        picks = policy.first_picks(run.view, first, size)
        assert picks is not None  # the loop is chosen only for policies that pre-draw
        # speculative job index of each pick: the device's count now plus its earlier picks
        order = np.argsort(picks, kind="stable")
        ranked = picks[order]
        idx = np.arange(size)
        starts = np.maximum.accumulate(np.where(np.r_[True, ranked[1:] != ranked[:-1]], idx, 0))
        repeat = np.empty(size, dtype=np.int64)
        repeat[order] = idx - starts
        keys = np.array([job_index[d] for d in picks.tolist()], dtype=np.int64) + repeat
        fleet, streams = run.fleet, run.streams
        self.first = first
        self.devices: list[int] = picks.tolist()
        self.keys: list[int] = keys.tolist()
        #: seconds per unit of work, and busy seconds until the device fails (keyed draws)
        self.draws = fleet.compute_draws(picks, round=keys, stage=0, streams=streams)
        self.fail_after = failure_clocks(fleet, picks, keys, streams)


class PlannedAsyncLoop:
    """The asynchronous server loop of a planned run (see the module docstring)."""

    def __init__(self, run: RunContext, policy: AsyncPolicy[Any]) -> None:
        self.run = run
        self.policy = policy
        self.env = run.env
        n = run.fleet.size
        self._busy = bytearray(n)
        #: the same memory as a boolean array, for :meth:`AsyncPolicy.pick`
        self.busy = np.frombuffer(self._busy, dtype=np.bool_)
        self.job_index = [0] * n  # jobs started on each device so far (keys its draws)
        self.snapshots: dict[int, list[Any]] = {0: [run.state, 0]}  # version -> [state, refs]
        self.refs = self.snapshots[0]  # the current version's snapshot
        alg = type(run.algorithm)
        self.fixed = alg.fixed_jobs  # plans do not change with the model version
        self.inert = alg.inert  # updates need not be computed nor mixed
        # the jobs, by job number
        self.device: list[int] = []
        self.key: list[int] = []
        self.version_of: list[int] = []
        self.t_start: list[float] = []
        self.row: list[int] = []  # the job's row in the plan table
        self.arrives: list[bool] = []
        # set when a job ends; allocated a block at a time (a job not started has no row)
        self.status: list[int] = []
        self.t_end: list[float] = []
        self.staleness: list[float] = []
        # the plan table: chunks of plan fields, rows numbered across chunks
        self.chunks: list[tuple[NDArray[np.float64], ...]] = []
        self.n_rows = 0
        self.heap: list[tuple[float, int]] = []  # (instant the job resolves, job number)
        self.buffer: list[int] = []
        self.ended: list[int] = []  # jobs that ended (dropped) since the last aggregation
        self.records: list[int] = []  # job numbers in the order their rows are recorded
        self.marks: list[tuple[int, int, int]] = []  # (round row, first record, end record)
        self.n_started = 0
        self.started_since = 0
        self.last_time = 0.0
        self.drops_in_row = 0
        self.block: _Block | None = None
        # the window of the block planned for the current model version
        self.win: tuple[int, int, int, int] = (-1, 0, 0, 0)  # version, lo, hi, first table row
        self.win_after: list[float] = []
        self.win_arrives: list[bool] = []
        self.win_ok: list[bool] = []
        self.done = False
        #: the policy state: start's, for ever (the loop plays only policies that do not observe)
        self.state: Any = policy.start(run.view)

    @property
    def version(self) -> int:
        """The current model version (the number of aggregations so far)."""
        return self.run.round

    # ----------------------------------------------------------------- plans
    def _add_chunk(self, fields: tuple[NDArray[np.float64], ...]) -> int:
        """Append plan rows; return the number of the first."""
        first = self.n_rows
        self.chunks.append(fields)
        self.n_rows += fields[0].size
        return first

    def _plan_window(self, block: _Block, lo: int) -> None:
        """Plan the block's jobs ``lo ..`` (up to :data:`WINDOW` of them) for this version."""
        run, alg = self.run, self.run.algorithm
        size = len(block.devices)
        hi = size if type(alg).fixed_jobs else min(lo + WINDOW, size)
        devices = np.asarray(block.devices[lo:hi], dtype=np.int64)
        fleet, state = run.fleet, run.state
        work = alg.work(state, devices)
        payload = alg.payload(state)
        with np.errstate(over="ignore"):  # a job that overflows is planned alone (and refused)
            compute = work * block.draws[lo:hi]
        latency = fleet.latency[devices]
        download = transfer_seconds(payload.down, fleet.bandwidth_down[devices], latency)
        upload = transfer_seconds(payload.up, fleet.bandwidth_up[devices], latency)
        total = download + compute + upload
        fail_after = block.fail_after[lo:hi]
        arrives = fail_after >= total
        m = hi - lo
        row0 = self._add_chunk(
            (
                download,
                compute,
                upload,
                fail_after,
                work,
                np.full(m, float(payload.down)),
                np.full(m, float(payload.up)),
            )
        )
        self.win = (self.version, lo, hi, row0)
        self.win_after = np.where(arrives, total, fail_after).tolist()
        self.win_arrives = arrives.tolist()
        self.win_ok = np.isfinite(total).tolist()

    def _plan_alone(self, device: int, key: int) -> tuple[float, bool, int]:
        """Plan one job as the reference loop does; its duration, arrival and table row."""
        plan = self.run.plan(np.array([device], dtype=np.int64), key=key, stage=0)
        after, arrives = resolution(plan)
        row = self._add_chunk(tuple(getattr(plan, f) for f in _PLAN_FIELDS))
        return float(after[0]), bool(arrives[0]), row

    # ----------------------------------------------------------------- jobs
    def _next_block(self, n: int) -> _Block:
        """Draw the block of job numbers from ``n``; make room for its jobs' end fields."""
        block = self.block = _Block(self.run, self.policy, self.job_index, n, BLOCK)
        self._prepare(block)
        self.win = (-1, 0, 0, 0)
        size = len(block.devices)
        self.status += [CANCELLED] * size
        self.t_end += [math.nan] * size
        self.staleness += [math.nan] * size
        return block

    def _prepare(self, block: _Block) -> None:
        """Tell the algorithm the block's jobs (it may draw their data ahead, in one batch).

        Only a hint: if it fails, the same work fails again in ``job_updates``, where the
        aggregation records the failure (the run does not crash here).
        """
        if self.inert:
            return
        run = self.run
        devices = np.array(block.devices, dtype=np.int64)
        keys = np.array(block.keys, dtype=np.int64)
        with contextlib.suppress(Exception):  # a hint: nothing computed is lost
            run.algorithm.prepare_jobs(run.data, devices, keys)

    def launch(self, now: float) -> None:
        """Start jobs at ``now`` until ``concurrency`` are in flight."""
        run, policy, heap = self.run, self.policy, self.heap
        busy, job_index = self._busy, self.job_index
        version, refs, fixed = run.round, self.refs, self.fixed
        while len(heap) < policy.concurrency:
            n = self.n_started
            block = self.block
            if block is None or n - block.first >= len(block.devices):
                land(self.env, now)  # the policy draws the block's picks from its view
                block = self._next_block(n)
            i = n - block.first
            device = block.devices[i]
            fast = not busy[device] and job_index[device] == block.keys[i]
            if fast:
                win_version, lo, hi, row0 = self.win
                if (win_version != version and not fixed) or not lo <= i < hi:
                    self._plan_window(block, i)
                    win_version, lo, hi, row0 = self.win
                fast = self.win_ok[i - lo]
            if fast:
                key, w = block.keys[i], i - lo
                after, arrives, row = self.win_after[w], self.win_arrives[w], row0 + w
            else:
                land(self.env, now)  # the policy's view, the plan's start: now
                if busy[device]:
                    picked = policy.pick(self.state, run.view, self.busy, n)
                    if picked is None:  # pragma: no cover - concurrency <= fleet size
                        return
                    device = picked
                key = job_index[device]
                after, arrives, row = self._plan_alone(device, key)  # raises on a bad plan
            busy[device] = 1
            job_index[device] += 1
            refs[1] += 1
            self.device.append(device)
            self.key.append(key)
            self.version_of.append(version)
            self.t_start.append(now)
            self.row.append(row)
            self.arrives.append(arrives)
            heapq.heappush(heap, (now + after, n))
            self.n_started += 1
            self.started_since += 1

    def release(self, job: int) -> None:
        """Forget the snapshot of ``job``'s version once nothing refers to it."""
        version = self.version_of[job]
        snap = self.snapshots[version]
        snap[1] -= 1
        if snap[1] == 0 and version != self.run.round:
            del self.snapshots[version]

    # ----------------------------------------------------------------- the loop
    def serve(self) -> Generator[Any, Any, None]:
        """The run's only SimPy process: plays the whole run without events.

        It waits only when the next job resolves at or after ``max_time``: on a timeout that
        does not fire before it, so the run stops at the budget as the reference loop does.
        """
        if self.play():
            now = float(self.env.now)
            budget = float(self.run.scenario.max_time or math.inf)
            delay = budget - now
            while now + delay < budget:
                delay = math.nextafter(delay, math.inf)
            yield self.env.timeout(delay)

    def play(self) -> bool:
        """Handle the jobs as they resolve; aggregate every ``buffer()`` arrivals.

        Returns whether it stopped at ``max_time`` (the next job resolves at or after it).
        """
        run, env, heap = self.run, self.env, self.heap
        max_time = run.scenario.max_time
        budget = math.inf if max_time is None else float(max_time)
        size = self.policy.buffer()
        busy, lazy, buffer = self._busy, run.lazy, self.buffer
        device, t_end, arrives = self.device, self.t_end, self.arrives
        pop, launch = heapq.heappop, self.launch
        t = float(env.now)
        try:
            launch(t)
            while run.stop_reason is None and heap:
                if heap[0][0] >= budget:  # events at the budget are not handled (engine._play)
                    return True
                t, job = pop(heap)
                busy[device[job]] = 0
                t_end[job] = t
                if arrives[job]:
                    self.drops_in_row = 0
                    buffer.append(job)
                    if len(buffer) >= size:
                        land(env, t)  # the aggregation is recorded (and shown) at t
                        self.aggregate(t)
                        buffer = self.buffer
                else:
                    self._drop(job, lazy)
                if run.stop_reason is None:
                    launch(t)
            return False
        finally:  # also when something failed: the run ends at the last instant handled
            land(env, t)

    def _drop(self, job: int, lazy: bool) -> None:
        """Job ``job``'s device failed: it ends, its snapshot reference goes."""
        run = self.run
        self.status[job] = DROPPED
        self.ended.append(job)
        if not lazy:  # eager runs compute the discarded update too
            run.discard(
                self.snapshots[self.version_of[job]][0],
                np.array([self.device[job]], dtype=np.int64),
                self.key[job],
            )
        self.release(job)
        self.drops_in_row += 1
        if self.drops_in_row >= STALL_JOBS:
            run.stop("stalled")

    # ----------------------------------------------------------------- aggregation
    def aggregate(self, now: float) -> None:
        """Mix the buffered updates into the model at ``now``, record the aggregation."""
        run = self.run
        version = self.version
        applied, lags = self._settle(version)
        row: dict[str, Any] = {
            "round": version,
            "stage": 0,
            "t_start": self.last_time,
            "time": now,
            "status": "ok" if applied else "empty",
            "n_selected": self.started_since,
            "n_arrived": len(applied),
            "n_dropped": len(self.ended),
            "n_late": len(self.buffer) - len(applied),
            "n_cancelled": 0,
            # the mean of integers (exact sum, one rounding), as numpy's mean gives it
            "staleness_mean": sum(lags) / len(lags) if applied else math.nan,
            "bytes_down": math.nan,  # filled in when the jobs are recorded, at the end
            "bytes_up": math.nan,
        }
        if applied and not self.inert:  # an inert algorithm's apply changes nothing
            jobs = self.ended + self.buffer
            run.apply(row, lambda: self._compute(applied, lags, jobs, version, now))
        records = self.records
        first = len(records)
        records += self.ended
        records += self.buffer
        self.marks.append((run.recorder.n_rounds, first, len(records)))
        for job in self.buffer:
            self.release(job)
        self.buffer, self.ended = [], []
        self.started_since = 0
        self.last_time = now
        run.end_aggregation(row)  # the version number moves on
        old = self.snapshots.get(version)
        if old is not None and old[1] == 0:
            del self.snapshots[version]
        self.refs = self.snapshots[self.version] = [run.state, 0]

    def _settle(self, version: int) -> tuple[list[int], list[int]]:
        """Mark the buffered jobs arrived or late at ``version``; the applied ones, their lags."""
        limit = self.policy.max_staleness
        version_of, status, staleness = self.version_of, self.status, self.staleness
        applied: list[int] = []
        lags: list[int] = []
        for job in self.buffer:
            lag = version - version_of[job]
            if limit is None or lag <= limit:
                applied.append(job)
                lags.append(lag)
                status[job] = ARRIVED
                staleness[job] = float(lag)
            else:
                status[job] = LATE
        return applied, lags

    def _compute(
        self,
        applied: list[int],
        lags: list[int],
        jobs: list[int],
        version: int,
        now: float,
    ) -> tuple[Any, Updates]:
        """The new state and the updates of ``applied`` (``jobs``: the aggregation's jobs)."""
        run, alg = self.run, self.run.algorithm
        state = run.state
        updates = self._updates(applied)
        shared: dict[int, Any] = {}
        for j in applied:
            v = self.version_of[j]
            if v not in shared:
                shared[v] = alg.shared(self.snapshots[v][0])
        bases = [shared[self.version_of[j]] for j in applied]
        staleness = np.array(lags, dtype=np.int64)
        new = self.policy.mixer(staleness).apply(alg.shared(state), updates, bases)
        mixed = alg.with_shared(alg.keep_local(state, updates), new)
        if type(alg).background is Algorithm.background:  # it returns the state: no outcome
            return mixed, updates
        return alg.background(mixed, run.data, self._outcome(jobs, version, now)), updates

    def _outcome(self, jobs: list[int], version: int, now: float) -> Outcome:
        """The :class:`Outcome` of the aggregation of ``jobs`` (drops, then the buffer)."""
        return Outcome(
            round=version,
            stage=0,
            t_start=self.last_time,
            time=now,
            devices=np.array([self.device[j] for j in jobs], dtype=np.int64),
            status=np.array([self.status[j] for j in jobs], dtype=np.int8),
            job_start=np.array([self.t_start[j] for j in jobs], dtype=np.float64),
            job_end=np.array([self.t_end[j] for j in jobs], dtype=np.float64),
            staleness=np.array([self.staleness[j] for j in jobs], dtype=np.float64),
        )

    def _updates(self, applied: list[int]) -> Updates:
        """The updates of ``applied``, in order, each from the version its job downloaded."""
        run = self.run
        snapshots, version_of = self.snapshots, self.version_of
        return run.algorithm.job_updates(
            [snapshots[version_of[j]][0] for j in applied],
            run.data,
            np.array([self.device[j] for j in applied], dtype=np.int64),
            [self.key[j] for j in applied],
            run.streams,
        )

    # ----------------------------------------------------------------- the end
    @property
    def in_flight(self) -> bool:
        """Whether jobs are in flight or updates wait in the buffer."""
        return bool(self.heap or self.buffer or self.ended)

    def abandon(self) -> None:
        """At the end of the run: cancel what is in flight, record every job."""
        if self.done:
            return
        self.done = True
        flying = sorted(entry[1] for entry in self.heap)
        self._cancel(flying)
        self.records += self.ended + self.buffer + flying
        self.heap.clear()
        self.buffer, self.ended = [], []
        if self.records:
            self._write(len(flying))

    def _cancel(self, flying: list[int]) -> None:
        """Mark the jobs in flight ended now, the buffered ones cancelled."""
        now = float(self.env.now)
        for job in flying:
            self.t_end[job] = now
        for job in self.buffer:
            self.status[job] = CANCELLED

    def _write(self, n_flying: int) -> None:
        """Write every job row, in the order the reference loop records them.

        (The last ``n_flying`` records are the jobs in flight.)
        """
        run = self.run
        rec = np.array(self.records, dtype=np.int64)
        table = [np.concatenate([c[f] for c in self.chunks]) for f in range(len(_PLAN_FIELDS))]
        rows = np.array(self.row, dtype=np.int64)[rec]
        fields = {name: table[f][rows] for f, name in enumerate(_PLAN_FIELDS)}
        n = rec.size
        plan = JobPlan(
            devices=np.array(self.device, dtype=np.int64)[rec],
            t_start=np.array(self.t_start, dtype=np.float64)[rec],
            progress=np.zeros(n, dtype=np.int8),
            spent=np.zeros((n, 3)),
            active_since=np.array(self.t_start, dtype=np.float64)[rec],
            moved=np.full((n, 2), np.nan),
            **fields,
        )
        b_down, b_up = run.record_job_rows(
            plan,
            np.array(self.status, dtype=np.int8)[rec],
            np.array(self.t_end, dtype=np.float64)[rec],
            round=np.array(self.version_of, dtype=np.int64)[rec],
            stage=0,
            staleness=np.array(self.staleness, dtype=np.float64)[rec],
            waits=False,
        )
        if self.marks:
            rows_at = [m[0] for m in self.marks]
            recorder = run.recorder
            recorder.set_round_values("bytes_down", rows_at, _chunk_sums(b_down, self.marks))
            recorder.set_round_values("bytes_up", rows_at, _chunk_sums(b_up, self.marks))


def _chunk_sums(values: NDArray[np.float64], marks: list[tuple[int, int, int]]) -> list[float]:
    """``float(values[a:b].sum())`` of every mark's range, as the reference sums each chunk."""
    bounds = np.array([(a, b) for _, a, b in marks], dtype=np.int64).reshape(-1, 2)
    sums: list[float] = chunk_sums(values, bounds[:, 0], bounds[:, 1]).tolist()
    return sums


def chunk_sums(
    values: NDArray[np.float64], begins: NDArray[np.int64], ends: NDArray[np.int64]
) -> NDArray[np.float64]:
    """``values[a:b].sum()`` for every range ``a:b`` of ``begins``, ``ends``, bit for bit.

    Ranges of one length are summed together, as the rows of a 2-D array: numpy sums each
    row of a reduction along the last axis exactly as it sums that row alone.
    """
    sizes = ends - begins
    out = np.zeros(sizes.size)
    for m in np.unique(sizes).tolist():
        if m > 0:
            rows = np.flatnonzero(sizes == m)
            out[rows] = values[begins[rows, None] + np.arange(m)].sum(axis=1)
    return out
