"""Sweeps: grids of scenarios x seeds, run on local processes or Dask into a results store.

>>> import simfl
>>> from simfl import policies, sweep
>>> # cases = sweep.grid(base, policy={"wait-all": policies.WaitAll(count=10),
>>> #                                  "srpfl": policies.SRPFL(n0=5)}, seed=range(10))
>>> # out = simfl.sweep(cases, store="runs/srpfl", executor="dask")   # or "processes"
>>> # out.frame   # tidy rounds of every run, with a column per grid axis
>>> # simfl.Store("runs/srpfl").rounds()   # the same, later, from the store

A grid axis is a ``Scenario`` field (``policy``, ``fleet``, ``algorithm``, ``seed``, ...) given
as a list of values or as a ``{label: value}`` dict; labels become columns of the tidy frame.

:func:`sweep` (also reachable as ``simfl.sweep(...)``: this module is callable) runs every case
on an executor (:mod:`simfl.executors`); workers write each finished run into the store
(:mod:`simfl.store`) atomically. Runs already in the store are skipped, so a killed sweep
resumes where it stopped; a run that raises is stored as ``failed`` and the others go on. Runs
are deterministic, so every executor gives bit-identical frames. :func:`run_all` is the simple
in-memory form, on local processes, kept for scripts.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import sys
import time
import traceback
import types
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from tqdm.auto import tqdm

from simfl.compare import collect
from simfl.engine import run
from simfl.executors import Executor, make_executor
from simfl.results import Results
from simfl.scenario import Scenario
from simfl.store import MemoryStore, Store
from simfl.worker import RunSpec, execute, git_revision, make_spec, record_of

__all__ = ["Case", "SweepOutcome", "SweepResults", "grid", "run_all", "sweep"]


@dataclass(frozen=True)
class Case:
    """One scenario of a grid, with the labels of its grid coordinates."""

    scenario: Scenario
    labels: dict[str, Any] = field(default_factory=dict)


def _label(value: Any) -> Any:
    if isinstance(value, (int, float, str)):
        return value
    name = getattr(value, "name", None)
    return name if isinstance(name, str) else repr(value)


def grid(base: Scenario, **axes: Sequence[Any] | Mapping[str, Any] | range) -> list[Case]:
    """Every combination of the given values of ``base``'s fields.

    Raises
    ------
    ValueError
        If an axis is not a Scenario field or has no values.
    """
    fields = {f.name for f in dataclasses.fields(Scenario)}
    labelled: list[list[tuple[Any, Any]]] = []
    for name, values in axes.items():
        if name not in fields:
            raise ValueError(f"grid axis {name!r} must be a Scenario field: {sorted(fields)}")
        pairs = (
            list(values.items())
            if isinstance(values, Mapping)
            else [(_label(v), v) for v in values]
        )
        if not pairs:
            raise ValueError(f"grid axis {name!r} has no values")
        labelled.append(pairs)
    cases = []
    for combo in itertools.product(*labelled):
        changes = {name: value for name, (_, value) in zip(axes, combo, strict=True)}
        labels = {name: label for name, (label, _) in zip(axes, combo, strict=True)}
        name = ",".join(f"{k}={v}" for k, v in labels.items() if k != "seed") or base.name
        cases.append(Case(dataclasses.replace(base, name=name, **changes), labels))
    return cases


@dataclass
class SweepResults:
    """The outcome of :func:`run_all`: one Results per case, and a tidy frame of all rounds."""

    cases: list[Case]
    results: list[Results]

    @property
    def frame(self) -> pd.DataFrame:
        """Rounds of every run with the initial row (see :func:`simfl.compare.collect`).

        Columns ``label`` (the scenario name) and ``seed``, and one column per grid axis.
        """
        frames = []
        for case, res in zip(self.cases, self.results, strict=True):
            labels = {k: v for k, v in case.labels.items() if k != "seed"}
            frames.append(collect({case.scenario.name: [res]}, **labels))
        return pd.concat(frames, ignore_index=True)


def _run_case(scenario: Scenario) -> Results:
    return run(scenario, progress=False)


def run_all(
    cases: Iterable[Case] | Iterable[Scenario],
    *,
    workers: int | None = None,
    progress: bool = True,
) -> SweepResults:
    """Run every case, on ``workers`` local processes (default: all CPUs; 1 runs inline)."""
    items = [c if isinstance(c, Case) else Case(c, {"seed": c.seed}) for c in cases]
    n = workers or os.cpu_count() or 1
    bar = tqdm(total=len(items), desc="sweep", unit="run", disable=not progress)
    results: list[Results] = []
    try:
        if n == 1 or len(items) <= 1:
            for case in items:
                results.append(_run_case(case.scenario))
                bar.update(1)
        else:
            with ProcessPoolExecutor(max_workers=n) as pool:
                for res in pool.map(_run_case, [c.scenario for c in items]):
                    results.append(res)
                    bar.update(1)
    finally:
        bar.close()
    return SweepResults(items, results)


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
        Where the runs are: a :class:`~simfl.store.Store`, or a ``MemoryStore`` if the sweep
        had no store directory.
    executor
        The executor, in words.
    seconds
        Host seconds the call took.
    """

    run_ids: tuple[str, ...]
    ran: tuple[str, ...]
    skipped: tuple[str, ...]
    failed: tuple[str, ...]
    store: Store
    executor: str
    seconds: float

    @property
    def frame(self) -> pd.DataFrame:
        """Tidy rounds of the finished runs of this sweep (:meth:`simfl.Store.rounds`)."""
        done = [r for r in self.run_ids if r not in self.failed]
        return self.store.rounds(done)

    @property
    def runs(self) -> pd.DataFrame:
        """Provenance of every run of this sweep, one row each (:meth:`simfl.Store.runs`)."""
        return self.store.runs(self.run_ids)

    def summary(self) -> str:
        """A few lines: what ran, what was skipped or failed, and where the store is."""
        done_now = len(self.ran) - len(set(self.ran) & set(self.failed))
        lines = [
            f"{len(self.run_ids)} runs: {len(self.ran)} ran ({done_now} done, "
            f"{len(self.ran) - done_now} failed), {len(self.skipped)} already in the store; "
            f"{self.executor}, {self.seconds:.3g} s"
        ]
        if not isinstance(self.store, MemoryStore):
            lines.append(
                f"store      {self.store.path}/  (simfl.Store({str(self.store.path)!r}).rounds(); "
                f"figures: simfl report {self.store.path})"
            )
        for run_id in self.failed:
            record = self.store.record(run_id) or {}
            error = str(record.get("error") or "?").strip().splitlines() or ["?"]
            lines.append(f"failed     {run_id}: {error[-1]}")
        return "\n".join(lines)


def _cases(cases: Iterable[Case] | Iterable[Scenario] | Scenario | Case) -> list[Case]:
    many: Iterable[object] = [cases] if isinstance(cases, (Scenario, Case)) else cases
    items = []
    for i, c in enumerate(many):
        if isinstance(c, Scenario):
            c = Case(c, {"seed": c.seed})
        if not isinstance(c, Case):
            raise ValueError(f"sweep case {i} must be a simfl.Scenario or a sweep.Case, got {c!r}")
        items.append(c)
    if not items:
        raise ValueError("sweep needs at least one scenario")
    return items


def sweep(
    cases: Iterable[Case] | Iterable[Scenario] | Scenario | Case,
    *,
    store: str | os.PathLike[str] | Store | None = None,
    executor: str | Executor | None = None,
    workers: int | None = None,
    scheduler: str | None = None,
    retry_failed: bool = False,
    progress: bool = True,
) -> SweepOutcome:
    """Run every case into a results store, skipping the runs it already holds.

    Parameters
    ----------
    cases
        Scenarios, or :class:`Case` objects from :func:`grid` (their labels become columns).
        Two cases must not be the same run (same scenario, name and seed).
    store
        The store directory (created if new; see :mod:`simfl.store`). Workers write into it
        directly, so on a multi-machine cluster it must be on a filesystem they share, at the
        same path. ``None``: results come back in memory (nothing is skipped or resumable).
    executor
        ``"processes"`` (the default without ``scheduler``), ``"dask"`` (the default with it),
        ``"inline"``, or an :class:`~simfl.executors.Executor` object (not closed afterwards).
    workers
        Local processes, or the size of the local Dask cluster (default: the CPUs).
    scheduler
        Address of a running Dask scheduler (``tcp://host:8786``).
    retry_failed
        Run again the runs stored as ``failed`` (default: keep them and skip them).
    progress
        Show a progress bar over runs.

    Returns
    -------
    SweepOutcome
        Counts of what ran, was skipped and failed, and the store to read (``.frame``).

    Raises
    ------
    ValueError
        If there are no cases, two cases are the same run, or an option is invalid.
    """
    started = time.perf_counter()
    items = _cases(cases)
    if not isinstance(retry_failed, bool):
        raise ValueError(f"sweep retry_failed must be True or False, got {retry_failed!r}")
    runner = make_executor(executor, workers=workers, scheduler=scheduler)
    disk = (
        store if isinstance(store, Store) else None if store is None else Store(store, create=True)
    )
    where = None if disk is None else str(disk.path.resolve())
    git = git_revision()
    specs: list[RunSpec] = []
    seen: dict[str, int] = {}
    for i, case in enumerate(items):
        spec = make_spec(
            case.scenario,
            case.labels,
            position=i,
            store=where,
            git=git,
            replace_failed=retry_failed,
        )
        if spec.run_id in seen:
            raise ValueError(
                f"sweep cases {seen[spec.run_id]} and {i} are the same run ({spec.run_id}); "
                f"give the scenarios different names or seeds"
            )
        seen[spec.run_id] = i
        specs.append(spec)
    memory = MemoryStore() if disk is None else None
    out: Store = disk if disk is not None else memory  # type: ignore[assignment]
    stored = disk.status() if disk is not None else {}
    if disk is not None:
        disk.remove_stale_partials()
    todo = [
        s
        for s in specs
        if s.run_id not in stored or (retry_failed and stored[s.run_id] == "failed")
    ]
    skipped = [s.run_id for s in specs if s.run_id in stored and s not in todo]
    failed = [r for r in skipped if stored[r] == "failed"]
    ran: list[str] = []
    described = "nothing to run"
    bar = tqdm(
        total=len(specs), initial=len(skipped), desc="sweep", unit="run", disable=not progress
    )
    try:
        if todo:
            results = runner.map_unordered(execute, todo, keys=[s.run_id for s in todo])
            described = runner.describe()
            for i, value in results:
                record = _settle(todo[i], value, disk, memory)
                ran.append(record["run_id"])
                if record["status"] == "failed":
                    failed.append(record["run_id"])
                    bar.set_postfix(failed=len(failed))
                bar.update(1)
    finally:
        bar.close()
        if runner is not executor:
            runner.close()
    order = {s.run_id: i for i, s in enumerate(specs)}
    return SweepOutcome(
        tuple(s.run_id for s in specs),
        tuple(sorted(ran, key=order.__getitem__)),
        tuple(skipped),
        tuple(sorted(failed, key=order.__getitem__)),
        out,
        described,
        time.perf_counter() - started,
    )


def _settle(
    spec: RunSpec, value: Any, disk: Store | None, memory: MemoryStore | None
) -> dict[str, Any]:
    """Record one completion; return the run's record as it is stored."""
    if isinstance(value, Exception):  # the executor lost the run (worker died, ...)
        text = "".join(traceback.format_exception_only(type(value), value)).strip()
        record = record_of(spec, f"executor error: {text}")
        if disk is not None:
            disk.publish(record, None, replace_failed=spec.replace_failed)
            return disk.record(spec.run_id) or record
        assert memory is not None
        memory.add(record, None)
        return record
    if memory is not None:
        memory.add(value.record, value.results)
    stored: dict[str, Any] = value.record
    return stored


class _CallableModule(types.ModuleType):
    """``simfl.sweep`` is this module and, called, its :func:`sweep` function."""

    def __call__(
        self,
        cases: Iterable[Case] | Iterable[Scenario] | Scenario | Case,
        **options: Any,
    ) -> SweepOutcome:
        return sweep(cases, **options)


sys.modules[__name__].__class__ = _CallableModule
