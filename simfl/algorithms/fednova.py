"""FedNova's normalised averaging, for algorithms whose clients may do unequal local work.

Wang, Liu, Liang, Joshi, Poor, "Tackling the Objective Inconsistency Problem in Heterogeneous
Federated Optimization", NeurIPS 2020, Eq. (6)-(7). A client that took ``tau_i`` plain SGD steps
from the server's ``x`` moved by ``x - x_i``; FedNova averages the *normalised* moves
``d_i = (x - x_i) / tau_i`` (for vanilla SGD ``||a_i||_1 = tau_i``) and scales the result by the
effective number of steps ``tau_eff = sum_i p_i tau_i``:

``x_new = x - tau_eff * sum_i p_i d_i``

With equal ``tau_i`` this is the plain average of the ``x_i``. The weights ``p_i`` are equal here
(callers with sample-weighted averages pass ``weights``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from simfl.outcome import Outcome

__all__ = ["fednova", "local_steps_done"]


def fednova(
    server: NDArray[np.float64],
    clients: NDArray[np.float64],
    tau: NDArray[np.float64],
    weights: NDArray[np.float64] | None = None,
) -> NDArray[np.float64]:
    """FedNova's update of ``server`` from the clients' results (first axis) after ``tau`` steps.

    ``weights`` (``p_i``, normalised here) default to equal weights.
    """
    p = np.full(tau.size, 1.0 / tau.size) if weights is None else weights / weights.sum()
    shape = (tau.size,) + (1,) * (clients.ndim - 1)
    moves = (server[None, ...] - clients) / tau.reshape(shape)
    tau_eff = float(np.dot(p, tau))
    return np.asarray(server - tau_eff * np.tensordot(p, moves, axes=1), dtype=np.float64)


def local_steps_done(outcome: Outcome, full: int) -> NDArray[np.float64]:
    """The local steps behind each aggregated update (rows of ``updates``, in order).

    From ``outcome.steps`` (partial work) for the arrived jobs, repeated as ``outcome.repeats``
    says; ``full`` for every update when every job did its full work (``steps`` is ``None``).
    """
    arrived = outcome.arrived
    if outcome.steps is None:
        n = int(arrived.sum()) if outcome.repeats is None else int(outcome.repeats[arrived].sum())
        return np.full(n, float(full))
    tau: Any = outcome.steps[arrived]
    if outcome.repeats is not None:
        tau = np.repeat(tau, outcome.repeats[arrived])
    return np.asarray(tau, dtype=np.float64)
