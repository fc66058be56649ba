"""What ``simfl sweep`` and ``simfl tune`` share: SIGTERM as Ctrl-C, scheduler, target."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from simfl.cli.errors import UsageError
from simfl.report.recorded import RECORD, record_target
from simfl.sweeps.integrity import MARKER
from simfl.sweeps.scheduler import SchedulerError, probe_scheduler

__all__ = ["check_scheduler", "save_target", "sigterm_interrupts"]


def check_scheduler(address: str) -> None:
    """Fail fast, in one line, if ``--scheduler`` is malformed or no Dask scheduler is there.

    See :func:`simfl.sweeps.scheduler.probe_scheduler` (bounded by its ``CONNECT_TIMEOUT``).
    """
    try:
        probe_scheduler(address)
    except ValueError as exc:
        raise UsageError(f"--scheduler: {exc}") from None
    except SchedulerError as exc:
        raise UsageError(f"{exc} (--scheduler)") from None


@contextlib.contextmanager
def sigterm_interrupts(seen: list[int]) -> Iterator[None]:
    """Within the block SIGTERM interrupts like Ctrl-C (and is appended to ``seen``).

    So ``kill PID`` stops a sweep's workers cleanly and prints how to resume. Only in the main
    thread (elsewhere the block runs with the handler as it was).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        if not seen:  # a second SIGTERM does not cut the clean-up short (SIGKILL does)
            seen.append(signum)
            raise KeyboardInterrupt

    before = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def save_target(store: str | Path, target: tuple[str, str, float] | None) -> None:
    """Record ``--target`` in the store for ``simfl report`` (a warning line if it cannot)."""
    if target is None or not (Path(store) / MARKER).is_file():
        return
    try:
        record_target(store, target)
    except OSError as exc:
        print(
            f"warning: could not record --target in {Path(store) / RECORD} ({exc}); give "
            f"simfl report the same --target",
            file=sys.stderr,
        )
