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
    energy of the whole run (``inf`` when a seed never reached it, and a ``note`` "not
    reached in k of n seeds", as in the time table).

:func:`groups_figure` draws them: each group's share of the aggregated updates beside its
share of the fleet, one panel per fleet size, and, where the runs recorded energy, every run's
energy to the target against its time to the target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from simfl import compare
from simfl.report.choose import Choice, panel_title
from simfl.results import Results
from simfl.sweeps.store import Store

__all__ = ["GroupTables", "group_tables", "groups_figure"]

_COUNTS = ["selected", "arrived", "late", "dropped", "cancelled"]


@dataclass(frozen=True)
class GroupTables:
    """The report's participation, fairness and energy tables (see the module docstring)."""

    participation: pd.DataFrame
    fairness: pd.DataFrame
    energy: pd.DataFrame | None
    #: Time and energy to target of every run (the rows ``energy`` summarises).
    energy_runs: pd.DataFrame | None


def group_tables(store: Store, chosen: Choice) -> GroupTables:
    """The tables of ``chosen``'s finished runs (``energy`` is ``None`` if none has energy)."""
    by = chosen.by
    cols = [by, *chosen.panels]  # the series and every label that varies (fleet size last)
    series = chosen.frame[["run_id", *cols]].drop_duplicates("run_id")
    parts, fair, energy = [], [], []
    for run_id, *values in series.itertuples(index=False):
        res = store.results(str(run_id))
        keys = dict(zip(cols, values, strict=True))
        keys["n_devices"] = int(keys["n_devices"])
        parts.append(res.participation().assign(**keys))
        fair.append({**keys, **res.fairness()})
        if res.has_energy:
            energy.append({**keys, **_energy_row(res, chosen)})
    pooled = _pooled(pd.concat(parts, ignore_index=True), cols)
    runs = pd.DataFrame(energy) if energy else None
    return GroupTables(
        pooled,
        _fairness(pd.DataFrame(fair), pooled, cols),
        None if runs is None else _energy(runs, cols),
        runs,
    )


def _energy_row(res: Results, chosen: Choice) -> dict[str, float]:
    kw: dict[str, Any] = {chosen.side: chosen.value}
    return {
        "time_to_target": compare.time_to_target(res, chosen.metric, **kw),
        "energy_to_target": compare.energy_to_target(res, chosen.metric, **kw),
        "energy": float(res.clients["energy"].sum()),
    }


def _pooled(table: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Participation per series, panel (varying labels, fleet size) and group, over seeds."""
    grouped = table.groupby([*keys, "group"], sort=False)
    out = grouped[_COUNTS].sum().reset_index()
    out.insert(len(keys) + 1, "devices", grouped["devices"].mean().to_numpy())
    out.insert(len(keys) + 2, "fleet_share", grouped["fleet_share"].mean().to_numpy())
    out["devices_arrived"] = grouped["devices_arrived"].mean().to_numpy()
    total = out.groupby(keys, sort=False)["arrived"].transform("sum").to_numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        out["update_share"] = np.where(total > 0, out["arrived"] / total, math.nan)
        # every run of a series and fleet size has the same groups: devices x runs
        device_runs = grouped["devices"].sum().to_numpy()
        out["updates_per_device"] = out["arrived"] / device_runs
    return out


def _fairness(table: pd.DataFrame, pooled: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Fairness per series and panel, mean over seeds.

    The group with the fewest updates per device is read from the pooled participation (over
    all seeds).
    """
    numbers = [c for c in table.columns if c not in keys]
    out = table.groupby(keys, sort=False)[numbers].mean().reset_index()
    fewest = pooled.loc[pooled.groupby(keys, sort=False)["updates_per_device"].idxmin()]
    fewest = fewest[[*keys, "group"]].rename(columns={"group": "fewest"})
    out = out.merge(fewest, on=keys, how="left")
    return out[[*keys, "fewest", *numbers]]


def _energy(table: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Energy and time to target per series and panel, mean over seeds."""
    grouped = table.groupby(keys, sort=False)
    out = grouped[["time_to_target", "energy_to_target", "energy"]].mean().reset_index()
    reached = grouped["energy_to_target"].agg(lambda s: int(np.isfinite(s).sum()))
    out.insert(len(keys), "reached", reached.to_numpy())
    out.insert(len(keys) + 1, "runs", grouped.size().to_numpy())
    out["note"] = [
        compare.not_reached_note(int(k), int(n))
        for k, n in zip(out["reached"], out["runs"], strict=True)
    ]
    return out


def groups_figure(
    tables: GroupTables, by: str, target: str, *, colours: dict[str, Any], path: Path
) -> str:
    """Draw the participation (and energy) figure; return its caption's text."""
    import matplotlib.pyplot as plt

    part = tables.participation
    keys = [c for c in part.columns[: list(part.columns).index("group")] if c != by]
    cells = list(part[keys].drop_duplicates().sort_values(keys).itertuples(index=False, name=None))
    energy = tables.energy_runs
    panels = len(cells) + (energy is not None)
    fig, axes = plt.subplots(1, panels, figsize=(6.0 * panels, 4.4), squeeze=False)
    for ax, values in zip(axes[0], cells, strict=False):
        mask = np.logical_and.reduce([part[k] == v for k, v in zip(keys, values, strict=True)])
        _shares(ax, part[mask], by, colours)
        ax.set_title(f"{panel_title(keys, values)}: who was aggregated")
    missing = 0
    if energy is not None:
        missing = _energy_points(axes[0][-1], energy, by, target, colours, keys, len(cells) > 1)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    text = (
        f"Left: each group's share of the aggregated updates (bars, one per {by}, over all "
        "seeds) beside its share of the fleet (black lines): a bar below its line means the group "
        "contributed less than its share of the fleet"
    )
    if energy is None:
        return text + ". The runs declare no energy model."
    text += (
        f". Right: energy against time to {target}, one small point per run and a large one "
        f"per {by} (the means)"
    )
    if missing:
        text += f"; not drawn: {missing} of {len(energy)} runs, which never reached the target"
    return text + "."


def _shares(ax: Any, part: pd.DataFrame, by: str, colours: dict[str, Any]) -> None:
    """Grouped bars of the update share per group and series, ticks at the fleet share."""
    groups = list(dict.fromkeys(part["group"]))
    series = list(dict.fromkeys(part[by]))
    width = 0.8 / max(len(series), 1)
    x = np.arange(len(groups))
    for i, name in enumerate(series):
        own = part[part[by] == name].set_index("group").reindex(groups)
        ax.bar(
            x - 0.4 + (i + 0.5) * width,
            100 * own["update_share"].fillna(0.0).to_numpy(),
            width,
            color=colours.get(name),
            label=str(name),
        )
    fleet = part.drop_duplicates("group").set_index("group").reindex(groups)["fleet_share"]
    ax.hlines(
        100 * fleet.to_numpy(),
        x - 0.45,
        x + 0.45,
        color="black",
        lw=2,
        zorder=3,
        label="share of the fleet",
    )
    ax.set_xticks(x, groups)
    ax.set(xlabel="group", ylabel="share (%)", ylim=(0, 105))
    ax.grid(alpha=0.3, axis="y")
    ax.legend(loc="upper right", fontsize="small")


def _energy_points(
    ax: Any,
    runs: pd.DataFrame,
    by: str,
    target: str,
    colours: dict[str, Any],
    keys: list[str],
    several: bool,
) -> int:
    """Energy against time to target, per run and per series mean; the runs not drawn."""
    finite = runs[np.isfinite(runs["energy_to_target"]) & np.isfinite(runs["time_to_target"])]
    for (name, *values), own in finite.groupby([by, *keys], sort=False):
        colour = colours.get(name)
        label = f"{name} ({panel_title(keys, tuple(values))})" if several else str(name)
        ax.scatter(own["time_to_target"], own["energy_to_target"], s=14, alpha=0.45, color=colour)
        ax.scatter(
            own["time_to_target"].mean(),
            own["energy_to_target"].mean(),
            s=110,
            color=colour,
            edgecolor="black",
            label=label,
            zorder=3,
        )
    ax.set(
        xlabel=f"simulated time to {target} (s)",
        ylabel=f"energy to {target} (J)",
        title="Energy and time to the target",
    )
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    if not finite.empty:
        ax.legend(fontsize="small")
    else:
        ax.text(
            0.5, 0.5, "no run reached the target", ha="center", va="center", transform=ax.transAxes
        )
    return len(runs) - len(finite)
