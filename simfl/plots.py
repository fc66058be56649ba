"""Figures from Results and tidy frames (seaborn on matplotlib; the ``plots`` extra).

* :func:`metric_vs_time`: a metric against simulated time, one line per group, a confidence band
  over seeds (each seed's curve is a step function of time: the last evaluated value).
* :func:`metric_vs_rounds`: the same against the aggregation index.
* :func:`speedup_vs`: speedups with their confidence intervals against a parameter (fleet size).
* :func:`gantt`: a timeline of device jobs for a few rounds, coloured by stage (download,
  compute, upload; late, dropped and cancelled jobs marked) or by status; its rows are the
  stragglers, the slowest devices, a sample per tier or given ids (:func:`gantt_devices`).

``by=`` is a column or a list of columns everywhere, and a grouping that would merge several
runs under one ``(by..., seed)`` is refused (:func:`simfl.compare.check_one_run`).

Each returns the matplotlib ``Axes`` it drew on; pass ``ax=`` to compose figures (a figure made
here uses constrained layout, so its labels and legends stay inside it when saved).
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from simfl import compare
from simfl.policies import EdgeAggregation
from simfl.results import Results

__all__ = [
    "EDGE_COLOR",
    "GANTT_CHOICES",
    "STATUS_COLORS",
    "gantt",
    "gantt_devices",
    "metric_vs_rounds",
    "metric_vs_time",
    "speedup_vs",
]


def _pyplot() -> Any:
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "simfl.plots needs matplotlib and seaborn: pip install 'simfl[plots]'"
        ) from exc
    return plt


def _axes(ax: Any, size: tuple[float, float] = (7.0, 4.2)) -> Any:
    """``ax``, or the axes of a new figure whose layout keeps labels and legends inside it."""
    if ax is not None:
        return ax
    return _pyplot().subplots(figsize=size, layout="constrained")[1]


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


_SPEEDUP_STATS = frozenset(
    {"speedup", "ci_low", "ci_high", "mean_time", "baseline_time", "reached", "runs"}
    | {"baseline_reached", "baseline_runs", "note"}
)


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
    tuples of them). Rows whose speedup is not finite (a seed of the group or of the baseline
    never reached the target: :func:`simfl.compare.speedup` gives NaN) are not points: a note
    under the axes names them, with the table's ``note``. On a log axis the ticks are the
    values of ``x`` when there are at most 12, and minor ticks carry no labels, so that none
    overlap.

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
    finite = np.isfinite(data["speedup"].to_numpy(dtype=np.float64))
    _not_drawn(ax, data[~finite], hue, x)
    data = data[finite]
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
    if hue is not None and len(data):
        ax.legend(title=hue, fontsize="small")
    ax.grid(alpha=0.3)
    return ax


def _not_drawn(ax: Any, rows: pd.DataFrame, hue: str | None, x: str) -> None:
    """A note under the axes for the rows of a speedup table with no finite speedup.

    Each says where (the group and ``x``) and why: the table's ``note`` (``"not reached in k
    of n seeds"``, :func:`simfl.compare.not_reached_note`), else ``no baseline``. Never a point
    at 0x.
    """
    if rows.empty:
        return
    why = rows["note"] if "note" in rows.columns else pd.Series("", index=rows.index)
    lines = [
        ", ".join(
            str(v) for v in (None if hue is None else row[hue], f"{x}={row[x]}") if v is not None
        )
        + f": {note or 'no baseline'}"
        for (_, row), note in zip(rows.iterrows(), why.fillna(""), strict=True)
    ]
    ax.annotate(
        textwrap.fill("no speedup (not drawn): " + "; ".join(lines), 110),
        xy=(0, 0),
        xycoords="axes fraction",
        xytext=(0, -40),
        textcoords="offset points",
        va="top",
        fontsize="small",
        color="0.3",
    )


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


#: Colour of the edge-cloud phases of ``EdgeAggregation`` rounds in :func:`gantt`.
EDGE_COLOR = "#6a51a3"
#: The named device choices of :func:`gantt`.
GANTT_CHOICES = ("stragglers", "slowest", "tiers")
_STRAGGLING = ("late", "dropped")


def _device_groups(results: Results) -> pd.Series | None:
    """The group (tier) label of every device, by id, if the results record two or more groups.

    Read from ``meta["groups"]``: the group names and runs of equal group indices over the
    devices (``{"names": ["fast", "slow"], "runs": [[0, 80], [1, 20]]}`` for 80 fast devices
    then 20 slow ones). ``None`` when it is absent or names a single group.
    """
    entry = results.meta.get("groups")
    if not isinstance(entry, dict) or len(entry.get("names") or []) < 2:
        return None
    names = [str(n) for n in entry["names"]]
    labels = [names[int(g)] for g, count in entry.get("runs", []) for _ in range(int(count))]
    return pd.Series(labels, index=np.arange(len(labels)), dtype=object)


def gantt_devices(
    results: Results,
    rounds: Sequence[int] | range = range(3),
    devices: str | int | Sequence[int] | None = None,
    *,
    max_devices: int = 40,
) -> list[int]:
    """The devices :func:`gantt` draws for ``rounds``, in the order of its rows.

    Parameters
    ----------
    devices
        ``"stragglers"``: the devices with a late or dropped job in these rounds (the most
        such jobs first, then the longest total job time, when there are more than
        ``max_devices``); ``"slowest"``: the ``max_devices`` devices with the longest total job
        time in these rounds; ``"tiers"``: from every device group (tier) an even sample of
        ``max_devices // groups`` of its devices over their total job time, from the fastest to
        the slowest (needs the devices' groups in ``meta["groups"]``); a list of device ids;
        an int ``n``: the ``n`` lowest device ids with a job in these rounds. ``None``
        (default): ``"stragglers"`` if any job was late or dropped, else ``"slowest"``.

    Raises
    ------
    ValueError
        If ``devices`` is none of these, names devices outside the fleet, or asks for
        ``"tiers"`` of results without group labels.
    """
    if isinstance(max_devices, bool) or not isinstance(max_devices, int) or max_devices < 1:
        raise ValueError(f"gantt max_devices must be an int >= 1, got {max_devices!r}")
    jobs = results.clients[results.clients["round"].isin(list(rounds))]
    busy = (jobs["t_end"] - jobs["t_start"]).groupby(jobs["device"]).sum()
    if devices is None:
        devices = "stragglers" if jobs["status"].isin(_STRAGGLING).any() else "slowest"
    if isinstance(devices, str):
        return _named_devices(results, jobs, busy, devices, max_devices)
    if isinstance(devices, (int, np.integer)) and not isinstance(devices, bool):
        if devices < 1:
            raise ValueError(f"gantt devices must be >= 1 when an int, got {devices}")
        return sorted(int(d) for d in busy.index)[: int(devices)]
    return _explicit_devices(results, devices)


def _named_devices(
    results: Results, jobs: pd.DataFrame, busy: pd.Series, choice: str, max_devices: int
) -> list[int]:
    """The devices of ``"stragglers"``, ``"slowest"`` or ``"tiers"`` (see :func:`gantt_devices`)."""
    if choice == "slowest":
        order = busy.reset_index(name="busy").sort_values(
            ["busy", "device"], ascending=[False, True], kind="stable"
        )
        return sorted(int(d) for d in order["device"].head(max_devices))
    if choice == "stragglers":
        bad = jobs[jobs["status"].isin(_STRAGGLING)].groupby("device").size()
        order = pd.DataFrame({"bad": bad, "busy": busy.reindex(bad.index)}).reset_index()
        order = order.sort_values(
            ["bad", "busy", "device"], ascending=[False, False, True], kind="stable"
        )
        return sorted(int(d) for d in order["device"].head(max_devices))
    if choice == "tiers":
        return _tier_sample(results, busy, max_devices)
    raise ValueError(
        f"gantt devices must be one of {list(GANTT_CHOICES)}, a list of device ids or an int, "
        f"got {choice!r}"
    )


def _tier_sample(results: Results, busy: pd.Series, max_devices: int) -> list[int]:
    """An even sample of every group's devices over their busy time, grouped by group."""
    groups = _device_groups(results)
    if groups is None:
        raise ValueError(
            "gantt devices='tiers' needs the devices' group labels (meta['groups'] with two "
            "or more groups); these results have none: use 'stragglers', 'slowest' or a list "
            "of device ids"
        )
    ran = busy.index.intersection(groups.index)
    labels = list(dict.fromkeys(groups.loc[ran]))
    per = max(1, max_devices // max(1, len(labels)))
    out: list[int] = []
    for label in labels:
        own = busy.loc[ran][groups.loc[ran] == label].sort_values(kind="stable")
        picks = np.unique(np.round(np.linspace(0, own.size - 1, min(per, own.size))).astype(int))
        out += sorted(int(d) for d in own.index[picks])
    return out


def _explicit_devices(results: Results, devices: Any) -> list[int]:
    """A list of device ids, checked against the fleet."""
    n = int(results.meta.get("n_devices", results.clients["device"].max() + 1))
    try:
        ids = [int(d) for d in devices]
    except (TypeError, ValueError):
        raise ValueError(
            f"gantt devices must be one of {list(GANTT_CHOICES)}, a list of device ids or an "
            f"int, got {devices!r}"
        ) from None
    bad = [d for d in ids if not 0 <= d < n]
    if bad or not ids:
        raise ValueError(f"gantt devices must be ids in [0, {n - 1}], got {devices!r}")
    return list(dict.fromkeys(ids))


def gantt(
    results: Results,
    rounds: Sequence[int] | range = range(3),
    *,
    devices: str | int | Sequence[int] | None = None,
    ax: Any = None,
    max_devices: int = 40,
    color: str = "stage",
) -> Any:
    """Timeline of the device jobs of some rounds: one row per device, one bar per stage.

    ``devices`` chooses the rows (:func:`gantt_devices`): by default the stragglers (devices
    with late or dropped jobs) when there are any, else the slowest devices; ``"tiers"`` a
    sample of every device group, a list of ids, or an int ``n`` (the ``n`` lowest ids). Row
    labels give the device id and, when the results carry them, its group.

    ``color="stage"`` (default): download, compute and upload in their own colours; late jobs
    get a red outline, cancelled ones a grey one, dropped jobs end with a black cross.
    ``color="status"``: each job in the colour of its status (arrived, late, dropped,
    cancelled; :data:`STATUS_COLORS`), its transfers lighter than its compute. Dotted lines mark
    the aggregations. The time axis starts at the start of the first drawn round (0 for round
    0), and the legend is placed right of the axes inside the figure (a figure made here uses
    constrained layout; give ``ax=`` of a figure that does the same).

    Runs of :class:`~simfl.policies.EdgeAggregation` get a top row ``edge-cloud``. The
    results do not record the edge servers' own transfers, so it draws what the records
    imply: per round, from its start to each distinct start of its device jobs (an edge
    server fetching the model from the cloud; the devices behind an edge start when it has
    it), and from the end of the round's last device job to the cloud aggregation (the edge
    aggregates travelling to the cloud, and the cloud waiting for them).

    Returns
    -------
    matplotlib.axes.Axes
        The axes; their y tick labels name the devices drawn, top to bottom.
    """
    plt = _pyplot()
    if color not in ("stage", "status"):
        raise ValueError(f"gantt color must be 'stage' or 'status', got {color!r}")
    chosen = gantt_devices(results, rounds, devices, max_devices=max_devices)
    edge = results.meta.get("policy") == EdgeAggregation.name
    jobs = results.clients[results.clients["round"].isin(list(rounds))]
    drawn = jobs[jobs["device"].isin(chosen)]
    row: dict[Any, int] = {d: i + int(edge) for i, d in enumerate(chosen)}
    ax = _axes(ax, (9.0, max(2.5, 0.22 * (len(chosen) + int(edge)) + 1.2)))
    for job in drawn.itertuples():
        _gantt_job(ax, job, row[job.device], color)
    in_rounds = results.rounds[results.rounds["round"].isin(list(rounds))]
    if edge:
        _gantt_edge_row(ax, jobs, in_rounds)
    for t in in_rounds["time"]:
        ax.axvline(t, color="0.2", ls=":", lw=1)
    handles, labels = _gantt_legend(plt, color, edge)
    ax.legend(handles, labels, fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_yticks(
        range(len(chosen) + int(edge)),
        ["edge-cloud"] * int(edge) + _device_labels(results, chosen),
        fontsize="small",
    )
    ends = [*in_rounds["time"], *jobs["t_end"]]
    start = min([*in_rounds["t_start"], *jobs["t_start"]], default=0.0)
    ax.set_xlim(start, max(ends, default=start + 1.0) + 0.01 * (max(ends, default=1.0) - start))
    ax.set(
        xlabel="simulated time (s)",
        ylabel="device",
        title=f"Device jobs, rounds {min(rounds)}-{max(rounds)}",
    )
    ax.set_ylim(len(chosen) + int(edge) - 0.5, -0.5)  # first row on top
    return ax


def _device_labels(results: Results, devices: list[int]) -> list[str]:
    """Row labels: the device id, and its group where the results carry one."""
    groups = _device_groups(results)
    if groups is None:
        return [str(d) for d in devices]
    return [f"{d} ({groups[d]})" if d in groups.index else str(d) for d in devices]


def _gantt_edge_row(ax: Any, jobs: pd.DataFrame, rounds: pd.DataFrame) -> None:
    """The edge-cloud phases of the drawn rounds of an edge run, on row 0 (see :func:`gantt`)."""
    for r, t0, t1 in zip(rounds["round"], rounds["t_start"], rounds["time"], strict=True):
        own = jobs[jobs["round"] == r]
        if own.empty:
            continue
        for begin in np.unique(own["t_start"].to_numpy()):
            if begin > t0:
                ax.barh(0, begin - t0, left=t0, height=0.7, color=EDGE_COLOR, alpha=0.5)
        close = float(own["t_end"].max())
        if t1 > close:
            ax.barh(0, t1 - close, left=close, height=0.7, color=EDGE_COLOR, alpha=0.5)


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


def _gantt_legend(plt: Any, color: str, edge: bool) -> tuple[list[Any], list[str]]:
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
    if edge:
        handles.append(plt.Rectangle((0, 0), 1, 1, color=EDGE_COLOR, alpha=0.5))
        labels.append("edge-cloud transfers")
    handles.append(plt.Line2D([], [], color="0.2", ls=":"))
    labels.append("aggregation")
    return handles, labels
