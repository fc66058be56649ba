"""How a results store keeps its files sound: the marker, errors that name the file, good runs.

The marker ``simfl-store.json`` is created by :func:`create_store`, whole and once even when
several processes create the same store at once, and checked by :func:`check_marker`, which
never rewrites it.

A run folder ``runs/<run_id>/`` is readable when

* its ``run.json`` is a JSON object with ``run_id`` (the folder's name), ``status`` (one of
  :data:`~simfl.sweeps.store.STATUSES`), ``name`` and ``seed``;
* and, when it has results (``has_results``: every ``done`` run, and failed runs that recorded
  rows), its ``rounds.parquet`` and ``clients.parquet`` are Parquet files whose footer can be
  read and its ``meta.json`` is a JSON object; the byte sizes the run was published with
  (``files`` in ``run.json``; runs stored by earlier versions have none) must match, which
  catches a file cut short even where its footer would still parse.

Reading a file that is missing, cut short or not what it should be raises :class:`StoreError`,
a ``ValueError`` whose message starts with the file's path. A run that is not readable is a
:class:`BadRun`; :meth:`simfl.Store.check` lists them and moves them aside.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # type: ignore[import-untyped]

__all__ = [
    "FORMAT",
    "MARKER",
    "RESULT_FILES",
    "BadRun",
    "StoreError",
    "StoreWarning",
    "bad_run",
    "check_marker",
    "create_store",
    "file_sizes",
    "match_mode",
    "read_json",
    "read_run",
]

#: The format of the stores this simfl reads and writes.
FORMAT = 1
#: The file that marks a directory as a store, and what it holds.
MARKER = "simfl-store.json"
MARKER_TEXT = json.dumps({"format": FORMAT, "kind": "simfl results store"}) + "\n"
#: The files of a run with results (``Results.save``).
RESULT_FILES = ("rounds.parquet", "clients.parquet", "meta.json")
_REQUIRED = ("run_id", "status", "name", "seed")


class StoreError(ValueError):
    """A file of a results store that cannot be read; the message starts with its path.

    Attributes
    ----------
    path
        The file (or run folder) that failed.
    problem
        What is wrong with it, in words (the message without the path).
    """

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path} {problem}")
        self.path = path
        self.problem = problem


class StoreWarning(UserWarning):
    """Some runs of a store cannot be read and were left out of what was read."""


@dataclass(frozen=True)
class BadRun:
    """A run folder of a store that cannot be read (:meth:`simfl.Store.check`).

    Attributes
    ----------
    run_id
        The folder's name under ``runs/`` (the run id, if the folder is a run).
    folder
        Where the folder was found.
    reason
        What is wrong, naming the file, e.g. ``rounds.parquet has 310 bytes, 2113 were written``.
    moved_to
        Where :meth:`~simfl.Store.check` moved it with ``repair=True`` (``None``: still in place).
    """

    run_id: str
    folder: Path
    reason: str
    moved_to: Path | None = None

    def __str__(self) -> str:
        where = f" (moved to {self.moved_to})" if self.moved_to is not None else ""
        return f"{self.run_id}: {self.reason}{where}"


def read_json(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``.

    Raises
    ------
    StoreError
        If the file is missing, cannot be read, is not JSON, or holds something else than an
        object.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise StoreError(path, "is missing") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise StoreError(path, f"cannot be read ({exc})") from None
    if not text.strip():
        raise StoreError(path, "is empty")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StoreError(
            path,
            f"is not valid JSON (cut short?): {exc.msg} (line {exc.lineno}, column {exc.colno})",
        ) from None
    if not isinstance(value, dict):
        raise StoreError(path, f"must hold a JSON object, not {type(value).__name__}")
    return value


def read_run(folder: Path, *, run_id: str | None = None) -> dict[str, Any]:
    """The ``run.json`` of a run folder, after checking that the whole run is readable.

    ``run_id`` is the run the folder must hold (default: the folder's name).

    Raises
    ------
    StoreError
        Naming the first file that is missing or unreadable (see the module docstring).
    """
    if not folder.is_dir():
        raise StoreError(folder, "is not a run folder (not a directory)")
    record = read_json(folder / "run.json")
    missing = [k for k in _REQUIRED if k not in record]
    if missing:
        raise StoreError(folder / "run.json", f"lacks the field(s) {', '.join(missing)}")
    if record["run_id"] != (folder.name if run_id is None else run_id):
        raise StoreError(
            folder / "run.json", f"is the record of run {record['run_id']!r}, not of its folder"
        )
    if record["status"] not in ("done", "failed"):
        raise StoreError(
            folder / "run.json", f"has status {record['status']!r}, not 'done' or 'failed'"
        )
    if not isinstance(record.get("labels", {}), dict):
        raise StoreError(folder / "run.json", "has labels that are not a JSON object")
    if record.get("has_results", True):
        sizes = record.get("files")
        _check_files(folder, sizes if isinstance(sizes, Mapping) else {})
    return record


def _check_files(folder: Path, sizes: Mapping[str, Any]) -> None:
    for name in RESULT_FILES:
        path = folder / name
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            raise StoreError(path, "is missing") from None
        if name in sizes and size != sizes[name]:
            raise StoreError(path, f"has {size} bytes, {sizes[name]} were written")
        if name.endswith(".parquet"):
            try:
                pq.read_metadata(path)
            except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ...
                raise StoreError(path, f"is not a readable Parquet file ({exc})") from None
        else:
            read_json(path)


def file_sizes(folder: Path, names: Iterable[str] = RESULT_FILES) -> dict[str, int]:
    """Byte sizes of the files ``names`` in ``folder`` (stored as ``files`` in ``run.json``)."""
    return {name: (folder / name).stat().st_size for name in names}


def match_mode(reference: Path, paths: Iterable[Path]) -> None:
    """Give ``paths`` the permission bits of ``reference``.

    ``reference`` is a file created with an ordinary ``open`` (mode ``0o666`` less the umask);
    files made by ``tempfile.mkstemp`` are ``0o600`` whatever the umask, so that others sharing a
    store could not read them. Reading the mode off a file avoids ``os.umask``, which changes
    the umask of every thread of the process while it is read.
    """
    mode = reference.stat().st_mode & 0o777
    for path in paths:
        if (path.stat().st_mode & 0o777) != mode:
            os.chmod(path, mode)


def bad_run(folder: Path, exc: StoreError) -> BadRun:
    """The :class:`BadRun` of ``folder``, its reason naming the file relative to the folder."""
    try:
        inside = exc.path.relative_to(folder)
    except ValueError:
        inside = exc.path
    reason = exc.problem if inside == Path() else f"{inside} {exc.problem}"
    return BadRun(folder.name, folder, reason)


def create_store(path: Path) -> None:
    """Make ``path`` a new results store; several processes may create the same store at once.

    The marker appears whole and only once (written privately, then hard-linked into place,
    which fails if another process won), and it appears before ``runs/``. So a directory whose
    only entries are other creators' private marker files, or that has a marker by the time it
    has been listed, is a store being created, not a directory holding other files.
    """
    path.mkdir(parents=True, exist_ok=True)
    marker = path / MARKER
    others = [e.name for e in path.iterdir() if not _creating(e.name)]
    if not marker.exists():
        if others:
            raise ValueError(
                f"store {path} must be an empty or new directory, or an existing simfl "
                f"store; it holds other files"
            )
        _link_marker(marker)
    (path / "runs").mkdir(exist_ok=True)


def _creating(name: str) -> bool:
    return name.startswith(f".{MARKER}.") and name.endswith(".tmp")


def _link_marker(marker: Path) -> None:
    """Write the marker unless it exists, whole (never half-written), without replacing one."""
    tmp = marker.with_name(f".{MARKER}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "x", encoding="utf-8") as file:  # mode 0o666 less the umask
            file.write(MARKER_TEXT)
            file.flush()
            os.fsync(file.fileno())
        try:
            os.link(tmp, marker)
        except FileExistsError:  # another process created the store first
            pass
        except OSError:  # a filesystem without hard links: same text, replaced atomically
            if not marker.exists():
                os.replace(tmp, marker)
    finally:
        tmp.unlink(missing_ok=True)


def check_marker(marker: Path) -> None:
    """Raise a one-line :class:`StoreError` naming ``marker`` unless it marks a store we read."""
    hint = (
        f"; a simfl store's marker holds {MARKER_TEXT.strip()} (simfl never rewrites it: "
        f"restore it if this is a format-{FORMAT} store)"
    )
    try:
        info = read_json(marker)
    except StoreError as exc:
        raise StoreError(marker, exc.problem + hint) from None
    fmt = info.get("format")
    if fmt is None:
        raise StoreError(marker, "has no format" + hint)
    if fmt != FORMAT:
        raise StoreError(marker, f"has format {fmt!r}; this simfl reads format {FORMAT}")
