"""Compute threads of sweep workers: each limits torch, OpenMP, MKL and OpenBLAS to its share."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys

from simfl._checks import check_int

__all__ = ["THREAD_VARS", "check_threads", "core_share", "limit_threads"]

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


def core_share(workers: int) -> int:
    """Each of ``workers`` processes' share of this machine's cores (at least 1)."""
    return max(1, (os.cpu_count() or 1) // workers)


def check_threads(owner: str, threads: int | None) -> int | None:
    """``threads`` (>= 1) of an executor, or ``None`` for its default."""
    return None if threads is None else check_int(f"{owner}.threads", threads, low=1)
