"""Who took part: participation per group and per device, fairness, per-group metrics, energy.

Pure functions of a run's ``clients`` frame and of what ``meta`` says about its devices:

``meta["groups"]``
    each device's group label (:meth:`simfl.Fleet.device_groups`: its tier's name, or labels
    given with :meth:`simfl.Fleet.with_groups`), stored by :func:`encode_groups` as the names
    and runs of equal indices (``{"names": ["fast", "slow"], "runs": [[0, 80], [1, 20]]}``
    for 80 fast devices then 20 slow ones), so that tiers cost a few numbers;
``meta["client_metrics"]``
    the task's metrics of each evaluated client for the final model, where the algorithm
    evaluates per client (``Algorithm.evaluate_clients``): ``{"clients": [...], "metrics":
    {name: [...]}}``.

:func:`participation` counts the jobs of each group (or device) by status; ``update_share`` is
the group's share of the aggregated (arrived) updates, beside ``fleet_share``, its share of the
devices. :func:`jain_index` is Jain's fairness index, ``(sum x)^2 / (n sum x^2)``: 1 when every
device (or group) contributed equally, ``1/n`` when one did everything.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray

from simfl.fleet.energy import ENERGY_COLUMNS
from simfl.outcome import STATUSES

__all__ = [
    "decode_groups",
    "encode_groups",
    "energy_until",
    "group_metrics",
    "jain_index",
    "participation",
]

Groups = tuple[tuple[str, ...], NDArray[np.int64]]


def encode_groups(names: Sequence[str], index: NDArray[np.int64]) -> dict[str, Any]:
    """The JSON-able ``meta["groups"]`` of devices: names and runs ``[index, count]``."""
    idx = np.asarray(index, dtype=np.int64)
    if idx.size == 0:
        return {"names": list(names), "runs": []}
    starts = np.flatnonzero(np.concatenate([[True], idx[1:] != idx[:-1]]))
    counts = np.diff(np.concatenate([starts, [idx.size]]))
    runs = [[int(idx[s]), int(c)] for s, c in zip(starts, counts, strict=True)]
    return {"names": [str(n) for n in names], "runs": runs}


def decode_groups(entry: dict[str, Any] | None, n_devices: int) -> Groups:
    """The names and per-device indices of ``meta["groups"]``.

    Results saved before groups were recorded (``entry`` is ``None``) have one group,
    ``"all"``.

    Raises
    ------
    ValueError
        If the entry does not describe ``n_devices`` devices.
    """
    if entry is None:
        return ("all",), np.zeros(n_devices, dtype=np.int64)
    names = tuple(str(n) for n in entry["names"])
    runs = entry["runs"]
    index = np.repeat(
        np.array([g for g, _ in runs], dtype=np.int64),
        np.array([c for _, c in runs], dtype=np.int64),
    )
    if index.size != n_devices or (index.size and not 0 <= index.min() <= index.max() < len(names)):
        raise ValueError(
            f'meta["groups"] must describe {n_devices} devices with indices into its '
            f"{len(names)} names, got {index.size} devices"
        )
    return names, index


def participation(clients: pd.DataFrame, groups: Groups, *, by: str = "group") -> pd.DataFrame:
    """Jobs per group (or per device) by status, and the group's share of aggregated updates.

    Parameters
    ----------
    clients
        A run's ``Results.clients``.
    groups
        The names of the groups and each device's index into them (:func:`decode_groups`).
    by
        ``"group"``: one row per group, in the order of ``names``; ``"device"``: one row per
        device of the fleet (those never selected have zeros).

    Returns
    -------
    pandas.DataFrame
        ``by="group"``: ``group``, ``devices`` (in the fleet), ``fleet_share`` (devices / all
        devices), ``selected`` (jobs started), ``arrived``, ``late``, ``dropped``,
        ``cancelled``, ``devices_arrived`` (devices with at least one aggregated update),
        ``update_share`` (arrived / all arrived; NaN when nothing arrived), ``updates_per_device``
        (arrived / devices), and ``energy`` (joules of the group's jobs) when the run recorded
        energy. ``by="device"``: ``device``, ``group``, ``selected``, the four statuses and
        ``energy`` when recorded.

    Raises
    ------
    ValueError
        If ``by`` is neither, or a job's device is outside the fleet.
    """
    if by not in ("group", "device"):
        raise ValueError(f'participation by= must be "group" or "device", got {by!r}')
    names, index = groups
    n = index.size
    devices = clients["device"].to_numpy(dtype=np.int64)
    if devices.size and not 0 <= devices.min() <= devices.max() < n:
        raise ValueError(f"clients name devices outside the fleet of {n} devices")
    codes = clients["status"].cat.codes.to_numpy() if len(clients) else np.empty(0, np.int8)
    counts = {s: np.bincount(devices[codes == i], minlength=n) for i, s in enumerate(STATUSES)}
    per_device: dict[str, Any] = {
        "selected": np.bincount(devices, minlength=n),
        **counts,
    }
    energy = "energy" in clients.columns and all(c in clients for c in ENERGY_COLUMNS)
    if energy:
        per_device["energy"] = np.bincount(
            devices, weights=clients["energy"].to_numpy(dtype=np.float64), minlength=n
        )
    if by == "device":
        labels = np.array(names, dtype=object)[index]
        return pd.DataFrame({"device": np.arange(n), "group": labels, **per_device})
    k = len(names)
    size = np.bincount(index, minlength=k)
    table: dict[str, Any] = {"group": list(names), "devices": size, "fleet_share": size / n}
    for col in ("selected", *STATUSES):
        table[col] = np.bincount(index, weights=per_device[col], minlength=k).astype(np.int64)
    table["devices_arrived"] = np.bincount(index[counts["arrived"] > 0], minlength=k)
    total = table["arrived"].sum()
    with np.errstate(invalid="ignore", divide="ignore"):
        table["update_share"] = table["arrived"] / total if total else np.full(k, math.nan)
        table["updates_per_device"] = table["arrived"] / size
    if energy:
        table["energy"] = np.bincount(index, weights=per_device["energy"], minlength=k)
    return pd.DataFrame(table)


def jain_index(values: ArrayLike) -> float:
    """Jain's fairness index of ``values``: ``(sum x)^2 / (n * sum x^2)``.

    1 when all are equal, ``1/n`` when one holds everything; NaN for no values or all zeros.

    >>> jain_index([1, 1, 1, 1])
    1.0
    >>> jain_index([4, 0, 0, 0])
    0.25
    """
    x = np.asarray(values, dtype=np.float64)
    squares = float(np.sum(x * x))
    if x.size == 0 or squares == 0:
        return math.nan
    return float(np.sum(x)) ** 2 / (x.size * squares)


def group_metrics(entry: dict[str, Any] | None, groups: Groups) -> pd.DataFrame:
    """Per-group means of the final model's per-client metrics (``meta["client_metrics"]``).

    Returns
    -------
    pandas.DataFrame
        One row per group: ``group``, ``evaluated`` (its clients the task evaluated), then
        one column per metric (the mean over the group's evaluated clients; NaN if none), and
        a last row ``group="all"`` over every evaluated client. Empty when the run holds no
        per-client metrics.
    """
    if not entry:
        return pd.DataFrame()
    names, index = groups
    clients = np.asarray(entry["clients"], dtype=np.int64)
    of_client = index[clients]
    k = len(names)
    count = np.bincount(of_client, minlength=k)
    table: dict[str, Any] = {
        "group": [*names, "all"],
        "evaluated": np.append(count, clients.size),
    }
    for name, values in entry["metrics"].items():
        v = np.asarray(values, dtype=np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            means = np.bincount(of_client, weights=v, minlength=k) / count
        table[name] = np.append(means, v.mean() if v.size else math.nan)
    return pd.DataFrame(table)


def energy_until(clients: pd.DataFrame, times: ArrayLike) -> NDArray[np.float64]:
    """Joules spent by the jobs that ended by each of ``times`` (``t_end <= time``).

    A synchronous round's jobs all end by its aggregation, so at a round's ``time`` this is
    the energy of every round up to it; under an asynchronous policy the jobs still running
    then are not counted yet.

    Raises
    ------
    ValueError
        If ``clients`` has no ``energy`` column (its fleet declared no energy model).
    """
    if "energy" not in clients.columns:
        raise ValueError(
            "this run recorded no energy: give its fleet an energy model "
            "(Fleet.with_energy(Energy(...)) or Profile(energy=...))"
        )
    order = np.argsort(clients["t_end"].to_numpy(), kind="stable")
    ends = clients["t_end"].to_numpy()[order]
    spent = np.concatenate([[0.0], np.cumsum(clients["energy"].to_numpy()[order])])
    at = np.searchsorted(ends, np.asarray(times, dtype=np.float64), side="right")
    return np.asarray(spent[at], dtype=np.float64)
