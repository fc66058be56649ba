"""A results store on disk: one directory per run, published atomically, read as tidy frames.

Layout::

    STORE/
      simfl-store.json                 marks the directory as a store (format version)
      runs/<run_id>/run.json           provenance: labels, seed, fingerprint, status, error,
                                       the byte sizes of the files below, the SHA-256 of
                                       meta.json, ...
      runs/<run_id>/rounds.parquet     the run's Results (Results.save layout; absent when the
      runs/<run_id>/clients.parquet    run failed before it produced any rows)
      runs/<run_id>/meta.json          ... and the SHA-256 of the two Parquet files
      runs/.claim-<run_id>             the claim of the sweep computing the run
                                       (:mod:`simfl.sweeps.claims`)
      .quarantine/<run_id>-<UTC time>/ unreadable run folders moved aside (never deleted)
      .superseded/<run_id>-<UTC time>/ runs replaced by a run of other code, or of older
                                       versions of a scenario (never deleted, never read)

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
folder whose ``run.json``, ``meta.json`` or Parquet files are missing, cut short or unreadable,
or whose ``run.json`` has a field of the wrong type or range (:mod:`simfl.sweeps.record`),
is left out of :meth:`Store.records`, :meth:`~Store.runs`, :meth:`~Store.rounds` and
:meth:`~Store.clients` with a :class:`~simfl.sweeps.integrity.StoreWarning` that names it;
:meth:`Store.check` lists such runs, and with ``repair=True`` moves them into
``.quarantine/`` so that the next sweep runs them again (every sweep does this before it
starts, and ``simfl store check DIR --repair`` does it from the shell).

What a store guarantees:

* **It verifies what it reads.** Every table :meth:`~Store.rounds`, :meth:`~Store.clients` and
  :meth:`~Store.results` return was checked against the SHA-256 written with it (``meta.json``
  lists those of the Parquet files, ``run.json`` that of ``meta.json``), so a changed byte
  leaves the run out with a warning, never changes a number. :meth:`Store.check` hashes every
  file (``verify=False``, ``simfl store check --fast``: sizes, footers and JSON only). A file
  is hashed at most once per process unless it changed.
* **It touches nothing outside itself.** A store whose ``runs/``, ``.quarantine/``,
  ``.superseded/`` or marker is a symbolic link is refused when opened, with one line naming
  it; every path it moves or writes is checked to lie inside it first. A run folder or file
  that is a link is a run that cannot be read; repairing moves the link itself, never what it
  points to. Run ids that are paths (``../x``) are not runs.
* **Reading it cannot hang or exhaust memory.** Files are opened without following links or
  waiting on FIFOs, and only regular files up to a cap are read (16 MiB of JSON, 4 GiB of
  Parquet): a FIFO, a device or a huge file is a run that cannot be read.
* **Reading it runs no code**: records are JSON, tables Parquet; nothing is unpickled.
* **Older versions are set aside, never deleted**: :meth:`Store.prune` (``simfl store prune``)
  moves the runs an edited scenario superseded into ``.superseded/``
  (:mod:`simfl.sweeps.versions` says which); readers never read ``.quarantine/`` or
  ``.superseded/``.

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
>>> # store.prune()           # set aside the runs of older versions of a scenario
"""

from __future__ import annotations

import contextlib
import errno
import io
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
from simfl.results.folder import MANIFEST, sha256
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
    read_table,
)
from simfl.sweeps.record import STATUSES
from simfl.sweeps.versions import SetAside, older_versions

__all__ = [
    "QUARANTINE",
    "STATUSES",
    "SUPERSEDED",
    "BadRun",
    "MemoryStore",
    "SetAside",
    "Store",
    "StoreError",
    "StoreWarning",
    "StoreWriteError",
]

#: The folder of a store that unreadable runs are moved into.
QUARANTINE = ".quarantine"
#: The folder of a store that runs replaced by runs of other code, or of older versions of a
#: scenario, are moved into.
SUPERSEDED = ".superseded"
#: The entries of a store that must be what they are, never symbolic links.
_LAYOUT = (("runs", True), (QUARANTINE, True), (SUPERSEDED, True), (MARKER, False))
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
        If the marker ``simfl-store.json`` cannot be read or has another format, or the
        marker, ``runs/``, ``.quarantine/`` or ``.superseded/`` is a symbolic link or not what
        it should be (a ``ValueError`` naming it).
    """

    def __init__(self, path: str | os.PathLike[str], *, create: bool = False) -> None:
        self.path = Path(path)
        self.runs_dir = self.path / "runs"
        marker = self.path / MARKER
        if create and not os.path.lexists(marker):
            create_store(self.path)
        if not os.path.lexists(marker):
            raise ValueError(f"{self.path} is not a simfl results store (no {MARKER})")
        self._check_layout()
        check_marker(marker)

    def _check_layout(self) -> None:
        """Refuse a store whose marker or folders are symbolic links (or not what they are).

        A store never follows a link: what it reads, moves and writes stays inside it.
        """
        for name, folder in _LAYOUT:
            entry = self.path / name
            if entry.is_symlink():
                raise StoreError(
                    entry,
                    f"is a symbolic link (to {os.readlink(entry)}); a store's {name} must be "
                    f"inside it, so this store is not used (simfl never follows the link)",
                )
            if folder and os.path.lexists(entry) and not entry.is_dir():
                raise StoreError(entry, f"is not a folder; a store's {name} must be one")

    def _inside(self, path: Path) -> Path:
        """``path`` after checking that the folder holding it lies inside the store."""
        self._check_layout()
        root = os.path.realpath(self.path)
        where = os.path.realpath(path.parent)
        if os.path.commonpath([root, where]) != root or path.name in ("", ".", ".."):
            raise StoreError(path, f"is outside the store {self.path}; it is not touched")
        return path

    def _folder(self, run_id: str) -> Path | None:
        """The folder of ``run_id`` under ``runs/``; ``None`` if that cannot be a run's name."""
        if not isinstance(run_id, str) or not run_id or run_id.startswith("."):
            return None
        if any(sep in run_id for sep in ("/", "\\", "\0")):
            return None
        return self.runs_dir / run_id

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
        folder = self._folder(run_id)
        if folder is None or not os.path.lexists(folder):
            return None
        return read_run(folder, verify=False)

    def check(self, repair: bool = False, *, verify: bool = True) -> list[BadRun]:
        """The run folders that cannot be read, and why; with ``repair``, moved aside.

        A folder is moved to ``.quarantine/<run_id>-<UTC time>/`` (never deleted), so the
        next sweep runs it again; an entry that is a symbolic link is moved as a link (what it
        points to is never touched). A folder that is gone or readable by the time it would be
        moved (another process repaired or replaced it) is not listed.

        Parameters
        ----------
        repair
            Move the unreadable runs aside. Those that cannot be moved (permissions, ...)
            are listed with ``moved_to=None`` and the reason.
        verify
            Check every file's SHA-256 against the one written with it (each file at most
            once per process); ``False`` checks sizes, Parquet footers and JSON only.

        Returns
        -------
        list of BadRun
            One per unreadable run folder, by folder name.
        """
        _, bad = self._scan(verify=verify)
        if not repair:
            return bad
        moved = (self._quarantine(b, verify=verify) for b in bad)
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
                rows, meta = self._table(record, "rounds"), self.run_meta(record)
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
                jobs = self._table(record, "clients")
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
            read or is not the file written with the run (its SHA-256).
        """
        record = self.record(run_id)
        if record is None:
            raise ValueError(f"run {run_id!r} is not in {self.path}")
        meta = self.run_meta(record)
        rounds, clients = self._table(record, "rounds"), self._table(record, "clients")
        return Results.from_tables(rounds, clients, meta)

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

    def _table(self, record: dict[str, Any], name: str) -> pd.DataFrame:
        """A verified Parquet table of a run (checked against its ``meta.json``)."""
        folder = self.runs_dir / record["run_id"]
        manifest = self.run_meta(record, manifest=True).get(MANIFEST)
        data = read_table(folder, f"{name}.parquet", manifest)
        try:
            return pd.read_parquet(io.BytesIO(data))
        except Exception as exc:  # pyarrow's errors: name the file
            path = folder / f"{name}.parquet"
            raise StoreError(path, f"is not a readable Parquet file ({exc})") from None

    def run_meta(self, record: dict[str, Any], *, manifest: bool = False) -> dict[str, Any]:
        """The verified ``meta.json`` of a stored run (with its manifest if ``manifest``)."""
        meta = read_json(
            self.runs_dir / record["run_id"] / "meta.json", sha=record.get("meta_sha256")
        )
        if manifest:
            return meta
        return {k: v for k, v in meta.items() if k != MANIFEST}

    def _scan(self, *, verify: bool = False) -> tuple[list[dict[str, Any]], list[BadRun]]:
        """The records of the readable runs, and the run folders that cannot be read."""
        self._check_layout()
        try:
            folders = sorted(e for e in self.runs_dir.iterdir() if not e.name.startswith("."))
        except FileNotFoundError:  # a store whose creator stopped before it made runs/
            return [], []
        good, bad = [], []
        for folder in folders:
            try:
                good.append(read_run(folder, verify=verify))
            except StoreError as exc:
                # read again: a failed run being replaced is briefly absent (see publish)
                with contextlib.suppress(StoreError):
                    good.append(read_run(folder, verify=verify))
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

    def _quarantine(self, bad: BadRun, *, verify: bool = True) -> BadRun | None:
        """Move an unreadable run folder into ``.quarantine/``; ``None`` if there is no need.

        Returns the run with ``moved_to`` set, or unmoved with the reason it could not be
        moved; ``None`` if the folder is gone (moved by another process) or was readable after
        all (replaced meanwhile by a good copy, which is put back).
        """
        try:
            dest = self._move_aside(bad.folder, QUARANTINE)
        except FileNotFoundError:
            return None
        except (OSError, StoreError) as exc:
            return replace(bad, reason=f"{bad.reason}; it cannot be moved aside ({exc})")
        try:
            read_run(dest, run_id=bad.run_id, verify=verify)
        except StoreError:
            return replace(bad, moved_to=dest)
        _rename_dir(dest, bad.folder)  # a good copy: back in place (kept aside if one is there)
        return None

    def _move_aside(self, entry: Path, into: str) -> Path:
        """Rename the entry ``entry`` of ``runs/`` to ``<into>/<name>-<UTC time>`` in one step.

        A symbolic link is moved as a link (``rename`` never follows it); both ends are
        checked to lie inside the store first.

        Raises
        ------
        FileNotFoundError
            If ``entry`` is gone.
        StoreError
            If either end is outside the store (a folder of the store is a link).
        """
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
        dest = self._inside(self.path / into / f"{entry.name}-{stamp}")
        source = self._inside(self.runs_dir / entry.name)
        dest.parent.mkdir(exist_ok=True)
        self._inside(dest)  # made just now: still a folder of the store, not a link
        os.rename(source, dest)
        return dest

    def supersede(self, run_id: str) -> Path:
        """Set a stored run aside into ``.superseded/<run_id>-<UTC time>/`` (never deleted).

        The run folder is renamed in one step (a symbolic link is moved as a link), after
        checking that both ends lie inside the store. Readers never read ``.superseded/``.

        Returns
        -------
        Path
            Where the run is now.

        Raises
        ------
        ValueError
            If the run is not stored (or was moved meanwhile); a :class:`StoreError` if the
            store's folders are not its own (a symbolic link).
        """
        folder = self._folder(run_id)
        if folder is None or not os.path.lexists(folder):
            raise ValueError(f"run {run_id!r} is not in {self.path}")
        try:
            return self._move_aside(folder, SUPERSEDED)
        except FileNotFoundError:
            raise ValueError(f"run {run_id!r} is not in {self.path} (moved meanwhile)") from None

    def prune(self, *, dry_run: bool = False) -> list[SetAside]:
        """Set aside the runs of older versions of each scenario (see :mod:`~.versions`).

        Runs with the same scenario name, seed and grid labels but another fingerprint are
        versions of one run (the scenario was edited between sweeps); the one that finished
        last is kept and the others are moved into ``.superseded/`` with :meth:`supersede`.

        Parameters
        ----------
        dry_run
            Only say what would be set aside (``moved_to`` stays ``None``).

        Returns
        -------
        list of SetAside
            One per older run, with the run kept in its place and where it was moved.
        """
        with warnings.catch_warnings():  # unreadable runs are check's business, not prune's
            warnings.simplefilter("ignore", StoreWarning)
            older = older_versions(self.records())
        if dry_run:
            return older
        return [replace(one, moved_to=self.supersede(one.run_id)) for one in older]

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
        final = self._folder(record["run_id"])
        if final is None:
            raise ValueError(f"run id must be a folder name, got {record['run_id']!r}")
        tmp = self._inside(self.runs_dir / f"{_PARTIAL}{final.name}+{host}+{pid}+{token}")
        try:
            tmp.mkdir(parents=True)
            if results is not None:
                results.save(tmp)
                record["files"] = file_sizes(tmp)
                record["meta_sha256"] = sha256((tmp / "meta.json").read_bytes())
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
                with contextlib.suppress(FileNotFoundError):  # another worker replaced it already
                    self._move_aside(final, SUPERSEDED)
                return _rename_dir(tmp, final)
            if stored["status"] != "failed" or not replace_failed:
                return False
            trash = self._inside(final.with_name(f".trash-{final.name}+{token}"))
            with contextlib.suppress(FileNotFoundError):  # another worker replaced it already
                os.rename(final, trash)
            _remove(trash)
            return _rename_dir(tmp, final)
        finally:
            _remove(tmp)

    def remove_stale_partials(self) -> int:
        """Delete partial run directories left on this host by processes that no longer exist.

        Partial directories of other hosts (remote Dask workers) are left alone; they are never
        read as runs. Returns how many were removed.
        """
        host = socket.gethostname()
        removed = 0
        self._check_layout()
        for entry in self.runs_dir.glob(f"{_PARTIAL}*"):
            parts = entry.name[len(_PARTIAL) :].split("+")
            if len(parts) != 4 or parts[1] != host or not parts[2].isdigit():
                continue
            if not _alive(int(parts[2])):
                _remove(self._inside(entry))
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


def _remove(entry: Path) -> None:
    """Delete a folder the store made; a symbolic link in its place is unlinked, not followed.

    ``shutil.rmtree`` does not follow the links inside the folder either.
    """
    if entry.is_symlink():
        with contextlib.suppress(OSError):
            entry.unlink()
        return
    shutil.rmtree(entry, ignore_errors=True)


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

    def check(self, repair: bool = False, *, verify: bool = True) -> list[BadRun]:  # noqa: D102
        return []

    def results(self, run_id: str) -> Results:  # noqa: D102
        if run_id not in self._results:
            raise ValueError(f"run {run_id!r} has no results")
        return self._results[run_id]

    def _table(self, record: dict[str, Any], name: str) -> pd.DataFrame:
        frame: pd.DataFrame = getattr(self._results[record["run_id"]], name)
        return frame.copy()

    def run_meta(self, record: dict[str, Any], *, manifest: bool = False) -> dict[str, Any]:  # noqa: D102
        return self._results[record["run_id"]].meta
