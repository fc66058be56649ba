"""The data generator of workload W1, copied from the shared peer benchmark (``peers/w1_data.py``).

W1 is the workload on which simfl is measured against FLGo and Flower (multinomial logistic
regression, 100 clients x 200 samples, d = 60, 10 classes). Every framework in that benchmark
trains on the arrays :func:`make_w1` returns; this is the peers' ``make_w1`` with type hints and
nothing else changed (the same sequence of ``numpy.random.default_rng(seed)`` draws), so simfl
sees bit-identical float32 inputs and int64 labels.

Client ``i`` draws ``x ~ N(mu_i, I_d)`` with its own mean shift ``mu_i ~ N(0, I_d)`` and labels
``y = argmax(x W / sqrt(d) + b + c_i)`` from a shared random linear teacher ``(W, b)`` plus a
per-client label bias ``c_i``. Test samples each come from a uniformly drawn client's
distribution.

It uses numpy's sequential generator rather than :class:`simfl.rng.Streams` on purpose: matching
the peers' arrays is the point. Adding a client therefore changes the test set (the draws are
sequential), unlike simfl's keyed data.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["D", "K", "make_w1"]

#: W1's input dimension and number of classes.
D, K = 60, 10

XY = tuple[NDArray[np.float32], NDArray[np.int64]]


def make_w1(
    num_clients: int = 100,
    n_per_client: int = 200,
    n_test: int = 2000,
    seed: int = 0,
    d: int = D,
    k: int = K,
) -> tuple[list[XY], XY]:
    """W1's client data sets and test set, exactly as the peer benchmark generates them.

    Returns
    -------
    clients, test
        ``clients[i] = (x, y)`` with ``x`` float32 ``(n_per_client, d)`` and ``y`` int64
        ``(n_per_client,)``; ``test = (x, y)`` with ``n_test`` samples.
    """
    rng = np.random.default_rng(seed)
    w, b = rng.normal(size=(d, k)), rng.normal(size=k)  # shared teacher
    mu = rng.normal(size=(num_clients, d))  # per-client mean shift
    cb = rng.normal(size=(num_clients, k))  # per-client label bias

    def draw(cids: NDArray[Any]) -> XY:
        x = rng.normal(size=(len(cids), d)) + mu[cids]
        y = np.argmax(x @ w / np.sqrt(d) + b + cb[cids], axis=1)
        return x.astype(np.float32), y.astype(np.int64)

    clients = [draw(np.full(n_per_client, i)) for i in range(num_clients)]
    test = draw(rng.integers(0, num_clients, size=n_test))
    return clients, test
