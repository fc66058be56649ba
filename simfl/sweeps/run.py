"""Sweeps: cases (scenarios x seeds) run on local processes or Dask into a results store.

>>> import simfl
>>> from simfl import sweeps
>>> # cases = sweeps.grid(base, policy=...)
>>> # out = simfl.sweep(cases, seeds=range(10), store="runs/srpfl", executor="dask")
>>> # out.frame   # tidy rounds of every run, with a column per grid axis
>>> # simfl.Store("runs/srpfl").rounds()   # the same, later, from the store

:func:`sweep` (``simfl.sweep``) runs every case on an executor (:mod:`simfl.sweeps.executors`);
workers write each finished run into the store (:mod:`simfl.sweeps.store`) atomically. Runs
already in the store are skipped, so a killed sweep resumes where it stopped; a run that raises
is stored as ``failed`` (as is one whose scenario cannot be pickled) and the others go on. A
store that cannot be written (a full disk, a quota, a read-only filesystem) is a fault of the
machine, not of the run: the sweep stops its workers and raises
:class:`~simfl.sweeps.store.StoreWriteError`, and the runs it could not store stay to do.
Sweeps sharing a store claim each run before computing it (:mod:`simfl.sweeps.claims`), so
every run is computed once: a sweep waits for the runs another sweep is computing and counts
them as already stored.
Before it schedules anything, the sweep checks the store and moves unreadable runs aside
(:meth:`simfl.Store.check`), so that they run again. A stored run is the same run when its
values (the run id's fingerprint) *and* the code behind it (:mod:`simfl.sweeps.identity`:
simfl's sources, the user's classes and functions the scenario reaches) are the same: a run
stored by other code is *stale* and runs again (``reuse_stale=True`` keeps it), the old copy
moved into the store's ``.superseded/``; runs stored before simfl recorded code are of unknown
code, kept unless ``rerun_unknown=True``. Without a store the results stay in
memory. An interrupted sweep stops its workers, then raises :class:`SweepInterrupted` (a
``KeyboardInterrupt``) with what it did so far. Runs are deterministic, so every executor gives
bit-identical frames.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
import traceback
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pandas as pd
from tqdm.auto import tqdm

from simfl.scenario import Scenario
from simfl.sweeps import claims
from simfl.sweeps.executors import Executor, make_executor
from simfl.sweeps.grid import Case, with_seeds
from simfl.sweeps.identity import changed_parts
from simfl.sweeps.store import SUPERSEDED, BadRun, MemoryStore, Store, StoreError, StoreWriteError
from simfl.sweeps.worker import (
    Prepared,
    RunOutcome,
    RunSpec,
    execute,
    git_revision,
    make_spec,
    record_of,
)

__all__ = ["SweepInterrupted", "SweepOutcome", "sweep"]

#: The sweep's bar: runs done, counting the share done of the runs in flight (15.4/18 runs).
_BAR = "{l_bar}{bar}| {n:.1f}/{total} runs [{elapsed}<{remaining}{postfix}]"
#: Seconds between two looks at the runs another sweep on the store claimed.
_CLAIM_POLL = 0.2


@dataclass(frozen=True)
class SweepOutcome:
    """What :func:`sweep` did, and its results.

    Attributes
    ----------
    run_ids
        Every run of the sweep, in the order of the cases.
    ran
        The runs executed by this call.
    skipped
        The runs found in the store (finished, or failed and not retried).
    failed
        The runs of this sweep whose stored status is ``failed`` (now or earlier).
    store
        Where the runs are: a :class:`~simfl.sweeps.Store`, or a ``MemoryStore`` if the sweep
        had no store directory.
    executor
        The executor, in words.
    seconds
        Host seconds the call took.
    repaired
        Unreadable run folders the store check found before the sweep started, moved into
        the store's ``.quarantine/`` (so they were run again), or left in place with the
        reason they could not be moved.
    stale
        The runs found stored by other code (same values, another ``code`` digest): run
        again, their old copies moved into the store's ``.superseded/``, unless
        ``reuse_stale``.
    changed
        The code parts that differ between the stale runs and this sweep (``PickK.plan``,
        ``simfl``, ...).
    unknown
        The runs found stored without a code digest (stores written before simfl recorded
        it): kept, unless ``rerun_unknown``.
    reuse_stale
        Whether the stale runs were kept (``reuse_stale=True``) rather than run again.
    rerun_unknown
        Whether the runs of unknown code were run again.
    claimed
        The runs of ``skipped`` that another sweep on the store was computing when this one
        came to them (claimed by another sweep): this sweep waited for them.
    """

    run_ids: tuple[str, ...]
    ran: tuple[str, ...]
    skipped: tuple[str, ...]
    failed: tuple[str, ...]
    store: Store
    executor: str
    seconds: float
    repaired: tuple[BadRun, ...] = ()
    stale: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()
    reuse_stale: bool = False
    rerun_unknown: bool = False
    claimed: tuple[str, ...] = ()

    @property
    def frame(self) -> pd.DataFrame:
        """Tidy rounds of the finished runs of this sweep (:meth:`simfl.Store.rounds`)."""
        done = [r for r in self.run_ids if r not in self.failed]
        return self.store.rounds(done)

    @property
    def runs(self) -> pd.DataFrame:
        """Provenance of every run of this sweep, one row each (:meth:`simfl.Store.runs`)."""
        return self.store.runs(self.run_ids)

    @property
    def left(self) -> int:
        """How many runs of the sweep did not run (it was interrupted)."""
        return len(self.run_ids) - len(self.ran) - len(self.skipped)

    def summary(self) -> str:
        """A few lines: what ran, what was skipped, failed or is left, and where the store is."""
        done_now = len(self.ran) - len(set(self.ran) & set(self.failed))
        left = f", {self.left} not run yet" if self.left else ""
        claimed = f" ({len(self.claimed)} claimed by another sweep)" if self.claimed else ""
        lines = [
            f"{len(self.run_ids)} runs: {len(self.ran)} ran ({done_now} done, "
            f"{len(self.ran) - done_now} failed), {len(self.skipped)} already in the store"
            f"{claimed}{left}; {self.executor}, {self.seconds:.3g} s"
        ]
        if not isinstance(self.store, MemoryStore):
            lines.append(
                f"store      {self.store.path}/  (simfl.Store({str(self.store.path)!r}).rounds(); "
                f"figures: simfl report {self.store.path})"
            )
        for bad in self.repaired:
            word = "moved" if bad.moved_to is not None else "unreadable"
            lines.append(f"{word:<10} {bad}")
        lines += self.code_lines()
        for run_id in self.failed:
            record = self.store.record(run_id) or {}
            error = str(record.get("error") or "?").strip().splitlines() or ["?"]
            lines.append(f"failed     {run_id}: {error[-1]}")
        return "\n".join(lines)

    def code_lines(self) -> list[str]:
        """What the sweep did with stale runs and runs of unknown code, a line each."""
        lines = []
        if self.stale:
            what = ", ".join(f"`{name}`" for name in self.changed[:6])
            more = f" and {len(self.changed) - 6} more" if len(self.changed) > 6 else ""
            done = (
                "reused as asked (--reuse-stale: their numbers come from the old code)"
                if self.reuse_stale
                else f"rerunning them (old runs kept in {self.store.path / SUPERSEDED}/)"
            )
            lines.append(
                f"stale      {len(self.stale)} runs stale: code of {what or 'the run'}{more} "
                f"changed; {done}"
            )
        if self.unknown:
            done = (
                "run again (--rerun-unknown)"
                if self.rerun_unknown
                else "reused (--rerun-unknown runs them again)"
            )
            lines.append(
                f"unknown    {len(self.unknown)} runs were stored before simfl recorded the "
                f"code behind a run, so their code is unknown: {done}"
            )
        return lines


class SweepInterrupted(KeyboardInterrupt):
    """A sweep stopped by Ctrl-C (or SIGTERM under ``simfl sweep``), once its workers stopped.

    ``outcome`` is the :class:`SweepOutcome` so far: the runs that finished are in the store
    and ``outcome.left`` runs did not run; the same call resumes the sweep.
    """

    def __init__(self, outcome: SweepOutcome) -> None:
        super().__init__(f"sweep interrupted with {outcome.left} runs not run yet")
        self.outcome = outcome


def _cases(
    cases: Iterable[Case] | Iterable[Scenario] | Scenario | Case, seeds: Iterable[int] | None
) -> list[Case]:
    """The cases to run: scenarios become cases, and ``seeds`` applies (:func:`with_seeds`)."""
    many: Iterable[object] = [cases] if isinstance(cases, (Scenario, Case)) else cases
    items = []
    for i, c in enumerate(many):
        if isinstance(c, Scenario):  # its seed is a label, unless seeds= gives the seed axis
            c = Case(c, {"seed": c.seed} if seeds is None else {})
        if not isinstance(c, Case):
            raise ValueError(f"sweep case {i} must be a simfl.Scenario or a sweeps.Case, got {c!r}")
        items.append(c)
    if not items:
        raise ValueError("sweep needs at least one scenario")
    if isinstance(seeds, (str, bytes)):
        raise ValueError(f"sweep seeds= must be integers such as range(5), got {seeds!r}")
    return items if seeds is None else with_seeds(items, seeds)


def sweep(
    cases: Iterable[Case] | Iterable[Scenario] | Scenario | Case,
    *,
    seeds: Iterable[int] | None = None,
    store: str | os.PathLike[str] | Store | None = None,
    executor: str | Executor | None = None,
    workers: int | None = None,
    scheduler: str | None = None,
    retry_failed: bool = False,
    reuse_stale: bool = False,
    rerun_unknown: bool = False,
    progress: bool = True,
    threads: int | None = None,
) -> SweepOutcome:
    """Run every case into a results store, skipping the runs it already holds.

    Parameters
    ----------
    cases
        Scenarios, or :class:`~simfl.sweeps.Case` objects from :func:`~simfl.sweeps.grid`
        (their labels become columns). Two cases must not be the same run (same scenario,
        name and seed).
    seeds
        Run every case on each of these seeds (e.g. ``range(5)``), as ``simfl sweep --seeds``
        does. Cases that set their own seeds (a ``seed`` axis of :func:`~simfl.sweeps.grid`)
        are refused with ``seeds=`` (:func:`~simfl.sweeps.with_seeds`: one rule, the case's
        seeds or ``seeds=``, never a silent mix). ``None`` (default): each scenario runs on
        its own seed.
    store
        The store directory (created if new; see :mod:`simfl.sweeps.store`). Workers write
        into it directly, so on a multi-machine cluster it must be on a filesystem they share,
        at the same path. ``None``: results come back in memory (nothing is skipped or resumable).
    executor
        ``"processes"`` (the default without ``scheduler``), ``"dask"`` (the default with it),
        ``"inline"``, or an :class:`~simfl.sweeps.Executor` object (not closed afterwards).
    workers
        Local processes, or the size of the local Dask cluster (default: the CPUs).
    scheduler
        Address of a running Dask scheduler (``tcp://host:8786``).
    threads
        Compute threads (torch, OpenMP, MKL, OpenBLAS) of each worker process (default: its
        share of the cores; see :func:`~simfl.sweeps.executors.limit_threads`). A neural run's
        own torch threads are its task's (``ImageClassification.threads``). When a task is not
        :attr:`~simfl.tasks.Task.fork_safe` (several threads, or a GPU) and torch is loaded
        here, the executor's workers are started fresh (:meth:`~simfl.sweeps.Executor.fresh`).
    retry_failed
        Run again the runs stored as ``failed`` (default: keep them and skip them).
    reuse_stale
        Keep the stored runs whose code changed since they ran (same values, another code
        digest: :mod:`simfl.sweeps.identity`), for a change known to be cosmetic. Default:
        run them again, moving the old runs into the store's ``.superseded/``.
    rerun_unknown
        Run again the runs stored before simfl recorded the code behind a run (their code is
        unknown; default: keep them, and say how many there are).
    progress
        Show a progress bar over runs, which also counts the share done of the runs in flight
        (rounds of ``rounds``, or simulated time of ``max_time``; with the inline and
        processes executors, updated every :data:`~simfl.sweeps.executors.PROGRESS_EVERY`
        seconds), so that its ETA moves during long runs.

    Returns
    -------
    SweepOutcome
        Counts of what ran, was skipped and failed, and the store to read (``.frame``).

    Raises
    ------
    ValueError
        If there are no cases, two cases are the same run, ``seeds=`` is given for cases with a
        seed axis, or an option is invalid.
    SweepInterrupted
        On ``KeyboardInterrupt`` while runs execute, once the workers are stopped (the runs in
        flight are not recorded; the same call resumes the sweep).
    StoreWriteError
        If a run cannot be written into the store (a full disk, a quota, a read-only
        filesystem: an ``OSError``), once the workers are stopped; its ``outcome`` says what
        was stored, and the same call, once there is room, runs the rest.
    """
    started = time.perf_counter()
    items = _cases(cases, seeds)
    for option, value in (
        ("retry_failed", retry_failed),
        ("reuse_stale", reuse_stale),
        ("rerun_unknown", rerun_unknown),
    ):
        if not isinstance(value, bool):
            raise ValueError(f"sweep {option} must be True or False, got {value!r}")
    runner = make_executor(executor, workers=workers, scheduler=scheduler, threads=threads)
    if "torch" in sys.modules and not all(
        c.scenario.task is None or c.scenario.task.fork_safe for c in items
    ):
        runner = runner.fresh()  # a forked worker would hang (OpenMP) or fail (CUDA)
    disk = (
        store if isinstance(store, Store) else None if store is None else Store(store, create=True)
    )
    specs = _specs(
        items, None if disk is None else str(disk.path.resolve()), retry_failed, progress
    )
    if disk is not None:  # the token of this sweep's claims on the runs
        token = uuid.uuid4().hex
        specs = [dataclasses.replace(s, sweep=token) for s in specs]
    memory = MemoryStore() if disk is None else None
    out: Store = disk if disk is not None else memory  # type: ignore[assignment]
    repaired = tuple(disk.check(repair=True)) if disk is not None else ()
    records = {r["run_id"]: r for r in disk.records()} if disk is not None else {}
    if disk is not None:
        disk.remove_stale_partials()
        claims.remove_expired(disk.runs_dir)
    code = _Code(specs, records, reuse_stale, rerun_unknown)
    specs = code.specs
    stored = {r: records[r]["status"] for r in records}
    todo = [
        s
        for s in specs
        if s.run_id not in stored or s.supersede or (retry_failed and stored[s.run_id] == "failed")
    ]
    to_run = {s.run_id for s in todo}
    skipped = [s.run_id for s in specs if s.run_id in stored and s.run_id not in to_run]
    failed = [r for r in skipped if stored[r] == "failed"]
    bar = tqdm(
        total=len(specs),
        initial=len(skipped),
        desc="sweep",
        unit="run",
        bar_format=_BAR,
        disable=not progress,
    )
    described = "nothing to run"
    done = _Done([], skipped, failed, [])
    try:
        if todo:
            described = runner.describe()
            _execute(runner, todo, disk, memory, done, _RunsBar(bar, len(skipped)))
    except KeyboardInterrupt as exc:
        raise SweepInterrupted(
            code.outcome(_outcome(specs, done, out, described, started, repaired))
        ) from exc
    except StoreWriteError as exc:  # the machine's fault: the runs not stored stay to do
        exc.outcome = code.outcome(_outcome(specs, done, out, described, started, repaired))
        raise
    finally:
        bar.close()
        if runner is not executor:
            runner.close()
    return code.outcome(_outcome(specs, done, out, described, started, repaired))


class _Code:
    """The stored runs of a sweep whose code differs from its own, or is unknown.

    ``specs`` are the sweep's specs, those to run again marked ``supersede`` (the stale
    runs unless ``reuse_stale``, the runs of unknown code if ``rerun_unknown``).
    """

    def __init__(
        self,
        specs: list[RunSpec],
        records: dict[str, dict[str, Any]],
        reuse_stale: bool,
        rerun_unknown: bool,
    ) -> None:
        self.reuse_stale, self.rerun_unknown = reuse_stale, rerun_unknown
        self.stale: list[str] = []
        self.unknown: list[str] = []
        changed: set[str] = set()
        self.specs = []
        for spec in specs:
            record = records.get(spec.run_id)
            supersede = False
            if record is not None and not isinstance(record.get("code"), str):
                self.unknown.append(spec.run_id)
                supersede = rerun_unknown
            elif record is not None and record["code"] != spec.info["code"]:
                self.stale.append(spec.run_id)
                old = record.get("code_parts")
                changed.update(
                    changed_parts(old, spec.info["code_parts"])
                    if isinstance(old, dict)
                    else ["the run"]
                )
                supersede = not reuse_stale
            self.specs.append(dataclasses.replace(spec, supersede=supersede) if supersede else spec)
        self.changed = sorted(changed)

    def outcome(self, out: SweepOutcome) -> SweepOutcome:
        """``out`` with what the sweep found about the code of its stored runs."""
        return dataclasses.replace(
            out,
            stale=tuple(self.stale),
            changed=tuple(self.changed),
            unknown=tuple(self.unknown),
            reuse_stale=self.reuse_stale,
            rerun_unknown=self.rerun_unknown,
        )


@dataclass(frozen=True)
class _Done:
    """The runs of a sweep so far, by what happened to them (lists appended to as they end)."""

    ran: list[str]
    skipped: list[str]
    failed: list[str]
    claimed: list[str]


def _outcome(
    specs: list[RunSpec],
    done: _Done,
    store: Store,
    described: str,
    started: float,
    repaired: tuple[BadRun, ...] = (),
) -> SweepOutcome:
    """The :class:`SweepOutcome` of these runs, ordered as the cases."""
    order = {s.run_id: i for i, s in enumerate(specs)}
    return SweepOutcome(
        tuple(s.run_id for s in specs),
        tuple(sorted(done.ran, key=order.__getitem__)),
        tuple(sorted(done.skipped, key=order.__getitem__)),
        tuple(sorted(done.failed, key=order.__getitem__)),
        store,
        described,
        time.perf_counter() - started,
        repaired,
        claimed=tuple(sorted(done.claimed, key=order.__getitem__)),
    )


def _specs(
    items: list[Case], where: str | None, retry_failed: bool, progress: bool
) -> list[RunSpec]:
    """The run of every case, in order (a progress bar if this takes more than two seconds).

    A case whose scenario cannot be pickled gets a spec that carries the error (see
    :func:`~simfl.sweeps.worker.make_spec`); its run is recorded ``failed``.

    Raises
    ------
    ValueError
        If two cases are the same run.
    """
    git = git_revision()
    prepared: Prepared = {}  # each scenario is fingerprinted and pickled once for all its seeds
    specs: list[RunSpec] = []
    seen: dict[str, int] = {}
    cases = tqdm(items, desc="prepare", unit="run", delay=2, leave=False, disable=not progress)
    for i, case in enumerate(cases):
        spec = make_spec(
            case.scenario,
            case.labels,
            position=i,
            store=where,
            git=git,
            replace_failed=retry_failed,
            prepared=prepared,
        )
        if spec.run_id in seen:
            raise ValueError(
                f"sweep cases {seen[spec.run_id]} and {i} are the same run ({spec.run_id}); "
                f"give the scenarios different names or seeds"
            )
        seen[spec.run_id] = i
        specs.append(spec)
    return specs


class _RunsBar:
    """The sweep's bar: finished runs plus the share done of each run in flight."""

    def __init__(self, bar: Any, finished: int) -> None:
        self.bar = bar
        self.finished = finished
        self.flight: dict[int, float] = {}
        self.failed = 0
        self.waiting = 0

    @property
    def shown(self) -> bool:
        """Whether the bar is displayed (else nobody asks the runs for their progress)."""
        return not self.bar.disable

    def share(self, index: int, share: float) -> None:
        """Run ``index`` of the runs to do reports the share of it done."""
        self.flight[index] = min(1.0, max(0.0, share))
        self._move()

    def leave(self, index: int) -> None:
        """Run ``index`` was left to another sweep: its share no longer counts."""
        self.flight.pop(index, None)
        self._move()

    def wait(self, claimed: int) -> None:
        """Say that ``claimed`` runs are waited for, claimed by another sweep (0: none now)."""
        self.waiting = claimed
        self._postfix(refresh=True)

    def finish(self, index: int, failed: int) -> None:
        """Run ``index`` ended (``failed``: how many runs of the sweep failed so far)."""
        self.flight.pop(index, None)
        self.finished += 1
        if failed != self.failed:
            self.failed = failed
            self._postfix()
        self._move()

    def _postfix(self, refresh: bool = False) -> None:
        words = {"failed": self.failed, "claimed by another sweep": self.waiting}
        self.bar.set_postfix({k: v for k, v in words.items() if v}, refresh=refresh)

    def _move(self) -> None:
        done = self.finished + sum(self.flight.values())
        self.bar.update(done - self.bar.n)


def _execute(
    runner: Executor,
    todo: list[RunSpec],
    disk: Store | None,
    memory: MemoryStore | None,
    done: _Done,
    bar: _RunsBar,
) -> None:
    """Run ``todo`` on ``runner``, adding each run to ``done`` as it ends.

    Runs that another sweep on the store claimed are waited for (:func:`_await_claimed`):
    those it stored count as skipped (and ``claimed``), the others run again here.
    """
    offset = 0  # the bar's index of the first run of this pass
    while todo:
        left = _pass(runner, todo, disk, memory, done, bar, offset)
        offset += len(todo)
        todo = [] if disk is None else _await_claimed(left, disk, done, bar)


def _pass(
    runner: Executor,
    todo: list[RunSpec],
    disk: Store | None,
    memory: MemoryStore | None,
    done: _Done,
    bar: _RunsBar,
    offset: int,
) -> list[RunSpec]:
    """Run ``todo`` on ``runner`` once; return the runs left to another sweep's claim.

    With the bar shown, the runs report their progress (:meth:`Executor.map_reporting`).
    However this ends (an interruption, a store that cannot be written), the executor's
    iterator is closed before it returns, so that its workers stop now rather than when it is
    garbage-collected.
    """
    keys = [s.run_id for s in todo]
    results = (
        runner.map_reporting(
            execute, todo, keys=keys, progress=lambda i, share: bar.share(offset + i, share)
        )
        if bar.shown
        else runner.map_unordered(execute, todo, keys=keys)
    )
    claimed: list[RunSpec] = []
    try:
        for i, value in results:
            if isinstance(value, RunOutcome) and value.claimed_by is not None:
                claimed.append(todo[i])
                bar.leave(offset + i)
                continue
            record = _settle(todo[i], value, disk, memory)
            fresh = not isinstance(value, RunOutcome) or value.fresh
            (done.ran if fresh else done.skipped).append(record["run_id"])
            if record["status"] == "failed":
                done.failed.append(record["run_id"])
            bar.finish(offset + i, len(done.failed))
    finally:
        close = getattr(results, "close", None)
        if close is not None:
            close()
    return claimed


def _await_claimed(
    claimed: list[RunSpec], disk: Store, done: _Done, bar: _RunsBar
) -> list[RunSpec]:
    """Wait until each run another sweep claimed is stored or no longer claimed.

    The runs stored meanwhile are added to ``done`` as skipped (and ``claimed``); the runs
    whose claim ended without them being stored (their claimant stopped) are returned, to run.
    """
    waiting, again = list(claimed), []
    while waiting:
        bar.wait(len(waiting))
        still = []
        for spec in waiting:
            try:
                record = disk.record(spec.run_id)
            except StoreError:  # stored unreadable: run it again once the claim ends
                record = None
            if record is not None and (record["status"] == "done" or not spec.replace_failed):
                done.skipped.append(spec.run_id)
                done.claimed.append(spec.run_id)
                if record["status"] == "failed":
                    done.failed.append(spec.run_id)
                bar.finish(-1, len(done.failed))
            elif claims.holder(disk.runs_dir / f"{claims.PREFIX}{spec.run_id}") is None:
                again.append(spec)
            else:
                still.append(spec)
        waiting = still
        if waiting:
            time.sleep(_CLAIM_POLL)
    bar.wait(0)
    return again


def _settle(
    spec: RunSpec, value: Any, disk: Store | None, memory: MemoryStore | None
) -> dict[str, Any]:
    """Record one completion; return the run's record as it is stored.

    Raises
    ------
    StoreWriteError
        If the worker could not write the run into the store (then nothing is recorded).
    """
    if isinstance(value, StoreWriteError):
        raise value
    if isinstance(value, Exception):  # the executor lost the run (worker died, ...)
        text = "".join(traceback.format_exception_only(type(value), value)).strip()
        record = record_of(spec, f"executor error: {text}")
        if disk is not None:
            disk.publish(record, None, replace_failed=spec.replace_failed, supersede=spec.supersede)
            return disk.record(spec.run_id) or record
        assert memory is not None
        memory.add(record, None)
        return record
    if memory is not None:
        memory.add(value.record, value.results)
    stored: dict[str, Any] = value.record
    return stored
