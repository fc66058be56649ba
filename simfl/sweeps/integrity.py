"""How a results store keeps its files sound: the marker, errors that name the file, good runs.

The marker ``simfl-store.json`` is created by :func:`create_store`, whole and once even when
several processes create the same store at once, and checked by :func:`check_marker`, which
never rewrites it.

A run folder ``runs/<run_id>/`` is readable when

* it is a folder, not a symbolic link, and its ``run.json`` is a JSON object whose fields
  hold what :mod:`simfl.sweeps.record` allows (``run_id`` is the folder's name, ``status`` one
  of :data:`~simfl.sweeps.record.STATUSES`, ``seed`` an integer, every label a JSON scalar, ...);
* and, when it has results (``has_results``: every ``done`` run, and failed runs that recorded
  rows), its ``rounds.parquet`` and ``clients.parquet`` are Parquet files whose footer can be
  read and its ``meta.json`` is a JSON object; the byte sizes the run was published with
  (``files`` in ``run.json``; runs stored by earlier versions have none) must match, which
  catches a file cut short even where its footer would still parse;
* and, verified (the default of :func:`read_run` and of every reader), each file's SHA-256 is
  the one written with it: ``meta.json`` lists those of the Parquet files
  (:mod:`simfl.results.folder`), ``run.json`` that of ``meta.json`` (``meta_sha256``; runs
  stored by earlier versions have none, and their ``meta.json`` is only parsed).

Files are read only through :func:`read_file`, which opens a regular file and nothing else:
never a symbolic link (``O_NOFOLLOW``), a FIFO, a device or a folder (``O_NONBLOCK``, so that
opening a FIFO cannot wait for a writer), and never more bytes than a cap (:data:`JSON_CAP`,
:data:`PARQUET_CAP`). A file's verification is remembered for the process (by path, device,
inode, size and change time; a file changed in the last two seconds is hashed again every
time), so a store is hashed at most once per process.

Reading a file that is missing, cut short or not what it should be raises :class:`StoreError`,
a ``ValueError`` whose message starts with the file's path. A run that is not readable is a
:class:`BadRun`; :meth:`simfl.Store.check` lists them and moves them aside.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow.parquet as pq  # type: ignore[import-untyped]

from simfl.results.files import JSON_CAP, PARQUET_CAP, UnreadableFileError, open_regular
from simfl.results.folder import MANIFEST, listed, mismatch, sha256
from simfl.sweeps.record import problem as record_problem

__all__ = [
    "FORMAT",
    "JSON_CAP",
    "MARKER",
    "PARQUET_CAP",
    "RESULT_FILES",
    "BadRun",
    "StoreError",
    "StoreWarning",
    "bad_run",
    "check_files",
    "check_marker",
    "create_store",
    "file_sizes",
    "match_mode",
    "open_file",
    "read_file",
    "read_json",
    "read_record",
    "read_run",
    "read_table",
]

#: The format of the stores this simfl reads and writes.
FORMAT = 1
#: The file that marks a directory as a store, and what it holds.
MARKER = "simfl-store.json"
MARKER_TEXT = json.dumps({"format": FORMAT, "kind": "simfl results store"}) + "\n"
#: The files of a run with results (``Results.save``).
RESULT_FILES = ("rounds.parquet", "clients.parquet", "meta.json")
#: Files changed less than this long ago (nanoseconds) are hashed again at every read.
_RACY_NS = 2_000_000_000
#: Bytes hashed at a time while a file is checked.
_CHUNK = 2**20
#: Files whose SHA-256 matched, as (path, device, inode, size, mtime, ctime, SHA-256).
_VERIFIED: set[tuple[Any, ...]] = set()


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


@contextlib.contextmanager
def open_file(path: Path, cap: int) -> Iterator[tuple[BinaryIO, os.stat_result]]:
    """:func:`simfl.results.files.open_regular` for a store: its refusals as :class:`StoreError`."""
    try:
        with open_regular(path, cap, reader="a store") as opened:
            yield opened
    except UnreadableFileError as exc:
        raise StoreError(exc.path, exc.problem) from None


def read_file(path: Path, cap: int, *, sha: str | None = None) -> bytes:
    """The bytes of the regular file ``path`` (see :func:`open_file`), checked against ``sha``.

    Raises
    ------
    StoreError
        As :func:`open_file`; also if the file changed size while it was read, or its SHA-256
        is not ``sha`` (when given).
    """
    data, info = _read(path, cap)
    if sha is not None:
        if not _known(path, info, sha) and sha256(data) != sha:
            raise StoreError(path, "has another SHA-256 than the one written with it (changed)")
        _remember(path, info, sha)
    return data


def _read(path: Path, cap: int) -> tuple[bytes, os.stat_result]:
    with open_file(path, cap) as (file, info):
        try:
            data = _read_all(file, info.st_size + 1)
        except OSError as exc:
            raise StoreError(path, f"cannot be read ({exc.strerror or exc})") from None
    if len(data) != info.st_size:
        raise StoreError(path, "changed while it was read")
    return data, info


def _read_all(file: BinaryIO, limit: int) -> bytes:
    chunks, left = [], limit
    while left > 0:
        chunk = file.read(min(left, _CHUNK))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _key(path: Path, info: os.stat_result, sha: str) -> tuple[Any, ...]:
    return (
        os.path.abspath(path),
        info.st_dev,
        info.st_ino,
        info.st_size,
        info.st_mtime_ns,
        info.st_ctime_ns,
        sha,
    )


def _known(path: Path, info: os.stat_result, sha: str) -> bool:
    return _key(path, info, sha) in _VERIFIED


def _remember(path: Path, info: os.stat_result, sha: str) -> None:
    """Remember a verified file, unless it changed so recently that a change may not show."""
    if time.time_ns() - max(info.st_mtime_ns, info.st_ctime_ns) > _RACY_NS:
        _VERIFIED.add(_key(path, info, sha))


def _hash_file(path: Path, sha: str) -> tuple[int, str]:
    """Size and SHA-256 of a Parquet file, read in chunks (``sha`` if it is known to match)."""
    with open_file(path, PARQUET_CAP) as (file, info):
        if _known(path, info, sha):
            return info.st_size, sha
        digest, size = hashlib.sha256(), 0
        try:
            while chunk := file.read(_CHUNK):
                digest.update(chunk)
                size += len(chunk)
        except OSError as exc:
            raise StoreError(path, f"cannot be read ({exc.strerror or exc})") from None
        if digest.hexdigest() == sha and size == info.st_size:
            _remember(path, info, sha)
        return size, digest.hexdigest()


def read_json(path: Path, *, sha: str | None = None) -> dict[str, Any]:
    """The JSON object in ``path`` (a regular file of at most :data:`JSON_CAP` bytes).

    Raises
    ------
    StoreError
        If the file is missing, not a regular file, too large, cannot be read, is not JSON,
        holds something else than an object, or its SHA-256 is not ``sha`` (when given).
    """
    data, info = _read(path, JSON_CAP)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
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
    except RecursionError:
        raise StoreError(path, "is not valid JSON (nested too deeply)") from None
    if not isinstance(value, dict):
        raise StoreError(path, f"must hold a JSON object, not {type(value).__name__}")
    if sha is not None:
        if not _known(path, info, sha) and sha256(data) != sha:
            raise StoreError(path, "has another SHA-256 than the one written with it (changed)")
        _remember(path, info, sha)
    return value


def read_record(folder: Path, *, run_id: str | None = None) -> dict[str, Any]:
    """The ``run.json`` of a run folder with every field checked (not its other files).

    Raises
    ------
    StoreError
        If the folder is a symbolic link or not a folder, or its ``run.json`` cannot be read
        or has a field that is missing or not valid (:mod:`simfl.sweeps.record`).
    """
    if folder.is_symlink():
        raise StoreError(
            folder, "is a symbolic link, not a run folder; a store never follows links"
        )
    if not folder.is_dir():
        raise StoreError(folder, "is not a run folder (not a directory)")
    record = read_json(folder / "run.json")
    wrong = record_problem(record)
    if wrong:
        raise StoreError(folder / "run.json", wrong)
    if record["run_id"] != (folder.name if run_id is None else run_id):
        raise StoreError(
            folder / "run.json", f"is the record of run {record['run_id']!r}, not of its folder"
        )
    return record


def read_run(folder: Path, *, run_id: str | None = None, verify: bool = True) -> dict[str, Any]:
    """The ``run.json`` of a run folder, after checking that the whole run is readable.

    ``run_id`` is the run the folder must hold (default: the folder's name). With ``verify``,
    every file's SHA-256 is checked (at most once per file and process); without, its size.

    Raises
    ------
    StoreError
        Naming the first file that is missing or unreadable (see the module docstring).
    """
    record = read_record(folder, run_id=run_id)
    if record.get("has_results", True):
        check_files(folder, record, verify=verify)
    return record


def check_files(folder: Path, record: Mapping[str, Any], *, verify: bool = True) -> None:
    """Check the result files of a run folder (see the module docstring).

    Raises
    ------
    StoreError
        Naming the first file that is missing, not a regular file, of another size than was
        written, not Parquet (its footer) or JSON, or (with ``verify``) whose SHA-256 is not
        the one written with it.
    """
    sizes = record.get("files") or {}
    meta: dict[str, Any] = {}
    for name in RESULT_FILES:
        path = folder / name
        with open_file(path, JSON_CAP if name.endswith(".json") else PARQUET_CAP) as (file, info):
            if name in sizes and info.st_size != sizes[name]:
                raise StoreError(path, f"has {info.st_size} bytes, {sizes[name]} were written")
            if name.endswith(".parquet"):
                try:
                    pq.read_metadata(file)
                except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ...
                    raise StoreError(path, f"is not a readable Parquet file ({exc})") from None
        if name.endswith(".json"):
            meta = read_json(path, sha=record.get("meta_sha256") if verify else None)
    manifest = meta.get(MANIFEST)
    if not isinstance(manifest, dict):
        return  # saved before the manifest existed: sizes and footers are all there is
    for name in RESULT_FILES[:2]:
        entry = _entry(folder / name, manifest)
        if verify:
            size, digest = _hash_file(folder / name, str(entry.get("sha256")))
        else:
            size, digest = (folder / name).lstat().st_size, None
        _match(folder / name, size, digest, entry)


def _entry(path: Path, manifest: Mapping[str, Any]) -> dict[str, Any]:
    entry = listed(manifest, path.name)
    if entry is None:
        raise StoreError(path, f"is not listed in the {MANIFEST} of meta.json")
    return entry


def _match(path: Path, size: int, digest: str | None, entry: dict[str, Any]) -> None:
    wrong = mismatch(size, digest, entry)
    if wrong:
        raise StoreError(path, f"is not the file written with the run: {wrong}")


def read_table(folder: Path, name: str, manifest: Any) -> bytes:
    """The verified bytes of the Parquet file ``name`` of a run folder.

    ``manifest`` is the :data:`~simfl.results.folder.MANIFEST` of the run's ``meta.json``
    (``None``, or anything but an object, for runs saved before it existed: read unchecked,
    as :func:`check_files` and ``Results.load`` do).

    Raises
    ------
    StoreError
        If the file cannot be read (:func:`read_file`), or it is not the file the manifest
        lists (size, SHA-256).
    """
    path = folder / name
    if not isinstance(manifest, dict):
        return read_file(path, PARQUET_CAP)
    entry = _entry(path, manifest)
    data, info = _read(path, PARQUET_CAP)
    sha = str(entry.get("sha256"))
    _match(path, len(data), None if _known(path, info, sha) else sha256(data), entry)
    _remember(path, info, sha)
    return data


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
