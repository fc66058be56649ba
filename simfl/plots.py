"""Figures from Results and tidy frames (seaborn on matplotlib; the ``plots`` extra).

* :func:`metric_vs_time`: a metric against simulated time, one line per group, a confidence band
  over seeds (each seed's curve is a step function of time: the last evaluated value).
* :func:`metric_vs_rounds`: the same against the aggregation index.
* :func:`speedup_vs`: speedups with their confidence intervals against a parameter (fleet size).
* :func:`gantt`: a timeline of device jobs for a few rounds, coloured by stage (download,
  compute, upload; late, dropped and cancelled jobs marked) or by status.

Each returns the matplotlib ``Axes`` it drew on; pass ``ax=`` to compose figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from simfl.results import Results

__all__ = ["STATUS_COLORS", "gantt", "metric_vs_rounds", "metric_vs_time", "speedup_vs"]


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
    palette: dict[Any, Any] | None = None,
) -> Any:
    """A metric against simulated time: mean over seeds with a 95% bootstrap band per group.

    ``palette`` maps groups to colours (keeps colours fixed across figures).
    """
    ax = _axes(ax)
    data = on_grid(frame, metric, by=by, points=points, log_time=log_time)
    _mean_with_band(data, "time", metric, by, ax, palette)
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


def _mean_with_band(
    data: pd.DataFrame, x: str, metric: str, by: str, ax: Any, palette: dict[Any, Any] | None
) -> None:
    """Mean of ``metric`` over seeds against ``x``, one line per ``by``, 95% bootstrap band."""
    import seaborn as sns

    sns.lineplot(
        data=data,
        x=x,
        y=metric,
        hue=by,
        errorbar=("ci", 95),
        ax=ax,
        n_boot=200,
        seed=0,
        palette=palette,
    )


def metric_vs_rounds(
    frame: pd.DataFrame,
    metric: str,
    *,
    by: str = "label",
    ax: Any = None,
    log_y: bool = True,
    palette: dict[Any, Any] | None = None,
) -> Any:
    """A metric against the aggregation index, mean over seeds with a 95% band."""
    ax = _axes(ax)
    data = frame.dropna(subset=[metric])
    _mean_with_band(data, "round", metric, by, ax, palette)
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
    palette: dict[Any, Any] | None = None,
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
            color=None if palette is None or key is None else palette.get(key),
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
#: Colours of job statuses in ``gantt(..., color="status")``: colour-blind-safe (Okabe-Ito).
STATUS_COLORS = {
    "arrived": "#009e73",
    "late": "#e69f00",
    "dropped": "#cc79a7",
    "cancelled": "#999999",
}


def gantt(
    results: Results,
    rounds: Sequence[int] | range = range(3),
    *,
    ax: Any = None,
    max_devices: int = 40,
    color: str = "stage",
) -> Any:
    """Timeline of the device jobs of some rounds: one row per device, one bar per stage.

    ``color="stage"`` (default): download, compute and upload in their own colours; late jobs
    get a red outline, cancelled ones a grey one, dropped jobs end with a black cross.
    ``color="status"``: each job in the colour of its status (arrived, late, dropped,
    cancelled; :data:`STATUS_COLORS`), its transfers lighter than its compute. Dotted lines mark
    the aggregations. At most ``max_devices`` devices are shown (the lowest device ids).
    """
    plt = _pyplot()
    if color not in ("stage", "status"):
        raise ValueError(f"gantt color must be 'stage' or 'status', got {color!r}")
    jobs = results.clients[results.clients["round"].isin(list(rounds))]
    devices = np.sort(jobs["device"].unique())[:max_devices]
    jobs = jobs[jobs["device"].isin(devices)]
    row = {d: i for i, d in enumerate(devices)}
    ax = _axes(ax, (9.0, max(2.5, 0.22 * len(devices) + 1.2)))
    for job in jobs.itertuples():
        _gantt_job(ax, job, row[job.device], color)
    for t in results.rounds.loc[results.rounds["round"].isin(list(rounds)), "time"]:
        ax.axvline(t, color="0.2", ls=":", lw=1)
    handles, labels = _gantt_legend(plt, color)
    ax.legend(handles, labels, fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_yticks(range(len(devices)), [str(d) for d in devices], fontsize="small")
    ax.set(
        xlabel="simulated time (s)",
        ylabel="device",
        title=f"Device jobs, rounds {min(rounds)}-{max(rounds)}",
    )
    ax.invert_yaxis()
    return ax


def _gantt_job(ax: Any, job: Any, y: int, color: str) -> None:
    """The bars of one job (a row of ``Results.clients``) on row ``y`` of a Gantt chart."""
    edge = {"late": "red", "cancelled": "0.45"}
    start = job.t_start
    status = str(job.status)
    for stage in ("download", "compute", "upload"):
        width = getattr(job, stage)
        if width > 0:
            style: dict[str, Any]
            if color == "stage":
                style = {"color": _STAGE_COLORS[stage], "edgecolor": edge.get(status, "none")}
            else:
                alpha = 1.0 if stage == "compute" else 0.45
                style = {"color": STATUS_COLORS[status], "alpha": alpha, "edgecolor": "none"}
            ax.barh(y, width, left=start, height=0.7, linewidth=1.2, **style)
        start += width
    if color == "status":  # a white edge keeps back-to-back jobs of a device apart
        ax.barh(
            y,
            float(job.t_end) - float(job.t_start),
            left=job.t_start,
            height=0.7,
            fill=False,
            edgecolor="white",
            linewidth=1.0,
        )
    elif status == "dropped":
        ax.plot(job.t_end, y, marker="x", color="black", ms=6)


def _gantt_legend(plt: Any, color: str) -> tuple[list[Any], list[str]]:
    """The legend of a Gantt chart coloured by ``"stage"`` or ``"status"``."""
    if color == "stage":
        handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in _STAGE_COLORS.values()]
        handles += [
            plt.Rectangle((0, 0), 1, 1, fill=False, edgecolor="red"),
            plt.Rectangle((0, 0), 1, 1, fill=False, edgecolor="0.45"),
            plt.Line2D([], [], marker="x", color="black", ls="none"),
        ]
        labels = [*_STAGE_COLORS, "late", "cancelled", "dropped"]
    else:
        handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in STATUS_COLORS.values()]
        handles.append(plt.Rectangle((0, 0), 1, 1, color="0.3", alpha=0.45))
        labels = [*STATUS_COLORS, "(lighter: transfers)"]
    handles.append(plt.Line2D([], [], color="0.2", ls=":"))
    labels.append("aggregation")
    return handles, labels
