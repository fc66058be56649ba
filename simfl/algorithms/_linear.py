"""Shared pieces of the linear-representation algorithms (initialisations, head solves)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simfl._checks import check_choice, check_int
from simfl.algorithms.base import Algorithm, ClientMetrics, Updates
from simfl.rng import Streams
from simfl.tasks.base import Task
from simfl.tasks.linear import LinearModel, LinearTask, ridge_solve

Array = NDArray[np.float64]
IntArray = NDArray[np.int64]

INITS = ("mom", "random")
_CHUNK = 2048


def per_client(data: Any, model: LinearModel) -> ClientMetrics | None:
    """Each evaluated client's metrics under ``model``, where the task data has them."""
    evaluate_clients = getattr(data, "evaluate_clients", None)
    if evaluate_clients is None:
        return None
    out: ClientMetrics = evaluate_clients(model)
    return out


def job_samples(data: Any, clients: IntArray, keys: Sequence[int]) -> tuple[Array, Array] | None:
    """The training samples of asynchronous jobs: row ``i`` is ``clients[i]``'s at ``keys[i]``.

    Each row equals the task's ``train_batch(clients[i:i + 1], keys[i])`` to the last bit
    (the task data's ``job_batch``); ``None`` where the data cannot draw them per job (the
    algorithm then computes one job at a time).
    """
    job_batch = getattr(data, "job_batch", None)
    if job_batch is None:
        return None
    samples: tuple[Array, Array] = job_batch(clients, np.asarray(keys, dtype=np.int64))
    return samples


def prefetch_jobs(data: Any, clients: IntArray, keys: IntArray) -> None:
    """Let the task data draw the samples of jobs about to start, if it can (``prefetch``)."""
    prefetch = getattr(data, "prefetch", None)
    if prefetch is not None:
        prefetch(clients, keys)


def stack_like(arrays: Sequence[Array]) -> Array | None:
    """``arrays`` as one ``(C, ...)`` stack whose items keep each array's memory layout.

    The layout decides whether numpy's products of an item take BLAS or its own loops (a
    non-contiguous matrix, such as the method-of-moments start, a reversed view, takes the
    loops), which changes the last bits. One array repeated: a broadcast view of it (its own
    strides); C-contiguous arrays: a contiguous stack; otherwise ``None`` (split the batch,
    :func:`split_jobs`).
    """
    first = arrays[0]
    if all(a is first for a in arrays):
        return np.broadcast_to(first, (len(arrays), *first.shape))
    if all(a.flags.c_contiguous for a in arrays):
        return np.stack(arrays)
    return None


def split_jobs(
    alg: Algorithm[Any],
    groups: Sequence[Sequence[int]],
    states: Sequence[Any],
    data: Any,
    clients: IntArray,
    keys: Sequence[int],
    streams: Streams,
) -> Updates:
    """``alg.job_updates`` computed group by group (indices of the jobs); rows in job order."""
    parts = [
        alg.job_updates(
            [states[i] for i in group],
            data,
            clients[list(group)],
            [keys[i] for i in group],
            streams,
        )
        for group in groups
    ]
    order = np.array([i for group in groups for i in group], dtype=np.int64)
    return Updates.concat(parts).take(np.argsort(order, kind="stable"))


def layout_groups(arrays: Sequence[Array]) -> list[list[int]]:
    """Indices of ``arrays`` in groups :func:`stack_like` can stack.

    The C-contiguous ones together, then each other array (by identity) with its repeats.
    """
    contiguous = [i for i, a in enumerate(arrays) if a.flags.c_contiguous]
    groups = [contiguous] if contiguous else []
    by_id: dict[int, list[int]] = {}
    for i, a in enumerate(arrays):
        if not a.flags.c_contiguous:
            by_id.setdefault(id(a), []).append(i)
    return groups + list(by_id.values())


def check_linear_task(owner: str, task: Task | None) -> None:
    """Raise unless ``task`` is a linear task (e.g. the linear representation task)."""
    if not isinstance(task, LinearTask):
        raise ValueError(
            f"Scenario.task must be a linear task such as tasks.LinearRepresentation for "
            f"{owner}, got {task!r}"
        )


def check_init(owner: str, init: str, init_clients: int | None) -> None:
    """Validate the ``init`` and ``init_clients`` fields of a linear algorithm."""
    check_choice(f"{owner}.init", init, INITS)
    if init_clients is not None:
        check_int(f"{owner}.init_clients", init_clients, low=1)


def initial_representation(
    init: str, init_clients: int | None, data: Any, streams: Streams
) -> Array:
    """A d x k orthonormal starting representation.

    ``"mom"``: the method-of-moments estimate of FedRep Alg. 2 / SRPFL: every client (or
    ``init_clients`` of them, drawn uniformly) sends ``Z_i = (1/m) sum_j y_ij^2 x_ij x_ij^T``;
    the server takes the top-k eigenvectors of their average, since
    ``E[y^2 x x^T] = ||B* w*||^2 I + 2 B* w* w*^T B*^T``. ``"random"``: the Q factor of a
    Gaussian d x k matrix.
    """
    if init == "random":
        g = streams.normal("alg/init_b", np.arange(data.d)[:, None], np.arange(data.k)[None, :])
        return np.asarray(np.linalg.qr(g)[0])
    n = data.n_clients
    if init_clients is None or init_clients >= n:
        clients = np.arange(n, dtype=np.int64)
    else:
        pick = streams.generator("alg/init_clients").choice(n, init_clients, replace=False)
        clients = np.sort(pick).astype(np.int64)
    d, m = data.d, data.samples_per_client
    moment = np.zeros((d, d))
    for start in range(0, clients.size, _CHUNK):
        x, y = data.init_batch(clients[start : start + _CHUNK])
        xs = x.reshape(-1, d)
        moment += (xs * (y.reshape(-1, 1) ** 2)).T @ xs
    moment /= clients.size * m
    eigvecs = np.linalg.eigh(moment)[1]
    return np.asarray(eigvecs[:, ::-1][:, : data.k])


def solve_heads(x: Array, y: Array, b: Array, ridge: float = 0.0) -> Array:
    """Least-squares heads ``argmin_w ||X_i B w - y_i||`` for a batch, shape ``(C, k)``.

    Uses the pseudo-inverse, so a client with fewer samples than ``k`` gets the minimum-norm
    solution instead of an error (or a ridge solution with ``ridge > 0``).
    """
    return ridge_solve(x @ b, y, ridge)
