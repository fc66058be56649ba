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
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from simfl._checks import check_bool, check_int, check_real
from simfl.rng import Streams
from simfl.tasks.base import Task

__all__ = [
    "JobSamples",
    "LinearModel",
    "LinearRepresentation",
    "LinearRepresentationData",
    "LinearTask",
    "principal_angle_distance",
    "ridge_solve",
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
    """Personalised linear models: a shared representation and one head per evaluated client.

    With ``representation=None`` the heads are whole d-dimensional models (Local-only).
    """

    representation: Array | None  # (d, k)
    heads: Array  # (n_eval, k), or (n_eval, d) without a representation


def ridge_solve(x: Array, y: Array, ridge: float = 0.0) -> Array:
    """Batched least squares ``argmin_w ||X_i w - y_i||^2 + ridge ||w||^2``, shape ``(C, p)``.

    ``ridge=0`` uses the pseudo-inverse (minimum-norm solution when under-determined).
    """
    if ridge == 0.0:
        return np.asarray((np.linalg.pinv(x) @ y[:, :, None])[:, :, 0])
    xt = x.transpose(0, 2, 1)
    gram = xt @ x + ridge * np.eye(x.shape[2])
    return np.asarray(np.linalg.solve(gram, xt @ y[:, :, None])[:, :, 0])


#: Most floats of samples :meth:`JobSamples.prefetch` draws ahead in one call.
AHEAD_FLOATS = 2**19


class JobSamples:
    """Training samples of jobs, drawn ahead in large batches and handed out by job.

    ``draw(clients, keys)`` gives the samples ``(X, y)`` of jobs (row ``i``: ``clients[i]``
    at data key ``keys[i]``), each row the same whatever batch draws it. :meth:`prefetch`
    draws the jobs an asynchronous run is about to start (their devices and keys are known
    before their model versions are); :meth:`take` hands out those rows and draws the rest.
    The rows of the last two prefetches are kept.

    Attributes
    ----------
    hits, misses
        Job rows :meth:`take` found drawn ahead, and drew itself.
    """

    def __init__(self, draw: Callable[[IntArray, IntArray], tuple[Array, Array]]) -> None:
        self.draw = draw
        self.hits = 0
        self.misses = 0
        self._index: dict[tuple[int, int], int] = {}  # job -> row of the kept samples
        self._last: dict[tuple[int, int], int] = {}  # the last prefetch's jobs, from row 0
        self._n_last = 0  # rows drawn by the last prefetch
        self._x: Array | None = None
        self._y: Array | None = None

    def prefetch(self, clients: IntArray, keys: IntArray, row_floats: int) -> None:
        """Draw the samples of jobs ``(clients[i], keys[i])`` (up to :data:`AHEAD_FLOATS`)."""
        if clients.size == 0:
            return
        n = min(clients.size, max(1, AHEAD_FLOATS // max(1, row_floats)))
        x, y = self.draw(clients[:n], keys[:n])
        jobs = zip(clients[:n].tolist(), keys[:n].tolist(), strict=True)
        last = {job: i for i, job in enumerate(jobs)}
        if self._x is None or self._y is None:
            self._x, self._y, self._index = x, y, dict(last)
        else:  # the previous prefetch's rows (the last of the kept ones), then this one's
            p = self._n_last
            self._x = np.concatenate([self._x[-p:], x])
            self._y = np.concatenate([self._y[-p:], y])
            self._index = dict(self._last)
            self._index.update({job: row + p for job, row in last.items()})
        self._last, self._n_last = last, n

    def take(self, clients: IntArray, keys: IntArray) -> tuple[Array, Array]:
        """The samples of jobs ``(clients[i], keys[i])``, as ``draw`` gives them."""
        get = self._index.get
        rows = [get(job, -1) for job in zip(clients.tolist(), keys.tolist(), strict=True)]
        missing = [i for i, row in enumerate(rows) if row < 0]
        self.misses += len(missing)
        self.hits += len(rows) - len(missing)
        if self._x is None or self._y is None or len(missing) == len(rows):
            return self.draw(clients, keys)
        x, y = self._x[rows], self._y[rows]
        if missing:
            x[missing], y[missing] = self.draw(clients[missing], keys[missing])
        return x, y


class LinearTask(Task):
    """Tasks whose clients fit linear models ``y = w^T B^T x`` (or ``y = u^T x``).

    Their bound data offer what the linear algorithms (FedRep, FedAvg, GD-GD, Local-only, ...)
    use, as :class:`LinearRepresentationData` does: ``d``, ``k``, ``n_clients``,
    ``samples_per_client``, ``fresh_samples``, ``eval_clients``, ``client_sizes()``,
    ``train_batch(clients, round)``,
    ``init_batch(clients)``, ``fit_batch()``, ``test_batch()`` and ``evaluate(model)`` for a
    :class:`LinearModel`.
    """


@dataclass(frozen=True)
class LinearRepresentation(LinearTask):
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
        object.__setattr__(
            self,
            "fresh_samples",
            check_bool("LinearRepresentation.fresh_samples", self.fresh_samples),
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
        self._ahead = JobSamples(self._draw_jobs)

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

    @property
    def fresh_samples(self) -> bool:
        """Whether clients draw new samples every round."""
        return self.spec.fresh_samples

    def client_sizes(self) -> NDArray[np.float64]:
        """Samples each client uses per round (all equal here)."""
        return np.full(self.n_clients, float(self.samples_per_client))

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

    def job_batch(self, clients: IntArray, rounds: IntArray) -> tuple[Array, Array]:
        """The training samples of jobs, each with its own round key: ``(C, m, d)``, ``(C, m)``.

        Row ``i`` equals ``train_batch(clients[i:i + 1], rounds[i])`` to the last bit: every
        product is taken per job (a stack of one-job products), never across the jobs, so the
        rows do not depend on which jobs share the call (asynchronous updates, batched).
        """
        return self._ahead.take(clients, self._job_keys(rounds))

    def prefetch(self, clients: IntArray, rounds: IntArray) -> None:
        """Draw the samples of jobs about to start, for :meth:`job_batch` (numbers unchanged)."""
        self._ahead.prefetch(clients, self._job_keys(rounds), self.samples_per_client * self.d)

    def _job_keys(self, rounds: IntArray) -> IntArray:
        keys = np.asarray(rounds, dtype=np.int64)
        return keys if self.spec.fresh_samples else np.zeros_like(keys)

    def _draw_jobs(self, clients: IntArray, keys: IntArray) -> tuple[Array, Array]:
        purpose = "data/train" if self.spec.fresh_samples else "data/fixed"
        return self._job_batch(purpose, clients, keys, self.samples_per_client)

    def _job_batch(
        self, purpose: str, clients: IntArray, keys: IntArray, m: int
    ) -> tuple[Array, Array]:
        """:meth:`_batch` (with noise) of one client per key, one product per job."""
        c, key = clients[:, None, None], keys[:, None, None]
        x = self.streams.normal(purpose + "/x", c, key, np.arange(m * self.d).reshape(1, m, self.d))
        theta = self.heads(clients)[:, None, :] @ self.b_star.T  # (C, 1, d): B* w_i*, per job
        y = (x @ theta.transpose(0, 2, 1))[:, :, 0]
        if self.spec.noise_std > 0:
            z = self.streams.normal(purpose + "/z", c[:, :, 0], key[:, :, 0], np.arange(m)[None, :])
            y = y + self.spec.noise_std * z
        return x, y

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

    def client_mse(self, model: LinearModel) -> Array:
        """The test MSE of each evaluated client (``eval_clients``) under ``model``."""
        x, y = self.test_batch()
        if model.representation is None:
            theta = model.heads  # (E, d)
        else:
            theta = model.heads @ model.representation.T  # (E, d)
        pred = (x @ theta[:, :, None])[:, :, 0]
        return np.asarray(np.mean((pred - y) ** 2, axis=1))

    def evaluate_clients(self, model: LinearModel) -> tuple[IntArray, dict[str, Array]]:
        """The evaluated clients and each one's ``test_mse`` (``distance`` is not per client)."""
        return self.eval_clients, {"test_mse": self.client_mse(model)}

    def evaluate(self, model: LinearModel) -> dict[str, float]:
        """``distance`` to ``B*`` (if the model has a representation) and mean ``test_mse``."""
        metrics = {"test_mse": float(np.mean(self.client_mse(model)))}
        if model.representation is not None:
            metrics["distance"] = principal_angle_distance(model.representation, self.b_star)
        return metrics

    def new_client_mse(
        self,
        representation: Array | None,
        m_new: int,
        *,
        n_new: int = 100,
        test_points: int = 50,
        ridge: float = 1e-5,
    ) -> float:
        """Mean test MSE of ``n_new`` clients that never trained (FedRep Fig. 4).

        Each new client has a head ``w* ~ N(0, I_k)`` on ``B*`` and ``m_new`` noisy samples; it
        fits only a k-dim head on ``representation`` by ridge least squares (or, with
        ``representation=None``, a whole d-dim model, as Local-only does), and is scored on
        ``test_points`` clean points.
        """
        check_int("new_client_mse m_new", m_new, low=1)
        ids = np.arange(n_new)
        k, d = self.k, self.d
        heads = self.streams.normal("newclient/head", ids[:, None], np.arange(k)[None, :])
        theta = heads @ self.b_star.T  # (n_new, d)

        def batch(purpose: str, m: int, noise: bool) -> tuple[Array, Array]:
            x = self.streams.normal(
                purpose + "/x", ids[:, None, None], np.arange(m * d).reshape(1, m, d)
            )
            y = (x @ theta[:, :, None])[:, :, 0]
            if noise and self.spec.noise_std > 0:
                z = self.streams.normal(purpose + "/z", ids[:, None], np.arange(m)[None, :])
                y = y + self.spec.noise_std * z
            return x, y

        x, y = batch("newclient/train", m_new, True)
        xt, yt = batch("newclient/test", test_points, False)
        if representation is None:
            fitted = ridge_solve(x, y, ridge)
        else:
            fitted = ridge_solve(x @ representation, y, ridge) @ representation.T
        pred = (xt @ fitted[:, :, None])[:, :, 0]
        return float(np.mean((pred - yt) ** 2))
