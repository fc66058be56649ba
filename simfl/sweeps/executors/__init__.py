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

from simfl._checks import check_choice
from simfl.sweeps.executors.base import EXECUTORS, PROGRESS_EVERY, Executor, Inline, Report
from simfl.sweeps.executors.dask_cluster import Dask
from simfl.sweeps.executors.processes import Processes
from simfl.sweeps.executors.threads import THREAD_VARS, limit_threads

__all__ = [
    "EXECUTORS",
    "PROGRESS_EVERY",
    "THREAD_VARS",
    "Dask",
    "Executor",
    "Inline",
    "Processes",
    "Report",
    "limit_threads",
    "make_executor",
]


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
