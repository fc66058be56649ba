"""What a report shows: its runs, series, metric, target, Gantt run, and the tables of them.

:func:`choose` picks the finished runs, the compared series, the metric and its target, and the
run of the Gantt chart; :func:`target_table` and :func:`speedups` compute the tables.

The series column is a grid label other than the fleet size (``policy`` when it varies, else
the first such label: ``policy`` for ``sweeps.grid(base, policy=..., fleet=...)``), or else the
scenario name (a column ``scenario``); ``by=`` chooses another. Every other grid label that
varies and is not implied by the series and the fleet size (another fleet of the same size,
a capacity, an algorithm, ...) is a *panel* column, and so is ``n_devices``: each combination
gets its own panel, table row and speedup, so that no number mixes runs of different
settings. The target is ``target=``, else the one ``simfl sweep --target`` recorded in the
store (:mod:`simfl.report.recorded`), else twice (``goal="min"``) or 98% of (``"max"``) the
median over runs of each run's best value, rounded to two digits, so that typical runs reach
it.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import pandas as pd

from simfl import compare
from simfl.report.recorded import RECORD, ReportWarning, Target
from simfl.sweeps.store import Store

__all__ = [
    "Choice",
    "Target",
    "choose",
    "panel_title",
    "speedups",
    "target_table",
    "version_of",
]


@dataclass(frozen=True)
class Choice:
    """What a report of a store shows (see :func:`choose`).

    Attributes
    ----------
    runs, done
        Every run of the store, and the finished ones (:meth:`simfl.Store.runs`).
    records
        The stored record of every run, by run id.
    frame
        Rounds of the finished runs with ``n_devices``, ``policy_name`` and the series column.
    jobs
        Device jobs of the finished runs with the series and panel columns.
    by, series, baseline
        The series column, its values in order, and the one speedups are relative to.
    panels
        The columns besides the series and the seed that tell runs apart, ``n_devices`` last:
        one panel (and table row, and speedup) per combination of their values.
    metric, side, value, target_note
        The target ``metric`` ``side`` (``"below"`` or ``"above"``) ``value``, and how it was
        chosen, in words.
    run_id
        The run whose jobs the Gantt chart shows.
    older
        The finished runs left out because they belong to an older version of their case
        (:func:`version_of`), with a column ``newest``: the version shown instead.
    """

    runs: pd.DataFrame
    done: pd.DataFrame
    records: dict[str, dict[str, Any]]
    frame: pd.DataFrame
    jobs: pd.DataFrame
    by: str
    panels: tuple[str, ...]
    series: list[str]
    baseline: str
    metric: str
    side: str
    value: float
    target_note: str
    run_id: str
    older: pd.DataFrame

    @property
    def target_text(self) -> str:
        """The target as people read it, e.g. ``distance ≤ 0.001``."""
        return f"{self.metric} {'≤' if self.side == 'below' else '≥'} {self.value:g}"

    @property
    def sizes(self) -> list[int]:
        """The fleet sizes of the finished runs, ascending."""
        return sorted(int(n) for n in self.frame["n_devices"].unique())

    @property
    def extra(self) -> list[str]:
        """The panel columns other than the fleet size."""
        return [c for c in self.panels if c != "n_devices"]

    @property
    def panels_text(self) -> str:
        """What a panel is, in words, e.g. ``fleet and fleet size``."""
        return " and ".join([*self.extra, "fleet size"])

    @property
    def seeds_text(self) -> str:
        """How many seeds each series has in each panel, e.g. ``5 seeds``."""
        keys = [self.by, *self.panels]
        counts = sorted(set(self.frame.groupby(keys, dropna=False)["seed"].nunique()))
        return f"{counts[0]} seeds" if len(counts) == 1 else f"{counts[0]}-{counts[-1]} seeds"


def choose(
    store: Store,
    *,
    metric: str | None = None,
    target: Target | None = None,
    run: str | None = None,
    by: str | None = None,
    baseline: str | None = None,
    recorded: Target | None = None,
) -> Choice:
    """What to show of ``store``'s finished runs (options as for :func:`simfl.report.write_report`).

    ``recorded`` is the target the sweep was given (:mod:`simfl.report.recorded`): used when
    ``target`` is not given and ``metric`` is not another one. If the runs do not report its
    metric, a :class:`~simfl.report.recorded.ReportWarning` says so and the report chooses.

    Raises
    ------
    ValueError
        If the store has no finished runs, or an option names something it does not hold.
    """
    records = {r["run_id"]: r for r in store.records()}
    runs = _missing_as_text(store.runs(), records)
    done = runs[runs["status"] == "done"]
    if done.empty:
        raise ValueError(f"{store.path} has no finished runs to report")
    done, older = _newest_versions(done)
    labels, by = _series(done, by)
    panels = _panels(labels, by)
    columns = list(dict.fromkeys(["run_id", "n_devices", "policy_name", by, *panels]))
    frame = _with_labels(store.rounds(), labels[columns])
    first = records[str(done["run_id"].iloc[0])]
    from_record = False
    if target is None and recorded is not None and metric in (None, recorded[0]):
        if recorded[0] in frame.columns:
            target, from_record = recorded, True
        else:
            warnings.warn(
                ReportWarning(
                    f"{store.path / RECORD}: the recorded target's metric {recorded[0]!r} is "
                    f"not a metric of the runs; the report chooses its own target"
                ),
                stacklevel=3,
            )
    metric, side, value, note = _target(frame, first, metric, target)
    if from_record:
        note = f"the sweep's --target, recorded in {RECORD}; set another with --target"
    series = [str(v) for v in dict.fromkeys(frame[by])]
    baseline = baseline if baseline is not None else series[0]
    if baseline not in series:
        raise ValueError(
            f"report baseline must be one of the {by} values {series}, got {baseline!r}"
        )
    jobs = _with_labels(store.clients(list(done["run_id"])), labels[columns])
    run_id = run if run is not None else _gantt_run(jobs, done)
    if run_id not in set(done["run_id"]):
        raise ValueError(f"report run must be a finished run id of {store.path}, got {run_id!r}")
    return Choice(
        runs=runs,
        done=done,
        records=records,
        frame=frame,
        jobs=jobs,
        by=by,
        panels=tuple(panels),
        series=series,
        baseline=baseline,
        metric=metric,
        side=side,
        value=value,
        target_note=note,
        run_id=run_id,
        older=older,
    )


def version_of(fingerprint: Any) -> str:
    """A run's version as the report shows it: the first 8 hex digits of its fingerprint."""
    return str(fingerprint)[:8] if isinstance(fingerprint, str) and fingerprint else "?"


def _newest_versions(done: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The finished runs of the newest version of every case, and those of older versions.

    A *case* is a scenario name and its grid labels (every label but the seed); a *version*
    of it is a fingerprint (its values and code, :func:`simfl.sweeps.scenario_fingerprint`).
    A case swept, edited and swept again has runs of two versions, which no figure or table
    may mix: the newest (the version whose last run finished last) is shown, the others are
    left out and listed.
    """
    fixed = list(done.columns[: list(done.columns).index("status")])
    case = done[[c for c in fixed if c not in ("run_id", "seed")]].astype(str)
    key = case.agg("\x1f".join, axis=1) if len(case.columns) else pd.Series("", done.index)
    order = done.assign(
        _case=key, _when=pd.to_datetime(done["finished"], utc=True, errors="coerce")
    )
    order = order.sort_values("_when", kind="stable", na_position="first")
    newest = order.groupby("_case", sort=False)["fingerprint"].last()
    shown = done["fingerprint"].to_numpy() == key.map(newest).to_numpy()
    older = done[~shown].assign(
        version=[version_of(f) for f in done.loc[~shown, "fingerprint"]],
        newest=[version_of(f) for f in key[~shown].map(newest)],
    )
    return done[shown], older


#: How a grid label reads for a run that does not have it (its sweep had no such axis).
_ABSENT = "-"


def _missing_as_text(runs: pd.DataFrame, records: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """``runs`` with every grid label that is ``None`` or absent for some run as text.

    pandas leaves missing values out of groups and counts, so a label ``None`` (a knob
    ``Choice([None, 5])``, a grid over ``count=[None, 5]``) would vanish from the series and
    panels, and the other values of its column would read as reals (``5.0``). Such a column
    takes each run's recorded label as text instead: ``None``, ``5``, or ``-`` for a run
    without that label.
    """
    fixed = list(runs.columns[: list(runs.columns).index("status")])
    out = runs.copy()
    for column in fixed:
        if column in ("run_id", "label", "seed") or not runs[column].isna().any():
            continue
        labels = [(records.get(str(r)) or {}).get("labels") or {} for r in runs["run_id"]]
        out[column] = pd.Series(
            [str(one[column]) if column in one else _ABSENT for one in labels],
            index=runs.index,
            dtype=object,
        )
    return out


def _with_labels(rows: pd.DataFrame, labels: pd.DataFrame) -> pd.DataFrame:
    """``rows`` of runs with the columns of ``labels`` (by ``run_id``), replacing their own."""
    own = [c for c in labels.columns if c != "run_id" and c in rows.columns]
    return rows.drop(columns=own).merge(labels, on="run_id")


def _target(
    frame: pd.DataFrame, first: dict[str, Any], metric: str | None, target: Target | None
) -> tuple[str, str, float, str]:
    """The metric, the target's side and value, and how the target was chosen."""
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
    if target is not None:
        return metric, target[1], target[2], "given"
    goal = first.get("goals", {}).get(metric, "min")
    side = "below" if goal == "min" else "above"
    how = "twice" if goal == "min" else "98% of"
    note = f"{how} the median over runs of each run's best value; set it with --target"
    return metric, side, _default_target(frame, metric, goal), note


def _grid_axes(runs: pd.DataFrame) -> list[str]:
    """The grid labels of the runs that vary (columns of ``Store.runs()`` before ``status``)."""
    fixed = list(runs.columns[: list(runs.columns).index("status")])
    axes = [c for c in fixed if c not in ("run_id", "label", "seed")]
    return [a for a in axes if runs[a].astype(str).nunique() > 1]


def _size_axes(runs: pd.DataFrame, axes: list[str]) -> list[str]:
    """Grid labels that are the fleet size in other words (one value per distinct size)."""
    sizes = runs["n_devices"].nunique()
    out = []
    for axis in axes:
        pairs = runs[[axis, "n_devices"]].astype(str).drop_duplicates()
        if sizes > 1 and len(pairs) == sizes and pairs[axis].nunique() == sizes:
            out.append(axis)
    return out


def _series(runs: pd.DataFrame, by: str | None) -> tuple[pd.DataFrame, str]:
    """The runs' labels with a string column naming the compared series, and its name."""
    labels = runs.copy()
    if by is not None:
        fixed = runs.columns[: list(runs.columns).index("status")]
        allowed = [c for c in fixed if c not in ("run_id", "seed")]
        allowed += ["policy_name", "algorithm_name"]  # the fleet size is a panel, never a series
        if by not in allowed:
            raise ValueError(f"report by= must be a label of the runs: {allowed}, got {by!r}")
        return labels.assign(**{by: labels[by].astype(str)}), by
    axes = _grid_axes(runs)
    candidates = [a for a in axes if a not in _size_axes(runs, axes)]
    if candidates:
        name = "policy" if "policy" in candidates else candidates[0]
        return labels.assign(**{name: labels[name].astype(str)}), name
    if axes:  # only a fleet-size axis: one series per remaining difference, the policy
        return labels.assign(series=labels["policy_name"].astype(str)), "series"
    return labels.assign(scenario=labels["label"].astype(str)), "scenario"


def _determined(runs: pd.DataFrame, keys: list[str], column: str) -> bool:
    """Whether ``keys`` fix ``column`` (one value of it per combination of theirs)."""
    per = runs.astype({column: str}).groupby(keys, dropna=False)[column].nunique()
    return bool((per <= 1).all())


def _panels(labels: pd.DataFrame, by: str) -> list[str]:
    """The panel columns: varying labels not fixed by the series and the size, then the size.

    If the series, the panels and the seed still leave several runs together (runs that differ
    only in their scenario name), the scenario name ``label`` becomes a panel column too.
    """
    panels: list[str] = []
    for axis in _grid_axes(labels):
        if axis != by and not _determined(labels, [by, *panels, "n_devices"], axis):
            panels.append(axis)
    panels.append("n_devices")
    if by != "label" and not _determined(labels, [by, *panels, "seed"], "run_id"):
        panels.insert(0, "label")
    return panels


def panel_title(keys: list[str], values: tuple[Any, ...]) -> str:
    """A panel's title, e.g. ``fleet=phones, 100 devices``."""
    parts = [f"{k}={v}" for k, v in zip(keys, values, strict=True) if k != "n_devices"]
    parts += [f"{v} devices" for k, v in zip(keys, values, strict=True) if k == "n_devices"]
    return ", ".join(parts)


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


def target_table(
    frame: pd.DataFrame, metric: str, side: str, value: float, by: str, panels: list[str]
) -> pd.DataFrame:
    """Time to target of every series in every panel (``compare.summarize_targets``)."""
    kw: dict[str, Any] = {"below": value} if side == "below" else {"above": value}
    table = compare.summarize_targets(frame, metric, by=[by, *panels], **kw)
    return table.sort_values(panels[::-1], kind="stable").reset_index(drop=True)


def speedups(
    frame: pd.DataFrame,
    metric: str,
    side: str,
    value: float,
    by: str,
    baseline: str,
    panels: list[str],
) -> pd.DataFrame:
    """Speedups over ``baseline`` in every panel (``compare.speedup``; NaN where it is absent)."""
    kw: dict[str, Any] = {"below": value} if side == "below" else {"above": value}
    return compare.speedup(frame, metric, baseline=baseline, by=[by, *panels], **kw)
