"""The linear representation-learning task of FedRep and SRPFL.

Collins, Hassani, Mokhtari, Shakkottai, "Exploiting Shared Representations for Personalized
Federated Learning", ICML 2021 (Section 4), and Tziotis et al., "Straggler-Resilient Personalized
Federated Learning", TMLR 2023: client ``i`` observes

    y = w_i*^T B*^T x + z,    x ~ N(0, I_d),  z ~ N(0, noise_std^2),

with a shared orthonormal representation ``B*`` (d x k, the Q factor of a Gaussian matrix) and a
client head ``w_i*`` of norm ``head_norm`` (default sqrt(k), the normalisation of FedRep's
analysis; the FedRep notebook's Figure 1 cell uses unit-norm heads, ``head_norm=1``).

All data are procedural: a client's samples are generated from the run's keyed streams when they
are needed, so a fleet of any size costs nothing until its clients are used.

Metrics
-------
``distance``
    Principal-angle distance ``||(I - Q Q^T) B*||_2`` between the learned column space ``Q``
    and ``B*`` (the sine of the largest principal angle; the FedRep notebook plots its square).
``test_mse``
    Mean over evaluated clients of each client's mean squared error on its own noise-free test
    points (clean labels, as in the FedRep notebook's new-client evaluation), with the
    personalised model the algorithm provides for that client.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from simfl._checks import check_int, check_real
from simfl.rng import Streams
from simfl.tasks.base import Task

__all__ = [
    "LinearModel",
    "LinearRepresentation",
    "LinearRepresentationData",
    "principal_angle_distance",
]

Array = NDArray[np.float64]
IntArray = NDArray[np.int64]


def principal_angle_distance(b: Array, b_star: Array) -> float:
    """``||(I - Q Q^T) Q*||_2`` with ``Q``, ``Q*`` orthonormal bases of ``col(b)``, ``col(b_star)``.

    Equal to the sine of the largest principal angle between the two column spaces; 0 when they
    coincide and 1 when some direction of ``b_star`` is orthogonal to ``col(b)``.
    """
    q = np.linalg.qr(b)[0]
    q_star = np.linalg.qr(b_star)[0]
    residual = q_star - q @ (q.T @ q_star)
    return float(np.linalg.norm(residual, 2))


@dataclass(frozen=True)
class LinearModel:
    """A shared representation and one head per evaluated client (personalised linear models)."""

    representation: Array  # (d, k)
    heads: Array  # (n_eval, k), row j belongs to the j-th evaluated client


@dataclass(frozen=True)
class LinearRepresentation(Task):
    """Linear regression with a shared low-dimensional representation and per-client heads.

    Parameters
    ----------
    d
        Input dimension (>= 1).
    k
        Representation dimension, ``1 <= k <= d``.
    samples_per_client
        Samples ``m`` a client uses per round (>= 1).
    noise_std
        Standard deviation of the label noise (>= 0). The papers' "N(0, 10^-3)" is read as a
        standard deviation, as in the FedRep notebook's ``np.random.normal(0, 0.001)``.
    fresh_samples
        If true (FedRep Alg. 2 and SRPFL), every client draws ``m`` new samples each round; if
        false, each client keeps one fixed training set of ``m`` samples (the FedRep notebook).
    head_norm
        Norm of every true head ``w_i*``; ``None`` means ``sqrt(k)``.
    test_samples
        Clean test points per evaluated client.
    eval_clients
        How many clients are evaluated: all of them if the fleet is no larger, otherwise a
        fixed uniformly drawn subset of this size (keeps evaluation cheap on huge fleets).
    """

    d: int = 20
    k: int = 2
    samples_per_client: int = 10
    noise_std: float = 1e-3
    fresh_samples: bool = True
    head_norm: float | None = None
    test_samples: int = 100
    eval_clients: int = 1000

    metrics: ClassVar[tuple[str, ...]] = ("distance", "test_mse")
    goals: ClassVar[dict[str, str]] = {"distance": "min", "test_mse": "min"}

    def __post_init__(self) -> None:
        check_int("LinearRepresentation.d", self.d, low=1)
        check_int(f"LinearRepresentation.k (<= d = {self.d})", self.k, low=1, high=self.d)
        check_int("LinearRepresentation.samples_per_client", self.samples_per_client, low=1)
        check_real("LinearRepresentation.noise_std", self.noise_std, low=0.0)
        if not isinstance(self.fresh_samples, bool):
            raise ValueError(
                f"LinearRepresentation.fresh_samples must be True or False, got "
                f"{self.fresh_samples!r}"
            )
        if self.head_norm is not None:
            check_real("LinearRepresentation.head_norm", self.head_norm, low=0.0, low_open=True)
        check_int("LinearRepresentation.test_samples", self.test_samples, low=1)
        check_int("LinearRepresentation.eval_clients", self.eval_clients, low=1)

    def build(self, n_clients: int, streams: Streams) -> LinearRepresentationData:
        """Bind the task to ``n_clients`` clients."""
        return LinearRepresentationData(self, n_clients, streams)


class LinearRepresentationData:
    """A :class:`LinearRepresentation` bound to a number of clients and a seed.

    Generates each client's data from keyed streams when asked; holds only the ground truth
    ``B*`` and the (small) cached evaluation sets.
    """

    def __init__(self, spec: LinearRepresentation, n_clients: int, streams: Streams) -> None:
        self.spec = spec
        self.n_clients = n_clients
        self.streams = streams
        d, k = spec.d, spec.k
        g = streams.normal("task/b_star", np.arange(d)[:, None], np.arange(k)[None, :])
        self.b_star: Array = np.linalg.qr(g)[0]
        self.head_norm = math.sqrt(k) if spec.head_norm is None else float(spec.head_norm)
        n_eval = min(spec.eval_clients, n_clients)
        if n_eval == n_clients:
            self.eval_clients: IntArray = np.arange(n_clients, dtype=np.int64)
        else:
            pick = streams.generator("task/eval_clients").choice(n_clients, n_eval, replace=False)
            self.eval_clients = np.sort(pick).astype(np.int64)
        self._fit: tuple[Array, Array] | None = None
        self._test: tuple[Array, Array] | None = None

    @property
    def d(self) -> int:
        """Input dimension."""
        return self.spec.d

    @property
    def k(self) -> int:
        """Representation dimension."""
        return self.spec.k

    @property
    def samples_per_client(self) -> int:
        """Samples per client per round."""
        return self.spec.samples_per_client

    def heads(self, clients: IntArray) -> Array:
        """True heads ``w_i*`` of ``clients``, shape ``(len(clients), k)``."""
        g = self.streams.normal("task/head", clients[:, None], np.arange(self.k)[None, :])
        return np.asarray(g * (self.head_norm / np.linalg.norm(g, axis=1, keepdims=True)))

    def _batch(
        self, purpose: str, clients: IntArray, key: int, m: int, noise: bool
    ) -> tuple[Array, Array]:
        c = clients[:, None, None]
        x = self.streams.normal(purpose + "/x", c, key, np.arange(m * self.d).reshape(1, m, self.d))
        theta = self.heads(clients) @ self.b_star.T  # (C, d): B* w_i*
        y = (x @ theta[:, :, None])[:, :, 0]
        if noise and self.spec.noise_std > 0:
            z = self.streams.normal(purpose + "/z", clients[:, None], key, np.arange(m)[None, :])
            y = y + self.spec.noise_std * z
        return x, y

    def train_batch(self, clients: IntArray, round: int) -> tuple[Array, Array]:
        """The samples ``(X, y)`` of shape ``(C, m, d)`` and ``(C, m)`` clients use in a round.

        Fresh every round if ``fresh_samples``, otherwise each client's fixed training set.
        """
        if self.spec.fresh_samples:
            return self._batch("data/train", clients, round, self.samples_per_client, True)
        return self._batch("data/fixed", clients, 0, self.samples_per_client, True)

    def init_batch(self, clients: IntArray) -> tuple[Array, Array]:
        """Samples for an initialisation step (e.g. method of moments), independent of rounds.

        With fixed data this is the clients' own training set.
        """
        if self.spec.fresh_samples:
            return self._batch("data/init", clients, 0, self.samples_per_client, True)
        return self._batch("data/fixed", clients, 0, self.samples_per_client, True)

    def fit_batch(self) -> tuple[Array, Array]:
        """Samples on which each evaluated client fits its personal head (its own data).

        A fixed batch of ``m`` noisy samples per evaluated client (its training set when the
        data are fixed), so evaluation curves are not jittered by resampling.
        """
        if self._fit is None:
            if self.spec.fresh_samples:
                self._fit = self._batch(
                    "data/fit", self.eval_clients, 0, self.samples_per_client, True
                )
            else:
                self._fit = self.train_batch(self.eval_clients, 0)
        return self._fit

    def test_batch(self) -> tuple[Array, Array]:
        """Clean test points ``(X, y)`` of the evaluated clients: ``(E, t, d)`` and ``(E, t)``."""
        if self._test is None:
            self._test = self._batch(
                "data/test", self.eval_clients, 0, self.spec.test_samples, False
            )
        return self._test

    def evaluate(self, model: LinearModel) -> dict[str, float]:
        """``distance`` to ``B*`` and mean per-client ``test_mse`` of a personalised model."""
        x, y = self.test_batch()
        theta = model.heads @ model.representation.T  # (E, d)
        pred = (x @ theta[:, :, None])[:, :, 0]
        mse = np.mean((pred - y) ** 2, axis=1)
        return {
            "distance": principal_angle_distance(model.representation, self.b_star),
            "test_mse": float(np.mean(mse)),
        }
