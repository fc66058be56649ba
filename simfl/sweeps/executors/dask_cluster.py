"""Runs on a Dask ``distributed`` cluster: a running scheduler, your client, or a local one."""

from __future__ import annotations

import functools
import importlib
import logging
import os
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from simfl._checks import check_int
from simfl.sweeps import scheduler as addresses
from simfl.sweeps.executors.base import Executor
from simfl.sweeps.executors.threads import check_threads, core_share, limit_threads
from simfl.sweeps.scheduler import SchedulerError, check_scheduler, probe_scheduler

__all__ = ["Dask"]

T = TypeVar("T")
R = TypeVar("R")


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
        default = core_share(workers or os.cpu_count() or 1) if local else 1
        self.threads = check_threads("Dask", threads) or default
        self._client = client
        self._owned: list[Any] = []
        # a sweep and its caller may ask for the client from two threads at once: one cluster
        self._starting = threading.Lock()
        self._where = "your client" if client is not None else scheduler or "local cluster"

    def client(self) -> Any:
        """The ``distributed.Client``, connecting or starting a local cluster on first use.

        Thread-safe: threads asking at once share the one client (and local cluster) started.
        """
        if self._client is not None:
            return self._client
        with self._starting:
            if self._client is None:
                self._connect()
        return self._client

    def _connect(self) -> None:
        """Connect to the scheduler, or start a local cluster, and keep the client."""
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
