"""The figures of a report (:mod:`simfl.report`), each drawn into a PNG file (matplotlib, Agg)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from simfl import plots
from simfl.report.choose import panel_title
from simfl.results import Results

__all__ = [
    "gantt_figure",
    "palette",
    "metric_figure",
    "speedup_figure",
    "staleness_figure",
    "utilisation_figure",
]

_DPI = 110


def _save(fig: Any, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=_DPI, bbox_inches="tight")
    plt.close(fig)


def _panels(n: int, width: float = 6.4, height: float = 4.2) -> tuple[Any, list[Any]]:
    import matplotlib.pyplot as plt

    cols = min(n, 3)
    rows = -(-n // cols)
    fig, axes = plt.subplots(  # constrained: titles never run into the labels above them
        rows,
        cols,
        figsize=(width * cols, height * rows),
        squeeze=False,
        sharey=True,
        layout="constrained",
    )
    flat = list(axes.ravel())
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def palette(series: list[str]) -> dict[str, Any]:
    """One fixed colour per series, the same in every figure."""
    import seaborn as sns

    colours = sns.color_palette("tab10" if len(series) <= 10 else "husl", len(series))
    return dict(zip(series, colours, strict=True))


def _panel_groups(frame: pd.DataFrame, panels: list[str]) -> list[tuple[str, pd.DataFrame]]:
    """The rows of every panel with its title, in order (other labels, then fleet size)."""
    return [
        (panel_title(panels, key if isinstance(key, tuple) else (key,)), group)
        for key, group in frame.groupby(panels, sort=True, dropna=False)
    ]


def metric_figure(
    frame: pd.DataFrame,
    metric: str,
    by: str,
    *,
    panels: list[str],
    x: str,
    target: float,
    colours: dict[str, Any],
    path: Path,
) -> None:
    """The metric against rounds (``x="rounds"``) or simulated time, one panel per panel key."""
    values = frame[metric].dropna().to_numpy()
    positive = values[values > 0]
    log_y = bool(values.size and (values > 0).all() and positive.max() > 100 * positive.min())
    groups = _panel_groups(frame, panels)
    fig, axes = _panels(len(groups))
    for i, (ax, (title, data)) in enumerate(zip(axes, groups, strict=True)):
        if x == "rounds":
            plots.metric_vs_rounds(data, metric, by=by, ax=ax, log_y=log_y, palette=colours)
            ax.axhline(target, color="0.3", ls=":", lw=1, label=f"target {target:g}")
        else:
            plots.metric_vs_time(
                data, metric, by=by, ax=ax, log_y=log_y, target=target, palette=colours, points=120
            )
        ax.set_title(title)
        legend = ax.get_legend()
        if legend is not None and i > 0:
            legend.remove()
        elif legend is not None:
            ax.legend(title=by, fontsize="small")
    fig.suptitle(f"{metric} vs {'round' if x == 'rounds' else 'simulated time'}")
    _save(fig, path)


def _line_names(table: pd.DataFrame, by: str, extra: list[str]) -> list[str]:
    """The series of each row, with the other panel labels (``fedrep, fleet=A``)."""
    return [
        ", ".join([str(row[0]), *(f"{k}={v}" for k, v in zip(extra, row[1:], strict=True))])
        for row in table[[by, *extra]].itertuples(index=False)
    ]


def speedup_figure(
    speed: pd.DataFrame,
    by: str,
    baseline: str,
    target: str,
    *,
    panels: list[str],
    sizes: list[int],
    colours: dict[str, Any],
    path: Path,
) -> None:
    """Speedup over the baseline against fleet size (bars when the store has one size).

    With other panel labels (``extra``), every series has a line (or bar) per value of them.
    """
    import matplotlib.pyplot as plt

    extra = [c for c in panels if c != "n_devices"]
    fig, ax = plt.subplots(figsize=(7.0, 4.2), layout="constrained")
    shown = speed
    if len(speed):
        shown = speed[(speed[by] != baseline) & np.isfinite(speed["speedup"])]
        shown = shown[shown["speedup"] > 0]
    if shown.empty:
        ax.text(
            0.5,
            0.5,
            "no speedup to show"
            + ("" if len(speed) and (speed[by] != baseline).any() else "\n(only the baseline)"),
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
        ax.set_axis_off()
    elif len(sizes) == 1:
        _speedup_bars(ax, shown, by, extra, sizes[0], colours)
    else:
        lines = shown.assign(line=_line_names(shown, by, extra))
        plots.speedup_vs(
            lines,
            "n_devices",
            by="line" if extra else by,
            ax=ax,
            xlabel="fleet size (devices)",
            palette=None if extra else colours,
        )
        legend = ax.get_legend()
        if legend is not None:
            legend.set_title(", ".join([by, *extra]))
        ax.set_xticks(sizes, [str(n) for n in sizes])
        ax.set_xlim(sizes[0] / 1.2, sizes[-1] * 1.2)
        ax.minorticks_off()
    if not shown.empty:
        ax.set_ylabel(f"speedup over {baseline} (x)")
        ax.set_ylim(bottom=0)
    if len(speed):
        missing = speed[(speed[by] != baseline) & ~speed.index.isin(shown.index)]
        _not_drawn(ax, missing, by, extra, baseline, sizes)
    ax.set_title(f"Speedup in time to {target}")
    _save(fig, path)


def _speedup_bars(
    ax: Any,
    shown: pd.DataFrame,
    by: str,
    extra: list[str],
    size: int,
    colours: dict[str, Any],
) -> None:
    """One bar per series (and other panel labels) with its CI, for one fleet size."""
    err = np.vstack([shown["speedup"] - shown["ci_low"], shown["ci_high"] - shown["speedup"]])
    pos = np.arange(len(shown))
    ax.bar(
        pos,
        shown["speedup"],
        yerr=np.clip(np.nan_to_num(err), 0, None),
        capsize=4,
        color=[colours[v] for v in shown[by]],
    )
    ax.set_xticks(pos, _line_names(shown, by, extra), rotation=20, ha="right")
    ax.set_xlim(-0.8, len(shown) - 0.2)
    ax.axhline(1.0, color="0.5", lw=0.8, ls="--")
    ax.set(xlabel=f"{', '.join([by, *extra])} (all runs: {size} devices)")
    ax.grid(alpha=0.3, axis="y")


def _not_drawn(
    ax: Any, missing: pd.DataFrame, by: str, extra: list[str], baseline: str, sizes: list[int]
) -> None:
    """A note under the axes naming the series with no speedup (if any), and why.

    Why is the speedup table's ``note`` (``"not reached in k of n seeds"``, for the series or
    its baseline), or that the baseline did not run there.
    """
    if not len(missing):
        return
    notes = missing["note"] if "note" in missing.columns else pd.Series("", missing.index)
    alone = missing["baseline_time"].isna() if "baseline_time" in missing.columns else notes == ""
    where: dict[tuple[str, str], list[int]] = {}
    for name, n, note, no_base in zip(
        _line_names(missing, by, extra), missing["n_devices"], notes.fillna(""), alone, strict=True
    ):
        why = note or (f"no {baseline} run there" if no_base else "no finite speedup")
        where.setdefault((name, why), []).append(int(n))
    names = "; ".join(
        f"{k} ({why})" if len(sizes) == 1 else f"{k} at {', '.join(map(str, v))} devices ({why})"
        for (k, why), v in where.items()
    )
    ax.annotate(
        textwrap.fill(f"no speedup (not drawn): {names}", 110),
        xy=(0, 0),
        xycoords="axes fraction",
        xytext=(0, -75 if len(sizes) == 1 else -45),
        textcoords="offset points",
        va="top",
        fontsize="small",
        color="0.3",
    )


def _gantt_rounds(results: Results, max_devices: int) -> range:
    """The first rounds (1 to 3) whose stragglers fit in ``max_devices`` rows."""
    jobs = results.clients
    late = jobs[jobs["status"].isin(["late", "dropped"])]
    best = 1
    for k in range(1, 4):
        if late.loc[late["round"] < k, "device"].nunique() <= max_devices:
            best = k
    return range(best)


def gantt_figure(results: Results, title: str, path: Path, *, max_devices: int = 40) -> str:
    """The device jobs of the first rounds of a run, by status; what it shows, in words.

    The rows are the devices with late or dropped jobs in these rounds (all of them, up to
    ``max_devices``), then the slowest others up to ``max_devices`` rows.
    """
    rounds = _gantt_rounds(results, max_devices)
    late = plots.gantt_devices(results, rounds, "stragglers", max_devices=max_devices)
    slow = plots.gantt_devices(results, rounds, "slowest", max_devices=max_devices)
    others = [d for d in slow if d not in set(late)][: max_devices - len(late)]
    ax = plots.gantt(results, rounds, devices=sorted([*late, *others]), color="status")
    ax.set_title(f"{title}: device jobs, rounds {rounds.start}-{rounds.stop - 1}")
    jobs = results.clients[results.clients["round"].isin(list(rounds))]
    stragglers = jobs.loc[jobs["status"].isin(["late", "dropped"]), "device"].nunique()
    n = int(results.meta.get("n_devices", jobs["device"].nunique()))
    _save(ax.figure, path)
    which = f"rounds {rounds.start}-{rounds.stop - 1}" if len(rounds) > 1 else "round 0"
    if stragglers == 0:
        part = "no job was late or dropped"
    elif len(late) == stragglers:
        part = (
            "the one device with late or dropped jobs"
            if stragglers == 1
            else f"all {stragglers} devices with late or dropped jobs"
        )
    else:
        part = f"{len(late)} of the {stragglers} devices with late or dropped jobs (the most)"
    return (
        f"{which} of the {n} devices: {part}"
        + (f", then the {len(others)} slowest other{'s' * (len(others) > 1)}" if others else "")
        + " (rows by device id)"
    )


def utilisation_figure(
    jobs: pd.DataFrame,
    runs: pd.DataFrame,
    by: str,
    *,
    panels: list[str],
    colours: dict[str, Any],
    path: Path,
) -> None:
    """Histogram of the busy fraction of every device of every run, per series and panel."""
    busy = (jobs["t_end"] - jobs["t_start"]).clip(lower=0)
    per = jobs.assign(busy=busy).groupby(["run_id", "device"])["busy"].sum()
    labels = jobs.drop_duplicates("run_id").set_index("run_id")[[by, *panels]]
    parts = []
    for run_id, n, sim_time in zip(
        runs["run_id"], runs["n_devices"], runs["sim_time"], strict=True
    ):
        if run_id not in labels.index:
            continue
        own = per.xs(run_id, level="run_id") if run_id in per.index else pd.Series()
        total = own.reindex(np.arange(int(n)), fill_value=0.0).to_numpy()
        frac = np.clip(total / max(float(sim_time or 0), 1e-300), 0.0, 1.0)
        parts.append(pd.DataFrame({**labels.loc[run_id].to_dict(), "utilisation": frac}))
    data = pd.concat(parts, ignore_index=True)
    high = min(1.0, max(0.1, float(np.ceil(data["utilisation"].max() * 10) / 10)))
    groups = _panel_groups(data, panels)
    fig, axes = _panels(len(groups), width=5.6, height=3.8)
    for i, (ax, (title, part)) in enumerate(zip(axes, groups, strict=True)):
        _histogram(
            ax, part, "utilisation", by, colours, i == 0, bins=np.linspace(0, high, 21), step=True
        )
        ax.set(
            xlabel="fraction of simulated time busy",
            ylabel="devices (%)",
            xlim=(0, high),
            title=title,
        )
        ax.grid(alpha=0.3)
    fig.suptitle("Device utilisation (busy: download + compute + upload)")
    _save(fig, path)


def _histogram(
    ax: Any,
    data: pd.DataFrame,
    x: str,
    by: str,
    colours: dict[str, Any],
    legend: bool,
    *,
    bins: Any = "auto",
    step: bool = False,
) -> None:
    """A histogram of ``x`` per series in percent of its own rows; the legend on one panel."""
    import seaborn as sns

    style: dict[str, Any] = (
        {"element": "step", "fill": False, "linewidth": 1.6}
        if step
        else {"discrete": True, "multiple": "dodge", "shrink": 0.85}
    )
    sns.histplot(
        data=data,
        x=x,
        hue=by,
        bins=bins,
        stat="percent",
        common_norm=False,
        palette={k: v for k, v in colours.items() if k in set(data[by])},
        ax=ax,
        legend=legend,
        **style,
    )


def _legend_outside(fig: Any, ax: Any, title: str) -> None:
    """Move the legend of ``ax`` to the right of the figure (inside it: constrained layout)."""
    legend = ax.get_legend()
    if legend is None:
        return
    handles, labels = legend.legend_handles, [t.get_text() for t in legend.get_texts()]
    legend.remove()
    fig.legend(handles, labels, title=title, loc="outside right upper", fontsize="small")


def staleness_figure(
    jobs: pd.DataFrame, by: str, *, panels: list[str], colours: dict[str, Any], path: Path
) -> tuple[bool, float]:
    """Histogram of the staleness of applied updates per series and panel.

    Returns whether all are 0, and the share of updates beyond the drawn range (the 99.5th
    percentile), which is cut off so that the common values stay readable.
    """
    applied = jobs.loc[jobs["staleness"].notna(), [by, *panels, "staleness"]]
    all_zero = bool(applied.empty or (applied["staleness"] == 0).all())
    if applied.empty:
        fig, axes = _panels(1)
        axes[0].text(
            0.5, 0.5, "no applied updates", ha="center", va="center", transform=axes[0].transAxes
        )
        _save(fig, path)
        return all_zero, 0.0
    top = int(np.ceil(applied["staleness"].quantile(0.995)))
    beyond = float((applied["staleness"] > top).mean())
    groups = _panel_groups(applied[applied["staleness"] <= top], panels)
    fig, axes = _panels(len(groups), width=5.6, height=3.8)
    for i, (ax, (title, part)) in enumerate(zip(axes, groups, strict=True)):
        _histogram(ax, part, "staleness", by, colours, i == 0)
        ax.set_xlim(-0.6, top + 0.6)
        if top <= 25:
            ax.set_xticks(range(top + 1))
        ax.set(xlabel="staleness (server versions)", ylabel="applied updates (%)", title=title)
        ax.grid(alpha=0.3, axis="y")
    _legend_outside(fig, axes[0], by)  # bars reach 100%: a legend inside would cover them
    fig.suptitle("Staleness of applied updates (versions between download and aggregation)")
    _save(fig, path)
    return all_zero, beyond
