"""The report's tables of who took part and what it cost: per group, fairness, energy.

:func:`group_tables` reads every finished run of a report (its ``Results``: jobs and the
devices' groups) and returns, per compared series and fleet size:

``participation``
    one row per group: its share of the fleet, its jobs by status summed over seeds, the devices
    that contributed at least one update (mean over seeds) and its share of the aggregated
    updates (over all seeds);
``fairness``
    Jain's index of the updates per device, over devices and over groups (mean over seeds),
    the group with the fewest updates per device, and the worst group's mean of each metric
    evaluated per client (mean over seeds);
``energy``
    where the runs recorded energy: mean time and energy to the report's target and mean
    energy of the whole run (``inf`` when a seed never reached it, as in the time table).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from simfl import compare
from simfl.report.choose import Choice
from simfl.results import Results
from simfl.sweeps.store import Store

__all__ = ["GroupTables", "group_tables"]

_COUNTS = ["selected", "arrived", "late", "dropped", "cancelled"]


@dataclass(frozen=True)
class GroupTables:
    """The report's participation, fairness and energy tables (see the module docstring)."""

    participation: pd.DataFrame
    fairness: pd.DataFrame
    energy: pd.DataFrame | None


def group_tables(store: Store, chosen: Choice) -> GroupTables:
    """The tables of ``chosen``'s finished runs (``energy`` is ``None`` if none has energy)."""
    by = chosen.by
    series = chosen.frame[["run_id", by, "n_devices"]].drop_duplicates("run_id")
    parts, fair, energy = [], [], []
    for run_id, name, n in series.itertuples(index=False):
        res = store.results(str(run_id))
        keys = {by: name, "n_devices": int(n)}
        parts.append(res.participation().assign(**keys))
        fair.append({**keys, **res.fairness()})
        if res.has_energy:
            energy.append({**keys, **_energy_row(res, chosen)})
    pooled = _pooled(pd.concat(parts, ignore_index=True), by)
    return GroupTables(
        pooled,
        _fairness(pd.DataFrame(fair), pooled, by),
        _energy(pd.DataFrame(energy), by) if energy else None,
    )


def _energy_row(res: Results, chosen: Choice) -> dict[str, float]:
    kw: dict[str, Any] = {chosen.side: chosen.value}
    return {
        "time_to_target": compare.time_to_target(res, chosen.metric, **kw),
        "energy_to_target": compare.energy_to_target(res, chosen.metric, **kw),
        "energy": float(res.clients["energy"].sum()),
    }


def _pooled(table: pd.DataFrame, by: str) -> pd.DataFrame:
    """Participation per series, fleet size and group, over seeds."""
    keys = [by, "n_devices"]
    grouped = table.groupby([*keys, "group"], sort=False)
    out = grouped[_COUNTS].sum().reset_index()
    out.insert(3, "devices", grouped["devices"].mean().to_numpy())
    out.insert(4, "fleet_share", grouped["fleet_share"].mean().to_numpy())
    out["devices_arrived"] = grouped["devices_arrived"].mean().to_numpy()
    total = out.groupby(keys, sort=False)["arrived"].transform("sum").to_numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        out["update_share"] = np.where(total > 0, out["arrived"] / total, math.nan)
        # every run of a series and fleet size has the same groups: devices x runs
        device_runs = grouped["devices"].sum().to_numpy()
        out["updates_per_device"] = out["arrived"] / device_runs
    return out


def _fairness(table: pd.DataFrame, pooled: pd.DataFrame, by: str) -> pd.DataFrame:
    """Fairness per series and fleet size, mean over seeds.

    The group with the fewest updates per device is read from the pooled participation (over
    all seeds).
    """
    keys = [by, "n_devices"]
    numbers = [c for c in table.columns if c not in keys]
    out = table.groupby(keys, sort=False)[numbers].mean().reset_index()
    fewest = pooled.loc[pooled.groupby(keys, sort=False)["updates_per_device"].idxmin()]
    fewest = fewest[[*keys, "group"]].rename(columns={"group": "fewest"})
    out = out.merge(fewest, on=keys, how="left")
    return out[[*keys, "fewest", *numbers]]


def _energy(table: pd.DataFrame, by: str) -> pd.DataFrame:
    """Energy and time to target per series and fleet size, mean over seeds."""
    keys = [by, "n_devices"]
    grouped = table.groupby(keys, sort=False)
    out = grouped[["time_to_target", "energy_to_target", "energy"]].mean().reset_index()
    reached = grouped["energy_to_target"].agg(lambda s: int(np.isfinite(s).sum()))
    out.insert(2, "reached", reached.to_numpy())
    out.insert(3, "runs", grouped.size().to_numpy())
    return out
