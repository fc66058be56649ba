"""Federated matrix factorisation tasks: what FedMAvg factorises, and the synthetic clustering one.

Wang, Suwandi, Chang, "Demystifying Model Averaging for Communication-Efficient Federated Matrix
Factorization", ICASSP 2021. A data matrix ``X`` (M x N) is split column-wise into ``P`` client
blocks ``X_p`` (M x N_p); the model is ``X ~ W H`` with a shared factor ``W`` (M x K, on the
server) and a local factor ``H_p`` (K x N_p) per client. Client ``p`` observes the rows
``R_p`` of its block (all of them for dense data, its rated items for recommendation), and its
local loss is, per observed entry ``(i, j)``,

    1/2 (x_ij - w_i^T h_j)^2 + ridge/2 (||w_i||^2 + ||h_j||^2)

(the per-rating ridge of ALS-WR, so the clients' losses add up to the centralised one). The
feasible sets are the task's: :func:`project_w` (``W >= 0`` for clustering) and
:func:`project_h` (for the ONMF clustering model, ``H >= 0`` with unit-norm columns).

:class:`SyntheticClustering` is the paper's synthetic clustering set (Section 4, Fig. 1): ``K``
non-negative clusters in ``M`` features, ``N`` samples on ``P`` clients. Case 1 (``split="iid"``)
deals the samples out uniformly at random in equal blocks; Case 2 (``split="noniid"``, the
paper's Fig. 1 setting) groups the data into ``P`` groups, one per client, which makes clients
non-i.i.d. (mostly one cluster each) and unbalanced. The paper clusters the data into 100 groups
without saying how; here each group is the Voronoi cell of a sample drawn uniformly as an
anchor (every client holds at least its anchor). The generator is an assumption too (the
paper's is not described): centroid entries ``U(0, 1)`` (each kept with probability
``density``), samples ``max(c_k + noise_std * z, 0)`` with balanced cluster labels.

Metrics: ``objective`` is the paper's ``sum_p (N_p/N) f_p = ||X - W H||_F^2 / (2N)`` (no
orthogonality penalty, see FedMAvg's docstring); ``accuracy`` is the clustering accuracy of the
labels ``argmax_k H_kj`` after the best one-to-one matching of clusters to true labels
(Hungarian algorithm, ``scipy.optimize.linear_sum_assignment``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import linear_sum_assignment

from simfl._checks import check_choice, check_int, check_real
from simfl.rng import Streams
from simfl.tasks.base import Task

__all__ = [
    "H_CONSTRAINTS",
    "ClusteringData",
    "MatrixData",
    "MatrixTask",
    "SyntheticClustering",
    "clustering_accuracy",
    "project_h",
    "project_w",
]

Array = NDArray[np.float64]
IntArray = NDArray[np.int64]

#: Feasible sets of the local factor: unconstrained, non-negative, non-negative unit-norm columns.
H_CONSTRAINTS = ("none", "nonneg", "nonneg_unit")


def project_w(w: Array, nonnegative: bool) -> Array:
    """Euclidean projection of ``W`` onto its feasible set (``W >= 0``, or all of R^(M x K))."""
    return np.maximum(w, 0.0) if nonnegative else w


def project_h(h: Array, constraint: str) -> Array:
    """Column-wise Euclidean projection of ``H`` (``..., K, n``) onto ``constraint``.

    ``"nonneg_unit"`` projects every column onto ``{h >= 0, ||h||_2 = 1}``: the positive part,
    normalised; a column with no positive entry goes to the unit vector of its largest entry
    (the nearest point of the set).
    """
    if constraint == "none":
        return h
    pos = np.maximum(h, 0.0)
    if constraint == "nonneg":
        return pos
    norms = np.linalg.norm(pos, axis=-2, keepdims=True)
    out = pos / np.where(norms > 0.0, norms, 1.0)
    dead = (norms == 0.0)[..., 0, :]  # (..., n)
    if dead.any():
        top = np.argmax(h, axis=-2)  # (..., n)
        onehot = np.arange(h.shape[-2])[:, None] == top[..., None, :]
        out = np.where(dead[..., None, :], onehot.astype(np.float64), out)
    return out


def clustering_accuracy(labels: IntArray, truth: IntArray) -> float:
    """Fraction of samples whose cluster maps to their true label under the best matching."""
    k = int(max(labels.max(), truth.max())) + 1
    counts = np.zeros((k, k))
    np.add.at(counts, (labels, truth), 1.0)
    rows, cols = linear_sum_assignment(counts, maximize=True)
    return float(counts[rows, cols].sum() / labels.size)


class MatrixTask(Task):
    """Matrix factorisation tasks; their bound data are :class:`MatrixData`."""


class MatrixData(ABC):
    """A factorisation problem bound to ``n_clients`` clients (what FedMAvg needs).

    Attributes
    ----------
    n_rows, rank, n_clients
        ``M``, ``K`` and ``P``.
    offsets
        Client ``p`` owns columns ``offsets[p]:offsets[p + 1]`` of the stacked ``H`` (K x N).
    ridge
        Per-entry ridge weight (>= 0).
    nonnegative_w, h_constraint
        The feasible sets (:func:`project_w`, :func:`project_h`).
    """

    n_rows: int
    rank: int
    n_clients: int
    offsets: IntArray
    ridge: float
    nonnegative_w: bool
    h_constraint: str

    @property
    def n_cols(self) -> int:
        """Total number of columns ``N``."""
        return int(self.offsets[-1])

    def columns(self, p: int) -> slice:
        """Client ``p``'s columns of ``H``."""
        return slice(int(self.offsets[p]), int(self.offsets[p + 1]))

    def client_cols(self) -> IntArray:
        """``N_p`` of every client."""
        return np.diff(self.offsets).astype(np.int64)

    def client_sizes(self) -> Array:
        """Data size of every client, for sampling in proportion to it (default ``N_p``)."""
        return self.client_cols().astype(np.float64)

    @abstractmethod
    def client_data(self, p: int) -> tuple[IntArray | None, Array]:
        """Client ``p``'s observed rows (``None``: all ``M``) and its values there (n_p x N_p)."""

    def xt_w(self, w: Array) -> Array | None:
        """``X^T W`` (N x K) over all clients' columns if every client observes all rows.

        ``None`` (the default) for tasks with partially observed rows.
        """
        return None

    @abstractmethod
    def initial_factors(self, streams: Streams) -> tuple[Array, Array]:
        """Feasible starting ``W^0`` (M x K) and stacked ``H^0`` (K x N)."""

    @abstractmethod
    def evaluate(self, w: Array, h: Array) -> dict[str, float]:
        """The task's metrics for ``W`` and the stacked ``H``."""


@dataclass(frozen=True)
class SyntheticClustering(MatrixTask):
    """Non-negative clustering data of FedMAvg's Fig. 1, clustered by an ONMF-type model.

    The fleet size is the number of clients ``P`` (the paper's 100).

    Parameters
    ----------
    n_features
        ``M`` (the paper's 2000).
    n_samples
        ``N`` (the paper's 10000); at least the number of clients.
    n_clusters
        ``K`` (the paper's 20), also the rank of the factorisation.
    split
        ``"noniid"`` (Case 2, the paper's Fig. 1) or ``"iid"`` (Case 1).
    noise_std
        Standard deviation of the Gaussian noise around the centroids (>= 0).
    density
        Fraction of the features on which a centroid is non-zero, in (0, 1] (1: dense).
    """

    n_features: int = 2000
    n_samples: int = 10000
    n_clusters: int = 20
    split: str = "noniid"
    noise_std: float = 0.5
    density: float = 1.0

    metrics: ClassVar[tuple[str, ...]] = ("objective", "accuracy")
    goals: ClassVar[dict[str, str]] = {"objective": "min", "accuracy": "max"}

    def __post_init__(self) -> None:
        check_int("SyntheticClustering.n_features", self.n_features, low=1)
        check_int(
            f"SyntheticClustering.n_clusters (<= n_features = {self.n_features})",
            self.n_clusters,
            low=1,
            high=self.n_features,
        )
        check_int(
            f"SyntheticClustering.n_samples (>= n_clusters = {self.n_clusters})",
            self.n_samples,
            low=self.n_clusters,
        )
        check_choice("SyntheticClustering.split", self.split, ("iid", "noniid"))
        check_real("SyntheticClustering.noise_std", self.noise_std, low=0.0)
        check_real("SyntheticClustering.density", self.density, low=0.0, high=1.0, low_open=True)

    def build(self, n_clients: int, streams: Streams) -> ClusteringData:
        """Generate the data and split it over ``n_clients`` clients."""
        if n_clients > self.n_samples:
            raise ValueError(
                f"SyntheticClustering.n_samples = {self.n_samples} must be >= the number of "
                f"clients {n_clients}"
            )
        return ClusteringData(self, n_clients, streams)


class ClusteringData(MatrixData):
    """A :class:`SyntheticClustering` bound to a fleet: ``X`` with client-ordered columns."""

    def __init__(self, spec: SyntheticClustering, n_clients: int, streams: Streams) -> None:
        m, n, k = spec.n_features, spec.n_samples, spec.n_clusters
        self.spec = spec
        self.n_rows, self.rank, self.n_clients = m, k, n_clients
        self.ridge, self.nonnegative_w, self.h_constraint = 0.0, True, "nonneg_unit"
        gen = streams.generator("task/clusters")
        centroids = gen.uniform(0.0, 1.0, size=(m, k)) * (gen.random((m, k)) < spec.density)
        labels = gen.permutation(np.arange(n) % k)
        x = np.maximum(centroids[:, labels] + spec.noise_std * gen.standard_normal((m, n)), 0.0)
        owner = self._partition(x, n_clients, streams)
        order = np.argsort(owner, kind="stable")
        counts = np.bincount(owner, minlength=n_clients)
        self.offsets: IntArray = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        #: The data, transposed (N x M, C order) so that each client's block is contiguous.
        self.xt: Array = np.ascontiguousarray(x[:, order].T)
        self.labels: IntArray = labels[order].astype(np.int64)
        self.centroids: Array = centroids
        self._sq_norm = float(np.sum(self.xt**2))

    def _partition(self, x: Array, p: int, streams: Streams) -> IntArray:
        n = x.shape[1]
        gen = streams.generator("task/split", 0 if self.spec.split == "iid" else 1)
        if self.spec.split == "iid":  # equal blocks of a random permutation
            return np.asarray((np.arange(n) * p) // n, dtype=np.int64)[np.argsort(gen.random(n))]
        anchors = np.sort(gen.choice(n, size=p, replace=False))
        a = x[:, anchors]  # Voronoi cells of the anchors: ||x - a||^2 up to ||x||^2
        dist = np.sum(a**2, axis=0)[:, None] - 2.0 * (a.T @ x)
        dist[np.arange(p), anchors] = -np.inf  # each anchor stays in its own cell
        return np.asarray(np.argmin(dist, axis=0), dtype=np.int64)

    def client_data(self, p: int) -> tuple[IntArray | None, Array]:  # noqa: D102
        return None, self.xt[self.columns(p)].T

    def xt_w(self, w: Array) -> Array:  # noqa: D102
        return self.xt @ w

    def initial_factors(self, streams: Streams) -> tuple[Array, Array]:
        """``W^0 ~ U(0, 1)`` and ``H^0`` with ``U(0, 1)`` entries projected to unit columns."""
        k = self.rank
        w = streams.uniform("alg/init_w", np.arange(self.n_rows)[:, None], np.arange(k)[None, :])
        h = streams.uniform("alg/init_h", np.arange(k)[:, None], np.arange(self.n_cols)[None, :])
        return w, project_h(h, self.h_constraint)

    def objective(self, w: Array, h: Array) -> float:
        """``||X - W H||_F^2 / (2N)``, by ``||X||^2 - 2<W^T X, H> + <W^T W, H H^T>``."""
        cross = float(np.sum(self.xt_w(w) * h.T))
        quad = float(np.sum((w.T @ w) * (h @ h.T)))
        return max(self._sq_norm - 2.0 * cross + quad, 0.0) / (2.0 * self.n_cols)

    def evaluate(self, w: Array, h: Array) -> dict[str, float]:
        """``objective`` and Hungarian-matched ``accuracy`` of ``argmax_k H_kj``."""
        labels = np.argmax(h, axis=0).astype(np.int64)
        return {
            "objective": self.objective(w, h),
            "accuracy": clustering_accuracy(labels, self.labels),
        }
