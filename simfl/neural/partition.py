"""Splitting a data set over clients (numpy only; no torch).

Every partition gives each client a set of training indices and then a set of test indices.
For class labels, :func:`match_test` deals the test pool so that each client's test set has the
same classes in the same proportions as its training set (the FedRep code reuses each client's
class assignment on the test set, which this generalises to any partition); for other kinds of
data (:attr:`simfl.neural.Dataset.kind`), :func:`deal_test` deals it in proportion to the
clients' training sizes. All randomness comes from the generator passed in (a keyed stream of
the run). :meth:`Partition.split_dataset` does both for a loaded data set.

* :class:`Shards` -- the FedRep code's ``utils/sampling.noniid``: ``S`` classes per client
  (class labels only).
* :class:`Dirichlet` -- label skew: each class is spread over the clients by ``Dir(alpha)``
  proportions (Hsu et al. 2019; with the NIID-Bench cap that stops a client growing past the
  mean size while classes are dealt; class labels only).
* :class:`IID` -- a uniform split into equal sizes (any kind of data).
* :class:`LogNormalSizes` -- quantity skew: i.i.d. samples, client sizes proportional to
  ``LogNormal(0, sigma^2)`` draws (any kind of data).
* :class:`Natural` -- the data set's own groups (FEMNIST writers, speakers, your client ids;
  any kind of data).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from simfl._checks import check_int, check_real

if TYPE_CHECKING:
    from simfl.neural.data import Dataset

__all__ = [
    "IID",
    "Dirichlet",
    "LogNormalSizes",
    "Natural",
    "Partition",
    "Shards",
    "deal_test",
    "match_test",
]

IntArray = NDArray[np.int64]


class Partition:
    """How a data set's pools are split over clients (a frozen dataclass in each subclass)."""

    def split(
        self,
        labels: IntArray,
        n_clients: int,
        n_classes: int | None,
        rng: np.random.Generator,
        groups: IntArray | None = None,
        *,
        kind: str = "classification",
    ) -> list[IntArray]:
        """Each client's training indices into ``labels`` (sorted).

        ``labels`` are the training targets (one row per sample) and ``kind`` what they are
        (:attr:`simfl.neural.Dataset.kind`); partitions that deal class labels refuse other
        kinds.
        """
        raise NotImplementedError

    def split_test(
        self,
        train_parts: list[IntArray],
        train_labels: IntArray,
        test_labels: IntArray,
        n_classes: int | None,
        rng: np.random.Generator,
        groups: tuple[IntArray, IntArray] | None = None,
        *,
        kind: str = "classification",
    ) -> list[IntArray]:
        """Each client's test indices.

        Default: :func:`match_test` for class labels, :func:`deal_test` for other kinds.
        """
        if kind == "classification":
            assert n_classes is not None
            return match_test(train_parts, train_labels, test_labels, n_classes, rng)
        return deal_test(train_parts, len(test_labels), rng)

    def split_dataset(
        self, data: Dataset, n_clients: int, rng: np.random.Generator
    ) -> tuple[list[IntArray], list[IntArray]]:
        """Each client's training and test indices into ``data``'s pools (in that order).

        The same draws from ``rng`` as :meth:`split` then :meth:`split_test` (which this calls
        with the data set's labels, classes, groups and kind). Class labels are passed without
        the ``kind`` keyword, so a partition written before kinds existed splits them as it did.
        """
        extra: dict[str, Any] = {} if data.kind == "classification" else {"kind": data.kind}
        groups = None if data.groups is None else data.groups[0]
        train = self.split(data.y_train, n_clients, data.n_classes, rng, groups, **extra)
        test = self.split_test(
            train, data.y_train, data.y_test, data.n_classes, rng, data.groups, **extra
        )
        return train, test


def _class_labels(owner: str, labels: IntArray, n_classes: int | None, kind: str) -> int:
    """``n_classes``, after checking the data set has class labels (else ``ValueError``)."""
    if kind != "classification":
        raise ValueError(
            f"{owner} deals class labels, but the data set's kind is {kind!r}: use Natural(), "
            "IID() or LogNormalSizes() for it"
        )
    if labels.ndim != 1 or labels.dtype.kind not in "iu" or n_classes is None:
        raise ValueError(
            f"{owner} needs integer class labels (N,) and n_classes, got {labels.dtype} "
            f"labels of shape {labels.shape} and n_classes = {n_classes}"
        )
    return n_classes


def _largest_remainder(weights: NDArray[np.float64], total: int) -> IntArray:
    """Integers proportional to ``weights`` that sum to ``total``."""
    share = weights / weights.sum() * total
    base: IntArray = np.floor(share).astype(np.int64)
    rest = total - int(base.sum())
    order = np.argsort(-(share - base), kind="stable")
    base[order[:rest]] += 1
    return base


@dataclass(frozen=True)
class Shards(Partition):
    """``classes_per_client`` shards per client, one class each (FedRep's ``noniid``).

    The class labels, each repeated ``shards_per_class = S * n / C`` times, are shuffled and
    dealt ``S`` to a client; every class is cut into as many equal contiguous shards as it was
    dealt and its shards are handed out in random order. As in the code, a client can be dealt
    the same class twice. When ``S * n`` is not a multiple of ``C`` (the code then fails), the
    dealt list is the first ``S * n`` labels of a shuffle of each class repeated
    ``ceil(S * n / C)`` times.
    """

    classes_per_client: int = 2

    def __post_init__(self) -> None:
        check_int("Shards.classes_per_client", self.classes_per_client, low=1)

    def split(  # noqa: D102
        self,
        labels: IntArray,
        n_clients: int,
        n_classes: int | None,
        rng: np.random.Generator,
        groups: IntArray | None = None,
        *,
        kind: str = "classification",
    ) -> list[IntArray]:
        n_classes = _class_labels("Shards()", labels, n_classes, kind)
        s = self.classes_per_client
        total = s * n_clients
        per_class = math.ceil(total / n_classes)
        dealt = rng.permutation(np.repeat(np.arange(n_classes), per_class))[:total]
        shards: dict[int, list[IntArray]] = {}
        for c in range(n_classes):
            count = int((dealt == c).sum())
            if count:
                pieces = np.array_split(np.flatnonzero(labels == c), count)
                shards[c] = [pieces[i] for i in rng.permutation(count)]
        parts = [[] for _ in range(n_clients)]  # type: list[list[IntArray]]
        for j, c in enumerate(dealt):
            parts[j // s].append(shards[int(c)].pop())
        return [np.sort(np.concatenate(p)).astype(np.int64) for p in parts]


@dataclass(frozen=True)
class Dirichlet(Partition):
    """Label skew: class ``c``'s samples go to the clients in ``Dir(alpha)`` proportions.

    While classes are dealt, a client already holding more than ``N / n`` samples gets no more
    (the NIID-Bench balancing). The draw is repeated until every client has at least
    ``min_size`` samples (at most 1000 times).
    """

    alpha: float = 0.5
    min_size: int = 2

    def __post_init__(self) -> None:
        check_real("Dirichlet.alpha", self.alpha, low=0.0, low_open=True)
        check_int("Dirichlet.min_size", self.min_size, low=1)

    def split(  # noqa: D102
        self,
        labels: IntArray,
        n_clients: int,
        n_classes: int | None,
        rng: np.random.Generator,
        groups: IntArray | None = None,
        *,
        kind: str = "classification",
    ) -> list[IntArray]:
        n_classes = _class_labels("Dirichlet()", labels, n_classes, kind)
        n = labels.size
        if n < self.min_size * n_clients:
            raise ValueError(
                f"Dirichlet.min_size = {self.min_size} needs >= {self.min_size * n_clients} "
                f"samples for {n_clients} clients; the data set has {n}"
            )
        for _ in range(1000):
            parts: list[list[int]] = [[] for _ in range(n_clients)]
            for c in range(n_classes):
                idx = rng.permutation(np.flatnonzero(labels == c))
                p = rng.dirichlet(np.full(n_clients, self.alpha))
                p = p * np.array([len(q) < n / n_clients for q in parts])
                if p.sum() <= 0:
                    p = np.full(n_clients, 1.0 / n_clients)
                cuts = (np.cumsum(p / p.sum()) * idx.size).astype(np.int64)[:-1]
                for q, piece in zip(parts, np.split(idx, cuts), strict=True):
                    q.extend(piece.tolist())
            if min(len(q) for q in parts) >= self.min_size:
                return [np.sort(np.asarray(q, dtype=np.int64)) for q in parts]
        raise ValueError(
            f"Dirichlet.alpha = {self.alpha}: no draw in 1000 gave every one of {n_clients} "
            f"clients >= Dirichlet.min_size = {self.min_size} samples; raise alpha or lower "
            "min_size"
        )


@dataclass(frozen=True)
class LogNormalSizes(Partition):
    """Quantity skew: i.i.d. labels, client sizes proportional to ``LogNormal(0, sigma^2)``.

    The sizes are rounded to integers summing to the pool size (largest remainder), each at
    least one; ``sigma=0`` gives equal sizes (an i.i.d. split).
    """

    sigma: float = 1.0

    def __post_init__(self) -> None:
        check_real("LogNormalSizes.sigma", self.sigma, low=0.0)

    def split(  # noqa: D102
        self,
        labels: IntArray,
        n_clients: int,
        n_classes: int | None,
        rng: np.random.Generator,
        groups: IntArray | None = None,
        *,
        kind: str = "classification",
    ) -> list[IntArray]:
        n = len(labels)
        if n < n_clients:
            raise ValueError(
                f"LogNormalSizes needs >= {n_clients} samples for the clients, got {n}"
            )
        w = np.exp(self.sigma * rng.standard_normal(n_clients))
        sizes = 1 + _largest_remainder(w, n - n_clients)
        order = rng.permutation(n)
        return [np.sort(p).astype(np.int64) for p in np.split(order, np.cumsum(sizes)[:-1])]


@dataclass(frozen=True)
class Natural(Partition):
    """The data set's own groups: one client per group, the ``n`` smallest group ids.

    FEMNIST's writers, the speakers of :class:`~simfl.neural.Plays`, the client ids of
    :class:`~simfl.neural.Tensors`. Each client's test set is its group's test samples. Works
    for every kind of data.
    """

    def split(  # noqa: D102
        self,
        labels: IntArray,
        n_clients: int,
        n_classes: int | None,
        rng: np.random.Generator,
        groups: IntArray | None = None,
        *,
        kind: str = "classification",
    ) -> list[IntArray]:
        if groups is None:
            raise ValueError("Natural() needs a data set with groups (e.g. FEMNIST's writers)")
        ids = np.unique(groups)
        if ids.size < n_clients:
            raise ValueError(
                f"Natural(): the data set has {ids.size} groups, fewer than the {n_clients} "
                "clients of the fleet"
            )
        return [np.flatnonzero(groups == g).astype(np.int64) for g in ids[:n_clients].tolist()]

    def split_test(  # noqa: D102
        self,
        train_parts: list[IntArray],
        train_labels: IntArray,
        test_labels: IntArray,
        n_classes: int | None,
        rng: np.random.Generator,
        groups: tuple[IntArray, IntArray] | None = None,
        *,
        kind: str = "classification",
    ) -> list[IntArray]:
        if groups is None:
            raise ValueError("Natural() needs a data set with groups (e.g. FEMNIST's writers)")
        train_groups, test_groups = groups
        ids = [int(train_groups[p[0]]) for p in train_parts]
        return [np.flatnonzero(test_groups == g).astype(np.int64) for g in ids]


def match_test(
    train_parts: list[IntArray],
    train_labels: IntArray,
    test_labels: IntArray,
    n_classes: int,
    rng: np.random.Generator,
    *,
    kind: str = "classification",
) -> list[IntArray]:
    """Deal the test pool so each client's test classes follow its training classes.

    Every class's test samples are shuffled and split over the clients in proportion to how
    many training samples of that class each holds (largest remainder), so a client only sees
    its own classes at test time, in the same proportions. Class labels only (``kind``
    ``"classification"``): :func:`deal_test` deals other kinds.
    """
    if kind != "classification" or test_labels.ndim != 1 or test_labels.dtype.kind not in "iu":
        raise ValueError(
            f"match_test deals class labels, but got kind {kind!r} with {test_labels.dtype} "
            f"labels of shape {test_labels.shape}: use deal_test"
        )
    counts = np.stack([np.bincount(train_labels[p], minlength=n_classes) for p in train_parts])
    parts: list[list[IntArray]] = [[] for _ in train_parts]
    for c in range(n_classes):
        pool = rng.permutation(np.flatnonzero(test_labels == c))
        if counts[:, c].sum() == 0 or pool.size == 0:
            continue
        sizes = _largest_remainder(counts[:, c].astype(np.float64), pool.size)
        for q, piece in zip(parts, np.split(pool, np.cumsum(sizes)[:-1]), strict=True):
            q.append(piece)
    return [
        np.sort(np.concatenate(q)).astype(np.int64) if q else np.zeros(0, np.int64) for q in parts
    ]


def deal_test(train_parts: list[IntArray], n_test: int, rng: np.random.Generator) -> list[IntArray]:
    """Deal a test pool of ``n_test`` samples in proportion to the clients' training sizes.

    The pool is shuffled and cut into one piece per client, sized by largest remainder in
    proportion to its number of training samples: any kind of data (no labels are read).
    """
    pool = rng.permutation(n_test).astype(np.int64)
    weights = np.array([p.size for p in train_parts], dtype=np.float64)
    if weights.sum() <= 0:
        weights = np.ones(len(train_parts))
    sizes = _largest_remainder(weights, n_test)
    return [np.sort(q) for q in np.split(pool, np.cumsum(sizes)[:-1])]


@dataclass(frozen=True)
class IID(Partition):
    """An i.i.d. split: the pool is shuffled and cut into ``n`` parts of equal size.

    Sizes differ by at most one (the first ``N mod n`` clients get one more). Works for every
    kind of data; the test pool follows :meth:`Partition.split_test`.
    """

    def split(  # noqa: D102
        self,
        labels: IntArray,
        n_clients: int,
        n_classes: int | None,
        rng: np.random.Generator,
        groups: IntArray | None = None,
        *,
        kind: str = "classification",
    ) -> list[IntArray]:
        n = len(labels)
        if n < n_clients:
            raise ValueError(f"IID() needs >= {n_clients} samples for the clients, got {n}")
        order = rng.permutation(n).astype(np.int64)
        return [np.sort(p) for p in np.array_split(order, n_clients)]
