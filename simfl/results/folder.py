"""The on-disk results folder: published as a whole, checked when read.

A results folder holds one Parquet file per table (``rounds.parquet``, ``clients.parquet``) and
``meta.json``. :func:`publish` writes them into a hidden sibling folder (``.NAME.saving-TOKEN``),
flushes them to disk and renames that folder into place. An earlier folder at the same path is
first renamed aside (``.NAME.old-TOKEN``) and deleted once the new one is in place, so a reader
sees the complete old folder, the complete new one, or (after a kill between the two renames) no
folder and the two hidden siblings, never a mix. An existing empty folder (such as a store's
private run folder) is filled in place instead: there is nothing in it to mix with.

``meta.json`` is written last and doubles as the completeness marker: its ``"_files"`` entry
lists every table file with its size and SHA-256. :func:`read` checks them and refuses a folder
whose files do not match (files copied together from different saves, a truncated file).
A folder may come from someone else, so every file is read as a regular file of bounded size,
never through a symbolic link and never waiting on a FIFO (:mod:`simfl.results.files`).

Folders written before the manifest existed (no ``"_files"`` in ``meta.json``) are still read:
their files cannot be checked, but one left by an interrupted save of that version (which wrote
file by file through hidden ``.FILE.XXXX.tmp`` names) still holds such a temporary file and is
refused. Saving such a folder again adds the manifest.

The hidden siblings a killed save leaves behind are never read as results and are not removed
automatically (another process may still be writing them); when the folder itself is missing,
:func:`read` names them in its error so that the user can rename the right one into place.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from simfl.results.files import JSON_CAP, PARQUET_CAP, read_regular

__all__ = [
    "MANIFEST",
    "META",
    "check_destination",
    "listed",
    "mismatch",
    "publish",
    "read",
    "sha256",
]

#: The metadata file, written last; it carries the manifest.
META = "meta.json"
#: The key of ``meta.json`` that lists the table files with their sizes and hashes.
MANIFEST = "_files"
#: Bytes of a folder name kept in the names of its hidden staging and set-aside siblings.
_PREFIX_BYTES = 100
_SAVING = "saving"
_OLD = "old"


def check_destination(directory: str | os.PathLike[str], tables: Sequence[str]) -> Path:
    """Check, before anything is computed, that a results folder can be published here.

    Parameters
    ----------
    directory
        Where the folder will be written.
    tables
        Names of its tables (``rounds`` for ``rounds.parquet``).

    Returns
    -------
    Path
        ``directory`` as a path.

    Raises
    ------
    ValueError
        If a component of the path is longer than the filesystem allows, the path is an existing
        file, an existing folder that holds anything but simfl results, or its nearest existing
        parent is a file or no folder can be created in it (a probe folder is created there and
        removed: permissions, a read-only filesystem).
    """
    out = Path(directory)
    ancestor = _nearest_existing(out.parent)
    limit = _name_max(ancestor)
    for part in out.parts:
        if len(os.fsencode(part)) > limit:
            raise ValueError(
                f"results folder {_short(out)}: a name in it is {len(os.fsencode(part))} "
                f"bytes long; this filesystem allows at most {limit}"
            )
    if os.path.lexists(out):
        if not out.is_dir():
            raise ValueError(f"results folder {out} is an existing file; give a folder path")
        foreign = _foreign_entries(out, tables)
        if foreign:
            raise ValueError(
                f"results folder {out} exists and holds other files than simfl results "
                f"({', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''}); "
                f"give a new or empty folder, or a results folder to replace"
            )
    if not ancestor.is_dir():
        raise ValueError(f"cannot create results folder {out}: {ancestor} is a file")
    probe = ancestor / f".simfl-probe-{uuid.uuid4().hex[:8]}"
    try:  # a real attempt: permissions, read-only filesystems, ACLs and pseudo-filesystems
        probe.mkdir()
        probe.rmdir()
    except OSError as exc:
        raise ValueError(
            f"cannot write results folder {_short(out)}: cannot create folders in {ancestor} "
            f"({exc.strerror or exc})"
        ) from None
    return out


def publish(
    directory: str | os.PathLike[str], tables: dict[str, pd.DataFrame], meta: dict[str, Any]
) -> Path:
    """Write ``tables`` and ``meta`` as a results folder and move it into place in one step.

    An existing empty folder (e.g. the private folder of a store's run) is filled in place,
    ``meta.json`` last: there is nothing earlier to mix with, and until the manifest appears
    a reader finds the folder incomplete.

    Raises
    ------
    ValueError
        As :func:`check_destination`; nothing is written then.
    OSError
        If writing fails (a full disk); an earlier folder at ``directory`` is left as it was.
    """
    out = check_destination(directory, list(tables))
    if out.is_dir() and not out.is_symlink() and not any(out.iterdir()):
        try:
            _write_folder(out, tables, meta)
        except BaseException:
            for name in (*(f"{t}.parquet" for t in tables), META):
                (out / name).unlink(missing_ok=True)
            raise
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex[:8]
    staging = _sibling(out, _SAVING, token)
    staging.mkdir()
    try:
        _write_folder(staging, tables, meta)
        _swap_in(staging, out, token)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out


def _write_folder(where: Path, tables: dict[str, pd.DataFrame], meta: dict[str, Any]) -> None:
    """Write the tables, then ``meta.json`` with their manifest, and flush them to disk."""
    files: dict[str, dict[str, Any]] = {}
    for name, frame in tables.items():
        data = frame.to_parquet(None, index=False)
        _write(where / f"{name}.parquet", data)
        files[f"{name}.parquet"] = {"bytes": len(data), "sha256": sha256(data)}
    text = json.dumps({**meta, MANIFEST: files}, indent=2, sort_keys=True, allow_nan=True)
    _write(where / META, (text + "\n").encode())
    _fsync(where)


def read(
    directory: str | os.PathLike[str], tables: Sequence[str]
) -> tuple[dict[str, pd.DataFrame], dict[str, Any]]:
    """Read a results folder written by :func:`publish` after checking it is whole.

    Returns
    -------
    tuple
        The tables by name and the metadata (without the manifest).

    Raises
    ------
    FileNotFoundError
        If the folder does not exist or lacks one of its files (the message names the hidden
        siblings an interrupted :func:`publish` left, which hold the old and the new folder).
    ValueError
        If it is a file, its files do not match the manifest of ``meta.json`` (they come from
        different saves, or one is truncated), ``meta.json`` is not valid JSON, or a folder
        without a manifest holds the temporary files of an interrupted save.
    """
    src = Path(directory)
    if src.exists() and not src.is_dir():
        raise ValueError(f"{src} is a file, not a simfl results folder")
    if not src.is_dir():
        raise FileNotFoundError(f"results folder {src} does not exist{_leftovers(src)}")
    names = [f"{t}.parquet" for t in tables]
    missing = [f for f in (*names, META) if not (src / f).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{src} is not a simfl results directory (missing {missing}){_leftovers(src)}"
        )
    try:
        meta = json.loads(read_regular(src / META, JSON_CAP).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"results folder {src}: {META} is not valid JSON ({exc})") from None
    if not isinstance(meta, dict):
        raise ValueError(f"results folder {src}: {META} must hold a JSON object")
    manifest = meta.pop(MANIFEST, None)
    if manifest is None:
        _check_legacy(src, names)
    frames = {}
    for table, name in zip(tables, names, strict=True):
        data = read_regular(src / name, PARQUET_CAP)
        if manifest is not None:
            _check_file(src, name, data, manifest)
        frames[table] = pd.read_parquet(io.BytesIO(data))
    return frames, meta


def _check_file(src: Path, name: str, data: bytes, manifest: Any) -> None:
    entry = listed(manifest, name)
    if entry is None:
        raise ValueError(f"results folder {src} is incomplete: {META} does not list {name}")
    problem = mismatch(len(data), sha256(data), entry)
    if problem:
        raise ValueError(
            f"results folder {src} is mixed or incomplete: {name} does not belong to its "
            f"{META} ({problem}); its files come from different saves: run or save it again"
        )


def listed(manifest: Any, name: str) -> dict[str, Any] | None:
    """The entry of the manifest of ``meta.json`` for the file ``name``, if it lists one."""
    entry = manifest.get(name) if isinstance(manifest, dict) else None
    return entry if isinstance(entry, dict) else None


def mismatch(size: int, digest: str | None, entry: dict[str, Any]) -> str:
    """How a file of ``size`` bytes and SHA-256 ``digest`` differs from its manifest ``entry``.

    An empty string if it matches; ``digest=None`` compares the size alone.
    """
    if size != entry.get("bytes"):
        return f"it has {size} bytes, {META} lists {entry.get('bytes')}"
    if digest is not None and digest != entry.get("sha256"):
        return f"its SHA-256 differs from the one {META} lists"
    return ""


def _check_legacy(src: Path, names: list[str]) -> None:
    """Refuse a folder without manifest that still holds an interrupted save's temporary files."""
    stray = sorted(p.name for p in src.iterdir() if _is_legacy_temp(p.name, [*names, META]))
    if stray:
        raise ValueError(
            f"results folder {src} was left by an interrupted save (temporary files "
            f"{', '.join(stray)}): its files may come from different runs; run it again"
        )


def _is_legacy_temp(entry: str, names: Sequence[str]) -> bool:
    return entry.endswith(".tmp") and any(entry.startswith(f".{n}.") for n in names)


def _foreign_entries(out: Path, tables: Sequence[str]) -> list[str]:
    """Entries of an existing folder that a results folder would not hold."""
    names = [*(f"{t}.parquet" for t in tables), META]
    return sorted(e for e in os.listdir(out) if e not in names and not _is_legacy_temp(e, names))


def _swap_in(staging: Path, out: Path, token: str) -> None:
    """Rename ``staging`` to ``out``, replacing an earlier results folder there."""
    if not os.path.lexists(out):
        os.rename(staging, out)  # atomic; also replaces an empty folder created meanwhile
        _fsync(out.parent)
        return
    aside = _sibling(out, _OLD, token)
    os.rename(out, aside)
    try:
        os.rename(staging, out)
    except BaseException:
        os.rename(aside, out)
        raise
    _fsync(out.parent)
    shutil.rmtree(aside, ignore_errors=True)


def _sibling(out: Path, kind: str, token: str) -> Path:
    """The hidden sibling of ``out`` used while it is written (short enough for any name)."""
    prefix = os.fsencode(out.name)[:_PREFIX_BYTES].decode(errors="ignore")
    return out.with_name(f".{prefix}.{kind}-{token}")


def _leftovers(src: Path) -> str:
    """A hint naming the hidden siblings an interrupted :func:`publish` left next to ``src``."""
    if not src.parent.is_dir():
        return ""
    heads = tuple(str(_sibling(src, kind, "")) for kind in (_SAVING, _OLD))
    found = sorted(str(p) for p in src.parent.iterdir() if str(p).startswith(heads))
    if not found:
        return ""
    return (
        f"; an interrupted save left {', '.join(found)} (.old-: the earlier results, "
        f".saving-: the new ones, whole if they hold {META}): rename one to {src.name}"
    )


def _write(path: Path, data: bytes) -> None:
    """Write a new file (mode 0666 less the umask) and flush it to disk."""
    with open(path, "xb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync(directory: Path) -> None:
    """Flush a directory's entries to disk (where the filesystem can)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        with contextlib.suppress(OSError):  # some filesystems cannot sync a directory
            os.fsync(fd)
    finally:
        os.close(fd)


def sha256(data: bytes) -> str:
    """The SHA-256 of ``data`` in hexadecimal (as the manifest lists it)."""
    return hashlib.sha256(data).hexdigest()


def _short(path: Path) -> str:
    text = str(path)
    return text if len(text) <= 160 else f"{text[:100]}...{text[-57:]}"


def _nearest_existing(path: Path) -> Path:
    while not os.path.lexists(path) and path != path.parent:
        path = path.parent
    return path


def _name_max(directory: Path) -> int:
    try:
        return int(os.pathconf(directory, "PC_NAME_MAX"))
    except (OSError, ValueError, AttributeError):  # no pathconf (Windows) or a file
        return 255
