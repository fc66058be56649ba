"""Your own data as a data source: arrays or tensors (:class:`Tensors`), or a torch data set.

:class:`Tensors` takes numpy arrays or torch tensors, with a client id per sample where the
data has natural clients; :class:`FromDataset` takes a map-style ``torch.utils.data.Dataset``,
materialised once into arrays. Neither imports torch unless given its tensors.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike, NDArray

from simfl._checks import INT64_MAX, check_choice, check_int, check_real, check_str
from simfl.neural.data import KINDS, Dataset, DataSource

__all__ = ["FromDataset", "MapDataset", "Tensors"]


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
