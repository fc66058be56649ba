"""A results store on disk: one directory per run, published atomically, read as tidy frames.

Layout::

    STORE/
      simfl-store.json                 marks the directory as a store (format version)
      runs/<run_id>/run.json           provenance: labels, seed, fingerprint, status, error,
                                       the byte sizes of the files below, ...
      runs/<run_id>/rounds.parquet     the run's Results (Results.save layout; absent when the
      runs/<run_id>/clients.parquet    run failed before it produced any rows)
      runs/<run_id>/meta.json
      runs/.claim-<run_id>             the claim of the sweep computing the run
                                       (:mod:`simfl.sweeps.claims`)
      .quarantine/<run_id>-<UTC time>/ unreadable run folders moved aside (never deleted)
      .superseded/<run_id>-<UTC time>/ runs replaced by a run of the same values computed by
                                       other code (never deleted, never read)

A run's ``run.json`` records the code behind it (``code``, ``code_parts``: see
:mod:`simfl.sweeps.identity`). A sweep reruns a stored run whose code differs from today's and
:meth:`Store.publish` moves the old one into ``.superseded/`` as the new one takes its place, so
that every reader sees one version of each run. Runs stored before code was recorded have no
``code``: they read as any other.

A run is written into a hidden ``runs/.partial-...`` directory and renamed to
``runs/<run_id>`` in one step, so a run directory that exists is complete: a sweep killed at any
moment loses at most the runs in flight and never leaves a half-written run behind. If two
workers finish the same run (a Dask task re-run after its worker was lost), the second rename
fails and its copy is discarded, so every run is stored exactly once. Files get the permissions
of ordinary files (``0o666`` less the umask: ``0o644`` under the usual umask ``022``), so that
others sharing a store can read it.

**The store checks itself** (:mod:`simfl.sweeps.integrity`). A file that cannot be read raises
:class:`~simfl.sweeps.integrity.StoreError`, whose message starts with the file's path. A run
folder whose ``run.json``, ``meta.json`` or Parquet files are missing, cut short or unreadable
is left out of :meth:`Store.records`, :meth:`~Store.runs`, :meth:`~Store.rounds` and
:meth:`~Store.clients` with a :class:`~simfl.sweeps.integrity.StoreWarning` that names it;
:meth:`Store.check` lists such runs, and with ``repair=True`` moves them into
``.quarantine/`` so that the next sweep runs them again (every sweep does this before it
starts, and ``simfl store check DIR --repair`` does it from the shell).

The marker ``simfl-store.json`` is never rewritten: if it is unreadable, opening the store
raises a one-line :class:`~simfl.sweeps.integrity.StoreError` naming it and what it should
hold. Repairing it is not provably safe (an empty or cut-short marker does not say which
format the store has, and a store of another format must not be read as this one), so the
user restores it. Creating a store is safe when several processes create the same new store at
once: the marker is written to a private file and hard-linked into place, which fails if
another process got there first, and a store that appears meanwhile is opened, not refused.

>>> # store = Store("runs/sweep")
>>> # store.rounds()          # tidy rounds of every finished run (pandas / seaborn)
>>> # store.runs()            # one row of provenance per run
>>> # store.clients(run_id)   # the device jobs of one run
>>> # store.check()           # the runs that cannot be read, and why
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import socket
import uuid
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from simfl.compare import collect
from simfl.results import Results
from simfl.sweeps.integrity import (
    MARKER,
    BadRun,
    StoreError,
    StoreWarning,
    bad_run,
    check_marker,
    create_store,
    file_sizes,
    match_mode,
    read_json,
    read_run,
)

__all__ = [
    "QUARANTINE",
    "STATUSES",
    "SUPERSEDED",
    "BadRun",
    "MemoryStore",
    "Store",
    "StoreError",
    "StoreWarning",
    "StoreWriteError",
]

#: Status of a stored run: ``done`` (the run ended normally) or ``failed`` (it raised, recorded
#: an error, or its worker was lost; ``error`` says why).
STATUSES = ("done", "failed")
#: The folder of a store that unreadable runs are moved into.
QUARANTINE = ".quarantine"
#: The folder of a store that runs replaced by runs of other code are moved into.
SUPERSEDED = ".superseded"
_PARTIAL = ".partial-"
#: Provenance columns that legitimately differ between two executions of the same run.
VOLATILE = ("started", "finished", "host", "host_seconds", "git_revision", "simfl_version")


class StoreWriteError(OSError):
    """Writing into a store failed: a fault of the machine, not of the run being written.

    A full disk (``ENOSPC``), a quota (``EDQUOT``), a file size limit (``EFBIG``), a
    read-only filesystem (``EROFS``) or any other ``OSError`` of the store's write path. The
    run is left unstored (the next sweep runs it), never recorded ``failed``; the sweep stops
    and raises this error, with ``errno`` and ``filename`` of the ``OSError`` behind it and, once
    the sweep stopped, ``outcome``: its :class:`~simfl.sweeps.SweepOutcome` so far (``None``
    outside a sweep).
    """

    outcome: Any = None

    @classmethod
    def of(cls, store: Path, exc: OSError) -> StoreWriteError:
        """The error of writing into ``store`` that failed with ``exc`` (message on one line)."""
        if isinstance(exc, StoreWriteError):
            return exc
        reason = " ".join(str(exc).split())
        return cls(exc.errno, f"cannot write into the store {store}: {reason}", exc.filename)

    def __str__(self) -> str:
        return str(self.strerror)


class Store:
    """A directory of runs written by :func:`simfl.sweep` (see the module docstring).

    Parameters
    ----------
    path
        The store directory.
    create
        Create the store if ``path`` does not exist or is an empty directory (several
        processes may create the same store at once).

    Raises
    ------
    ValueError
        If ``path`` is not a store (and ``create`` is false, or it is a non-empty directory
        that is not a store).
    StoreError
        If the marker ``simfl-store.json`` cannot be read or has another format (a
        ``ValueError`` naming the file).
    """

    def __init__(self, path: str | os.PathLike[str], *, create: bool = False) -> None:
        self.path = Path(path)
        self.runs_dir = self.path / "runs"
        marker = self.path / MARKER
        if create and not marker.exists():
            create_store(self.path)
        if not marker.exists():
            raise ValueError(f"{self.path} is not a simfl results store (no {MARKER})")
        check_marker(marker)

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r}: {len(self.records())} runs)"

    # ----------------------------------------------------------------- reading
    def records(self) -> list[dict[str, Any]]:
        """The ``run.json`` of every readable run, ordered by sweep position, then run id.

        Runs that cannot be read are left out with a :class:`StoreWarning` naming them.
        """
        good, bad = self._scan()
        self._warn(bad)
        return sorted(good, key=lambda r: (r.get("position", 0), r["run_id"]))

    def record(self, run_id: str) -> dict[str, Any] | None:
        """The provenance of one run, or ``None`` if it is not stored.

        Raises
        ------
        StoreError
            If the run's folder exists but the run cannot be read (naming the file).
        """
        folder = self.runs_dir / run_id
        if not os.path.lexists(folder):
            return None
        return read_run(folder)

    def check(self, repair: bool = False) -> list[BadRun]:
        """The run folders that cannot be read, and why; with ``repair``, moved aside.

        A folder is moved to ``.quarantine/<run_id>-<UTC time>/`` (never deleted), so the
        next sweep runs it again. A folder that is gone or readable by the time it would be
        moved (another process repaired or replaced it) is not listed.

        Parameters
        ----------
        repair
            Move the unreadable runs aside. Those that cannot be moved (permissions, ...)
            are listed with ``moved_to=None`` and the reason.

        Returns
        -------
        list of BadRun
            One per unreadable run folder, by folder name.
        """
        _, bad = self._scan()
        if not repair:
            return bad
        moved = (self._quarantine(b) for b in bad)
        return [b for b in moved if b is not None]

    def status(self) -> dict[str, str]:
        """``{run_id: status}`` of every stored run."""
        return {r["run_id"]: r["status"] for r in self.records()}

    def runs(self, run_ids: Sequence[str] | None = None) -> pd.DataFrame:
        """Provenance of the runs, one row each.

        Columns ``run_id``, ``label`` (scenario name), ``seed``, one per grid label, then
        ``status``, ``error``, and the fingerprint, ``code`` (the first 12 hex digits of the
        code digest; ``None`` for runs stored before code was recorded), versions, times and
        host.
        """
        return _runs_frame(self._select(run_ids))

    def rounds(self, run_ids: Sequence[str] | None = None, *, failed: bool = False) -> pd.DataFrame:
        """The tidy frame of all runs: their rounds with labels, for pandas and seaborn.

        Columns ``label`` (scenario name), ``seed``, one column per grid label and ``run_id``
        come first, then the rounds of each run preceded by its initial row (``round=-1``,
        ``time=0``, see :func:`simfl.compare.collect`), as in :meth:`clients`. Only ``done``
        runs unless ``failed=True`` (failed runs
        that recorded rows up to their error). Runs that cannot be read are left out with a
        :class:`StoreWarning`.
        """
        frames, bad = [], []
        for record in self._select(run_ids):
            if record["status"] != "done" and not (failed and record.get("has_results")):
                continue
            try:
                rows, meta = self._table(record["run_id"], "rounds"), self._meta(record)
            except StoreError as exc:
                bad.append(bad_run(self.runs_dir / record["run_id"], exc))
                continue
            frame = collect({record["name"]: [Results(rows, pd.DataFrame(), meta)]})
            _insert_front(frame, {**_axes(record), "run_id": record["run_id"]}, at=2)
            frames.append(frame)
        self._warn(bad)
        if not frames:
            raise ValueError(f"{self} has no finished runs to read")
        return pd.concat(frames, ignore_index=True)

    def clients(self, run_ids: str | Sequence[str] | None = None) -> pd.DataFrame:
        """Device jobs (``Results.clients``) of finished runs (all, or the ones given).

        ``label``, ``seed``, the grid labels and ``run_id`` come first. Runs that cannot be
        read are left out with a :class:`StoreWarning`.
        """
        ids = [run_ids] if isinstance(run_ids, str) else run_ids
        frames, bad = [], []
        for record in self._select(ids):
            if record["status"] != "done":
                continue
            try:
                jobs = self._table(record["run_id"], "clients")
            except StoreError as exc:
                bad.append(bad_run(self.runs_dir / record["run_id"], exc))
                continue
            front = {"label": record["name"], "seed": record["seed"], **_axes(record)}
            _insert_front(jobs, {**front, "run_id": record["run_id"]}, at=0)
            frames.append(jobs)
        self._warn(bad)
        if not frames:
            raise ValueError(f"{self} has no finished runs to read")
        return pd.concat(frames, ignore_index=True)

    def results(self, run_id: str) -> Results:
        """The stored :class:`~simfl.results.Results` of one run (without the final state).

        Raises
        ------
        ValueError
            If the run is not stored; a :class:`StoreError` naming the file if it cannot be
            read.
        """
        if self.record(run_id) is None:
            raise ValueError(f"run {run_id!r} is not in {self.path}")
        folder = self.runs_dir / run_id
        try:
            return Results.load(folder)
        except Exception as exc:  # pyarrow's errors, OSError, JSON errors: name the run
            raise StoreError(folder, f"cannot be read ({exc})") from None

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
        path = self.runs_dir / run_id / f"{name}.parquet"
        try:
            return pd.read_parquet(path)
        except Exception as exc:  # pyarrow's errors and OSError: name the file
            raise StoreError(path, f"is not a readable Parquet file ({exc})") from None

    def _meta(self, record: dict[str, Any]) -> dict[str, Any]:
        return read_json(self.runs_dir / record["run_id"] / "meta.json")

    def _scan(self) -> tuple[list[dict[str, Any]], list[BadRun]]:
        """The records of the readable runs, and the run folders that cannot be read."""
        try:
            folders = sorted(e for e in self.runs_dir.iterdir() if not e.name.startswith("."))
        except FileNotFoundError:  # a store whose creator stopped before it made runs/
            return [], []
        good, bad = [], []
        for folder in folders:
            try:
                good.append(read_run(folder))
            except StoreError as exc:
                # read again: a failed run being replaced is briefly absent (see publish)
                with contextlib.suppress(StoreError):
                    good.append(read_run(folder))
                    continue
                if os.path.lexists(folder):
                    bad.append(bad_run(folder, exc))
        return good, bad

    def _warn(self, bad: list[BadRun]) -> None:
        if bad:
            warnings.warn(
                StoreWarning(
                    f"{self.path}: {len(bad)} run(s) cannot be read and are left out: "
                    + "; ".join(map(str, bad))
                    + f". `simfl store check {self.path} --repair` moves them aside; the next "
                    f"sweep runs them again"
                ),
                stacklevel=3,
            )

    def _quarantine(self, bad: BadRun) -> BadRun | None:
        """Move an unreadable run folder into ``.quarantine/``; ``None`` if there is no need.

        Returns the run with ``moved_to`` set, or unmoved with the reason it could not be
        moved; ``None`` if the folder is gone (moved by another process) or was readable after
        all (replaced meanwhile by a good copy, which is put back).
        """
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
        dest = self.path / QUARANTINE / f"{bad.run_id}-{stamp}"
        try:
            dest.parent.mkdir(exist_ok=True)
            os.rename(bad.folder, dest)
        except FileNotFoundError:
            return None
        except OSError as exc:
            return replace(bad, reason=f"{bad.reason}; it cannot be moved aside ({exc})")
        try:
            read_run(dest, run_id=bad.run_id)
        except StoreError:
            return replace(bad, moved_to=dest)
        _rename_dir(dest, bad.folder)  # a good copy: back in place (kept aside if one is there)
        return None

    # ----------------------------------------------------------------- writing
    def publish(
        self,
        record: dict[str, Any],
        results: Results | None,
        *,
        replace_failed: bool = False,
        supersede: bool = False,
    ) -> bool:
        """Store one run atomically; whether this copy is the one stored.

        If the run is already stored, the new copy is discarded (every run is stored exactly
        once), except that a ``failed`` record is replaced when ``replace_failed``, and a run
        whose ``code`` differs from this record's (or was not recorded) when ``supersede``:
        that run is moved into ``.superseded/<run_id>-<UTC time>/`` (one rename, never
        deleted). A stored folder of the run that cannot be read is moved into
        ``.quarantine/`` (with a :class:`StoreWarning`) and replaced by this copy.

        Raises
        ------
        StoreWriteError
            If writing fails (a full disk, ...): nothing of this copy is left in the store.
        """
        try:
            return self._publish(record, results, replace_failed, supersede)
        except OSError as exc:
            raise StoreWriteError.of(self.path, exc) from exc

    def _publish(
        self, record: dict[str, Any], results: Results | None, replace_failed: bool, supersede: bool
    ) -> bool:
        record = {**record, "has_results": results is not None}
        host, pid, token = socket.gethostname(), os.getpid(), uuid.uuid4().hex[:8]
        tmp = self.runs_dir / f"{_PARTIAL}{record['run_id']}+{host}+{pid}+{token}"
        final = self.runs_dir / record["run_id"]
        try:
            tmp.mkdir(parents=True)
            if results is not None:
                results.save(tmp)
                record["files"] = file_sizes(tmp)
            (tmp / "run.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
            match_mode(tmp / "run.json", (p for p in tmp.iterdir() if p.is_file()))
            _sync(tmp)
            if _rename_dir(tmp, final):
                return True
            try:
                stored = self.record(record["run_id"])
            except StoreError as exc:
                bad = self._quarantine(bad_run(final, exc))
                self._warn([] if bad is None else [bad])
                stored = None
            if stored is None:  # gone meanwhile, or moved aside just now
                return _rename_dir(tmp, final)
            if supersede and stored.get("code") != record.get("code"):
                self._set_aside(final, SUPERSEDED)
                return _rename_dir(tmp, final)
            if stored["status"] != "failed" or not replace_failed:
                return False
            trash = final.with_name(f".trash-{final.name}+{token}")
            with contextlib.suppress(FileNotFoundError):  # another worker replaced it already
                os.rename(final, trash)
            shutil.rmtree(trash, ignore_errors=True)
            return _rename_dir(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _set_aside(self, folder: Path, where: str) -> None:
        """Move a run folder into ``where/<run_id>-<UTC time>/`` (gone already: nothing)."""
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
        dest = self.path / where / f"{folder.name}-{stamp}"
        dest.parent.mkdir(exist_ok=True)
        with contextlib.suppress(FileNotFoundError):  # another worker replaced it already
            os.rename(folder, dest)

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


def _insert_front(frame: pd.DataFrame, columns: dict[str, Any], *, at: int) -> None:
    """Insert constant ``columns`` into ``frame``, in order, from position ``at``."""
    for i, (name, value) in enumerate(columns.items(), start=at):
        frame.insert(i, name, value)


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
    "code",
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
        code = r.get("code")
        last = {k: r.get(k) for k in _LAST} | {"code": code[:12] if isinstance(code, str) else None}
        row.update({k: v for k, v in last.items() if k not in row})
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

    def check(self, repair: bool = False) -> list[BadRun]:  # noqa: D102
        return []

    def results(self, run_id: str) -> Results:  # noqa: D102
        if run_id not in self._results:
            raise ValueError(f"run {run_id!r} has no results")
        return self._results[run_id]

    def _table(self, run_id: str, name: str) -> pd.DataFrame:
        frame: pd.DataFrame = getattr(self._results[run_id], name)
        return frame.copy()

    def _meta(self, record: dict[str, Any]) -> dict[str, Any]:
        return self._results[record["run_id"]].meta
