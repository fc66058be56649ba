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
  once for the whole fleet. A job starts on the first device :meth:`~simfl.policies.
  AsyncPolicy.pick` draws for its number, or on its second draw when the first is busy (the
  policy is asked only if both are). For a block of job numbers both draws are drawn at once
  (:meth:`~simfl.policies.AsyncPolicy.first_picks`), and every device drawn gets one row per
  job index it can reach in the block, with its keyed compute and dropout draws and its
  resolution (``after``: seconds until the job arrives or drops; whether it arrives),
  vectorised. A run with ``rounds`` plans no further ahead than the jobs it starts if none
  drops.
* **The loop** peeks at the next job to resolve in a heap of ``(instant, job number, code)``
  (the code: the device if the job arrives, else ``~device``), starts the next job (its row:
  the device's range in the block plus its job index) and puts it in the resolved job's place
  (one heap step, :func:`heapq.heapreplace`): per job, two list appends (start, row). A job
  the block has no row for (rare), or whose plan is not finite (a device's range ends before
  it), is planned alone with the same keyed draws (:meth:`TimingAsyncLoop._plan_one`).
* **Aggregations** append two numbers (jobs started, jobs recorded); FedAsync without a
  staleness limit (every arrival an aggregation applying its update) appends nothing but the
  job to the records, in the order handled, and its aggregations are found at the end (its
  arrivals). :meth:`RunContext.count_aggregation
  <simfl.engine.context.RunContext.count_aggregation>` applies the stop rules, only where one
  can fire (:meth:`~simfl.engine.context.RunContext.quiet_aggregations`). Which updates were
  applied, and their staleness, is settled for all aggregations at the end, in numpy, and the
  rows of both frames are written once.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from collections.abc import Iterator
from operator import itemgetter
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import numpy as np
from numpy.typing import NDArray

from simfl.engine.async_planned import PlannedAsyncLoop, chunk_sums
from simfl.engine.asynchronous import STALL_JOBS
from simfl.engine.clock import land
from simfl.engine.jobs import JobPlan, failure_clocks
from simfl.network import transfer_seconds
from simfl.outcome import ARRIVED, CANCELLED, DROPPED, LATE
from simfl.policies.base import AsyncPolicy

if TYPE_CHECKING:
    from simfl.engine.context import RunContext

__all__ = ["BLOCK", "FIRST_BLOCK", "TimingAsyncLoop"]

_Number = TypeVar("_Number", np.int64, np.float64)

#: Job numbers planned together, at most (larger than the planned loop's blocks: a block here
#: costs a few vectorised steps and nothing per model version) ...
BLOCK = 8192
#: ... and at least, after the first: a run with ``rounds`` plans the jobs it starts if none
#: drops; without, blocks grow with the jobs started so far, from this size to BLOCK.
FIRST_BLOCK = 1024


class _Table(NamedTuple):
    """A block's plans: by job, its first and second picks and their rows; by row, the plan.

    Job ``i``'s first pick ``picks[i]`` has its job index ``k``'s plan in row
    ``base[i] + k`` if that is below ``end[i]`` (likewise ``base2``, ``end2`` for
    ``second[i]``; a device's rows end before its first plan that is not finite); the rows'
    ``after`` (seconds until the job arrives or drops) and ``code`` (the device if the job
    arrives, else ``~device``); ``row0``: the table row of the block's row 0.
    """

    picks: list[int]
    base: list[int]
    end: list[int]
    second: list[int]
    base2: list[int]
    end2: list[int]
    after: list[float]
    code: list[int]
    row0: int


_EMPTY = _Table([], [], [], [], [], [], [], [], 0)


def _array(values: list[Any], dtype: type[_Number]) -> NDArray[_Number]:
    """``values`` as an array (faster than ``np.array`` for the loop's long lists)."""
    return np.fromiter(values, dtype=dtype, count=len(values))


def _device(code: int) -> int:
    """The device of a heap entry's ``code``: the device if the job arrives, else ``~device``."""
    return code if code >= 0 else ~code


class TimingAsyncLoop(PlannedAsyncLoop):
    """The asynchronous server loop of a timing-only planned run (see the module docstring)."""

    def __init__(self, run: RunContext, policy: AsyncPolicy[Any]) -> None:
        super().__init__(run, policy)
        fleet, alg = run.fleet, run.algorithm
        self.payload = alg.payload(run.state)
        # what a job costs on each device, whatever the draws (alg.fixed_jobs)
        self.work = np.asarray(alg.work(run.state, np.arange(fleet.size)), dtype=np.float64)
        self.down = transfer_seconds(self.payload.down, fleet.bandwidth_down, fleet.latency)
        self.up = transfer_seconds(self.payload.up, fleet.bandwidth_up, fleet.latency)
        # the plan table (job n's row: self.row[n]): device, compute seconds, failure clock
        self.picks: list[NDArray[np.int64]] = []
        self.computes: list[NDArray[np.float64]] = []
        self.fails: list[NDArray[np.float64]] = []
        #: the jobs in flight: (instant the job resolves, job number, code): the code is the
        #: device if the job arrives, else ``~device``
        self.heap: list[tuple[float, int, int]] = []  # type: ignore[assignment]  # and a code
        max_time = run.scenario.max_time
        self.budget = math.inf if max_time is None else float(max_time)
        #: every arrival is an aggregation applying its update (FedAsync, no staleness limit)
        self.single = policy.buffer() == 1 and policy.max_staleness is None
        self.table, self.block_first, self.block_end = _EMPTY, 0, 0  # the current block
        # per aggregation: the jobs started by then, the end of its records (buffered loop)
        self.agg_started: list[int] = []
        self.agg_end: list[int] = []

    # ----------------------------------------------------------------- plans
    def _add_rows(
        self, devices: NDArray[np.int64], compute: NDArray[np.float64], fail: NDArray[np.float64]
    ) -> int:
        """Append planned jobs to the table; return the number of the first row."""
        first = self.n_rows
        self.picks.append(devices)
        self.computes.append(compute)
        self.fails.append(fail)
        self.n_rows += devices.size
        return first

    def _plan_block(self, first: int) -> _Table:
        """Plan the jobs the block of job numbers from ``first`` can start.

        A job starts on its first pick, or on its second if the first is busy (else the policy
        picks; rare). So every device picked either way gets one row per job index it can
        reach in the block: its next one, and one more per further pick. A device's rows end
        before its first plan that is not finite (that job is planned alone, and refused).
        """
        run, policy = self.run, self.policy
        rounds = run.scenario.rounds
        if rounds is None:  # growing: short runs plan little ahead
            size = min(BLOCK, max(FIRST_BLOCK, first))
        else:  # the jobs a run without drops starts, and the next (read before the last ends)
            needed = rounds * policy.buffer() + policy.concurrency - first
            size = min(BLOCK, max(needed, FIRST_BLOCK if first else 1))
        picks = policy.first_picks(run.view, first, size)
        second = policy.first_picks(run.view, first, size, attempt=1)
        assert picks is not None and second is not None  # the loop plays only such policies
        devices, at, counts = np.unique(
            np.concatenate([picks, second]), return_inverse=True, return_counts=True
        )
        # (itemgetter of one index returns a value, of two or more a tuple: -1 is dropped)
        known = np.array(itemgetter(*devices.tolist(), -1)(self.job_index)[:-1], dtype=np.int64)
        lo = np.cumsum(counts) - counts  # each device's first row in the block
        rows = np.repeat(devices, counts)
        keys = np.repeat(known - lo, counts) + np.arange(rows.size)  # job index of each row
        fleet, streams = run.fleet, run.streams
        draws = fleet.compute_draws(rows, round=keys, stage=0, streams=streams)
        fail = failure_clocks(fleet, rows, keys, streams)
        with np.errstate(over="ignore", invalid="ignore"):
            compute = self.work[rows] * draws
            total = self.down[rows] + compute + self.up[rows]
        arrives = fail >= total
        after = np.where(arrives, total, fail)
        row0 = self._add_rows(rows, compute, fail)
        # a device's row (in the block) for its job index k: base + k, valid below its end
        base, end = lo - known, lo + counts
        bad = np.flatnonzero(~np.isfinite(total))  # such a job is planned alone (and refused)
        if bad.size:
            np.minimum.at(end, np.repeat(np.arange(devices.size), counts)[bad], bad)
        at1, at2 = at[:size], at[size:]  # each pick's place in devices
        return _Table(
            picks.tolist(),
            base[at1].tolist(),
            end[at1].tolist(),
            second.tolist(),
            base[at2].tolist(),
            end[at2].tolist(),
            after.tolist(),
            np.where(arrives, rows, ~rows).tolist(),
            row0,
        )

    def _plan_one(self, device: int, key: int) -> tuple[float, bool, int]:
        """Plan one job alone, as the reference plans every job: after, arrives, its row.

        A plan that is not finite is refused as :func:`~simfl.engine.jobs.plan_jobs` does.
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
        row = self._add_rows(
            np.array([device], dtype=np.int64), np.array([compute]), np.array([fail_after])
        )
        arrives = fail_after >= total
        return (total if arrives else fail_after), arrives, row

    def _start_alone(self, n: int, device: int, now: float) -> tuple[float, int, int]:
        """Job ``n`` (on ``device`` unless busy), not in the block's table: its heap entry."""
        if self._busy[device]:
            picked = self.policy.pick(self.state, self.run.view, self.busy, n)
            assert picked is not None  # concurrency <= fleet size: an idle device exists
            device = picked
        after, arrives, row = self._plan_one(device, self.job_index[device])
        self.row.append(row)
        return now + after, n, (device if arrives else ~device)

    # ----------------------------------------------------------------- the loop
    def play(self) -> bool:
        """Handle the jobs as they resolve; aggregate every ``buffer()`` arrivals.

        Returns whether it stopped at ``max_time`` (the next job resolves at or after it).
        Each step pops the next job to resolve and starts the next job in its place (one heap
        step); the first ``concurrency`` jobs start at once. Where every arrival is an
        aggregation applying its update (:attr:`single`: FedAsync without a staleness
        limit), every job handled is recorded at once, in the order handled (the reference's
        order there), and :meth:`_write` finds the aggregations from the arrivals among them.
        """
        run, heap = self.run, self.heap
        budget, concurrency, single = self.budget, self.policy.concurrency, self.single
        size, limit = self.policy.buffer(), self.policy.max_staleness
        busy, job_index, t_start = self._busy, self.job_index, self.t_start
        buffer, ended, records = self.buffer, self.ended, self.records
        agg_started, agg_end = self.agg_started, self.agg_end
        record, add_row, add_start = records.append, self.row.append, t_start.append
        push, replace, pop = heapq.heappush, heapq.heapreplace, heapq.heappop
        # aggregations the stop rules need not see one by one (the base pick, the only one
        # this loop plays, does not read the model version meanwhile)
        quiet, uncounted = run.quiet_aggregations(), 0
        drops, last = self.drops_in_row, self.last_time
        t = float(self.env.now)
        filling = len(heap) < concurrency  # the first jobs start at once, in places of their own
        try:
            while True:
                tab, jobs = self._ahead(len(t_start))
                _, _, _, second, base2, end2, afters, codes, row0 = tab
                first = self.block_first
                for n, d, r, hi in jobs:  # n: the job to start once the next one is handled
                    if not filling:
                        entry = heap[0]  # the next job to resolve (replaced below)
                        if entry[0] >= budget:  # events at the budget are not handled
                            return True
                        t, job, c = entry
                        if single:
                            record(job)
                        if c >= 0:  # it arrives
                            busy[c] = 0
                            drops = 0
                            applied = 1  # an aggregation applying it (-1: none yet)
                            if not single:
                                buffer.append(job)
                                applied = -1
                                if len(buffer) >= size:  # aggregate
                                    applied = size if limit is None else self._applied(uncounted)
                                    if ended:
                                        records += ended
                                        ended.clear()
                                    records += buffer
                                    buffer.clear()
                                    agg_started.append(n)
                                    agg_end.append(len(records))
                            if applied >= 0:  # an aggregation (its row is written at the end)
                                if applied and quiet:  # no stop rule can fire: counted later
                                    quiet -= 1
                                    uncounted += 1
                                else:
                                    run.count_quiet(uncounted)
                                    uncounted = 0
                                    if self._count(t, applied, t - last):
                                        pop(heap)
                                        return False
                                    quiet = run.quiet_aggregations()
                                last = t
                        else:
                            busy[~c] = 0
                            if not single:
                                ended.append(job)
                            drops += 1
                            if drops >= STALL_JOBS:
                                pop(heap)
                                run.stop("stalled")
                                return False
                    # start job n: on its first pick, or on its second if the first is busy,
                    # from the block's table; a job the table has no row for is planned alone
                    if busy[d]:
                        i = n - first
                        d, r, hi = second[i], base2[i], end2[i]
                        if busy[d]:
                            hi = 0  # both busy (a row is never negative): the policy picks
                    k = job_index[d]
                    r += k  # its next job's row, if the block has it
                    if r < hi:
                        entry = (t + afters[r], n, codes[r])
                        add_row(row0 + r)
                        job_index[d] = k + 1
                    else:
                        entry = self._start_alone(n, d, t)
                        d = _device(entry[2])
                        job_index[d] += 1
                    busy[d] = 1
                    add_start(t)
                    if filling:
                        push(heap, entry)
                        filling = len(heap) < concurrency
                    else:
                        replace(heap, entry)  # in the place of the job handled
        finally:  # also when interrupted: what was handled is recorded at its instant
            run.count_quiet(uncounted)
            self._stopped(t, drops, last)

    def _ahead(self, n: int) -> tuple[_Table, Iterator[tuple[int, int, int, int]]]:
        """The table of job ``n``'s block (planned if new) and its jobs from ``n``.

        Each job as (job number, first pick, its row base, its rows' end).
        """
        tab, i = self._table(n), n - self.block_first
        return tab, zip(
            range(n, self.block_end), tab.picks[i:], tab.base[i:], tab.end[i:], strict=True
        )

    def _table(self, n: int) -> _Table:
        """The table of job ``n``'s block (planned if new)."""
        if n >= self.block_end:
            self.table = self._plan_block(n)
            self.block_first, self.block_end = n, n + len(self.table.picks)
        return self.table

    def _stopped(self, t: float, drops: int, last: float) -> None:
        """Where a loop stopped (also when interrupted): its state; the clock at ``t``."""
        self.n_started, self.drops_in_row, self.last_time = len(self.t_start), drops, last
        heap = self.heap
        handled = self.records[-1:] + self.buffer[-1:] + self.ended[-1:]
        if heap and heap[0][1] in handled:  # interrupted before its entry was replaced
            heapq.heappop(heap)
        land(self.env, t)

    def _count(self, t: float, applied: int, advance: float) -> bool:
        """Count one aggregation at ``t`` for the stop rules (and progress); whether to stop."""
        run = self.run
        run.count_aggregation(applied, advance)
        if run.shows_progress:
            land(self.env, t)
            run.show_progress()
        return run.stop_reason is not None

    def _applied(self, uncounted: int) -> int:
        """How many buffered updates are not staler than ``max_staleness`` now.

        ``uncounted``: aggregations not yet counted in the run's version. (Which updates, and
        their staleness, is settled for every aggregation at the end, by :meth:`_settle_all`.)
        A job's version is the number of aggregations before it started.
        """
        limit, started = self.policy.max_staleness, self.agg_started
        assert limit is not None
        version = self.run.round + uncounted
        return sum(version - bisect_right(started, job) <= limit for job in self.buffer)

    # ----------------------------------------------------------------- the end
    def _cancel(self, flying: list[int]) -> None:
        """Nothing to mark: :meth:`_write` works out every end (the buffer stays cancelled)."""

    def _write(self, n_flying: int) -> None:
        """Write every job row (in ``records`` order) and every aggregation row.

        A job's end, status and staleness follow from its plan and the aggregations: a
        handled job ended ``after`` its start (the loop's own addition); it dropped if its
        plan says so; aggregation ``k``'s last ``buffer()`` records arrived (or were late);
        the buffer left at the end and the jobs in flight (the last ``n_flying`` records,
        ending now) were cancelled.
        """
        rec = _array(self.records, np.int64)
        m = rec.size
        rows = _array(self.row, np.int64)[rec]
        devices = np.concatenate(self.picks)[rows]
        compute = np.concatenate(self.computes)[rows]
        fail = np.concatenate(self.fails)[rows]
        down, up = self.down[devices], self.up[devices]
        total = down + compute + up
        arrives = fail >= total
        starts = _array(self.t_start, np.float64)[rec]
        flying = np.arange(m) >= m - n_flying
        t_end = np.where(flying, float(self.env.now), starts + np.where(arrives, total, fail))
        status = np.where(~flying & ~arrives, DROPPED, CANCELLED).astype(np.int8)
        staleness = np.full(m, np.nan)
        started, ends = self._aggregations(arrives[: m - n_flying])
        version = np.searchsorted(started, rec, side="right")  # aggregations before its start
        arrived, lag_sum = self._settle_all(ends, version, status, staleness)
        plan = JobPlan(
            devices=devices,
            t_start=starts,
            download=down,
            compute=compute,
            upload=up,
            fail_after=fail,
            work=self.work[devices],
            size_down=np.full(m, float(self.payload.down)),
            size_up=np.full(m, float(self.payload.up)),
            progress=np.zeros(m, dtype=np.int8),
            spent=np.zeros((m, 3)),
            active_since=starts,
            moved=np.full((m, 2), np.nan),
        )
        b_down, b_up = self.run.record_job_rows(
            plan, status, t_end, round=version, stage=0, staleness=staleness, waits=False
        )
        self._record_rounds(started, ends, t_end, arrived, lag_sum, b_down, b_up)

    def _aggregations(
        self, arrives: NDArray[np.bool_]
    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Per aggregation, the jobs started by then and the end of its records.

        ``arrives``: whether each job handled arrives. The loop for a buffer of one records
        every job handled at once, so its aggregations are its arrivals; the ``concurrency``
        jobs in flight, and one more started per job handled before.
        """
        if not self.single:
            return (
                _array(self.agg_started, np.int64),
                _array(self.agg_end, np.int64),
            )
        at = np.flatnonzero(arrives)
        return at + self.policy.concurrency, at + 1

    def _settle_all(
        self,
        ends: NDArray[np.int64],
        version: NDArray[np.int64],
        status: NDArray[np.int8],
        staleness: NDArray[np.float64],
    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Mark every aggregated update arrived or late (in place, in record order).

        ``ends``: the end of each aggregation's records; ``version``: each record's model
        version. Returns, per aggregation, the number of
        updates applied and their staleness summed. Aggregation ``k`` recorded
        ``records[end[k-1]:end[k]]``: the drops, then the buffer (its last ``buffer()``).
        """
        size, limit = self.policy.buffer(), self.policy.max_staleness
        k = ends.size
        at = (ends[:, None] - size + np.arange(size)).ravel()
        lag = np.repeat(np.arange(k), size) - version[at]
        ok = np.ones(lag.size, dtype=bool) if limit is None else lag <= limit
        status[at] = np.where(ok, ARRIVED, LATE)
        staleness[at] = np.where(ok, lag, np.nan)
        arrived = ok.reshape(k, size).sum(axis=1)
        lag_sum = np.where(ok, lag, 0).reshape(k, size).sum(axis=1)
        return arrived, lag_sum

    def _record_rounds(
        self,
        started: NDArray[np.int64],
        ends: NDArray[np.int64],
        t_end: NDArray[np.float64],
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
        time = t_end[ends - 1]  # the end of its last buffered job
        t_start = np.r_[0.0, time[:-1]]
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
            "n_selected": np.diff(started, prepend=0),
            "n_arrived": arrived,
            "n_dropped": ends - begins - size,
            "n_late": size - arrived,
            "n_cancelled": np.zeros(k, dtype=np.int64),
            "bytes_down": chunk_sums(b_down, begins, ends),
            "bytes_up": chunk_sums(b_up, begins, ends),
            "staleness_mean": stale,
        }
        self.run.recorder.add_round_columns(columns)
