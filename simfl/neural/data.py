"""Supervised data sets as arrays, and the data source interface (numpy only; no torch).

Any supervised data fits a :class:`Dataset`: its ``kind`` says what the targets are
(``"classification"``: integer class labels; ``"next_token"``: token ids to predict from token
sequences; ``"regression"``: real targets). A :class:`DataSource` says where a data set comes
from; :meth:`DataSource.load` caches loads per process and cuts them to ``limit`` training
samples: the first ones of each class in file order, classes in their proportions, and the
same fraction of the test samples.

Nothing is downloaded at run time. The data sets that work offline are in
:mod:`simfl.neural.datasets`; :mod:`simfl.neural.own_data` takes data you already have;
text with natural clients lives in :mod:`simfl.neural.text`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simfl._checks import check_choice, check_int

__all__ = ["KINDS", "DataSource", "Dataset", "DatasetNotFoundError"]

Floats = NDArray[np.float32]
Ints = NDArray[np.int64]


class DatasetNotFoundError(FileNotFoundError):
    """The files of a data set are not where they were looked for (the message says how)."""


#: What a data set's targets are (:attr:`Dataset.kind`).
KINDS = ("classification", "next_token", "regression")


@dataclass(frozen=True)
class Dataset:
    """A supervised data set with a training and a test pool (what a data source loads).

    The pools are numpy arrays, one sample per row. What they hold depends on :attr:`kind`:

    ``"classification"``
        ``x``: any numeric array ``(N, ...)`` (images are float32 ``(N, channels, height,
        width)``); ``y``: int64 class labels ``(N,)`` in ``[0, n_classes)``.
    ``"next_token"``
        ``x``: int64 token ids ``(N, T)``; ``y``: int64 token ids, either the token after each
        sequence ``(N,)`` or each position's next token ``(N, T)``; ``n_classes`` is the
        vocabulary size (every id in ``x`` and ``y`` lies in ``[0, n_classes)``).
    ``"regression"``
        ``x``: any numeric array ``(N, ...)``; ``y``: float32 targets ``(N,)`` or ``(N, k)``;
        ``n_classes`` is ``None``.

    The checks at construction are cheap (shapes, dtypes, the range of the ids): a source that
    builds an inconsistent data set fails here, naming the field.
    """

    name: str
    x_train: NDArray[Any]
    y_train: NDArray[Any]
    x_test: NDArray[Any]
    y_test: NDArray[Any]
    n_classes: int | None
    #: Group of each training / test sample (natural clients: FEMNIST's writer, a speaker of a
    #: play, your client ids), if the data set has groups.
    groups: tuple[Ints, Ints] | None = None
    #: What the targets are: one of :data:`KINDS`.
    kind: str = "classification"
    #: A name for each group id (``group_names[g]``), where the source has names.
    group_names: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        _check_dataset(self)

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one input sample (an image's ``(channels, height, width)``, ``(T,)``)."""
        return tuple(int(s) for s in self.x_train.shape[1:])

    @property
    def target_shape(self) -> tuple[int, ...]:
        """Shape of one target: ``()`` for a label or a scalar, ``(T,)`` or ``(k,)`` else."""
        return tuple(int(s) for s in self.y_train.shape[1:])


def _check_dataset(d: Dataset) -> None:
    """Consistency of a :class:`Dataset` (see its docstring); ``ValueError`` naming the field."""
    kind = check_choice("Dataset.kind", d.kind, KINDS)
    pools = (("x_train", "y_train", 0), ("x_test", "y_test", 1))
    for xs, ys, _ in pools:
        x, y = getattr(d, xs), getattr(d, ys)
        if not isinstance(x, np.ndarray) or not isinstance(y, np.ndarray):
            raise ValueError(f"Dataset.{xs} and Dataset.{ys} must be numpy arrays")
        if x.ndim < 1 or y.ndim < 1 or x.shape[0] != y.shape[0]:
            raise ValueError(
                f"Dataset.{xs} {x.shape} and Dataset.{ys} {y.shape} must have one row per sample"
            )
    if d.x_train.shape[1:] != d.x_test.shape[1:] or d.y_train.shape[1:] != d.y_test.shape[1:]:
        raise ValueError(
            f"Dataset: the test pool's shapes {d.x_test.shape[1:]}, {d.y_test.shape[1:]} differ "
            f"from the training pool's {d.x_train.shape[1:]}, {d.y_train.shape[1:]}"
        )
    if kind == "regression":
        if d.n_classes is not None:
            raise ValueError(f"Dataset.n_classes must be None for regression, got {d.n_classes}")
        if d.y_train.dtype.kind != "f" or d.y_train.ndim > 2 or d.y_test.dtype != d.y_train.dtype:
            raise ValueError("Dataset.y_train and y_test must be float arrays (N,) or (N, k)")
    else:
        k = check_int("Dataset.n_classes", d.n_classes, low=1)
        ids: list[tuple[str, NDArray[Any]]] = [("y_train", d.y_train), ("y_test", d.y_test)]
        if kind == "classification" and d.y_train.ndim != 1:
            raise ValueError(f"Dataset.y_train must hold one label per sample, {d.y_train.shape}")
        if kind == "next_token":
            ids += [("x_train", d.x_train), ("x_test", d.x_test)]
            if d.x_train.ndim != 2 or d.y_train.ndim > 2:
                raise ValueError("Dataset: next_token data needs x (N, T) and y (N,) or (N, T)")
        for field, a in ids:
            if a.dtype.kind not in "iu":
                raise ValueError(f"Dataset.{field} must hold integer ids, got {a.dtype}")
            if a.size and (int(a.min()) < 0 or int(a.max()) >= k):
                raise ValueError(f"Dataset.{field} must lie in [0, n_classes = {k})")
    if d.groups is not None:
        if not (isinstance(d.groups, tuple) and len(d.groups) == 2):
            raise ValueError("Dataset.groups must be a (train groups, test groups) pair")
        for g, (xs, _, i) in zip(d.groups, pools, strict=True):
            n = getattr(d, xs).shape[0]
            if not isinstance(g, np.ndarray) or g.dtype.kind not in "iu" or g.shape != (n,):
                raise ValueError(f"Dataset.groups[{i}] must be {n} integer group ids")


class DataSource:
    """Where a data set comes from (a frozen dataclass in each subclass; hashable, cached)."""

    limit: int | None

    def _load(self) -> Dataset:
        raise NotImplementedError

    def load(self) -> Dataset:
        """The data set (cached per process), cut to ``limit`` training samples if set.

        A classification data set keeps the first samples of each class, classes in their
        proportions; other kinds keep the first ``limit`` training samples and the first test
        samples in the same proportion (of the groups kept, where the data set has groups).
        """
        return _load_cached(self)

    def _check_fields(self) -> None:
        """``limit`` >= 1 or ``None``; ``path`` a directory name (``None`` where optional)."""
        owner = type(self).__name__
        if self.limit is not None:
            check_int(f"{owner}.limit", self.limit, low=1)
        path = getattr(self, "path", _NO_PATH)
        optional = getattr(type(self), "path", _NO_PATH) is None  # the field defaults to None
        if path is _NO_PATH or isinstance(path, (str, os.PathLike)) or (optional and path is None):
            return
        none = " or None" if optional else ""
        raise ValueError(
            f"{owner}.path must be a directory (a str or a pathlib.Path){none}, got {path!r:.60}"
        )


#: Marks a data source without a ``path`` field.
_NO_PATH = object()


def _stratified_first(labels: Ints, n: int) -> Ints:
    """Indices of the first images of each class, ``n`` in all, classes in proportion."""
    classes, counts = np.unique(labels, return_counts=True)
    share = counts / counts.sum() * n
    keep = np.floor(share).astype(np.int64)
    keep[np.argsort(-(share - keep), kind="stable")[: n - int(keep.sum())]] += 1
    picked = [np.flatnonzero(labels == c)[:k] for c, k in zip(classes, keep, strict=True)]
    return np.sort(np.concatenate(picked)).astype(np.int64)


def _first_of_groups(data: Dataset, tr: Ints, m: int) -> Ints:
    """The first ``m`` test samples, of the groups that the kept training samples hold."""
    if data.groups is None:
        return np.arange(min(m, data.y_test.shape[0]), dtype=np.int64)
    kept = np.isin(data.groups[1], data.groups[0][tr])
    return np.flatnonzero(kept)[:m].astype(np.int64)


@lru_cache(maxsize=4)
def _load_cached(source: DataSource) -> Dataset:
    data = source._load()
    n_train, n_test = data.y_train.shape[0], data.y_test.shape[0]
    if source.limit is None or source.limit >= n_train:
        return data
    n = source.limit
    m = max(1, round(n * n_test / n_train))
    if data.kind == "classification":
        tr, te = _stratified_first(data.y_train, n), _stratified_first(data.y_test, m)
    else:
        tr = np.arange(n, dtype=np.int64)
        te = _first_of_groups(data, tr, m)
    groups = None if data.groups is None else (data.groups[0][tr], data.groups[1][te])
    return Dataset(
        data.name,
        data.x_train[tr],
        data.y_train[tr],
        data.x_test[te],
        data.y_test[te],
        data.n_classes,
        groups,
        data.kind,
        data.group_names,
    )
