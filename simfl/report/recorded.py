"""The target a sweep was given, recorded in its store for the report: ``STORE/report.json``.

``simfl sweep --target "distance<1e-3"`` writes ``{"target": "distance<=0.001"}`` into the
store (:func:`record_target`, atomically: a private file in the store renamed over the old
one), and ``simfl report STORE`` compares the runs at that target unless ``--target`` says
otherwise (:func:`recorded_target`). The file is read with care, as everything in a store
that may have come from someone else: only a regular file (never a link, a FIFO or a
device), at most :data:`MAX_BYTES`, a JSON object whose ``target`` parses as ``--target``
does; anything else is reported in one line and the report chooses its own target.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import stat
import tempfile
from pathlib import Path

__all__ = [
    "MAX_BYTES",
    "RECORD",
    "ReportWarning",
    "Target",
    "parse_target",
    "record_target",
    "recorded_target",
    "target_spec",
]

Target = tuple[str, str, float]

#: The file of a store that records the sweep's target for the report.
RECORD = "report.json"
#: The largest ``report.json`` that is read (a target is a few dozen bytes).
MAX_BYTES = 4096


class ReportWarning(UserWarning):
    """Something of a store the report could not use as it is (said in one line)."""


_TARGET = re.compile(r"^\s*(?P<metric>[^<>=\s]+)\s*(?P<sign><=|>=|<|>)\s*(?P<value>[^<>=]+)$")


def parse_target(text: str) -> Target:
    """``"distance<1e-3"`` -> ``("distance", "below", 0.001)``; ``"accuracy>=0.9"`` -> above.

    ``<`` and ``<=`` both mean ``below`` and ``>`` and ``>=`` both mean ``above``: simfl's
    targets are reached when ``metric <= below`` or ``metric >= above`` (see
    :class:`simfl.Target`), and the output says so (``accuracy >= 0.9``).

    Raises
    ------
    ValueError
        If ``text`` is not ``metric``, one of ``< <= > >=``, and a finite number.
    """
    match = _TARGET.match(text) if isinstance(text, str) else None
    if match is not None:
        side = "below" if match["sign"].startswith("<") else "above"
        try:
            value = float(match["value"])
        except ValueError:
            value = math.nan
        if math.isfinite(value):
            return match["metric"], side, value
    raise ValueError(
        f"--target must look like metric<=value or metric>=value (< and > mean the same: "
        f"reached at <= and >=), e.g. distance<1e-3 or accuracy>=0.9, got {text!r}"
    )


def target_spec(target: Target) -> str:
    """``("distance", "below", 0.001)`` -> ``"distance<=0.001"`` (:func:`parse_target` reads it)."""
    metric, side, value = target
    return f"{metric}{'<=' if side == 'below' else '>='}{value!r}"


def record_target(store: str | os.PathLike[str], target: Target) -> Path:
    """Write ``STORE/report.json`` holding ``target``, atomically; return its path.

    The JSON goes to a private file in the store, flushed to disk, then renamed over
    ``report.json`` (a link there is replaced, never followed), so that a reader sees the old
    file or the new one, whole.
    """
    folder = Path(store)
    path = folder / RECORD
    text = json.dumps({"target": target_spec(target)}) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=f".{RECORD}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def recorded_target(store: str | os.PathLike[str]) -> tuple[Target | None, str | None]:
    """The target recorded in ``STORE/report.json``, and what is wrong with the file, if any.

    Returns ``(None, None)`` when there is no such file, ``(target, None)`` when it holds one,
    and ``(None, reason)`` when it cannot be used (a one-line reason that names the file).
    """
    path = Path(store) / RECORD
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"{path} cannot be read ({exc.strerror or exc})"
    if not stat.S_ISREG(info.st_mode):
        return None, f"{path} is not a regular file; it is not read"
    if info.st_size > MAX_BYTES:
        return None, f"{path} holds {info.st_size:,} bytes, more than {MAX_BYTES:,}; not read"
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as file:
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                return None, f"{path} is not a regular file; it is not read"
            data = file.read(MAX_BYTES + 1)
    except OSError as exc:
        return None, f"{path} cannot be read ({exc.strerror or exc})"
    if len(data) > MAX_BYTES:
        return None, f"{path} holds more than {MAX_BYTES:,} bytes; not read"
    try:
        record = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        return None, f"{path} is not JSON ({exc})"
    spec = record.get("target") if isinstance(record, dict) else None
    if not isinstance(spec, str):
        return None, f'{path} must hold {{"target": "metric<=value"}}, got {_short(record)}'
    try:
        return parse_target(spec), None
    except ValueError:
        return None, (
            f"{path}: target must look like metric<=value or metric>=value with a finite "
            f"value, got {_short(spec)}"
        )


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."
