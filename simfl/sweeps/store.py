"""A results store on disk: one directory per run, published atomically, read as tidy frames.

Layout::

    STORE/
      simfl-store.json                 marks the directory as a store (format version)
      runs/<run_id>/run.json           provenance: labels, seed, fingerprint, status, error, ...
      runs/<run_id>/rounds.parquet     the run's Results (Results.save layout; absent when the
      runs/<run_id>/clients.parquet    run failed before it produced any rows)
      runs/<run_id>/meta.json

A run is written into a hidden ``runs/.partial-...`` directory and renamed to
``runs/<run_id>`` in one step, so a run directory that exists is complete: a sweep killed at any
moment loses at most the runs in flight and never leaves a half-written run behind. If two
workers finish the same run (a Dask task re-run after its worker was lost), the second rename
fails and its copy is discarded, so every run is stored exactly once.

>>> # store = Store("runs/sweep")
>>> # store.rounds()          # tidy rounds of every finished run (pandas / seaborn)
>>> # store.runs()            # one row of provenance per run
>>> # store.clients(run_id)   # the device jobs of one run
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import socket
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from simfl.compare import collect
from simfl.results import Results

__all__ = ["STATUSES", "MemoryStore", "Store"]

FORMAT = 1
_MARKER = "simfl-store.json"
#: Status of a stored run: ``done`` (the run ended normally) or ``failed`` (it raised, recorded
#: an error, or its worker was lost; ``error`` says why).
STATUSES = ("done", "failed")
_PARTIAL = ".partial-"
#: Provenance columns that legitimately differ between two executions of the same run.
VOLATILE = ("started", "finished", "host", "host_seconds", "git_revision", "simfl_version")


class Store:
    """A directory of runs written by :func:`simfl.sweep` (see the module docstring).

    Parameters
    ----------
    path
        The store directory.
    create
        Create the store if ``path`` does not exist or is an empty directory.

    Raises
    ------
    ValueError
        If ``path`` is not a store (and ``create`` is false, or it is a non-empty directory
        that is not a store).
    """

    def __init__(self, path: str | os.PathLike[str], *, create: bool = False) -> None:
        self.path = Path(path)
        marker = self.path / _MARKER
        if not marker.is_file():
            empty = not self.path.exists() or (self.path.is_dir() and not any(self.path.iterdir()))
            if not create:
                raise ValueError(f"{self.path} is not a simfl results store (no {_MARKER})")
            if not empty:
                raise ValueError(
                    f"store {self.path} must be an empty or new directory, or an existing simfl "
                    f"store; it holds other files"
                )
            (self.path / "runs").mkdir(parents=True, exist_ok=True)
            text = json.dumps({"format": FORMAT, "kind": "simfl results store"}) + "\n"
            _write_atomic(marker, text)
        fmt = json.loads(marker.read_text()).get("format")
        if fmt != FORMAT:
            raise ValueError(f"store {self.path} has format {fmt!r}; this simfl reads {FORMAT}")
        self.runs_dir = self.path / "runs"

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r}: {len(self.records())} runs)"

    # ----------------------------------------------------------------- reading
    def records(self) -> list[dict[str, Any]]:
        """The ``run.json`` of every stored run, ordered by sweep position, then run id."""
        out = []
        for entry in self.runs_dir.iterdir():
            record = self.record(entry.name) if not entry.name.startswith(".") else None
            if record is not None:
                out.append(record)
        return sorted(out, key=lambda r: (r.get("position", 0), r["run_id"]))

    def record(self, run_id: str) -> dict[str, Any] | None:
        """The provenance of one run, or ``None`` if it is not stored."""
        try:
            record: dict[str, Any] = json.loads((self.runs_dir / run_id / "run.json").read_text())
        except FileNotFoundError:
            return None
        return record

    def status(self) -> dict[str, str]:
        """``{run_id: status}`` of every stored run."""
        return {r["run_id"]: r["status"] for r in self.records()}

    def runs(self, run_ids: Sequence[str] | None = None) -> pd.DataFrame:
        """Provenance of the runs, one row each.

        Columns ``run_id``, ``label`` (scenario name), ``seed``, one per grid label, then
        ``status``, ``error``, and the fingerprint, versions, times and host.
        """
        return _runs_frame(self._select(run_ids))

    def rounds(self, run_ids: Sequence[str] | None = None, *, failed: bool = False) -> pd.DataFrame:
        """The tidy frame of all runs: their rounds with labels, for pandas and seaborn.

        Columns ``label`` (scenario name) and ``seed``, the rounds of each run preceded by its
        initial row (``round=-1``, ``time=0``, see :func:`simfl.compare.collect`), one column
        per grid label and ``run_id``. Only ``done`` runs unless ``failed=True`` (failed runs
        that recorded rows up to their error).
        """
        frames = []
        for record in self._select(run_ids):
            if record["status"] != "done" and not (failed and record.get("has_results")):
                continue
            res = Results(
                self._table(record["run_id"], "rounds"), pd.DataFrame(), self._meta(record)
            )
            frame = collect({record["name"]: [res]}, **_axes(record))
            frame["run_id"] = record["run_id"]
            frames.append(frame)
        if not frames:
            raise ValueError(f"{self} has no finished runs to read")
        return pd.concat(frames, ignore_index=True)

    def clients(self, run_ids: str | Sequence[str] | None = None) -> pd.DataFrame:
        """Device jobs (``Results.clients``) of finished runs (all, or the ones given).

        ``label``, ``seed``, the grid labels and ``run_id`` come first.
        """
        ids = [run_ids] if isinstance(run_ids, str) else run_ids
        frames = []
        for record in self._select(ids):
            if record["status"] != "done":
                continue
            jobs = self._table(record["run_id"], "clients")
            front = {"label": record["name"], "seed": record["seed"], **_axes(record)}
            for i, (k, v) in enumerate({**front, "run_id": record["run_id"]}.items()):
                jobs.insert(i, k, v)
            frames.append(jobs)
        if not frames:
            raise ValueError(f"{self} has no finished runs to read")
        return pd.concat(frames, ignore_index=True)

    def results(self, run_id: str) -> Results:
        """The stored :class:`~simfl.results.Results` of one run (without the final state)."""
        if self.record(run_id) is None:
            raise ValueError(f"run {run_id!r} is not in {self.path}")
        return Results.load(self.runs_dir / run_id)

    def _select(self, run_ids: Sequence[str] | None) -> list[dict[str, Any]]:
        if run_ids is None:
            return self.records()
        out = []
        for run_id in run_ids:
            record = self.record(run_id)
            if record is None:
                raise ValueError(f"run {run_id!r} is not in {self.path}")
            out.append(record)
        return out

    def _table(self, run_id: str, name: str) -> pd.DataFrame:
        return pd.read_parquet(self.runs_dir / run_id / f"{name}.parquet")

    def _meta(self, record: dict[str, Any]) -> dict[str, Any]:
        meta: dict[str, Any] = json.loads(
            (self.runs_dir / record["run_id"] / "meta.json").read_text()
        )
        return meta

    # ----------------------------------------------------------------- writing
    def publish(
        self, record: dict[str, Any], results: Results | None, *, replace_failed: bool = False
    ) -> bool:
        """Store one run atomically; whether this copy is the one stored.

        If the run is already stored, the new copy is discarded (every run is stored exactly
        once), except that a ``failed`` record is replaced when ``replace_failed``.
        """
        record = {**record, "has_results": results is not None}
        host, pid, token = socket.gethostname(), os.getpid(), uuid.uuid4().hex[:8]
        tmp = self.runs_dir / f"{_PARTIAL}{record['run_id']}+{host}+{pid}+{token}"
        final = self.runs_dir / record["run_id"]
        try:
            tmp.mkdir(parents=True)
            if results is not None:
                results.save(tmp)
            (tmp / "run.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
            _sync(tmp)
            if _rename_dir(tmp, final):
                return True
            stored = self.record(record["run_id"])
            if stored is None or stored["status"] != "failed" or not replace_failed:
                return False
            trash = final.with_name(f".trash-{final.name}+{token}")
            with contextlib.suppress(FileNotFoundError):  # another worker replaced it already
                os.rename(final, trash)
            shutil.rmtree(trash, ignore_errors=True)
            return _rename_dir(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def remove_stale_partials(self) -> int:
        """Delete partial run directories left on this host by processes that no longer exist.

        Partial directories of other hosts (remote Dask workers) are left alone; they are never
        read as runs. Returns how many were removed.
        """
        host = socket.gethostname()
        removed = 0
        for entry in self.runs_dir.glob(f"{_PARTIAL}*"):
            parts = entry.name[len(_PARTIAL) :].split("+")
            if len(parts) != 4 or parts[1] != host or not parts[2].isdigit():
                continue
            if not _alive(int(parts[2])):
                shutil.rmtree(entry, ignore_errors=True)
                removed += 1
        return removed


def _sync(directory: Path) -> None:
    """Flush the files of ``directory`` and the directory itself to disk before it is renamed."""
    for path in (*directory.iterdir(), directory):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        except OSError:  # some filesystems cannot sync a directory; the rename still is atomic
            pass
        finally:
            os.close(fd)


def _rename_dir(src: Path, dst: Path) -> bool:
    """Rename ``src`` to ``dst`` unless ``dst`` exists (atomic on POSIX); whether it did."""
    try:
        os.rename(src, dst)
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
            return False
        raise
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
    tmp.write_text(text)
    os.replace(tmp, path)


def _axes(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.get("labels", {}).items() if k not in ("seed", "label")}


_FIRST = ("run_id", "label", "seed")
_LAST = (
    "status",
    "error",
    "n_devices",
    "algorithm_name",
    "policy_name",
    "n_rounds",
    "sim_time",
    "stop_reason",
    "fingerprint",
    "simfl_version",
    "git_revision",
    "started",
    "finished",
    "host",
    "host_seconds",
)


def _runs_frame(records: Iterable[dict[str, Any]]) -> pd.DataFrame:
    rows = []
    for r in records:
        row: dict[str, Any] = {"run_id": r["run_id"], "label": r["name"], "seed": r["seed"]}
        row.update(_axes(r))
        row.update({k: r.get(k) for k in _LAST if k not in row})
        rows.append(row)
    if not rows:
        return pd.DataFrame(columns=[*_FIRST, *_LAST])
    frame = pd.DataFrame(rows)
    with contextlib.suppress(ValueError, TypeError):
        for col in ("started", "finished"):
            frame[col] = pd.to_datetime(frame[col], utc=True, format="ISO8601")
    return frame


class MemoryStore(Store):
    """The runs of a sweep without a store directory, kept in memory (same reading methods)."""

    def __init__(self) -> None:
        self.path = Path("<memory>")
        self._records: dict[str, dict[str, Any]] = {}
        self._results: dict[str, Results] = {}

    def add(self, record: dict[str, Any], results: Results | None) -> None:
        """Keep one run (replacing an earlier record of it)."""
        self._records[record["run_id"]] = {**record, "has_results": results is not None}
        if results is not None:
            self._results[record["run_id"]] = results

    def records(self) -> list[dict[str, Any]]:  # noqa: D102
        return sorted(self._records.values(), key=lambda r: (r.get("position", 0), r["run_id"]))

    def record(self, run_id: str) -> dict[str, Any] | None:  # noqa: D102
        return self._records.get(run_id)

    def results(self, run_id: str) -> Results:  # noqa: D102
        if run_id not in self._results:
            raise ValueError(f"run {run_id!r} has no results")
        return self._results[run_id]

    def _table(self, run_id: str, name: str) -> pd.DataFrame:
        frame: pd.DataFrame = getattr(self._results[run_id], name)
        return frame.copy()

    def _meta(self, record: dict[str, Any]) -> dict[str, Any]:
        return self._results[record["run_id"]].meta
