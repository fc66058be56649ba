"""Figures from Results and tidy frames (seaborn on matplotlib; the ``plots`` extra).

* :func:`metric_vs_time`: a metric against simulated time, one line per group, a confidence band
  over seeds (each seed's curve is a step function of time: the last evaluated value).
* :func:`metric_vs_rounds`: the same against the aggregation index.
* :func:`speedup_vs`: speedups with their confidence intervals against a parameter (fleet size).
* :func:`gantt`: a timeline of device jobs for a few rounds (download, compute, upload; late,
  dropped and cancelled jobs marked).

Each returns the matplotlib ``Axes`` it drew on; pass ``ax=`` to compose figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from simfl.results import Results

__all__ = ["gantt", "metric_vs_rounds", "metric_vs_time", "speedup_vs"]


def _pyplot() -> Any:
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "simfl.plots needs matplotlib and seaborn: pip install 'simfl[plots]'"
        ) from exc
    return plt


def _axes(ax: Any, size: tuple[float, float] = (7.0, 4.2)) -> Any:
    if ax is not None:
        return ax
    return _pyplot().subplots(figsize=size)[1]


def on_grid(
    frame: pd.DataFrame,
    metric: str,
    *,
    by: str = "label",
    points: int = 200,
    log_time: bool = False,
) -> pd.DataFrame:
    """Each run's metric as a step function of time, sampled on a common grid per group.

    The grid of a group spans from 0 (or its first positive time, on a log axis) to the end of
    its shortest run, so no run is extended beyond what it simulated.
    """
    rows = []
    for key, group in frame.groupby(by, sort=False):
        runs = [df.dropna(subset=[metric]) for _, df in group.groupby("seed")]
        runs = [df for df in runs if not df.empty]
        if not runs:
            continue
        end = min(float(df["time"].iloc[-1]) for df in runs)
        if log_time:
            first = min(float(df.loc[df["time"] > 0, "time"].min()) for df in runs)
            grid = np.geomspace(first, max(end, first), points)
        else:
            grid = np.linspace(0.0, end, points)
        for df in runs:
            t, v = df["time"].to_numpy(), df[metric].to_numpy()
            idx = np.searchsorted(t, grid, side="right") - 1
            ok = idx >= 0
            rows.append(
                pd.DataFrame(
                    {by: key, "seed": df["seed"].iloc[0], "time": grid[ok], metric: v[idx[ok]]}
                )
            )
    return pd.concat(rows, ignore_index=True)


def metric_vs_time(
    frame: pd.DataFrame,
    metric: str,
    *,
    by: str = "label",
    ax: Any = None,
    log_y: bool = True,
    log_time: bool = False,
    target: float | None = None,
    points: int = 200,
) -> Any:
    """A metric against simulated time: mean over seeds with a 95% bootstrap band per group."""
    import seaborn as sns

    ax = _axes(ax)
    data = on_grid(frame, metric, by=by, points=points, log_time=log_time)
    sns.lineplot(
        data=data, x="time", y=metric, hue=by, errorbar=("ci", 95), ax=ax, n_boot=200, seed=0
    )
    if target is not None:
        ax.axhline(target, color="0.3", ls=":", lw=1, label=f"target {target:g}")
    ax.set(
        xlabel="simulated time (s)",
        ylabel=metric,
        yscale="log" if log_y else "linear",
        xscale="log" if log_time else "linear",
    )
    ax.legend(title=by, fontsize="small")
    ax.grid(alpha=0.3)
    return ax


def metric_vs_rounds(
    frame: pd.DataFrame, metric: str, *, by: str = "label", ax: Any = None, log_y: bool = True
) -> Any:
    """A metric against the aggregation index, mean over seeds with a 95% band."""
    import seaborn as sns

    ax = _axes(ax)
    data = frame.dropna(subset=[metric])
    sns.lineplot(
        data=data, x="round", y=metric, hue=by, errorbar=("ci", 95), ax=ax, n_boot=200, seed=0
    )
    ax.set(xlabel="round (aggregations)", ylabel=metric, yscale="log" if log_y else "linear")
    ax.grid(alpha=0.3)
    return ax


def speedup_vs(
    table: pd.DataFrame,
    x: str,
    *,
    by: str | None = None,
    ax: Any = None,
    log_x: bool = True,
    xlabel: str | None = None,
) -> Any:
    """Speedups (columns ``speedup``, ``ci_low``, ``ci_high``) against column ``x``."""
    ax = _axes(ax)
    groups = [(None, table)] if by is None else list(table.groupby(by, sort=False))
    for key, df in groups:
        df = df.sort_values(x)
        err = np.vstack([df["speedup"] - df["ci_low"], df["ci_high"] - df["speedup"]])
        ax.errorbar(
            df[x],
            df["speedup"],
            yerr=np.clip(err, 0, None),
            marker="o",
            capsize=3,
            label=None if key is None else str(key),
        )
    ax.axhline(1.0, color="0.5", lw=0.8, ls="--")
    ax.set(
        xlabel=xlabel or x,
        ylabel="speedup (time to target, baseline / policy)",
        xscale="log" if log_x else "linear",
    )
    if by is not None:
        ax.legend(title=by, fontsize="small")
    ax.grid(alpha=0.3)
    return ax


_STAGE_COLORS = {"download": "#8fb9e0", "compute": "#2f6fae", "upload": "#f0a34a"}


def gantt(
    results: Results,
    rounds: Sequence[int] | range = range(3),
    *,
    ax: Any = None,
    max_devices: int = 40,
) -> Any:
    """Timeline of the device jobs of some rounds: one row per device, one bar per stage.

    Late jobs get a red outline, cancelled ones a grey one, dropped jobs end with a black cross;
    dotted lines mark the aggregations.
    """
    plt = _pyplot()
    jobs = results.clients[results.clients["round"].isin(list(rounds))]
    devices = np.sort(jobs["device"].unique())[:max_devices]
    jobs = jobs[jobs["device"].isin(devices)]
    row = {d: i for i, d in enumerate(devices)}
    ax = _axes(ax, (9.0, max(2.5, 0.22 * len(devices) + 1.2)))
    edge = {"late": "red", "cancelled": "0.45"}
    for job in jobs.itertuples():
        y = row[job.device]
        start = job.t_start
        for stage in ("download", "compute", "upload"):
            width = getattr(job, stage)
            if width > 0:
                ax.barh(
                    y,
                    width,
                    left=start,
                    height=0.7,
                    color=_STAGE_COLORS[stage],
                    edgecolor=edge.get(str(job.status), "none"),
                    linewidth=1.2,
                )
            start += width
        if job.status == "dropped":
            ax.plot(job.t_end, y, marker="x", color="black", ms=6)
    for t in results.rounds.loc[results.rounds["round"].isin(list(rounds)), "time"]:
        ax.axvline(t, color="0.2", ls=":", lw=1)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in _STAGE_COLORS.values()]
    handles += [
        plt.Rectangle((0, 0), 1, 1, fill=False, edgecolor="red"),
        plt.Rectangle((0, 0), 1, 1, fill=False, edgecolor="0.45"),
        plt.Line2D([], [], marker="x", color="black", ls="none"),
        plt.Line2D([], [], color="0.2", ls=":"),
    ]
    labels = [*_STAGE_COLORS, "late", "cancelled", "dropped", "aggregation"]
    ax.legend(
        handles, labels, fontsize="small", ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.18)
    )
    ax.set_yticks(range(len(devices)), [str(d) for d in devices], fontsize="small")
    ax.set(
        xlabel="simulated time (s)",
        ylabel="device",
        title=f"Device jobs, rounds {min(rounds)}-{max(rounds)}",
    )
    ax.invert_yaxis()
    return ax
