"""One run of a sweep, as a worker sees it: what to run, the run itself, and its provenance.

The sweep turns every case into a :class:`RunSpec` (the scenario pickled with ``cloudpickle``,
so classes defined in a scenario file or a notebook travel by value to any worker), and an
executor calls :func:`execute` on a worker. :func:`execute` runs the scenario, catches anything
it raises, and writes the run into the store itself, so that only a small record travels back
to the sweep (never the model).
"""

from __future__ import annotations

import dataclasses
import hashlib
import pickle
import platform
import re
import socket
import subprocess
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import cloudpickle
import numpy as np

from simfl.engine import run, simfl_version
from simfl.results import Results
from simfl.scenario import Scenario
from simfl.sweeps import claims
from simfl.sweeps.fingerprint import defining_fields, fingerprint
from simfl.sweeps.identity import code_digest, code_parts
from simfl.sweeps.integrity import StoreError
from simfl.sweeps.store import Store

__all__ = ["RunOutcome", "RunSpec", "execute", "git_revision", "make_spec", "scenario_fingerprint"]

#: What :func:`make_spec` already worked out, for all seeds of a scenario: the identities of its
#: class and of its fields other than the seed -> (fingerprint, payload, error, code parts, that
#: class and those fields, kept alive so that no id is reused).
Prepared = dict[tuple[int, ...], tuple[str, bytes, str | None, dict[str, str], tuple[Any, ...]]]


@dataclass(frozen=True)
class RunSpec:
    """Everything a worker needs for one run.

    Attributes
    ----------
    run_id
        The run's directory name in the store: ``<name>-<fingerprint[:12]>-s<seed>``.
    payload
        The :class:`~simfl.Scenario`, pickled with ``cloudpickle``; its seed may be another
        (runs that differ only in their seed can share one payload): the run's seed is
        ``info["seed"]``.
    info
        The run's record before it runs: ``name``, ``seed``, ``labels``, ``position``,
        ``fingerprint``, ``code`` (the digest of the code behind the run) and ``code_parts``
        (its digest per piece: :func:`~simfl.sweeps.identity.code_parts`), ``n_devices``,
        ``algorithm_name``, ``policy_name``, ``metrics``, ``goals``, ``git_revision``.
    store
        Where the worker writes the run (``None``: it returns the results instead).
    replace_failed
        Replace a stored ``failed`` record of this run.
    supersede
        Replace a stored run of this id whose ``code`` differs from ``info["code"]`` (or was
        not recorded), moving it into the store's ``.superseded/``.
    error
        Why the scenario cannot run anywhere (it cannot be pickled or fingerprinted; then
        ``payload`` is empty): :func:`execute` records the run ``failed`` with this error.
    sweep
        The token of the sweep the run belongs to: its claim on the run in the store
        (:mod:`simfl.sweeps.claims`) says so, so that the sweep takes over its own claim when
        the executor runs the run again after losing its worker.
    """

    run_id: str
    payload: bytes
    info: dict[str, Any]
    store: str | None = None
    replace_failed: bool = False
    error: str | None = None
    supersede: bool = False
    sweep: str = ""


@dataclass(frozen=True)
class RunOutcome:
    """What a worker sends back: the run's record, and its results only when there is no store.

    ``fresh`` is false when the run was found already stored (a Dask task re-run after its
    worker was lost, or another sweep on the store stored it first), so it was not counted
    twice. ``claimed_by`` names the holder of another sweep's claim on the run (see
    :mod:`simfl.sweeps.claims`) when the run was left to it: then nothing ran and ``record``
    holds only the ``run_id``.
    """

    record: dict[str, Any]
    results: Results | None = None
    fresh: bool = True
    claimed_by: str | None = None


def scenario_fingerprint(scenario: Scenario) -> str:
    """SHA-256 of everything that defines ``scenario`` except its seed (name included).

    Fields added to :class:`~simfl.scenario.Scenario` after the first fingerprints are left out
    while they hold their default (:func:`~simfl.sweeps.fingerprint.defining_fields`), so that
    stores keep their run ids.
    """
    fields = defining_fields(scenario)
    fields.pop("seed")
    return fingerprint({"scenario": type(scenario).__qualname__, **fields})


def _label(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return value.item() if isinstance(value, np.generic) else str(value)


def make_spec(
    scenario: Scenario,
    labels: dict[str, Any],
    *,
    position: int = 0,
    store: str | None = None,
    git: str | None = None,
    replace_failed: bool = False,
    prepared: Prepared | None = None,
) -> RunSpec:
    """The :class:`RunSpec` of ``scenario`` with its grid ``labels`` (JSON-able values).

    Never raises for a scenario that cannot be fingerprinted or pickled: its spec carries the
    ``error``, so that the sweep records that run ``failed`` and runs the others. Specs made
    with the same ``prepared`` dict fingerprint and pickle a scenario once for all its seeds:
    scenarios whose other fields are the same objects (``dataclasses.replace(base, seed=s)``)
    share one payload.
    """
    fields = tuple(
        getattr(scenario, f.name) for f in dataclasses.fields(scenario) if f.name != "seed"
    )
    alive = (type(scenario), *fields)
    key = tuple(id(v) for v in alive)
    prepared = {} if prepared is None else prepared
    if key not in prepared:
        prepared[key] = (*_prepare(scenario, fields), code_parts(scenario), alive)
    fp, payload, error, parts, _ = prepared[key]
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", scenario.name).strip("._-")[:48] or "run"
    task = scenario.task
    info = {
        "name": scenario.name,
        "seed": scenario.seed,
        "labels": {str(k): _label(v) for k, v in labels.items()},
        "position": position,
        "fingerprint": fp,
        "code": code_digest(parts),
        "code_parts": dict(parts),
        "n_devices": scenario.fleet.size,
        "algorithm_name": scenario.algorithm.name,
        "policy_name": scenario.policy.name,
        "metrics": list(task.metrics) if task is not None else [],
        "goals": dict(task.goals) if task is not None else {},
        "git_revision": git,
    }
    return RunSpec(
        f"{slug}-{fp[:12]}-s{scenario.seed}", payload, info, store, replace_failed, error
    )


def _prepare(scenario: Scenario, fields: tuple[Any, ...]) -> tuple[str, bytes, str | None]:
    """Fingerprint and payload of ``scenario``, or why it cannot run (then no payload).

    ``fields`` are its values other than the seed: a scenario that cannot be fingerprinted
    gets a stand-in from their repr (memory addresses removed), the same for all its seeds.
    """
    try:
        fp = scenario_fingerprint(scenario)
    except Exception as exc:  # e.g. an opaque object whose repr is a memory address
        text = re.sub(r" at 0x[0-9a-fA-F]+", "", f"{type(scenario).__qualname__}{fields!r}")
        stand_in = hashlib.sha256(f"unfingerprintable:{text}".encode()).hexdigest()
        return stand_in, b"", f"cannot fingerprint the scenario (run ids need one): {_line(exc)}"
    return (fp, *_pickle(scenario))


def _pickle(scenario: Scenario) -> tuple[bytes, str | None]:
    """The scenario pickled with cloudpickle, or no bytes and why it cannot be pickled."""
    try:
        return cloudpickle.dumps(scenario), None
    except Exception as exc:
        culprit, problem = "the scenario", _line(exc)
    for f in dataclasses.fields(scenario):  # name the field that cannot be pickled
        try:
            cloudpickle.dumps(getattr(scenario, f.name))
        except Exception as exc:
            culprit, problem = f"Scenario.{f.name}", _line(exc)
            break
    return b"", (
        f"cannot send the scenario to a worker: {culprit} cannot be pickled ({problem}); "
        f"scenarios travel pickled with cloudpickle, so they must not hold locks, open "
        f"files, connections or other process-bound objects"
    )


def _line(exc: BaseException) -> str:
    """``Type: message`` of an exception, on one line."""
    return " ".join(traceback.format_exception_only(type(exc), exc)).strip().replace("\n", " ")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def record_of(
    spec: RunSpec,
    error: str | None,
    *,
    started: str | None = None,
    seconds: float | None = None,
    results: Results | None = None,
) -> dict[str, Any]:
    """The provenance record of a run: ``failed`` if ``error`` is given, else ``done``."""
    meta = results.meta if results is not None else {}
    return {
        **spec.info,
        "run_id": spec.run_id,
        "status": "done" if error is None else "failed",
        "error": error,
        "simfl_version": simfl_version(),
        "python": platform.python_version(),
        "started": started or _now(),
        "finished": _now(),
        "host": socket.gethostname(),
        "host_seconds": seconds,
        "sim_time": meta.get("sim_time"),
        "n_rounds": 0 if results is None else len(results.rounds),
        "stop_reason": meta.get("stop_reason"),
    }


def execute(spec: RunSpec, report: Callable[[float], None] | None = None) -> RunOutcome:
    """Run one spec and store it; never raises for a failing scenario (it is recorded failed).

    A run that raises (even while the scenario is unpickled or built), that ``simfl.run``
    records as an error, or whose spec carries an ``error`` (a scenario that could not be
    pickled) is stored with status ``failed``, its traceback or error message, and whatever
    rows it produced. ``KeyboardInterrupt`` is not recorded: the run stays to do.

    ``report``, if given, is told the share of the run done after every aggregation
    (``simfl.run(progress=report)``); the sweep's bar shows it.

    With a store, the run is claimed first (:mod:`simfl.sweeps.claims`): a run claimed by
    another sweep is left to it (``RunOutcome.claimed_by``), and one stored meanwhile is not
    run again.

    Raises
    ------
    StoreWriteError
        If the run cannot be written into the store (a full disk, ...): a fault of the
        machine, so the run is not recorded at all and the next sweep runs it.
    """
    store = None
    if spec.store is not None:
        try:
            store = Store(spec.store)
        except ValueError as exc:
            raise RuntimeError(
                f"the worker on {socket.gethostname()} cannot open the store {spec.store} ({exc}); "
                f"workers write runs into it, so it must be on a filesystem they all share, at "
                f"the same path"
            ) from None
    if store is None:
        return _compute(spec, report, None)
    stored = _stored(store, spec)
    if stored is not None:
        return RunOutcome(stored, fresh=False)
    claim = claims.take(store.runs_dir, spec.run_id, spec.sweep)
    if not isinstance(claim, claims.Claim):
        return RunOutcome({"run_id": spec.run_id}, fresh=False, claimed_by=str(claim))
    with claim:
        stored = _stored(store, spec)  # published by another sweep before the claim was taken
        if stored is not None:
            return RunOutcome(stored, fresh=False)
        return _compute(spec, report, store)


def _stored(store: Store, spec: RunSpec) -> dict[str, Any] | None:
    """The stored record of ``spec``'s run, if it is not to be run (again)."""
    try:
        stored = store.record(spec.run_id)
    except StoreError:  # damaged since the sweep's check: run it again, publish replaces it
        return None
    if stored is not None and not _replaces(spec, stored):
        return stored
    return None


def _compute(
    spec: RunSpec, report: Callable[[float], None] | None, store: Store | None
) -> RunOutcome:
    """Run ``spec`` and publish it into ``store`` (without one: return its results)."""
    started, clock = _now(), time.perf_counter()
    results: Results | None = None
    error = spec.error
    try:
        if error is None:
            scenario: Scenario = pickle.loads(spec.payload)
            if scenario.seed != spec.info["seed"]:  # a payload shared by the sweep's seeds
                scenario = dataclasses.replace(scenario, seed=spec.info["seed"])
            results = run(scenario, progress=False if report is None else report)
    except Exception:
        error = traceback.format_exc()
    if results is not None:
        if results.meta.get("status") == "interrupted":
            raise KeyboardInterrupt
        if not results.ok:
            error = str(results.meta.get("error") or f"run ended {results.meta.get('status')}")
        results = dataclasses.replace(results, state=None)
    record = record_of(
        spec, error, started=started, seconds=time.perf_counter() - clock, results=results
    )
    if store is None:
        return RunOutcome(record, results)
    if store.publish(record, results, replace_failed=spec.replace_failed, supersede=spec.supersede):
        return RunOutcome(record)
    return RunOutcome(store.record(spec.run_id) or record, fresh=False)


def _replaces(spec: RunSpec, stored: dict[str, Any]) -> bool:
    """Whether ``spec`` is to replace the stored run of its id (else that run stands)."""
    if spec.supersede and stored.get("code") != spec.info.get("code"):
        return True
    return stored["status"] == "failed" and spec.replace_failed


def git_revision(path: str | Path | None = None) -> str | None:
    """The git commit of the working tree at ``path`` (default: the current directory).

    ``+dirty`` is appended if tracked files changed; ``None`` outside git or without git.
    """
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=path, capture_output=True, text=True, timeout=10
        )
        if head.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=path,
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
