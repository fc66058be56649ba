"""The domain-mixed linear regression task of FedDAR's synthetic experiment.

Zhong, He, Ren, Li, Li, "FedDAR: Federated Domain-Aware Representation Learning", ICLR 2023
(Section 3's toy example and Section 5.1, Figure 2). There are ``M`` domains sharing one
orthonormal representation ``B*`` (d x k, the Q factor of a Gaussian matrix), each with its own
head ``w_m*`` (a Gaussian k-vector normalised to norm ``head_norm``). Client ``i`` has a domain
mixture ``pi_i ~ Dirichlet(alpha * p)`` with the uniform prior ``p = 1/M``, and each of its
samples is drawn as

    z ~ Multinomial(pi_i),   x ~ N(0, I_d),   y = w_z*^T B*^T x + e,   e ~ N(0, noise_std^2).

Every client holds ``samples_per_client`` samples (the x-axis of the paper's Figure 2). The paper
writes the label noise as ``N(., sigma)`` with ``sigma = 1e-3`` and does not say whether
``sigma`` is a standard deviation or a variance; here ``noise_std`` is a standard deviation, as in
the FedRep notebook's ``np.random.normal(0, 0.001)`` (so the noise variance is 1e-6).

Not in the paper, and parameters here: ``d`` (default 20, FedRep's synthetic dimension),
``alpha`` (default 0.5, a small concentration: most clients hold one or two dominant domains plus
a few samples of others), ``head_norm`` (default 1: "normalising" read as unit norm) and whether
clients keep one training set (default, the paper's "training samples per client") or draw fresh
samples every round (the sample-splitting convention of the FedRep/FedDAR analyses).

The bound data offer the whole :class:`~simfl.tasks.linear.LinearTask` interface, so FedRep,
FedAvg and Local-only run on it unchanged as the paper's baselines, plus what FedDAR needs: the
domain label of every sample (:meth:`DomainMixtureData.train_domains`), the domain counts
``L_{i,m}`` (:meth:`DomainMixtureData.domain_counts`) and ``L_m``
(:meth:`DomainMixtureData.domain_totals`).

Metrics
-------
``domain_mse``
    The paper's objective ``(1/M) sum_m R_m``: the test squared error averaged over the test
    samples of each domain (pooled over the evaluated clients), then equally over the domains
    (domains without test samples are left out).
``test_mse``
    Mean over the evaluated clients of each client's mean squared error on its own test points
    (the client-wise metric of FedRep's experiments).
``distance``
    Principal-angle distance ``||(I - Q Q^T) B*||_2`` of the learned representation (absent
    for models without one, such as Local-only).

Test labels are clean (noise-free), as in :class:`~simfl.tasks.LinearRepresentation`: the test
errors measure the excess risk ``E (x^T (theta - theta*))^2`` and can fall below the noise
variance. Each evaluated client's test points follow its own mixture ``pi_i``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray
from scipy.special import gammaincinv

from simfl._checks import check_bool, check_int, check_real
from simfl.rng import Streams
from simfl.tasks.linear import JobSamples, LinearModel, LinearTask, principal_angle_distance

__all__ = ["DomainMixture", "DomainMixtureData", "DomainModel"]

Array = NDArray[np.float64]
IntArray = NDArray[np.int64]
_CHUNK = 4096
_CACHE_CLIENTS = 2**16


def _keyed(key: int | IntArray, ndim: int) -> int | IntArray:
    """A draw key for arrays of ``ndim`` axes: a scalar as is, one key per client on axis 0."""
    if np.ndim(key) == 0:
        return key
    return np.asarray(key).reshape((-1,) + (1,) * (ndim - 1))


@dataclass(frozen=True)
class DomainModel:
    """A shared representation and one head per domain (FedDAR's model).

    Every test sample is predicted with the head of its own domain.
    """

    representation: Array  # (d, k)
    heads: Array  # (M, k)


@dataclass(frozen=True)
class DomainMixture(LinearTask):
    """Linear regression whose clients mix ``n_domains`` domains with Dirichlet weights.

    Parameters
    ----------
    d
        Input dimension (>= 1; not given in the paper, 20 as in FedRep's synthetic setup).
    k
        Representation dimension, ``1 <= k <= d`` (paper: 2).
    n_domains
        Number of domains ``M`` (>= 1; paper: 5).
    samples_per_client
        Samples ``L_i`` every client holds (or draws per round with ``fresh_samples``), >= 1.
    alpha
        Dirichlet concentration (> 0; not given in the paper): ``pi_i ~ Dir(alpha * p)`` with
        ``p = 1/M``. Small values give clients dominated by one domain.
    noise_std
        Standard deviation of the training label noise (>= 0; see the module docstring).
    fresh_samples
        False (default): every client keeps one training set. True: new samples every round.
    head_norm
        Norm of every true domain head ``w_m*`` (> 0).
    test_samples
        Clean test points per evaluated client (>= 1).
    eval_clients
        Clients evaluated: all of them if the fleet is no larger, otherwise a fixed uniform
        subset of this size.
    """

    d: int = 20
    k: int = 2
    n_domains: int = 5
    samples_per_client: int = 10
    alpha: float = 0.5
    noise_std: float = 1e-3
    fresh_samples: bool = False
    head_norm: float = 1.0
    test_samples: int = 100
    eval_clients: int = 1000

    metrics: ClassVar[tuple[str, ...]] = ("domain_mse", "test_mse", "distance")
    goals: ClassVar[dict[str, str]] = {"domain_mse": "min", "test_mse": "min", "distance": "min"}

    def __post_init__(self) -> None:
        check_int("DomainMixture.d", self.d, low=1)
        check_int(f"DomainMixture.k (<= d = {self.d})", self.k, low=1, high=self.d)
        check_int("DomainMixture.n_domains", self.n_domains, low=1)
        check_int("DomainMixture.samples_per_client", self.samples_per_client, low=1)
        check_real("DomainMixture.alpha", self.alpha, low=0.0, low_open=True)
        check_real("DomainMixture.noise_std", self.noise_std, low=0.0)
        object.__setattr__(
            self, "fresh_samples", check_bool("DomainMixture.fresh_samples", self.fresh_samples)
        )
        check_real("DomainMixture.head_norm", self.head_norm, low=0.0, low_open=True)
        check_int("DomainMixture.test_samples", self.test_samples, low=1)
        check_int("DomainMixture.eval_clients", self.eval_clients, low=1)

    def build(self, n_clients: int, streams: Streams) -> DomainMixtureData:
        """Bind the task to ``n_clients`` clients."""
        return DomainMixtureData(self, n_clients, streams)


class DomainMixtureData:
    """A :class:`DomainMixture` bound to a number of clients and a seed.

    Generates each client's mixture and samples from keyed streams when asked; holds only the
    ground truth (``b_star``, ``domain_heads``) and small cached evaluation sets.
    """

    def __init__(self, spec: DomainMixture, n_clients: int, streams: Streams) -> None:
        self.spec = spec
        self.n_clients = n_clients
        self.streams = streams
        d, k, n_dom = spec.d, spec.k, spec.n_domains
        g = streams.normal("domain/b_star", np.arange(d)[:, None], np.arange(k)[None, :])
        self.b_star: Array = np.linalg.qr(g)[0]
        h = streams.normal("domain/heads", np.arange(n_dom)[:, None], np.arange(k)[None, :])
        #: The true domain heads ``w_m*``, shape ``(M, k)``.
        self.domain_heads: Array = h * (spec.head_norm / np.linalg.norm(h, axis=1, keepdims=True))
        n_eval = min(spec.eval_clients, n_clients)
        if n_eval == n_clients:
            self.eval_clients: IntArray = np.arange(n_clients, dtype=np.int64)
        else:
            pick = streams.generator("task/eval_clients").choice(n_clients, n_eval, replace=False)
            self.eval_clients = np.sort(pick).astype(np.int64)
        self._fit: tuple[Array, Array] | None = None
        self._test: tuple[Array, Array, IntArray] | None = None
        self._totals: Array | None = None
        self._mixtures: Array | None = None
        self._ahead = JobSamples(self._draw_jobs)

    # ------------------------------------------------------------------ the LinearTask interface
    @property
    def d(self) -> int:
        """Input dimension."""
        return self.spec.d

    @property
    def k(self) -> int:
        """Representation dimension."""
        return self.spec.k

    @property
    def n_domains(self) -> int:
        """Number of domains ``M``."""
        return self.spec.n_domains

    @property
    def samples_per_client(self) -> int:
        """Samples per client (per round with fresh samples)."""
        return self.spec.samples_per_client

    @property
    def fresh_samples(self) -> bool:
        """Whether clients draw new samples every round."""
        return self.spec.fresh_samples

    def client_sizes(self) -> NDArray[np.float64]:
        """Samples ``L_i`` each client holds (all equal here)."""
        return np.full(self.n_clients, float(self.samples_per_client))

    def mixtures(self, clients: IntArray) -> Array:
        """Domain mixtures ``pi_i ~ Dir(alpha / M, ..., alpha / M)``, shape ``(C, M)``.

        Drawn as normalised Gamma variates by the inverse CDF of keyed uniforms. If every
        Gamma of a client underflows (tiny ``alpha``), the client gets its largest one's domain.
        Fleets of up to ``2**16`` clients draw every mixture once and keep them.
        """
        if self.n_clients <= _CACHE_CLIENTS:
            if self._mixtures is None:
                self._mixtures = self._draw_mixtures(np.arange(self.n_clients, dtype=np.int64))
            return self._mixtures[clients]
        return self._draw_mixtures(clients)

    def _draw_mixtures(self, clients: IntArray) -> Array:
        n_dom = self.n_domains
        u = self.streams.uniform("domain/mixture", clients[:, None], np.arange(n_dom)[None, :])
        gam = np.asarray(gammaincinv(self.spec.alpha / n_dom, u), dtype=np.float64)
        total = gam.sum(axis=1, keepdims=True)
        empty = total[:, 0] == 0.0
        if empty.any():
            gam[empty] = np.eye(n_dom)[np.argmax(u[empty], axis=1)]
            total[empty] = 1.0
        return np.asarray(gam / total)

    def _domains(self, purpose: str, clients: IntArray, key: int | IntArray, m: int) -> IntArray:
        cum = np.cumsum(self.mixtures(clients), axis=1)  # (C, M)
        u = self.streams.uniform(
            purpose + "/z", clients[:, None], _keyed(key, 2), np.arange(m)[None, :]
        )
        z = np.sum(u[:, :, None] > cum[:, None, :], axis=2, dtype=np.int64)
        return np.asarray(np.minimum(z, self.n_domains - 1), dtype=np.int64)

    def _batch(
        self, purpose: str, clients: IntArray, key: int | IntArray, m: int, noise: bool
    ) -> tuple[Array, Array, IntArray]:
        """Samples of ``clients`` at ``key`` (one key, or one per client), ``(X, y, z)``.

        Every product is per client (a stack), so a client's rows do not depend on the batch.
        """
        z = self._domains(purpose, clients, key, m)
        c = clients[:, None, None]
        grid = np.arange(m * self.d).reshape(1, m, self.d)
        x = self.streams.normal(purpose + "/x", c, _keyed(key, 3), grid)
        theta = self.domain_heads @ self.b_star.T  # (M, d)
        y = np.take_along_axis(x @ theta.T, z[:, :, None], axis=2)[:, :, 0]
        if noise and self.spec.noise_std > 0:
            e = self.streams.normal(
                purpose + "/noise", clients[:, None], _keyed(key, 2), np.arange(m)[None, :]
            )
            y = y + self.spec.noise_std * e
        return x, y, z

    def _train_key(self, round: int) -> tuple[str, int]:
        return ("dm/train", round) if self.spec.fresh_samples else ("dm/fixed", 0)

    def train_batch(self, clients: IntArray, round: int) -> tuple[Array, Array]:
        """Training samples ``(X, y)`` of shape ``(C, L_i, d)`` and ``(C, L_i)`` for a round.

        Each client's fixed training set, or fresh samples every round with ``fresh_samples``.
        """
        x, y, _ = self.train_samples(clients, round)
        return x, y

    def train_domains(self, clients: IntArray, round: int) -> IntArray:
        """Domain label (0..M-1) of every sample of :meth:`train_batch`, shape ``(C, L_i)``."""
        purpose, key = self._train_key(round)
        return self._domains(purpose, clients, key, self.samples_per_client)

    def train_samples(self, clients: IntArray, round: int) -> tuple[Array, Array, IntArray]:
        """:meth:`train_batch` and :meth:`train_domains` in one call: ``(X, y, z)``."""
        purpose, key = self._train_key(round)
        return self._batch(purpose, clients, key, self.samples_per_client, True)

    def job_batch(self, clients: IntArray, rounds: IntArray) -> tuple[Array, Array]:
        """The training samples of jobs, each with its own round key.

        Row ``i`` equals ``train_batch(clients[i:i + 1], rounds[i])`` to the last bit
        (asynchronous updates, batched).
        """
        return self._ahead.take(clients, self._job_keys(rounds))

    def prefetch(self, clients: IntArray, rounds: IntArray) -> None:
        """Draw the samples of jobs about to start, for :meth:`job_batch` (numbers unchanged)."""
        self._ahead.prefetch(clients, self._job_keys(rounds), self.samples_per_client * self.d)

    def _job_keys(self, rounds: IntArray) -> IntArray:
        keys = np.asarray(rounds, dtype=np.int64)
        return keys if self.spec.fresh_samples else np.zeros_like(keys)

    def _draw_jobs(self, clients: IntArray, keys: IntArray) -> tuple[Array, Array]:
        purpose = "dm/train" if self.spec.fresh_samples else "dm/fixed"
        x, y, _ = self._batch(purpose, clients, keys, self.samples_per_client, True)
        return x, y

    def init_batch(self, clients: IntArray) -> tuple[Array, Array]:
        """Samples for an initialisation step (the training set when the data are fixed)."""
        purpose = "dm/init" if self.spec.fresh_samples else "dm/fixed"
        x, y, _ = self._batch(purpose, clients, 0, self.samples_per_client, True)
        return x, y

    def fit_batch(self) -> tuple[Array, Array]:
        """Samples on which each evaluated client fits a personal head (its own data).

        The training set of each evaluated client, or one fixed noisy batch with fresh samples.
        """
        if self._fit is None:
            purpose = "dm/fit" if self.spec.fresh_samples else "dm/fixed"
            x, y, _ = self._batch(purpose, self.eval_clients, 0, self.samples_per_client, True)
            self._fit = (x, y)
        return self._fit

    def _test_set(self) -> tuple[Array, Array, IntArray]:
        if self._test is None:
            self._test = self._batch("dm/test", self.eval_clients, 0, self.spec.test_samples, False)
        return self._test

    def test_batch(self) -> tuple[Array, Array]:
        """Clean test points ``(X, y)`` of the evaluated clients: ``(E, t, d)`` and ``(E, t)``."""
        x, y, _ = self._test_set()
        return x, y

    def test_domains(self) -> IntArray:
        """Domain label of every test point, shape ``(E, t)``."""
        return self._test_set()[2]

    # ------------------------------------------------------------------ domain counts
    def domain_counts(self, clients: IntArray) -> Array:
        """``L_{i,m}``: samples of each domain in each client's training set, ``(C, M)``.

        With fresh samples, the expected counts per round ``L_i * pi_{i,m}``.
        """
        if self.spec.fresh_samples:
            return self.samples_per_client * self.mixtures(clients)
        z = self.train_domains(clients, 0)
        return np.asarray((z[:, :, None] == np.arange(self.n_domains)).sum(axis=1), float)

    def domain_totals(self) -> Array:
        """``L_m = sum_i L_{i,m}`` over all clients, shape ``(M,)`` (shared once, cached)."""
        if self._totals is None:
            totals = np.zeros(self.n_domains)
            for start in range(0, self.n_clients, _CHUNK):
                chunk = np.arange(start, min(start + _CHUNK, self.n_clients), dtype=np.int64)
                totals += self.domain_counts(chunk).sum(axis=0)
            self._totals = totals
        return self._totals

    # ------------------------------------------------------------------ evaluation
    def squared_errors(self, model: LinearModel | DomainModel) -> Array:
        """Squared test error of every test point, ``(E, t)``.

        A :class:`~simfl.tasks.linear.LinearModel` predicts each client's points with that
        client's model; a :class:`DomainModel` predicts each point with its domain's head.
        """
        x, y, z = self._test_set()
        if isinstance(model, DomainModel):
            theta = model.heads @ model.representation.T  # (M, d)
            pred = np.take_along_axis(x @ theta.T, z[:, :, None], axis=2)[:, :, 0]
        else:
            if model.representation is None:
                per_client = model.heads  # (E, d)
            else:
                per_client = model.heads @ model.representation.T  # (E, d)
            pred = (x @ per_client[:, :, None])[:, :, 0]
        return np.asarray((pred - y) ** 2)

    def domain_errors(self, model: LinearModel | DomainModel) -> Array:
        """Test MSE of each domain ``R_m`` (pooled over evaluated clients; NaN if no points)."""
        return self._per_domain(self.squared_errors(model))

    def _per_domain(self, err: Array) -> Array:
        z = self.test_domains().ravel()
        sums = np.bincount(z, weights=err.ravel(), minlength=self.n_domains)
        counts = np.bincount(z, minlength=self.n_domains)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.asarray(np.where(counts > 0, sums / np.maximum(counts, 1), np.nan))

    def evaluate(self, model: LinearModel | DomainModel) -> dict[str, float]:
        """``domain_mse``, ``test_mse`` and (with a representation) ``distance``."""
        err = self.squared_errors(model)
        per_domain = self._per_domain(err)
        metrics = {
            "domain_mse": float(np.nanmean(per_domain)),
            "test_mse": float(np.mean(np.mean(err, axis=1))),
        }
        if model.representation is not None:
            metrics["distance"] = principal_angle_distance(model.representation, self.b_star)
        return metrics
