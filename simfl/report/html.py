"""``simfl report STORE``: PNG figures of a results store and an ``index.html`` that shows them.

>>> # from simfl.report import write_report
>>> # write_report("runs/sweep", "runs/sweep/report", target=("distance", "below", 1e-3))

The report compares *series* (the policies, or whatever the sweep's grid varied) at every fleet
size, over the seeds of each:

* ``metric_vs_rounds.png`` and ``metric_vs_time.png``: the metric per series, mean over seeds
  with a 95% bootstrap band, one panel per fleet size;
* ``speedup.png``: time-to-target of the baseline series divided by that of each series, against
  the fleet size (a paired bootstrap 95% CI over seeds);
* a time-to-target table (mean, bootstrap 95% CI, median, rounds; also ``time_to_target.csv``);
* ``gantt.png``: the device jobs of one run, coloured by status;
* ``utilisation.png``: the fraction of simulated time each device spent in a job;
* ``staleness.png``: the staleness of the applied updates (0 for synchronous policies).

The series column is a grid label other than the fleet size (``policy`` for
``sweep.grid(base, policy=..., fleet=...)``), or else the scenario name (a column
``scenario``); ``by=`` chooses another.
The target defaults to twice (``goal="min"``) or 98% of (``"max"``) the median over runs of each
run's best value, rounded to two digits, so that typical runs reach it; ``target=`` sets it.
"""

from __future__ import annotations

import html
import math
import os
from pathlib import Path
from typing import Any

import pandas as pd

from simfl import compare
from simfl.report import figures
from simfl.sweeps.store import Store

__all__ = ["write_report"]

Target = tuple[str, str, float]


def _size_axes(runs: pd.DataFrame, axes: list[str]) -> list[str]:
    """Grid labels that are the fleet size in other words (one value per distinct size)."""
    sizes = runs["n_devices"].nunique()
    out = []
    for axis in axes:
        pairs = runs[[axis, "n_devices"]].astype(str).drop_duplicates()
        if sizes > 1 and len(pairs) == sizes and pairs[axis].nunique() == sizes:
            out.append(axis)
    return out


def _series(frame: pd.DataFrame, runs: pd.DataFrame, by: str | None) -> tuple[pd.DataFrame, str]:
    """Add the string column that names the compared series; return the frame and its name."""
    if by is not None:
        if by not in frame.columns:
            raise ValueError(f"report by= must be a column of the rounds: {list(frame.columns)}")
        frame = frame.assign(**{by: frame[by].astype(str)})
        return frame, by
    fixed = set(runs.columns[: list(runs.columns).index("status")])
    axes = [c for c in runs.columns if c in fixed and c not in ("run_id", "label", "seed")]
    axes = [a for a in axes if runs[a].nunique() > 1]
    series = [a for a in axes if a not in _size_axes(runs, axes)]
    if len(series) == 1:
        return frame.assign(**{series[0]: frame[series[0]].astype(str)}), series[0]
    if series:
        text = frame[series].astype(str)
        joined = text.apply(lambda r: ",".join(f"{k}={v}" for k, v in r.items()), axis=1)
        return frame.assign(series=joined), "series"
    if axes:  # only a fleet-size axis: one series per remaining difference, the policy
        return frame.assign(series=frame["policy_name"].astype(str)), "series"
    return frame.assign(scenario=frame["label"].astype(str)), "scenario"


def _default_target(frame: pd.DataFrame, metric: str, goal: str) -> float:
    best = frame.groupby("run_id", sort=False)[metric].agg("min" if goal == "min" else "max")
    median = float(best.median())
    if not math.isfinite(median):
        raise ValueError(f"no run evaluated {metric!r}; give --target")
    value = 2 * median if goal == "min" else 0.98 * median
    if value == 0:
        return 0.0
    digits = 1 - math.floor(math.log10(abs(value)))
    scale = 10.0**digits
    return (math.ceil if goal == "min" else math.floor)(value * scale) / scale


def _table(frame: pd.DataFrame, metric: str, side: str, value: float, by: str) -> pd.DataFrame:
    kw: dict[str, Any] = {"below": value} if side == "below" else {"above": value}
    table = compare.summarize_targets(frame, metric, by=[by, "n_devices"], **kw)
    return table.sort_values(["n_devices"], kind="stable").reset_index(drop=True)


def _speedups(
    frame: pd.DataFrame, metric: str, side: str, value: float, by: str, baseline: str
) -> pd.DataFrame:
    kw: dict[str, Any] = {"below": value} if side == "below" else {"above": value}
    parts = []
    for n, group in frame.groupby("n_devices", sort=True):
        if baseline not in set(group[by]):
            continue
        table = compare.speedup(group, metric, baseline=baseline, by=by, **kw)
        parts.append(table.assign(n_devices=n))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def _html_table(table: pd.DataFrame) -> str:
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return "" if math.isnan(v) else "not reached" if math.isinf(v) else f"{v:.4g}"
        return html.escape(str(v))

    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in table.columns)
    rows = "".join(
        "<tr>" + "".join(f"<td>{fmt(v)}</td>" for v in row) + "</tr>"
        for row in table.itertuples(index=False)
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def _interval(mean: float, low: float, high: float) -> str:
    if math.isinf(mean):
        return "not reached by every seed"
    return f"{mean:.4g} [{low:.4g}, {high:.4g}]"


def _display(table: pd.DataFrame, by: str, metric: str) -> pd.DataFrame:
    """The time-to-target table as people read it: intervals in brackets, units in headers."""
    out = pd.DataFrame(
        {
            by: table[by],
            "devices": table["n_devices"],
            "seeds reaching": [
                f"{r} of {n}" for r, n in zip(table["reached"], table["runs"], strict=True)
            ],
            "mean time (s) [95% CI]": [
                _interval(*v)
                for v in zip(table["mean_time"], table["ci_low"], table["ci_high"], strict=True)
            ],
            "median time (s)": table["median_time"],
            "mean rounds": table["mean_rounds"],
            f"final {metric}": table["final"],
        }
    )
    if "speedup" in table:
        out["speedup [95% CI]"] = [
            ""
            if math.isnan(v[0])
            else "target not reached"
            if math.isinf(t)
            else f"{v[0]:.3g} [{v[1]:.3g}, {v[2]:.3g}]"
            for t, *v in zip(
                table["mean_time"],
                table["speedup"],
                table["speedup_ci_low"],
                table["speedup_ci_high"],
                strict=True,
            )
        ]
    return out


def _gantt_run(jobs: pd.DataFrame, done: pd.DataFrame) -> str:
    """The default Gantt run, one with something to see.

    Among the first seed's runs at the smallest fleet size, the one whose first rounds show the
    most kinds of job status (ties: the first in the store).
    """
    first = done[
        (done["seed"] == done["seed"].min()) & (done["n_devices"] == done["n_devices"].min())
    ]
    early = jobs[jobs["run_id"].isin(first["run_id"]) & (jobs["round"] < 3)]
    kinds = early.groupby("run_id", sort=False)["status"].nunique()
    variety = kinds.reindex(first["run_id"], fill_value=0)
    return str(variety.idxmax())


_CSS = (
    "body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
    "figure{margin:2em 0}img{max-width:100%;border:1px solid #ddd}"
    "figcaption{color:#444;margin-top:.4em}table{border-collapse:collapse;font-size:90%}"
    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f3f3f3}"
    "code{background:#f3f3f3;padding:0 3px}"
)


def write_report(
    store: Store | str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    *,
    metric: str | None = None,
    target: Target | None = None,
    run: str | None = None,
    by: str | None = None,
    baseline: str | None = None,
) -> Path:
    """Write the figures and ``index.html`` of a store's finished runs; return the index path.

    Parameters
    ----------
    store
        The results store (a path or :class:`~simfl.Store`).
    out
        The report folder (default ``STORE/report``); created if needed.
    metric
        The metric to compare (default: the target's, else the runs' first metric).
    target
        ``(metric, "below" | "above", value)``, as parsed from ``"distance<1e-3"`` (default:
        see the module docstring).
    run
        The run id whose jobs the Gantt chart shows (default: among the first seed's runs at
        the smallest fleet size, the one whose first rounds show the most job statuses).
    by
        The column naming the compared series (default: guessed, see the module docstring).
    baseline
        The series speedups are relative to (default: the first).

    Raises
    ------
    ValueError
        If the store has no finished runs, or an option names something it does not hold.
    """
    import matplotlib

    matplotlib.use("Agg")
    store = store if isinstance(store, Store) else Store(store)
    folder = Path(out) if out is not None else store.path / "report"
    runs = store.runs()
    done = runs[runs["status"] == "done"]
    if done.empty:
        raise ValueError(f"{store.path} has no finished runs to report")
    frame = store.rounds().merge(done[["run_id", "n_devices", "policy_name"]], on="run_id")
    frame, by = _series(frame, done, by)
    records = {r["run_id"]: r for r in store.records()}
    first = records[str(done["run_id"].iloc[0])]
    metrics = first.get("metrics") or []
    if target is not None:
        if metric is not None and metric != target[0]:
            raise ValueError(f"report metric {metric!r} and target {target[0]!r} disagree")
        metric = target[0]
    metric = metric or (metrics[0] if metrics else None)
    if metric is None or metric not in frame.columns:
        raise ValueError(
            f"report metric must be one of the runs' metrics {metrics}, got {metric!r}"
        )
    goal = first.get("goals", {}).get(metric, "min")
    if target is None:
        side = "below" if goal == "min" else "above"
        value = _default_target(frame, metric, goal)
        how = "twice" if goal == "min" else "98% of"
        target_note = f"{how} the median over runs of each run's best value; set it with --target"
    else:
        _, side, value = target
        target_note = "given"
    series = [str(v) for v in dict.fromkeys(frame[by])]
    baseline = baseline if baseline is not None else series[0]
    if baseline not in series:
        raise ValueError(
            f"report baseline must be one of the {by} values {series}, got {baseline!r}"
        )
    jobs = store.clients(list(done["run_id"])).merge(frame[["run_id", by]].drop_duplicates())
    run_id = run if run is not None else _gantt_run(jobs, done)
    if run_id not in set(done["run_id"]):
        raise ValueError(f"report run must be a finished run id of {store.path}, got {run_id!r}")
    folder.mkdir(parents=True, exist_ok=True)
    colours = figures.palette(series)

    tgt = f"{metric} {'≤' if side == 'below' else '≥'} {value:g}"
    counts = sorted(set(frame.groupby([by, "n_devices"])["seed"].nunique()))
    seeds = f"{counts[0]} seeds" if len(counts) == 1 else f"{counts[0]}-{counts[-1]} seeds"
    sizes = sorted(int(n) for n in frame["n_devices"].unique())
    band = (
        f"mean over {seeds} with a 95% bootstrap band, one line per {by}, one panel per fleet size"
    )
    shown: list[tuple[str, str]] = []
    for x in ("rounds", "time"):
        name = f"metric_vs_{x}.png"
        figures.metric_figure(
            frame, metric, by, x=x, target=value, colours=colours, path=folder / name
        )
        what = "round (aggregations)" if x == "rounds" else "simulated time (s)"
        shown.append((name, f"{metric} vs {what}: {band}; dotted line: the target {tgt}."))
    speed = _speedups(frame, metric, side, value, by, baseline)
    figures.speedup_figure(
        speed, by, baseline, tgt, sizes=sizes, colours=colours, path=folder / "speedup.png"
    )
    one = len(sizes) == 1
    shown.append(
        (
            "speedup.png",
            (
                f"This store has one fleet size ({sizes[0]} devices): one bar per {by}. "
                if one
                else ""
            )
            + f"Speedup = mean time to {tgt} of the baseline {baseline!r} / that of each {by}"
            + ("" if one else " at each fleet size (devices)")
            + "; bars: paired bootstrap 95% CI over seeds; above 1 is faster than the baseline; "
            f"a {by} whose mean time is infinite (a seed never reached the target) is not drawn.",
        )
    )
    rec = records[run_id]
    title = f"{rec['name']}, seed {rec['seed']}"
    window = figures.gantt_figure(store.results(run_id), title, folder / "gantt.png")
    shown.append(
        (
            "gantt.png",
            f"Device jobs of run <code>{html.escape(run_id)}</code> ({html.escape(title)}), "
            f"{window}: one row per device, colour = status, transfers lighter than compute, "
            f"dotted lines = aggregations. Choose another run with --run.",
        )
    )
    figures.utilisation_figure(jobs, done, by, colours=colours, path=folder / "utilisation.png")
    shown.append(
        (
            "utilisation.png",
            f"Utilisation: the fraction of its run's simulated time each device spent in a job "
            f"(downloading, computing or uploading), pooled over the devices of all runs of a "
            f"{by}; devices never selected count as 0.",
        )
    )
    all_zero, beyond = figures.staleness_figure(
        jobs, by, colours=colours, path=folder / "staleness.png"
    )
    note = " Every run here is synchronous: all are 0." if all_zero else ""
    if beyond > 0:
        note += f" The {100 * beyond:.2g}% of updates beyond the drawn range are not shown."
    shown.append(
        (
            "staleness.png",
            "Staleness of the applied updates: server model versions created between a job's "
            f"download and the aggregation that used its update (share per {by}).{note}",
        )
    )

    table = _table(frame, metric, side, value, by)
    if not speed.empty:
        ci = {"ci_low": "speedup_ci_low", "ci_high": "speedup_ci_high"}
        cols = [by, "n_devices", "speedup", "ci_low", "ci_high"]
        table = table.merge(speed[cols].rename(columns=ci), on=[by, "n_devices"], how="left")
    table.to_csv(folder / "time_to_target.csv", index=False)
    failed = runs[runs["status"] == "failed"]
    where = html.escape(str(store.path))
    page = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>simfl report: {where}</title><style>{_CSS}</style></head><body>",
        f"<h1>simfl report: <code>{where}</code></h1>",
        f"<p>{len(done)} finished runs, {len(failed)} failed: {len(series)} {html.escape(by)} "
        f"values, fleet size{'s' * (len(sizes) > 1)} {', '.join(map(str, sizes))} devices, "
        f"{seeds}. Target: "
        f"<b>{html.escape(tgt)}</b> ({html.escape(target_note)}).</p>",
        f"<h2>Time to {html.escape(tgt)}</h2><p>Simulated seconds: mean over seeds with a "
        f"bootstrap 95% CI of the mean, median, mean rounds to reach it, mean final value; "
        f"speedup over {html.escape(repr(baseline))} (also in <code>time_to_target.csv</code>)."
        f"</p>",
        _html_table(_display(table, by, metric)),
    ]
    for name, caption in shown:
        page.append(
            f"<figure><img src='{name}' alt='{html.escape(name)}'>"
            f"<figcaption>{caption}</figcaption></figure>"
        )
    if not failed.empty:
        last = failed["error"].map(lambda e: str(e).strip().splitlines()[-1] if e else "?")
        errors = failed[["run_id", "label", "seed"]].assign(error=last)
        page += ["<h2>Failed runs</h2>", _html_table(errors)]
    cols = ["run_id", "label", "seed", "status", "n_devices", "n_rounds", "sim_time"]
    cols += ["host_seconds", "simfl_version", "git_revision", "host", "finished"]
    page += ["<h2>Runs</h2>", _html_table(runs[cols].astype(object)), "</body></html>"]
    index = folder / "index.html"
    index.write_text("\n".join(page) + "\n")
    return index
