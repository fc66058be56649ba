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


def split_jobs(
    alg: Algorithm[Any],
    alone: Sequence[int],
    states: Sequence[Any],
    data: Any,
    clients: IntArray,
    keys: Sequence[int],
    streams: Streams,
) -> Updates:
    """``alg.job_updates`` with the jobs ``alone`` (indices) computed one at a time.

    The other jobs are batched by ``alg.job_updates``; the rows come back in job order.
    """
    single = set(alone)
    rest = [i for i in range(len(states)) if i not in single]
    parts = [
        Algorithm.job_updates(
            alg, [states[i] for i in alone], data, clients[alone], [keys[i] for i in alone], streams
        )
    ]
    if rest:
        parts.append(
            alg.job_updates(
                [states[i] for i in rest], data, clients[rest], [keys[i] for i in rest], streams
            )
        )
    order = np.array(list(alone) + rest, dtype=np.int64)
    return Updates.concat(parts).take(np.argsort(order, kind="stable"))


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
