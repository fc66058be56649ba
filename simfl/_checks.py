"""Validation helpers that raise errors written for people.

Every message names the field (``Owner.field``), the value it got and what would be valid, so
that a bad scenario fails at construction, before anything runs.

One rule for types, scalars and arrays alike: a number is an ``int``, a ``float`` or a numpy
integer or floating scalar (or an array of those); strings, bytes, booleans (``bool`` and
``np.bool_``), ``None`` and other objects are not numbers. A flag is a ``bool`` or an
``np.bool_``, and nothing else. Integers must fit in 64 bits. Every refusal is a ``ValueError``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "INT64_MAX",
    "MAX_DEVICES",
    "check_array",
    "check_bool",
    "check_choice",
    "check_int",
    "check_real",
    "check_str",
]

#: The largest integer :func:`check_int` accepts (integers must fit in an ``int64``).
INT64_MAX = 2**63 - 1
#: The largest fleet simfl accepts (a hundred million devices: every per-device column of such
#: a fleet already takes 800 MB; a larger count is a mistake, not a fleet).
MAX_DEVICES = 10**8
#: The numpy dtype kinds of numeric arrays: signed and unsigned integers, floats.
_NUMERIC_KINDS = "iuf"


def _fmt(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_bool(value: Any) -> bool:
    return isinstance(value, (bool, np.bool_))


def _to_float(value: Any) -> float:
    """``float(value)``, or an infinity of its sign for an integer beyond the float range."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def check_real(
    field: str,
    value: Any,
    *,
    low: float = -math.inf,
    high: float = math.inf,
    low_open: bool = False,
    high_open: bool = False,
    allow_inf: bool = False,
) -> float:
    """Return ``value`` as a float after checking it lies in the given interval.

    Parameters
    ----------
    field
        Name used in the error message, e.g. ``"Exponential.mean"``.
    value
        The value to check: an ``int``, a ``float`` or a numpy number (booleans, strings and
        other objects are refused; an integer beyond the float range counts as infinite).
    low, high
        Bounds of the valid interval.
    low_open, high_open
        Whether the corresponding bound is excluded.
    allow_inf
        Whether ``+inf`` is a valid value (for example an unlimited bandwidth).

    Raises
    ------
    ValueError
        If the value is not a real number, is NaN, is infinite while ``allow_inf`` is false, or
        lies outside the interval.
    """
    interval = (
        ("(" if low_open else "[")
        + f"{low:g}, {high:g}"
        + (")" if high_open or (high == math.inf and not allow_inf) else "]")
    )
    if _is_bool(value) or not isinstance(value, numbers.Real):
        raise ValueError(f"{field} must be a real number in {interval}, got {_fmt(value)}")
    x = _to_float(value)
    if math.isnan(x):
        raise ValueError(f"{field} must be a real number in {interval}, got NaN")
    if math.isinf(x) and not (allow_inf and x > 0):
        raise ValueError(f"{field} must be finite, in {interval}, got {x}")
    too_low = x < low or (low_open and x == low)
    too_high = x > high or (high_open and x == high)
    if too_low or too_high:
        raise ValueError(f"{field} must be in {interval}, got {x:g}")
    return x


def check_int(field: str, value: Any, *, low: int | None = None, high: int | None = None) -> int:
    """Return ``value`` as an int after checking ``low <= value <= high``.

    Whatever the bounds (``None``: unbounded), the integer must fit in 64 bits (numpy arrays
    and counts are int64): ``-INT64_MAX - 1 <= value <= INT64_MAX``.

    Raises
    ------
    ValueError
        If the value is not an integer (booleans and floats are refused) or is out of range.
    """
    lo = "-inf" if low is None else str(low)
    hi = "inf" if high is None else str(high)
    if _is_bool(value) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{field} must be an integer in [{lo}, {hi}], got {_fmt(value)}")
    v = int(value)
    if (low is not None and v < low) or (high is not None and v > high):
        raise ValueError(f"{field} must be an integer in [{lo}, {hi}], got {v}")
    if not -INT64_MAX - 1 <= v <= INT64_MAX:
        raise ValueError(
            f"{field} must be an integer in [{lo}, {hi}] that fits in 64 bits "
            f"([-2**63, 2**63 - 1]), got {_fmt(v)}"
        )
    return v


def check_bool(field: str, value: Any) -> bool:
    """Return ``value`` as a ``bool`` after checking it is one (``np.bool_`` counts).

    Raises
    ------
    ValueError
        If the value is anything else (``0``, ``1``, ``"yes"``, ``None``, ...).
    """
    if not _is_bool(value):
        raise ValueError(f"{field} must be True or False, got {_fmt(value)}")
    return bool(value)


def check_str(field: str, value: Any, *, empty: bool = True) -> str:
    """Return ``value`` after checking it is a string (non-empty unless ``empty``).

    Raises
    ------
    ValueError
        If the value is not a ``str``, or is empty while ``empty`` is false.
    """
    if not isinstance(value, str) or (not empty and not value):
        what = "a string" if empty else "a non-empty string"
        raise ValueError(f"{field} must be {what}, got {_fmt(value)}")
    return str(value)


def check_choice(field: str, value: Any, choices: Sequence[str]) -> str:
    """Return ``value`` after checking it is one of ``choices``.

    Raises
    ------
    ValueError
        If the value is not one of the choices (only strings can be).
    """
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{field} must be one of {list(choices)}, got {_fmt(value)}")
    return str(value)


def check_array(
    field: str,
    values: ArrayLike,
    *,
    size: int | None,
    low: float = -math.inf,
    low_open: bool = False,
    allow_inf: bool = False,
    high: float = math.inf,
) -> NDArray[np.float64]:
    """Broadcast ``values`` to a read-only float array of length ``size`` and check its entries.

    The entries follow the rule of :func:`check_real`: integers and floats (Python or numpy),
    never booleans, strings, bytes or other objects. ``size=None`` takes an array of any
    length (flattened; a scalar counts as one entry).

    Raises
    ------
    ValueError
        If the values are not numbers, do not broadcast to ``(size,)``, or an entry is NaN,
        infinite (unless ``allow_inf``), below ``low`` or above a finite ``high``. The message
        names the first offending entry ("device" when ``size`` is given).
    """
    want = "a number or an array of " + ("numbers" if size is None else f"{size} numbers")
    try:
        raw = np.asarray(values)
    except (ValueError, TypeError) as exc:  # ragged nested sequences
        raise ValueError(f"{field} must be {want}, got {_fmt(values)}") from exc
    if raw.dtype.kind not in _NUMERIC_KINDS:
        raise ValueError(
            f"{field} must be {want} (int or float; not bool, str, bytes or objects), got "
            f"{_fmt(values)} (dtype {raw.dtype})"
        )
    flat = raw.astype(np.float64)
    try:
        arr = np.array(np.broadcast_to(flat, (size,)) if size is not None else flat.reshape(-1))
    except ValueError as exc:
        raise ValueError(f"{field} must be {want}, got {_fmt(values)}") from exc
    bad = np.isnan(arr) | (arr < low) | (low_open & (arr == low))
    bad |= np.isinf(arr) & ~(allow_inf & (arr > 0))
    bad |= np.isfinite(arr) & (arr > high)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        bound = ("> " if low_open else ">= ") + f"{low:g}"
        if high < math.inf:
            bound += f" and <= {high:g}"
        inf = " (inf allowed)" if allow_inf else ", finite"
        entry = "device" if size is not None else "entry"
        raise ValueError(f"{field} must be {bound}{inf}; {entry} {i} has {arr[i]!r}")
    arr.setflags(write=False)
    return arr
