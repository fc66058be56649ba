"""The figures of a report (:mod:`simfl.report`), each drawn into a PNG file (matplotlib, Agg)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from simfl import plots
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
    fig, axes = plt.subplots(
        rows, cols, figsize=(width * cols, height * rows), squeeze=False, sharey=True
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


def metric_figure(
    frame: pd.DataFrame,
    metric: str,
    by: str,
    *,
    x: str,
    target: float,
    colours: dict[str, Any],
    path: Path,
) -> None:
    """The metric against rounds (``x="rounds"``) or simulated time, one panel per fleet size."""
    values = frame[metric].dropna().to_numpy()
    positive = values[values > 0]
    log_y = bool(values.size and (values > 0).all() and positive.max() > 100 * positive.min())
    sizes = sorted(frame["n_devices"].unique())
    fig, axes = _panels(len(sizes))
    for i, (ax, n) in enumerate(zip(axes, sizes, strict=True)):
        data = frame[frame["n_devices"] == n]
        if x == "rounds":
            plots.metric_vs_rounds(data, metric, by=by, ax=ax, log_y=log_y, palette=colours)
            ax.axhline(target, color="0.3", ls=":", lw=1, label=f"target {target:g}")
        else:
            plots.metric_vs_time(
                data, metric, by=by, ax=ax, log_y=log_y, target=target, palette=colours, points=120
            )
        ax.set_title(f"{n} devices")
        legend = ax.get_legend()
        if legend is not None and i > 0:
            legend.remove()
        elif legend is not None:
            ax.legend(title=by, fontsize="small")
    fig.suptitle(f"{metric} vs {'round' if x == 'rounds' else 'simulated time'}", y=1.02)
    _save(fig, path)


def speedup_figure(
    speed: pd.DataFrame,
    by: str,
    baseline: str,
    target: str,
    *,
    sizes: list[int],
    colours: dict[str, Any],
    path: Path,
) -> None:
    """Speedup over the baseline against fleet size (bars when the store has one size)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.0, 4.2))
    shown = speed
    if len(speed):
        shown = speed[(speed[by] != baseline) & np.isfinite(speed["speedup"])]
        shown = shown[shown["speedup"] > 0]
    if shown.empty:
        ax.text(
            0.5,
            0.5,
            "no speedup to show\n(only the baseline, or no run reached the target)",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
        ax.set_axis_off()
    elif len(sizes) == 1:
        _speedup_bars(ax, shown, by, sizes[0], colours)
    else:
        plots.speedup_vs(
            shown, "n_devices", by=by, ax=ax, xlabel="fleet size (devices)", palette=colours
        )
        ax.set_xticks(sizes, [str(n) for n in sizes])
        ax.set_xlim(sizes[0] / 1.2, sizes[-1] * 1.2)
        ax.minorticks_off()
    if not shown.empty:
        ax.set_ylabel(f"speedup over {baseline} (x)")
        ax.set_ylim(bottom=0)
        _not_drawn(
            ax, speed[(speed[by] != baseline) & ~speed.index.isin(shown.index)], by, baseline, sizes
        )
    ax.set_title(f"Speedup in time to {target}")
    _save(fig, path)


def _speedup_bars(
    ax: Any, shown: pd.DataFrame, by: str, size: int, colours: dict[str, Any]
) -> None:
    """One bar per series with its CI, for a store with one fleet size."""
    err = np.vstack([shown["speedup"] - shown["ci_low"], shown["ci_high"] - shown["speedup"]])
    pos = np.arange(len(shown))
    ax.bar(
        pos,
        shown["speedup"],
        yerr=np.clip(np.nan_to_num(err), 0, None),
        capsize=4,
        color=[colours[v] for v in shown[by]],
    )
    ax.set_xticks(pos, [str(v) for v in shown[by]], rotation=20, ha="right")
    ax.set_xlim(-0.8, len(shown) - 0.2)
    ax.axhline(1.0, color="0.5", lw=0.8, ls="--")
    ax.set(xlabel=f"{by} (all runs: {size} devices)")
    ax.grid(alpha=0.3, axis="y")


def _not_drawn(ax: Any, missing: pd.DataFrame, by: str, baseline: str, sizes: list[int]) -> None:
    """A note under the axes naming the series whose speedup is infinite (if any)."""
    if not len(missing):
        return
    where: dict[str, list[int]] = {}
    for key, n in zip(missing[by], missing["n_devices"], strict=True):
        where.setdefault(str(key), []).append(int(n))
    names = "; ".join(
        k if len(sizes) == 1 else f"{k} ({', '.join(map(str, v))} devices)"
        for k, v in where.items()
    )
    ax.annotate(
        f"not drawn (a seed of it or of {baseline} never reached the target): {names}",
        xy=(0, 0),
        xycoords="axes fraction",
        xytext=(0, -75 if len(sizes) == 1 else -45),
        textcoords="offset points",
        va="top",
        fontsize="small",
        color="0.3",
    )


def _gantt_rounds(results: Results, max_devices: int) -> range:
    jobs = results.clients
    best = 1
    for k in range(1, 6):
        if jobs.loc[jobs["round"] < k, "device"].nunique() <= max_devices:
            best = k
    return range(best)


def gantt_figure(results: Results, title: str, path: Path, *, max_devices: int = 40) -> str:
    """The device jobs of the first rounds of a run, by status; what it shows, in words."""
    rounds = _gantt_rounds(results, max_devices)
    ax = plots.gantt(results, rounds, color="status", max_devices=max_devices)
    ax.set_title(f"{title}: device jobs, rounds {rounds.start}-{rounds.stop - 1}")
    jobs = results.clients[results.clients["round"].isin(list(rounds))]
    devices = jobs["device"].nunique()
    n = int(results.meta.get("n_devices", devices))
    _save(ax.figure, path)
    which = f"rounds {rounds.start}-{rounds.stop - 1}" if len(rounds) > 1 else "round 0"
    part = f"{min(devices, max_devices)} of the {n} devices"
    return f"{which}, {part}" + (" (the lowest ids)" if devices > max_devices else "")


def utilisation_figure(
    jobs: pd.DataFrame, runs: pd.DataFrame, by: str, *, colours: dict[str, Any], path: Path
) -> None:
    """Histogram of the busy fraction of every device of every run, per series."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    busy = (jobs["t_end"] - jobs["t_start"]).clip(lower=0)
    per = jobs.assign(busy=busy).groupby(["run_id", "device"])["busy"].sum()
    series = jobs.drop_duplicates("run_id").set_index("run_id")[by]
    parts = []
    for run_id, n, sim_time in zip(
        runs["run_id"], runs["n_devices"], runs["sim_time"], strict=True
    ):
        if run_id not in series.index:
            continue
        own = per.xs(run_id, level="run_id") if run_id in per.index else pd.Series()
        total = own.reindex(np.arange(int(n)), fill_value=0.0).to_numpy()
        frac = np.clip(total / max(float(sim_time or 0), 1e-300), 0.0, 1.0)
        parts.append(pd.DataFrame({by: series[run_id], "utilisation": frac}))
    data = pd.concat(parts, ignore_index=True)
    high = min(1.0, max(0.1, float(np.ceil(data["utilisation"].max() * 10) / 10)))
    fig, ax = plt.subplots(figsize=(7.0, 4.2))
    sns.histplot(
        data=data,
        x="utilisation",
        hue=by,
        bins=np.linspace(0, high, 21),
        stat="percent",
        common_norm=False,
        palette=colours,
        element="step",
        fill=False,
        ax=ax,
        linewidth=1.6,
    )
    ax.set(
        xlabel="fraction of simulated time busy (download + compute + upload)",
        ylabel="devices (%)",
        xlim=(0, high),
        title="Device utilisation",
    )
    ax.grid(alpha=0.3)
    _save(fig, path)


def staleness_figure(
    jobs: pd.DataFrame, by: str, *, colours: dict[str, Any], path: Path
) -> tuple[bool, float]:
    """Histogram of the staleness of applied updates per series.

    Returns whether all are 0, and the share of updates beyond the drawn range (the 99.5th
    percentile), which is cut off so that the common values stay readable.
    """
    import matplotlib.pyplot as plt
    import seaborn as sns

    applied = jobs.loc[jobs["staleness"].notna(), [by, "staleness"]]
    fig, ax = plt.subplots(figsize=(7.0, 4.2))
    all_zero = bool(applied.empty or (applied["staleness"] == 0).all())
    beyond = 0.0
    if applied.empty:
        ax.text(0.5, 0.5, "no applied updates", ha="center", va="center", transform=ax.transAxes)
    else:
        top = int(np.ceil(applied["staleness"].quantile(0.995)))
        beyond = float((applied["staleness"] > top).mean())
        sns.histplot(
            data=applied[applied["staleness"] <= top],
            x="staleness",
            hue=by,
            discrete=True,
            stat="percent",
            common_norm=False,
            multiple="dodge",
            shrink=0.85,
            palette=colours,
            ax=ax,
        )
        ax.set_xlim(-0.6, top + 0.6)
        sns.move_legend(ax, "upper left", bbox_to_anchor=(1.01, 1.0))  # bars reach 100%
        if top <= 25:
            ax.set_xticks(range(top + 1))
    ax.set(
        xlabel="staleness (server versions between download and aggregation)",
        ylabel="applied updates (%)",
        title="Staleness of applied updates",
    )
    ax.grid(alpha=0.3, axis="y")
    _save(fig, path)
    return all_zero, beyond
