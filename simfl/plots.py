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

from simfl import compare
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


def _hue(frame: pd.DataFrame, keys: list[str]) -> tuple[pd.DataFrame, str]:
    """The frame with one column naming each group of ``keys`` (``"fedrep, small"``)."""
    if len(keys) == 1:
        return frame, keys[0]
    name = ", ".join(keys)
    text = frame[keys].astype(str)
    return frame.assign(**{name: text.agg(", ".join, axis=1)}), name


def _hue_palette(palette: dict[Any, Any] | None, keys: list[str]) -> dict[Any, Any] | None:
    """``palette`` keyed as the hue column is: tuples of several ``by`` values joined."""
    if palette is None or len(keys) == 1:
        return palette
    return {(", ".join(map(str, k)) if isinstance(k, tuple) else k): v for k, v in palette.items()}


def on_grid(
    frame: pd.DataFrame,
    metric: str,
    *,
    by: str | Sequence[str] = "label",
    points: int = 200,
    log_time: bool = False,
) -> pd.DataFrame:
    """Each run's metric as a step function of time, sampled on a common grid per group.

    The grid of a group spans from 0 (or its first positive time, on a log axis) to the end of
    its shortest run, so no run is extended beyond what it simulated.

    Raises
    ------
    ValueError
        If a ``(by..., seed)`` group holds several runs (:func:`simfl.compare.check_one_run`).
    """
    keys = compare.by_columns(by, frame, where="on_grid")
    compare.check_one_run(frame, keys, where="on_grid")
    rows = []
    for key, group in frame.groupby(keys, sort=False, dropna=False):
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
        labels = dict(zip(keys, key if isinstance(key, tuple) else (key,), strict=True))
        for df in runs:
            t, v = df["time"].to_numpy(), df[metric].to_numpy()
            idx = np.searchsorted(t, grid, side="right") - 1
            ok = idx >= 0
            rows.append(
                pd.DataFrame(
                    {**labels, "seed": df["seed"].iloc[0], "time": grid[ok], metric: v[idx[ok]]}
                )
            )
    return pd.concat(rows, ignore_index=True)


def metric_vs_time(
    frame: pd.DataFrame,
    metric: str,
    *,
    by: str | Sequence[str] = "label",
    ax: Any = None,
    log_y: bool = True,
    log_time: bool = False,
    target: float | None = None,
    points: int = 200,
    palette: dict[Any, Any] | None = None,
) -> Any:
    """A metric against simulated time: mean over seeds with a 95% bootstrap band per group.

    ``by`` is a column or a list of them (one line per combination); ``palette`` maps groups
    (tuples of values for several columns) to colours (keeps colours fixed across figures).

    Raises
    ------
    ValueError
        If a ``(by..., seed)`` group holds several runs (:func:`simfl.compare.check_one_run`).
    """
    keys = compare.by_columns(by, frame, where="metric_vs_time")
    compare.check_one_run(frame, keys, where="metric_vs_time")
    ax = _axes(ax)
    data, hue = _hue(on_grid(frame, metric, by=keys, points=points, log_time=log_time), keys)
    _mean_with_band(data, "time", metric, hue, ax, _hue_palette(palette, keys))
    if target is not None:
        ax.axhline(target, color="0.3", ls=":", lw=1, label=f"target {target:g}")
    ax.set(
        xlabel="simulated time (s)",
        ylabel=metric,
        yscale="log" if log_y else "linear",
        xscale="log" if log_time else "linear",
    )
    ax.legend(title=hue, fontsize="small")
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
    by: str | Sequence[str] = "label",
    ax: Any = None,
    log_y: bool = True,
    palette: dict[Any, Any] | None = None,
) -> Any:
    """A metric against the aggregation index, mean over seeds with a 95% band.

    Raises
    ------
    ValueError
        If a ``(by..., seed)`` group holds several runs (:func:`simfl.compare.check_one_run`).
    """
    keys = compare.by_columns(by, frame, where="metric_vs_rounds")
    compare.check_one_run(frame, keys, where="metric_vs_rounds")
    ax = _axes(ax)
    data, hue = _hue(frame.dropna(subset=[metric]), keys)
    _mean_with_band(data, "round", metric, hue, ax, _hue_palette(palette, keys))
    ax.set(xlabel="round (aggregations)", ylabel=metric, yscale="log" if log_y else "linear")
    ax.grid(alpha=0.3)
    return ax


_SPEEDUP_STATS = frozenset({"speedup", "ci_low", "ci_high", "mean_time", "baseline_time"})


def _one_row_per_point(table: pd.DataFrame, keys: list[str], x: str) -> None:
    """Refuse a speedup table with several rows at one ``x`` of one line."""
    dup = table.duplicated([*keys, x], keep=False)
    if not dup.any():
        return
    rows = table[dup]
    first = rows.iloc[0]
    same = (rows[[*keys, x]] == first[[*keys, x]]).all(axis=1)
    rows = rows[same]
    skip = {*keys, x, *_SPEEDUP_STATS}
    differ = [c for c in table.columns if c not in skip and rows[c].nunique(dropna=False) > 1]
    where = ", ".join(f"{k}={first[k]!r}" for k in [*keys, x])
    if not differ:
        raise ValueError(
            f"speedup_vs: {len(rows)} rows of the table share ({where}) and no column tells "
            f"them apart; give one row per line and x"
        )
    names = ", ".join(repr(c) for c in differ)
    raise ValueError(
        f"speedup_vs: {len(rows)} rows share ({where}): the rows differ in {names}; add "
        f"{'it' if len(differ) == 1 else 'them'} to by=, e.g. by={[*keys, *differ]}, or "
        f"select one value"
    )


def speedup_vs(
    table: pd.DataFrame,
    x: str,
    *,
    by: str | Sequence[str] | None = None,
    ax: Any = None,
    log_x: bool = True,
    xlabel: str | None = None,
    palette: dict[Any, Any] | None = None,
) -> Any:
    """Speedups (columns ``speedup``, ``ci_low``, ``ci_high``) against column ``x``.

    One line per ``by`` group (a column or a list of them; ``palette`` keyed by its values, or
    tuples of them). On a log axis the ticks are the values of ``x`` when there are at most 12,
    and minor ticks carry no labels, so that none overlap.

    Raises
    ------
    ValueError
        If a line has several rows at one ``x`` (it would zigzag between them).
    """
    keys = [] if by is None else compare.by_columns(by, table, where="speedup_vs")
    _one_row_per_point(table, keys, x)
    ax = _axes(ax)
    data, hue = (table, None) if not keys else _hue(table, keys)
    colours = _hue_palette(palette, keys) if keys else None
    groups = [(None, data)] if hue is None else list(data.groupby(hue, sort=False))
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
            color=None if colours is None or key is None else colours.get(key),
        )
    ax.axhline(1.0, color="0.5", lw=0.8, ls="--")
    ax.set(
        xlabel=xlabel or x,
        ylabel="speedup (time to target, baseline / policy)",
        xscale="log" if log_x else "linear",
    )
    if log_x:
        _log_ticks(ax, np.unique(table[x].to_numpy(dtype=np.float64)))
    if hue is not None:
        ax.legend(title=hue, fontsize="small")
    ax.grid(alpha=0.3)
    return ax


def _log_ticks(ax: Any, values: np.ndarray) -> None:
    """Readable ticks on a log x axis: the data's values (few), else decades; no minor labels."""
    from matplotlib.ticker import NullFormatter, NullLocator

    values = values[np.isfinite(values) & (values > 0)]
    if 0 < values.size <= 12:
        ax.set_xticks(values, [f"{v:g}" for v in values])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlim(values[0] / 1.25, values[-1] * 1.25)
    ax.xaxis.set_minor_formatter(NullFormatter())


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
