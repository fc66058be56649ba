"""Checks of a fleet's constructor arguments: scales, distributions, groups, links, labels.

Each function refuses a bad value with a ``ValueError`` that names the field, before a
:class:`~simfl.fleet.Fleet` is built, and returns the value in the form the fleet stores.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray

from simfl._checks import MAX_DEVICES, check_array, check_str
from simfl.dists import MAX_DRAW, MIN_BANDWIDTH, Dist
from simfl.fleet.availability import Availability
from simfl.fleet.energy import EnergySpec, energy_table
from simfl.rng import Streams

__all__ = [
    "check_availability",
    "check_dist",
    "check_dists",
    "check_energy",
    "check_group",
    "check_group_names",
    "check_labels",
    "check_links",
    "check_scale_keeps_draws_finite",
    "draw_scale",
    "factorize",
    "sequence",
]


def draw_scale(scale: ArrayLike | Dist, n: int, seed: int, field: str) -> NDArray[np.float64]:
    """Per-device scales: drawn from ``scale`` (keyed by device) if a distribution, else checked."""
    if isinstance(scale, Dist):
        u = Streams(seed).uniform("fleet/scale", np.arange(n))
        scale = scale.ppf(u)
    return check_array(field, scale, size=n, low=0.0, low_open=True)


def check_scale_keeps_draws_finite(
    dists: Sequence[Dist], group: NDArray[np.int64], scale: NDArray[np.float64]
) -> None:
    """Refuse a scale whose product with a device's largest draw or mean exceeds MAX_DRAW."""
    # the largest compute time per unit of work a device can be given, or its mean if larger
    # (a log-normal's mean can exceed its largest draw); an infinite mean does not exist
    top = np.array([max(d.max_draw, d.mean if math.isfinite(d.mean) else 0.0) for d in dists])
    with np.errstate(over="ignore"):
        bad = ~(top[group] * scale <= MAX_DRAW)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        d = dists[int(group[i])]
        raise ValueError(
            f"Fleet.scale must keep every device's compute draws finite: the largest draw (or "
            f"mean) of {d!r}, {top[group[i]]:.4g}, times the scale must be <= "
            f"simfl.dists.MAX_DRAW = {MAX_DRAW:g}, so scale <= {MAX_DRAW / top[group[i]]:.4g}; "
            f"device {i} has {float(scale[i])!r}"
        )


def sequence(field: str, values: object, what: str) -> tuple[object, ...]:
    """``values`` as a tuple, if it is a list, tuple or other sequence (not a string)."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise ValueError(f"{field} must be a list or tuple of {what}, got {values!r:.60}")
    return tuple(values)


def check_dists(compute: Sequence[Dist]) -> tuple[Dist, ...]:
    """The compute-time distributions of a fleet, validated."""
    dists = sequence("Fleet.compute", compute, "simfl.dists distributions")
    if not dists:
        raise ValueError("Fleet.compute must hold at least one distribution, got none")
    return tuple(check_dist(f"Fleet.compute[{i}]", d) for i, d in enumerate(dists))


def check_dist(field: str, dist: object) -> Dist:
    """``dist`` if it is a distribution of :mod:`simfl.dists`."""
    if not isinstance(dist, Dist):
        raise ValueError(f"{field} must be a simfl.dists distribution, got {dist!r:.60}")
    return dist


def check_group(group: ArrayLike, n_dists: int) -> NDArray[np.int64]:
    """Each device's index into the distributions, as a read-only int64 array."""
    try:
        g = np.asarray(group)
    except (ValueError, TypeError) as exc:  # ragged nested sequences
        raise ValueError(
            f"Fleet.group must be a 1-d array of group indices, got {group!r:.60}"
        ) from exc
    if g.ndim != 1:
        raise ValueError(f"Fleet.group must be a 1-d array of group indices, got shape {g.shape}")
    if not 1 <= g.size <= MAX_DEVICES:
        raise ValueError(
            f"Fleet.group must hold one entry per device, 1 to {MAX_DEVICES:,} (Fleet size), "
            f"got {g.size:,}"
        )
    if g.dtype.kind not in "iu" or g.min() < 0 or g.max() >= n_dists:
        raise ValueError(
            f"Fleet.group entries must be integers in [0, {n_dists - 1}] (indices into "
            f"Fleet.compute)"
        )
    out = g.astype(np.int64)
    out.setflags(write=False)
    return out


def check_links(
    n: int,
    bandwidth_down: ArrayLike,
    bandwidth_up: ArrayLike,
    latency: ArrayLike,
    dropout_rate: ArrayLike,
) -> dict[str, NDArray[np.float64]]:
    """The per-device link and failure columns of ``n`` devices, validated."""
    return {
        "bandwidth_down": check_array(
            "Fleet.bandwidth_down", bandwidth_down, size=n, low=MIN_BANDWIDTH, allow_inf=True
        ),
        "bandwidth_up": check_array(
            "Fleet.bandwidth_up", bandwidth_up, size=n, low=MIN_BANDWIDTH, allow_inf=True
        ),
        "latency": check_array("Fleet.latency", latency, size=n, low=0.0, high=MAX_DRAW),
        "dropout_rate": check_array("Fleet.dropout_rate", dropout_rate, size=n, low=0.0),
    }


def check_group_names(group_names: Sequence[str] | None, n_dists: int) -> tuple[str, ...]:
    """The labels of the groups (default ``"g0"``, ``"g1"``, ...), one per distribution."""
    if group_names is None:
        return tuple(f"g{i}" for i in range(n_dists))
    names = tuple(
        check_str(f"Fleet.group_names[{i}]", name)
        for i, name in enumerate(sequence("Fleet.group_names", group_names, "strings"))
    )
    if len(names) != n_dists:
        raise ValueError(
            f"Fleet.group_names must have {n_dists} names (one per distribution), got {len(names)}"
        )
    return names


def check_labels(
    groups: Sequence[str] | NDArray[np.object_] | None, n: int
) -> tuple[tuple[str, ...], NDArray[np.int64]] | None:
    """Group labels of ``n`` devices as (names in order of first appearance, device indices)."""
    if groups is None:
        return None
    if isinstance(groups, str) or not isinstance(groups, (Sequence, np.ndarray)):
        raise ValueError(
            f"Fleet groups must be a sequence of {n} strings (one group label per device), "
            f"got {groups!r}"
        )
    labels = np.asarray(groups, dtype=object)
    if labels.ndim != 1 or labels.size != n:
        raise ValueError(
            f"Fleet groups must hold one label per device ({n}), got {labels.size} "
            f"(shape {labels.shape})"
        )
    for i, label in enumerate(labels):
        if not isinstance(label, str) or not label:
            raise ValueError(
                f"Fleet groups must be non-empty strings, got {label!r} for device {i}"
            )
    return factorize(labels)


def factorize(labels: NDArray[np.object_]) -> tuple[tuple[str, ...], NDArray[np.int64]]:
    """Distinct labels in order of first appearance, and each device's index into them."""
    index, names = pd.factorize(labels, sort=False)
    out = np.asarray(index, dtype=np.int64)
    out.setflags(write=False)
    return tuple(str(x) for x in names), out


def check_energy(energy: EnergySpec | None, n: int) -> NDArray[np.float64] | None:
    """The per-device energy table (``n`` x :data:`ENERGY_FIELDS`), or ``None``."""
    return None if energy is None else energy_table(energy, n, "Fleet.energy")


def check_availability(availability: Availability | None, n: int) -> Availability | None:
    """The fleet's availability, which must cover its ``n`` devices (or ``None``)."""
    if availability is None:
        return None
    if not isinstance(availability, Availability):
        raise ValueError(f"Fleet.availability must be a simfl Availability, got {availability!r}")
    if availability.size != n:
        raise ValueError(
            f"Fleet.availability must cover every device ({n}), got {availability.size}"
        )
    return availability
