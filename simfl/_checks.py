"""Validation helpers that raise errors written for people.

Every message names the field (``Owner.field``), the value it got and what would be valid, so
that a bad scenario fails at construction, before anything runs.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "check_array",
    "check_choice",
    "check_int",
    "check_real",
]


def _fmt(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


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
        The value to check. Booleans are refused.
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
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{field} must be a real number in {interval}, got {_fmt(value)}")
    x = float(value)
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

    Raises
    ------
    ValueError
        If the value is not an integer (booleans and floats are refused) or is out of range.
    """
    lo = "-inf" if low is None else str(low)
    hi = "inf" if high is None else str(high)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{field} must be an integer in [{lo}, {hi}], got {_fmt(value)}")
    v = int(value)
    if (low is not None and v < low) or (high is not None and v > high):
        raise ValueError(f"{field} must be an integer in [{lo}, {hi}], got {v}")
    return v


def check_choice(field: str, value: Any, choices: Sequence[str]) -> str:
    """Return ``value`` after checking it is one of ``choices``.

    Raises
    ------
    ValueError
        If the value is not one of the choices.
    """
    if value not in choices:
        raise ValueError(f"{field} must be one of {list(choices)}, got {_fmt(value)}")
    return str(value)


def check_array(
    field: str,
    values: ArrayLike,
    *,
    size: int,
    low: float = -math.inf,
    low_open: bool = False,
    allow_inf: bool = False,
) -> NDArray[np.float64]:
    """Broadcast ``values`` to a read-only float array of length ``size`` and check its entries.

    Raises
    ------
    ValueError
        If the values do not broadcast to ``(size,)``, or an entry is NaN, infinite (unless
        ``allow_inf``) or below the bound. The message names the first offending device.
    """
    try:
        arr = np.array(np.broadcast_to(np.asarray(values, dtype=np.float64), (size,)))
    except (ValueError, TypeError) as exc:
        raise ValueError(
            f"{field} must be a number or an array of {size} numbers, got {_fmt(values)}"
        ) from exc
    bad = np.isnan(arr) | (arr < low) | (low_open & (arr == low))
    bad |= np.isinf(arr) & ~(allow_inf & (arr > 0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        bound = ("> " if low_open else ">= ") + f"{low:g}"
        inf = " (inf allowed)" if allow_inf else ", finite"
        raise ValueError(f"{field} must be {bound}{inf}; device {i} has {arr[i]!r}")
    arr.setflags(write=False)
    return arr
