"""Claims on the runs of a store, so that sweeps sharing a store compute each run once.

Before a worker computes a run it claims it: it creates ``runs/.claim-<run_id>`` with
``O_CREAT | O_EXCL`` (only one process can), holding its host, process id, the token of its
sweep, a token of its own and the time. It keeps the claim while the run executes, touching the
file every :data:`HEARTBEAT` seconds, and removes it once the run is published. A worker that
finds a run claimed leaves it to the claimant: its sweep waits for the run to appear in the
store (then it counts it as already stored, not as run) or for the claim to end.

A claim ends when its file is removed, and expires when its claimant cannot be computing any
more: its process no longer exists (a claimant on this host), no heartbeat touched it for
:data:`LEASE` seconds (a claimant on another host, or one whose claim cannot be read), or it
belongs to the same sweep (the executor runs the run again because the worker that claimed it
was lost). An expired claim is taken over: it is renamed aside (one process wins the rename),
checked to be the one judged expired, and removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simfl.sweeps.store import StoreWriteError

__all__ = ["HEARTBEAT", "LEASE", "Claim", "Holder", "holder", "remove_expired", "take"]

#: Seconds without a heartbeat after which a claim has expired.
LEASE = 600.0
#: Seconds between two touches of a claim by its claimant.
HEARTBEAT = 30.0
#: Name of a run's claim file in the store's ``runs/`` folder, before its run id.
PREFIX = ".claim-"


@dataclass(frozen=True)
class Holder:
    """Who holds a claim (fields empty when the claim file cannot be read yet)."""

    host: str = ""
    pid: int = 0
    sweep: str = ""
    token: str = ""

    def __str__(self) -> str:
        return f"process {self.pid} on {self.host}" if self.host else "another process"


class Claim:
    """A claim this process holds: a context manager that keeps it alive, then releases it."""

    def __init__(self, path: Path, token: str) -> None:
        self.path = path
        self.token = token
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    def __enter__(self) -> Claim:
        self._beat = threading.Thread(target=self._heartbeat, name="simfl-claim", daemon=True)
        self._beat.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT):
            try:
                os.utime(self.path)
            except OSError:  # taken over or removed: nothing to keep alive
                return

    def release(self) -> None:
        """Stop the heartbeat and remove the claim file, if it is still this claim."""
        self._stop.set()
        if self._beat is not None:
            self._beat.join()
        found = _read(self.path)
        if found is not None and found.token == self.token:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()


def take(runs: Path, run_id: str, sweep: str) -> Claim | Holder:
    """Claim run ``run_id`` of the store whose ``runs/`` folder is ``runs`` for ``sweep``.

    Returns the :class:`Claim` (enter it while the run executes), or the :class:`Holder` of a
    claim that has not expired.

    Raises
    ------
    StoreWriteError
        If the claim file cannot be written (a full disk, a read-only store, ...).
    """
    path = runs / f"{PREFIX}{run_id}"
    token = uuid.uuid4().hex
    mine = Holder(socket.gethostname(), os.getpid(), sweep, token)
    for _ in range(8):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            found = holder(path, sweep)
            if found is not None:
                return found
            continue  # gone, or expired and removed: try again
        except OSError as exc:
            raise StoreWriteError.of(runs.parent, exc) from exc
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as file:
                json.dump({**mine.__dict__, "time": time.time()}, file)
        except OSError as exc:
            path.unlink(missing_ok=True)
            raise StoreWriteError.of(runs.parent, exc) from exc
        return Claim(path, token)
    return holder(path, sweep) or Holder()


def remove_expired(runs: Path) -> int:
    """Remove the expired claims in the store's ``runs/`` folder; how many were removed.

    Raises
    ------
    StoreWriteError
        If an expired claim cannot be removed (a read-only store, ...).
    """
    removed = 0
    for path in runs.glob(f"{PREFIX}*"):
        if "+" not in path.name and path.exists() and holder(path) is None:
            removed += 1
    return removed


def holder(path: Path, sweep: str = "") -> Holder | None:
    """The holder of the claim at ``path``; ``None`` if there is none (expired ones removed).

    Raises
    ------
    StoreWriteError
        If an expired claim cannot be removed.
    """
    found = _read(path)
    try:
        age = time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return None
    if found is None:  # being written, or its writer died before it wrote
        return Holder() if age < LEASE else _remove(path, None)
    same_sweep = bool(sweep) and found.sweep == sweep
    gone = found.host == socket.gethostname() and not _alive(found.pid)
    if same_sweep or gone or age >= LEASE:
        return _remove(path, found)
    return found


def _remove(path: Path, expired: Holder | None) -> Holder | None:
    """Remove the expired claim at ``path``; a claim that replaced it meanwhile is kept.

    Returns ``None`` (no claim left), or the holder of the claim found instead.

    Raises
    ------
    StoreWriteError
        If the claim cannot be removed (a read-only store, ...).
    """
    aside = path.with_name(f"{path.name}+expired+{uuid.uuid4().hex[:8]}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:  # another process removed it first
        return None
    except OSError as exc:
        raise StoreWriteError.of(path.parent.parent, exc) from exc
    moved = _read(aside)
    if expired is not None and moved != expired:  # a new claim came in between: put it back
        with contextlib.suppress(OSError):
            os.link(aside, path)
        aside.unlink(missing_ok=True)
        return moved or Holder()
    aside.unlink(missing_ok=True)
    return None


def _read(path: Path) -> Holder | None:
    """The holder written in a claim file, or ``None`` if it is gone or not (yet) readable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as file:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or a device is never read
                return None
            data: Any = json.loads(file.read(4096))
        return Holder(str(data["host"]), int(data["pid"]), str(data["sweep"]), str(data["token"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True
