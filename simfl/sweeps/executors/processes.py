"""A pool of local worker processes that die with the sweep, with progress on a shared board."""

from __future__ import annotations

import ctypes
import functools
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.sharedctypes import RawArray
from typing import Any, TypeVar

from simfl._checks import check_choice, check_int
from simfl.sweeps.executors import base
from simfl.sweeps.executors.base import Executor, Report
from simfl.sweeps.executors.threads import check_threads, core_share, limit_threads

__all__ = ["Processes"]

T = TypeVar("T")
R = TypeVar("R")


class Processes(Executor):
    """A pool of local worker processes.

    Parameters
    ----------
    workers
        Number of processes (>= 1; default: the CPUs of this machine).
    restarts
        How many times a run in flight when worker processes died is tried again before it is
        reported failed (>= 0).
    threads
        Compute threads of each worker (torch, OpenMP, MKL, OpenBLAS; >= 1; default: its share
        of the cores, ``max(1, cores // workers)``); see :func:`limit_threads`.
    start_method
        How workers start: ``"fork"`` (default: they inherit this process's modules and
        data) or ``"forkserver"`` (fresh: see :meth:`fresh`).
    """

    name = "processes"

    def __init__(
        self,
        workers: int | None = None,
        *,
        restarts: int = 2,
        threads: int | None = None,
        start_method: str = "fork",
    ) -> None:
        n = (os.cpu_count() or 1) if workers is None else workers
        self.workers = check_int("Processes.workers", n, low=1)
        self.restarts = check_int("Processes.restarts", restarts, low=0)
        self.threads = check_threads("Processes", threads) or core_share(self.workers)
        self.start_method = check_choice(
            "Processes.start_method", start_method, ("fork", "forkserver")
        )

    def describe(self) -> str:
        """See :meth:`Executor.describe`."""
        fresh = ", fresh" if self.start_method == "forkserver" else ""
        return f"processes ({self.workers} workers{fresh})"

    def fresh(self) -> Processes:
        """The same pool with workers started by ``forkserver`` (:mod:`simfl.sweeps.executors`)."""
        return Processes(
            self.workers, restarts=self.restarts, threads=self.threads, start_method="forkserver"
        )

    def map_unordered(
        self, fn: Callable[[T], R], items: Sequence[T], *, keys: Sequence[str] | None = None
    ) -> Iterator[tuple[int, R | Exception]]:
        """See :meth:`Executor.map_unordered`."""
        return self._map(fn, items, None)

    def map_reporting(
        self,
        fn: Callable[[T, Report], R],
        items: Sequence[T],
        *,
        keys: Sequence[str] | None = None,
        progress: Callable[[int, float], None],
    ) -> Iterator[tuple[int, R | Exception]]:
        """See :meth:`Executor.map_reporting`.

        Workers write each item's share into a shared array (one float per item, no lock: a
        run's reports come from one process at a time); this process reads the shares of the
        runs in flight every :data:`PROGRESS_EVERY` seconds and passes on those that changed.
        """
        return self._map(functools.partial(_report_on_board, fn), items, progress)

    def _map(
        self,
        fn: Callable[[Any], R],
        items: Sequence[Any],
        progress: Callable[[int, float], None] | None,
    ) -> Iterator[tuple[int, R | Exception]]:
        """Run ``fn`` on the pool (on ``(index, item)`` pairs with a board for ``progress``)."""
        pending = deque(range(len(items)))
        crashes = [0] * len(items)
        board = None if progress is None else RawArray(ctypes.c_double, len(items))
        shown: dict[int, float] = {}
        while pending:
            pool = ProcessPoolExecutor(
                max_workers=self.workers,
                mp_context=multiprocessing.get_context(self.start_method),
                initializer=_start_worker,
                initargs=(os.getpid(), board, self.threads),
            )
            running: dict[Future[R], int] = {}
            broken = False
            try:
                while (pending and not broken) or running:
                    while pending and not broken and len(running) < self.workers:
                        i = pending.popleft()
                        if board is None:
                            running[pool.submit(fn, items[i])] = i
                        else:
                            board[i] = 0.0  # a run tried again starts over
                            running[pool.submit(fn, (i, items[i]))] = i
                    timeout = None if board is None else base.PROGRESS_EVERY
                    done, _ = wait(running, timeout=timeout, return_when=FIRST_COMPLETED)
                    if progress is not None and board is not None:
                        _read_board(board, running.values(), shown, progress)
                    for future in done:
                        i = running.pop(future)
                        try:
                            value: R | Exception = future.result()
                        except BrokenProcessPool as exc:
                            broken = True
                            crashes[i] += 1
                            if crashes[i] <= self.restarts:
                                pending.appendleft(i)
                                continue
                            value = RuntimeError(
                                f"worker process died {crashes[i]} times while this run was in "
                                f"flight ({exc})"
                            )
                        except Exception as exc:
                            value = exc
                        yield i, value
            finally:
                if running:  # interrupted, or the caller stopped: the runs in flight stay to do
                    for process in list(pool._processes.values()):
                        process.kill()
                pool.shutdown(wait=True, cancel_futures=True)


_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
#: In a :class:`Processes` worker: the shared array its runs report their progress into.
_BOARD: Any = None


def _start_worker(parent: int, board: Any, threads: int) -> None:
    """Initializer of a :class:`Processes` worker.

    Limits its threads, keeps the progress board and follows ``parent``.
    """
    global _BOARD
    limit_threads(threads)
    _BOARD = board
    _follow_parent(parent)


def _report_on_board(fn: Callable[[T, Report], R], pair: tuple[int, T]) -> R:
    """In a worker: ``fn(item, report)`` where ``report`` writes the item's slot of the board."""
    index, item = pair
    board = _BOARD

    def report(share: float) -> None:
        board[index] = share

    return fn(item, report)


def _read_board(
    board: Any,
    running: Iterable[int],
    shown: dict[int, float],
    progress: Callable[[int, float], None],
) -> None:
    """Pass on the shares of the runs in flight that changed since they were last passed on."""
    for i in running:
        share = float(board[i])
        if share != shown.get(i, 0.0):
            shown[i] = share
            progress(i, share)


def _follow_parent(parent: int) -> None:
    """Initializer of a :class:`Processes` worker: die with ``parent``, the sweep's process.

    On Linux the kernel sends the worker SIGKILL when its parent dies; elsewhere (or if
    ``prctl`` fails) a daemon thread polls for the parent (:func:`_watch_parent`). SIGTERM gets
    its default action back: a worker forked from ``simfl sweep`` would otherwise inherit the
    handler that turns SIGTERM into an interruption of the sweep.
    """
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if os.getppid() == parent and _parent_death_signal(signal.SIGKILL):
        if os.getppid() != parent:  # the parent died before the kernel knew to tell us
            os._exit(1)
        return
    _watch_parent(parent)


def _parent_death_signal(sig: int) -> bool:
    """Ask Linux to send ``sig`` to this process when its parent dies; whether it will."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent: int, every: float = 0.5) -> threading.Thread:
    """Start a daemon thread that ends this process once ``parent`` is gone.

    Gone: this process was re-parented (its parent died), or no process ``parent`` exists
    (a parent that is not the direct one, as with the ``forkserver`` start method).
    """
    first = os.getppid()

    def watch() -> None:
        while os.getppid() == first and _exists(parent):
            time.sleep(every)
        os._exit(1)

    thread = threading.Thread(target=watch, name="simfl-parent-watchdog", daemon=True)
    thread.start()
    return thread


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process has that pid now: ours is gone
        return False
    return True
