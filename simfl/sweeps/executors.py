"""Where the runs of a sweep execute: in this process, on local processes, or on Dask.

Every executor has one method, :meth:`Executor.map_unordered`: call a function on every item and
yield ``(index, result)`` pairs as runs complete, in completion order. An error of the executor
itself (a worker process that died, a Dask task lost too often) comes back as
``(index, exception)`` so that the sweep can record that run as failed and go on; the function
the sweep sends (:func:`simfl.sweeps.worker.execute`) never raises for a failing scenario.

:meth:`Executor.map_reporting` does the same for a function that also reports how far it got
(``fn(item, report)``, ``report(share)`` with a share in [0, 1]): the sweep's bar then moves
inside long runs. :class:`Inline` passes the reports on directly, :class:`Processes` through a
shared array of one float per item that workers write and the sweep's process reads every
:data:`PROGRESS_EVERY` seconds; :class:`Dask` (and any executor that does not override it)
gives ``report=None`` (no reports: the bar counts whole runs).

* :class:`Inline` runs one item after the other here (debugging, ``workers=1``).
* :class:`Processes` uses a pool of local processes (the default). If a worker process dies
  (killed, out of memory), the pool is restarted and the runs in flight are tried again, up to
  ``restarts`` times each. Workers die with the sweep's process however it ends: an interrupted
  sweep (Ctrl-C, or SIGTERM under ``simfl sweep``) kills them before it returns, and on Linux
  the kernel kills them when it is killed (``prctl(PR_SET_PDEATHSIG)``; elsewhere a watchdog
  thread in each worker polls for its parent).
* :class:`Dask` submits runs to a ``distributed`` cluster: an existing scheduler
  (``Dask("tcp://host:8786")``), a client you made (``Dask(client=Client(SLURMCluster(...)))``,
  dask-jobqueue) or a local cluster of ``workers`` single-threaded processes. Dask re-runs the
  task of a worker that died on another worker.

Threads: each worker limits the compute threads of torch, OpenMP, MKL and OpenBLAS to its
share of the machine's cores (``threads``; default ``max(1, cores // workers)``), so that
workers running neural scenarios side by side do not each start a thread per core and slow
each other down (:func:`limit_threads`). The environment variables are set before a worker
imports those libraries, and torch (and numpy's BLAS, through ``threadpoolctl`` where
installed) are limited at once where already loaded. :class:`Inline` leaves the threads of
the calling process alone. The threads of a neural run's own torch work are not the worker's:
they are its task's (:attr:`simfl.neural.ImageClassification.threads`, default 1), set for the
run and restored after it, because the count changes how oneDNN's convolutions round (about
1e-8 after a few LeNet-5 steps, 1 thread against 2); so a scenario gives the same bits under
every executor, and ``threads`` here sizes only what runs outside that (numpy's BLAS, a
task's own code).

Fresh workers: :class:`Processes` forks its workers (fast: they inherit the loaded modules
and data). A worker that runs torch with more than one thread would hang in its first
parallel operation if the sweep's process had already run torch with several OpenMP threads
(GNU OpenMP is not fork-safe), and CUDA cannot be used in a worker forked after the parent
used it. So when a sweep holds a task that is not :attr:`~simfl.tasks.Task.fork_safe` (a
neural task with ``threads > 1`` or on a GPU) and torch is loaded in the sweep's process, it
asks its executor for fresh workers (:meth:`Executor.fresh`): :class:`Processes` then starts
them with the ``forkserver`` method (they import simfl and torch themselves; scenarios travel
pickled with cloudpickle, so classes defined in ``__main__`` or a notebook still work, but a
script that calls the sweep at its top level, without ``if __name__ == "__main__":``, is run
again by each worker and fails, as with any non-fork start method). :class:`Dask` and
:class:`Inline` are unchanged: Dask's local workers are started fresh, Inline runs here.

Executors are context managers; :func:`simfl.sweep` closes the ones it makes, not yours.
"""

from __future__ import annotations

import ctypes
import functools
import importlib
import importlib.util
import logging
import math
import multiprocessing
import os
import signal
import sys
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.sharedctypes import RawArray
from typing import Any, ClassVar, TypeAlias, TypeVar

from simfl._checks import check_choice, check_int
from simfl.sweeps import scheduler as addresses
from simfl.sweeps.scheduler import SchedulerError, check_scheduler, probe_scheduler

__all__ = [
    "EXECUTORS",
    "PROGRESS_EVERY",
    "Dask",
    "Executor",
    "Inline",
    "Processes",
    "Report",
    "limit_threads",
    "make_executor",
]

T = TypeVar("T")
R = TypeVar("R")

#: Names accepted by :func:`make_executor` and ``simfl sweep --executor``.
EXECUTORS = ("processes", "dask", "inline")
#: Seconds between two progress reports of the same run (:meth:`Executor.map_reporting`).
PROGRESS_EVERY = 0.5
#: What a reporting function is given: a callable taking the share of its item done, or None.
Report: TypeAlias = Callable[[float], None] | None
#: Environment variables that size the thread pools of OpenMP (torch), MKL and OpenBLAS.
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def limit_threads(threads: int) -> None:
    """Limit this process's compute threads to ``threads`` (a sweep worker's share).

    Sets :data:`THREAD_VARS` (read by libraries imported from now on), calls
    ``torch.set_num_threads`` if torch is loaded, and limits the BLAS libraries already
    loaded through ``threadpoolctl`` if it is installed. Imports neither torch nor numpy.
    """
    for var in THREAD_VARS:
        os.environ[var] = str(threads)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(threads)
    if importlib.util.find_spec("threadpoolctl") is not None:
        importlib.import_module("threadpoolctl").threadpool_limits(threads)


def _share(workers: int) -> int:
    """Each of ``workers`` processes' share of this machine's cores (at least 1)."""
    return max(1, (os.cpu_count() or 1) // workers)


def _check_threads(owner: str, threads: int | None) -> int | None:
    return None if threads is None else check_int(f"{owner}.threads", threads, low=1)


class Executor(ABC):
    """Runs a function over items somewhere, yielding results as they complete."""

    name: ClassVar[str]

    @abstractmethod
    def map_unordered(
        self, fn: Callable[[T], R], items: Sequence[T], *, keys: Sequence[str] | None = None
    ) -> Iterator[tuple[int, R | Exception]]:
        """Call ``fn`` on every item; yield ``(index, result or executor error)`` as each ends.

        ``keys`` name the items for the executor's own monitoring (Dask's dashboard).
        """

    def map_reporting(
        self,
        fn: Callable[[T, Report], R],
        items: Sequence[T],
        *,
        keys: Sequence[str] | None = None,
        progress: Callable[[int, float], None],
    ) -> Iterator[tuple[int, R | Exception]]:
        """As :meth:`map_unordered`, for ``fn(item, report)`` that reports its progress.

        ``report(share)`` (``share`` in [0, 1]) called in the worker reaches
        ``progress(index, share)`` in this process, at most every :data:`PROGRESS_EVERY`
        seconds per item, before that item's result is yielded. This default gives
        ``report=None`` (nothing is reported) and calls :meth:`map_unordered`.
        """
        return self.map_unordered(functools.partial(_unreported, fn), items, keys=keys)

    def describe(self) -> str:
        """A short description for summaries, e.g. ``"processes (4 workers)"``."""
        return self.name

    def fresh(self) -> Executor:
        """Return this executor with workers that inherit nothing from this process.

        For runs that cannot go in a forked process (see the module's "Fresh workers"). The
        default returns ``self``: its workers are fresh already, or it runs here.
        """
        return self

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release workers and connections (idempotent)."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Inline(Executor):
    """Run every item here, one after the other."""

    name = "inline"

    def map_unordered(
        self, fn: Callable[[T], R], items: Sequence[T], *, keys: Sequence[str] | None = None
    ) -> Iterator[tuple[int, R | Exception]]:
        """See :meth:`Executor.map_unordered`."""
        for i, item in enumerate(items):
            try:
                value: R | Exception = fn(item)
            except Exception as exc:
                value = exc
            yield i, value

    def map_reporting(
        self,
        fn: Callable[[T, Report], R],
        items: Sequence[T],
        *,
        keys: Sequence[str] | None = None,
        progress: Callable[[int, float], None],
    ) -> Iterator[tuple[int, R | Exception]]:
        """See :meth:`Executor.map_reporting`: the reports are passed on here, throttled."""
        indexed = list(enumerate(items))
        call = functools.partial(_call_indexed, fn, _Throttled(progress))
        return self.map_unordered(call, indexed, keys=keys)


def _unreported(fn: Callable[[T, Report], R], item: T) -> R:
    """``fn(item, None)``: a reporting function run where reports cannot travel."""
    return fn(item, None)


class _Throttled:
    """Passes ``(index, share)`` reports on to ``progress``, each index every PROGRESS_EVERY s."""

    def __init__(self, progress: Callable[[int, float], None]) -> None:
        self.progress = progress
        self.last: dict[int, float] = {}

    def __call__(self, index: int, share: float) -> None:
        now = time.monotonic()
        if now - self.last.get(index, -math.inf) >= PROGRESS_EVERY:
            self.last[index] = now
            self.progress(index, share)


def _call_indexed(
    fn: Callable[[T, Report], R], reporter: Callable[[int, float], None], pair: tuple[int, T]
) -> R:
    """``fn(item, report)`` where ``report`` tells ``reporter`` the item's index too."""
    index, item = pair
    return fn(item, functools.partial(reporter, index))


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
        self.threads = _check_threads("Processes", threads) or _share(self.workers)
        self.start_method = check_choice(
            "Processes.start_method", start_method, ("fork", "forkserver")
        )

    def describe(self) -> str:
        """See :meth:`Executor.describe`."""
        fresh = ", fresh" if self.start_method == "forkserver" else ""
        return f"processes ({self.workers} workers{fresh})"

    def fresh(self) -> Processes:
        """The same pool with workers started by the ``forkserver`` method (see the module)."""
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
                    timeout = None if board is None else PROGRESS_EVERY
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


class Dask(Executor):
    """Runs on a Dask ``distributed`` cluster (the ``dask`` extra).

    Parameters
    ----------
    scheduler
        Address of a running scheduler, e.g. ``"tcp://10.0.0.5:8786"``: checked at once
        (:func:`~simfl.sweeps.scheduler.check_scheduler`); on first use, a scheduler that
        does not answer, or a peer that is not one, raises :class:`SchedulerError` within
        about ``2 *`` :data:`~simfl.sweeps.scheduler.CONNECT_TIMEOUT` seconds
        (:func:`~simfl.sweeps.scheduler.probe_scheduler`).
    workers
        Without ``scheduler`` or ``client``: size of the local cluster started for the sweep
        (single-threaded worker processes; default: the CPUs of this machine).
    client
        An existing ``distributed.Client`` (for example on a dask-jobqueue SLURM/PBS cluster);
        it is not closed by :meth:`close`.
    threads
        Compute threads of each run (:func:`limit_threads`, applied in the task; >= 1).
        Default: for a local cluster each worker's share of the cores,
        ``max(1, cores // workers)``; on a running scheduler or your client 1, as Dask's own
        nannies set ``OMP_NUM_THREADS=1`` for their workers.

    Notes
    -----
    A local cluster starts its workers as new Python processes that import the main module, so
    a script that starts one needs the usual ``if __name__ == "__main__":`` guard (``simfl
    sweep`` has it).
    """

    name = "dask"

    def __init__(
        self,
        scheduler: str | None = None,
        *,
        workers: int | None = None,
        client: Any = None,
        threads: int | None = None,
    ) -> None:
        if scheduler is not None:
            check_scheduler(scheduler)
        if sum(x is not None for x in (scheduler, client)) > 1:
            raise ValueError("Dask takes a scheduler address or a client, not both")
        if workers is not None:
            check_int("Dask.workers", workers, low=1)
            if scheduler is not None or client is not None:
                raise ValueError(
                    "Dask.workers sizes a local cluster; a running scheduler has its own workers"
                )
        self.scheduler = scheduler
        self.workers = workers
        local = scheduler is None and client is None
        default = _share(workers or os.cpu_count() or 1) if local else 1
        self.threads = _check_threads("Dask", threads) or default
        self._client = client
        self._owned: list[Any] = []
        self._where = "your client" if client is not None else scheduler or "local cluster"

    def client(self) -> Any:
        """The ``distributed.Client``, connecting or starting a local cluster on first use."""
        if self._client is not None:
            return self._client
        try:
            distributed: Any = importlib.import_module("distributed")
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError(
                "the dask executor needs distributed: pip install 'simfl[dask]'"
            ) from exc
        if self.scheduler is not None:
            probe_scheduler(self.scheduler)
            try:
                self._client = distributed.Client(self.scheduler, timeout=addresses.CONNECT_TIMEOUT)
            except (OSError, MemoryError, OverflowError) as exc:
                reason = " ".join(str(exc).split()) or type(exc).__name__
                raise SchedulerError(
                    f"cannot connect to the Dask scheduler at {self.scheduler}: {reason}"
                ) from None
        else:
            cluster = distributed.LocalCluster(
                n_workers=self.workers or os.cpu_count() or 1,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                silence_logs=logging.ERROR,
            )
            self._owned.append(cluster)
            self._client = distributed.Client(cluster)
        self._owned.insert(0, self._client)
        return self._client

    def describe(self) -> str:
        """See :meth:`Executor.describe`."""
        return f"dask ({self._where}, {len(self.client().nthreads())} workers)"

    def map_unordered(
        self, fn: Callable[[T], R], items: Sequence[T], *, keys: Sequence[str] | None = None
    ) -> Iterator[tuple[int, R | Exception]]:
        """See :meth:`Executor.map_unordered`."""
        client = self.client()
        as_completed = importlib.import_module("distributed").as_completed
        token = uuid.uuid4().hex[:8]
        names = keys if keys is not None else [str(i) for i in range(len(items))]
        task = functools.partial(_limited, self.threads, fn)
        futures = {
            client.submit(task, item, key=f"simfl-{name}-{token}", pure=False): i
            for i, (name, item) in enumerate(zip(names, items, strict=True))
        }
        try:
            for future in as_completed(list(futures)):
                i = futures.pop(future)
                try:
                    value: R | Exception = future.result()
                except Exception as exc:
                    value = exc
                future.release()
                yield i, value
        finally:
            if futures:
                client.cancel(list(futures))

    def close(self) -> None:
        """Close the client and local cluster this executor started (not a client you gave)."""
        for thing in self._owned:
            thing.close()
        if self._owned:
            self._client = None
        self._owned = []


def _limited(threads: int, fn: Callable[[T], R], item: T) -> R:
    """On a Dask worker: :func:`limit_threads` then ``fn(item)``."""
    limit_threads(threads)
    return fn(item)


def make_executor(
    executor: str | Executor | None = None,
    *,
    workers: int | None = None,
    scheduler: str | None = None,
    threads: int | None = None,
) -> Executor:
    """An executor from its name (``"processes"``, ``"dask"``, ``"inline"``) or as given.

    ``None`` means ``"dask"`` when a ``scheduler`` address is given, else ``"processes"``.
    ``threads`` sets the compute threads of each worker (default: its share of the cores;
    ignored by ``"inline"``, which runs in this process).

    Raises
    ------
    ValueError
        If the name is unknown, or ``scheduler`` is given for an executor other than Dask.
    """
    if isinstance(executor, Executor):
        if workers is not None or scheduler is not None or threads is not None:
            raise ValueError(
                "workers=, scheduler= and threads= configure a named executor, not an object"
            )
        return executor
    if executor is None:
        executor = "dask" if scheduler is not None else "processes"
    check_choice("sweep executor", executor, EXECUTORS)
    if scheduler is not None and executor != "dask":
        raise ValueError(f"scheduler= needs executor='dask', got executor={executor!r}")
    if executor == "dask":
        return Dask(scheduler, workers=workers, threads=threads)
    if executor == "inline" or workers == 1:
        return Inline()
    return Processes(workers, threads=threads)
