"""Classification on per-client arrays: each client holds its own ``(x, y)``; one shared test set.

Two task specs bind to the same data object, :class:`ClassificationData`:

:class:`ClientArrays`
    Arrays the user already has (one ``(x, y)`` pair per client, plus a test set).
:class:`SyntheticSoftmax`
    Synthetic non-iid multinomial logistic data from W1's generator
    (:func:`simfl.tasks.w1_data.make_w1`): with its defaults it is workload W1 of the peer
    benchmark (100 clients x 200 samples when run on a fleet of 100, d = 60, 10 classes,
    2,000 test samples), bit-identical to the arrays FLGo and Flower train on there.

Metrics
-------
``accuracy``
    Fraction of the test samples whose largest logit is the label (the first one on ties, as
    ``argmax`` does).
``loss``
    Mean softmax cross-entropy (natural log) over the test samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from simfl._checks import check_int
from simfl.rng import Streams
from simfl.tasks.base import Task
from simfl.tasks.w1_data import make_w1

__all__ = [
    "ClassificationData",
    "ClassificationTask",
    "ClientArrays",
    "SyntheticSoftmax",
    "softmax_metrics",
]

Array = NDArray[np.float32]
IntArray = NDArray[np.int64]


def softmax_metrics(logits: NDArray[np.floating[Any]], y: IntArray) -> dict[str, float]:
    """``accuracy`` and mean cross-entropy ``loss`` of ``logits`` (n, k) for labels ``y`` (n)."""
    z = logits.astype(np.float64, copy=False)
    top = z.max(axis=1, keepdims=True)
    lse = np.log(np.exp(z - top).sum(axis=1)) + top[:, 0]
    loss = lse - z[np.arange(y.size), y]
    return {
        "accuracy": float(np.mean(np.argmax(z, axis=1) == y)),
        "loss": float(np.mean(loss)),
    }


class ClassificationData:
    """Per-client classification data, pooled: what a bound classification task provides.

    The clients' samples are stored back to back in one float32 array (``x``: ``(N, d)``,
    ``y``: ``(N,)``, client ``i`` owning rows ``offsets[i]:offsets[i + 1]``), so a cohort's
    samples are gathered with one ``take``. The array has one more column, all ones, that
    :meth:`gather` can include, so a linear model's bias joins its weights in one product.

    Parameters
    ----------
    clients
        One ``(x, y)`` pair per client: ``x`` of shape ``(n_i, d)`` (converted to float32),
        ``y`` of shape ``(n_i,)`` with integer labels in ``[0, n_classes)``; ``n_i >= 1``.
    test
        The test set ``(x, y)``, at least one sample.
    n_classes
        Number of classes (default: one more than the largest label seen).
    owner
        Name used in error messages.
    """

    def __init__(
        self,
        clients: Sequence[tuple[ArrayLike, ArrayLike]],
        test: tuple[ArrayLike, ArrayLike],
        n_classes: int | None = None,
        owner: str = "ClassificationData",
    ) -> None:
        given: object = clients
        if isinstance(given, (str, bytes)) or not isinstance(given, Sequence):
            raise ValueError(f"{owner}.clients must be a list of (x, y) pairs, got {clients!r:.60}")
        if len(clients) == 0:
            raise ValueError(f"{owner}.clients must hold at least one (x, y) pair, got none")
        pairs = [_pair(f"{owner}.clients[{i}]", c) for i, c in enumerate(clients)]
        tx, ty = _pair(f"{owner}.test", test)
        d = pairs[0][0].shape[1]
        for i, (x, _) in enumerate(pairs):
            if x.shape[1] != d:
                raise ValueError(
                    f"{owner}.clients[{i}] x must have d = {d} columns like client 0, "
                    f"got {x.shape[1]}"
                )
        if tx.shape[1] != d:
            raise ValueError(f"{owner}.test x must have d = {d} columns, got {tx.shape[1]}")
        top = max(int(y.max()) for _, y in [*pairs, (tx, ty)]) + 1
        k = top if n_classes is None else check_int(f"{owner}.n_classes", n_classes, low=2)
        if k < top or k < 2:
            raise ValueError(
                f"{owner}.n_classes must be >= 2 and exceed every label (max label {top - 1}), "
                f"got {k}"
            )
        n_total = sum(y.size for _, y in pairs)
        self._xa: Array = np.empty((n_total, d + 1), dtype=np.float32)  # x and a ones column
        np.concatenate([x for x, _ in pairs], out=self._xa[:, :d])
        self._xa[:, d] = 1.0
        self.x: Array = self._xa[:, :d]
        self.y: IntArray = np.concatenate([y for _, y in pairs])
        self.sizes: IntArray = np.array([y.size for _, y in pairs], dtype=np.int64)
        self.offsets: IntArray = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)
        self.test_x: Array = tx
        self.test_y: IntArray = ty
        self.n_classes = k
        for a in (self._xa, self.x, self.y, self.sizes, self.offsets, tx, ty):
            a.setflags(write=False)

    @property
    def d(self) -> int:
        """Input dimension."""
        return int(self.x.shape[1])

    @property
    def n_clients(self) -> int:
        """Number of clients."""
        return int(self.sizes.size)

    def client_sizes(self) -> NDArray[np.float64]:
        """Samples each client holds (for size-weighted sampling and aggregation)."""
        return self.sizes.astype(np.float64)

    def client(self, i: int) -> tuple[Array, IntArray]:
        """Client ``i``'s own ``(x, y)`` (read-only views)."""
        lo, hi = self.offsets[i], self.offsets[i + 1]
        return self.x[lo:hi], self.y[lo:hi]

    def gather(
        self, clients: IntArray, rows: IntArray, *, ones: bool = False
    ) -> tuple[Array, IntArray]:
        """Samples ``rows[c]`` (indices within each client) of every client of ``clients``.

        ``rows`` has shape ``(C, m)``; returns ``x`` ``(C, m, d)`` (``(C, m, d + 1)`` with a
        last column of ones if ``ones``) and ``y`` ``(C, m)``, both new arrays.
        """
        index = self.offsets[clients][:, None] + rows
        source = self._xa if ones else self.x
        return np.take(source, index, axis=0), np.take(self.y, index)

    def evaluate(self, weight: NDArray[Any], bias: NDArray[Any]) -> dict[str, float]:
        """Test ``accuracy`` and ``loss`` of the linear softmax model ``x @ weight + bias``."""
        return softmax_metrics(self.test_x @ weight + bias, self.test_y)


def _pair(field_name: str, pair: Any) -> tuple[Array, IntArray]:
    try:
        x_raw, y_raw = pair
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"{field_name} must be an (x, y) pair of arrays, got {pair!r:.60}"
        ) from exc
    try:
        x_num, y = np.asarray(x_raw), np.asarray(y_raw)
    except (TypeError, ValueError) as exc:  # ragged nested sequences
        raise ValueError(
            f"{field_name} must be an (x, y) pair of arrays, got {pair!r:.60}"
        ) from exc
    if x_num.dtype.kind not in "iuf":
        raise ValueError(
            f"{field_name} x must hold numbers (int or float), got dtype {x_num.dtype}"
        )
    x = np.ascontiguousarray(x_num, dtype=np.float32)
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"{field_name} x must be a non-empty 2-d array (n, d), got {x.shape}")
    if y.shape != (x.shape[0],):
        raise ValueError(f"{field_name} y must have shape ({x.shape[0]},) like x, got {y.shape}")
    if y.dtype.kind not in "iu" or int(y.min()) < 0:
        raise ValueError(f"{field_name} y must hold non-negative integer labels")
    if not np.isfinite(x).all():
        raise ValueError(f"{field_name} x must be finite")
    return x, y.astype(np.int64)


class ClassificationTask(Task):
    """Tasks bound to :class:`ClassificationData` (what softmax classifiers train on)."""

    metrics: ClassVar[tuple[str, ...]] = ("accuracy", "loss")
    goals: ClassVar[dict[str, str]] = {"accuracy": "max", "loss": "min"}


@dataclass(frozen=True, eq=False, repr=False)
class ClientArrays(ClassificationTask):
    """Classification on arrays given per client (client ``i`` lives on device ``i``).

    The arrays are validated and pooled at construction; the fleet must have exactly one
    device per client. Compared by identity (it holds arrays).

    Parameters
    ----------
    clients
        One ``(x, y)`` pair per client (see :class:`ClassificationData`).
    test
        The test set ``(x, y)``.
    n_classes
        Number of classes (default: one more than the largest label).
    """

    clients: Sequence[tuple[ArrayLike, ArrayLike]]
    test: tuple[ArrayLike, ArrayLike]
    n_classes: int | None = None
    _data: ClassificationData = field(init=False, compare=False)

    def __post_init__(self) -> None:
        data = ClassificationData(self.clients, self.test, self.n_classes, owner="ClientArrays")
        object.__setattr__(self, "_data", data)

    def __repr__(self) -> str:
        data = self._data
        return (
            f"ClientArrays({data.n_clients} clients, {int(data.sizes.sum())} samples, d={data.d}, "
            f"{data.n_classes} classes, {data.test_y.size} test samples)"
        )

    def build(self, n_clients: int, streams: Streams) -> ClassificationData:
        """The pooled data; ``n_clients`` (the fleet size) must equal the number of clients."""
        if n_clients != self._data.n_clients:
            raise ValueError(
                f"ClientArrays holds {self._data.n_clients} clients but the fleet has "
                f"{n_clients} devices; they must be equal (client i lives on device i)"
            )
        return self._data


@dataclass(frozen=True)
class SyntheticSoftmax(ClassificationTask):
    """W1's synthetic non-iid multinomial logistic data, one client per device.

    Generated by :func:`simfl.tasks.w1_data.make_w1` for as many clients as the fleet has
    devices. The defaults are workload W1.

    Parameters
    ----------
    samples_per_client
        Training samples of every client (>= 1).
    test_samples
        Size of the shared test set (>= 1).
    d
        Input dimension (>= 1).
    k
        Number of classes (>= 2).
    data_seed
        Seed of the generator; ``None`` (default) uses the scenario's seed, as the peer scripts
        use their ``--seed`` for the data.
    """

    samples_per_client: int = 200
    test_samples: int = 2000
    d: int = 60
    k: int = 10
    data_seed: int | None = None

    def __post_init__(self) -> None:
        check_int("SyntheticSoftmax.samples_per_client", self.samples_per_client, low=1)
        check_int("SyntheticSoftmax.test_samples", self.test_samples, low=1)
        check_int("SyntheticSoftmax.d", self.d, low=1)
        check_int("SyntheticSoftmax.k", self.k, low=2)
        if self.data_seed is not None:
            check_int("SyntheticSoftmax.data_seed", self.data_seed, low=0, high=2**63 - 1)

    def build(self, n_clients: int, streams: Streams) -> ClassificationData:
        """Generate the data of ``n_clients`` clients (from ``data_seed`` or the run's seed)."""
        seed = streams.seed if self.data_seed is None else self.data_seed
        clients, test = make_w1(
            n_clients, self.samples_per_client, self.test_samples, seed, self.d, self.k
        )
        return ClassificationData(clients, test, self.k, owner="SyntheticSoftmax")
