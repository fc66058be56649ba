"""Comparing runs: time-to-target, speedup at equal accuracy, bootstrap confidence intervals.

Everything here is a pure function of :class:`~simfl.results.Results` or of their DataFrames.
The common currency is a *tidy* frame of rounds from many runs, made by :func:`collect`: one row
per aggregation with the run's labels (``label``, ``seed`` and any others) as columns, plus a row
at ``round = -1``, ``time = 0`` holding the initial metrics, so that curves start at time 0.

Every function that takes ``by=`` accepts a column name or a list of them, and refuses (with a
``ValueError`` that names the columns to add) to merge several runs under one ``(by..., seed)``:
a store of 2 policies x 2 fleet sizes grouped ``by="policy"`` would otherwise mix the fleet
sizes (see :func:`check_one_run`).

>>> import simfl
>>> from simfl import compare
>>> # frame = compare.collect({"srpfl": srpfl_runs, "wait-all": wait_all_runs})
>>> # compare.summarize_targets(frame, "distance", below=1e-3)
>>> # compare.speedup(frame, "distance", below=1e-3, baseline="wait-all")
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from simfl.results import ROUND_COLUMNS, Results

__all__ = [
    "bootstrap_ci",
    "by_columns",
    "check_one_run",
    "collect",
    "energy_targets",
    "energy_to_target",
    "not_reached_note",
    "speedup",
    "summarize_targets",
    "targets",
    "time_to_target",
]


def _rounds_with_start(res: Results) -> pd.DataFrame:
    rounds = res.rounds
    initial = res.meta.get("initial_metrics") or {}
    if not initial:
        return rounds
    start: dict[str, Any] = {c: math.nan for c in rounds.columns}
    start.update(
        {
            "round": -1,
            "stage": 0,
            "t_start": 0.0,
            "time": 0.0,
            "duration": 0.0,
            "status": "ok",
            "n_selected": 0,
            "n_arrived": 0,
            "n_dropped": 0,
            "n_late": 0,
            "n_cancelled": 0,
            "bytes_down": 0.0,
            "bytes_up": 0.0,
            **initial,
        }
    )
    first = pd.DataFrame([start]).astype(rounds.dtypes.to_dict())
    return pd.concat([first, rounds], ignore_index=True)


def collect(
    runs: Mapping[str, Iterable[Results]] | Iterable[Results], **labels: Any
) -> pd.DataFrame:
    """One tidy frame of the rounds of many runs.

    Parameters
    ----------
    runs
        Either ``{label: [Results, ...]}`` (the label goes in a ``label`` column) or an iterable
        of Results (labelled by their scenario name).
    **labels
        Constant columns to add (e.g. ``n_devices=100``).

    Returns
    -------
    pandas.DataFrame
        The ``rounds`` rows of every run, preceded by an initial row at ``round=-1``, ``time=0``
        with the initial metrics, and columns ``label`` and ``seed``.
    """
    items: list[tuple[str, Results]]
    if isinstance(runs, Mapping):
        items = [(str(k), r) for k, group in runs.items() for r in group]
    else:
        items = [(str(r.meta.get("scenario", "run")), r) for r in runs]
    frames = []
    for label, res in items:
        df = _rounds_with_start(res).copy()
        df.insert(0, "seed", res.meta.get("seed", 0))
        df.insert(0, "label", label)
        for k, v in labels.items():
            df[k] = v
        frames.append(df)
    if not frames:
        raise ValueError("collect needs at least one Results")
    return pd.concat(frames, ignore_index=True)


#: Columns of ``Results.rounds`` itself: they change from round to round, never label a run.
_ROUND_FIELDS = frozenset(ROUND_COLUMNS)


def by_columns(by: str | Sequence[str], frame: pd.DataFrame, *, where: str) -> list[str]:
    """``by`` (a column name or a list of them) as a list of columns of ``frame``.

    Raises
    ------
    TypeError
        If ``by`` is neither a string nor a sequence of strings.
    ValueError
        If it is empty, repeats a column, or names one that ``frame`` lacks.
    """
    keys = [by] if isinstance(by, str) else list(by) if isinstance(by, Sequence) else None
    if keys is None or not all(isinstance(k, str) for k in keys):
        raise TypeError(f"{where} by= must be a column name or a list of them, got {by!r}")
    if not keys:
        raise ValueError(f"{where} by= must name at least one column, got {by!r}")
    if len(set(keys)) != len(keys):
        raise ValueError(f"{where} by= names a column twice: {keys}")
    missing = [k for k in keys if k not in frame.columns]
    if missing:
        raise ValueError(
            f"{where} by= names {missing}, not columns of the frame: {list(frame.columns)}"
        )
    return keys


def _run_ids(frame: pd.DataFrame) -> pd.Series | None:
    """Which run each row belongs to: ``run_id``, else blocks of rows whose ``round`` increases.

    ``collect`` and ``Store.rounds`` write each run's rows in a block with increasing rounds,
    so a round that does not increase (or a change of seed) starts the next run. ``None`` if
    the frame has neither ``run_id`` nor ``round``.
    """
    if "run_id" in frame.columns:
        return frame["run_id"]
    if "round" not in frame.columns:
        return None
    rounds = frame["round"].to_numpy()
    restart = np.r_[True, rounds[1:] <= rounds[:-1]]
    if "seed" in frame.columns:
        seeds = frame["seed"].to_numpy()
        restart[1:] |= seeds[1:] != seeds[:-1]
    return pd.Series(np.cumsum(restart), index=frame.index)


def _merged(frame: pd.DataFrame, keys: list[str], runs: pd.Series) -> pd.Series:
    """Whether each row's ``(keys..., seed)`` group holds rows of several runs."""
    group = [frame[k] for k in keys]
    if "run_id" in frame.columns:
        count = runs.groupby(group, sort=False, dropna=False).transform("nunique")
        return count > 1
    # without run ids a run is a block of rows, each round once: a repeated round is a merge
    repeated = frame.duplicated([*keys, "round"], keep=False)
    return repeated.groupby(group, sort=False, dropna=False).transform("any").astype(bool)


def _labels_that_differ(frame: pd.DataFrame, runs: pd.Series, skip: list[str]) -> list[str]:
    """Columns constant within each run of ``frame`` that differ between its runs."""
    out = []
    for col in frame.columns:
        if col in skip or col in _ROUND_FIELDS:
            continue
        per_run = frame[col].groupby(runs, sort=False).nunique(dropna=False)
        if (per_run <= 1).all() and frame[col].nunique(dropna=False) > 1:
            out.append(str(col))
    return sorted(out, key=lambda c: c == "label")  # the scenario name last: a grid label says more


def _plain(value: Any) -> Any:
    """A NumPy scalar as the Python value it holds (for messages)."""
    return value.item() if isinstance(value, np.generic) else value


def check_one_run(frame: pd.DataFrame, by: str | Sequence[str], *, where: str = "compare") -> None:
    """Refuse a grouping that would merge several runs under one ``(by..., seed)``.

    A run is a ``run_id`` (frames of :meth:`simfl.Store.rounds`) or else a block of rows with
    increasing ``round`` (frames of :func:`collect`). Grouping a store of 2 policies x 2 fleet
    sizes ``by="policy"`` puts two runs under each (policy, seed); their times to target would
    be mixed into one number that belongs to no fleet size.

    Raises
    ------
    ValueError
        Naming the group, the columns in which its runs differ and the ``by=`` to use instead.
    """
    keys = by_columns(by, frame, where=where)
    keys = [*keys, "seed"] if "seed" in frame.columns and "seed" not in keys else keys
    runs = _run_ids(frame)
    if runs is None:
        return
    merged = _merged(frame, keys, runs)
    if not merged.any():
        return
    gid = frame.groupby(keys, sort=False, dropna=False).ngroup()
    in_group = (gid == gid[merged].iloc[0]).to_numpy()
    rows, first = frame[in_group], frame[in_group].iloc[0]
    n = runs[in_group].nunique()
    group = ", ".join(f"{k}={_plain(first[k])!r}" for k in keys)
    differ = _labels_that_differ(rows, runs[in_group], [*keys, "run_id"])
    given = [k for k in keys if k != "seed"]
    if not differ:
        raise ValueError(
            f"{where}: {n} runs fall in one group ({group}) and no label column tells them "
            f"apart; give each run its own label (compare.collect({{label: runs}}) or a grid "
            f"label) and add it to by={given}"
        )
    add = [c for c in differ if c != "label"] or differ
    names = ", ".join(repr(c) for c in add)
    also = " (and in their scenario name, 'label')" if len(add) < len(differ) else ""
    raise ValueError(
        f"{where}: by={given} merges {n} runs into one group ({group}): the runs differ in "
        f"{names}{also}; add {'it' if len(add) == 1 else 'them'} to by=, e.g. "
        f"by={[*given, *add]}"
    )


def _reached(values: pd.Series, below: float | None, above: float | None) -> pd.Series:
    if (below is None) == (above is None):
        raise ValueError("give exactly one of below= or above=")
    return values <= below if below is not None else values >= above


def time_to_target(
    rounds: pd.DataFrame | Results,
    metric: str,
    *,
    below: float | None = None,
    above: float | None = None,
    column: str = "time",
) -> float:
    """Simulated time at which ``metric`` first reaches the target (``inf`` if it never does).

    Only evaluated rounds count. ``column="round"`` gives the number of rounds instead (the
    initial state counts as round -1, so a target met before training gives -1).
    """
    df = _rounds_with_start(rounds) if isinstance(rounds, Results) else rounds
    if metric not in df.columns:
        raise ValueError(f"metric {metric!r} is not a column; columns are {list(df.columns)}")
    hit = _reached(df[metric], below, above).to_numpy()
    if not hit.any():
        return math.inf
    return float(df[column].to_numpy()[int(np.argmax(hit))])


def _as_tuple(key: Any) -> tuple[Any, ...]:
    return key if isinstance(key, tuple) else (key,)


def _targets(
    frame: pd.DataFrame,
    metric: str,
    below: float | None,
    above: float | None,
    keys: list[str],
    where: str,
) -> pd.DataFrame:
    check_one_run(frame, keys, where=where)
    rows = []
    for key, df in frame.groupby([*keys, "seed"], sort=False, dropna=False):
        rows.append(
            {
                **dict(zip([*keys, "seed"], _as_tuple(key), strict=True)),
                "time_to_target": time_to_target(df, metric, below=below, above=above),
                "rounds_to_target": time_to_target(
                    df, metric, below=below, above=above, column="round"
                )
                + 1,
                "final": float(df[metric].dropna().iloc[-1])
                if df[metric].notna().any()
                else math.nan,
                "end_time": float(df["time"].iloc[-1]),
            }
        )
    return pd.DataFrame(rows)


def targets(
    frame: pd.DataFrame,
    metric: str,
    *,
    below: float | None = None,
    above: float | None = None,
    by: str | Sequence[str] = "label",
) -> pd.DataFrame:
    """Time and rounds to target of every run of a tidy frame (one row per group and seed).

    Raises
    ------
    ValueError
        If a ``(by..., seed)`` group holds several runs (:func:`check_one_run`).
    """
    keys = by_columns(by, frame, where="targets")
    return _targets(frame, metric, below, above, keys, "targets")


def bootstrap_ci(
    values: np.ndarray,
    *,
    stat: str = "mean",
    ci: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean or median of ``values`` (a NumPy array)."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(n_boot, x.size))
    func = np.mean if stat == "mean" else np.median
    with np.errstate(invalid="ignore"):
        stats = func(x[idx], axis=1)
    # no interpolation: runs that never reach a target give inf, and inf - inf is undefined
    lo, hi = np.quantile(stats, [(1 - ci) / 2, (1 + ci) / 2], method="inverted_cdf")
    return float(lo), float(hi)


def not_reached_note(reached: int, runs: int, *, who: str = "") -> str:
    """``"not reached in k of n seeds"`` (``who`` first, if given), or ``""`` if all reached.

    The one way tables, CSV files and figures say that a target was missed: a seed that never
    reaches it has time ``inf``, a mean over seeds that include one is ``inf`` (never the mean
    of the lucky seeds), and a speedup involving one is NaN (never 0x or infinitely fast).
    """
    if reached >= runs:
        return ""
    return f"{who}{': ' if who else ''}not reached in {runs - reached} of {runs} seeds"


def summarize_targets(
    frame: pd.DataFrame,
    metric: str,
    *,
    below: float | None = None,
    above: float | None = None,
    by: str | Sequence[str] = "label",
    ci: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
) -> pd.DataFrame:
    """Time-to-target across seeds per group: mean, median and bootstrap CI of the mean.

    Runs that never reach the target have time ``inf``; a group with any such run has an
    infinite mean and mean rounds (shown honestly rather than averaged over the lucky runs),
    no CI (NaN), ``reached`` of ``runs`` seeds made it, and ``note`` says ``"not reached in k
    of n seeds"`` (empty when every seed reached it; :func:`not_reached_note`).

    Raises
    ------
    ValueError
        If a ``(by..., seed)`` group holds several runs (:func:`check_one_run`).
    """
    keys = by_columns(by, frame, where="summarize_targets")
    per_run = _targets(frame, metric, below, above, keys, "summarize_targets")
    rows = []
    for key, df in per_run.groupby(keys, sort=False, dropna=False):
        t = df["time_to_target"].to_numpy()
        reached = int(np.isfinite(t).sum())
        lo, hi = (
            bootstrap_ci(t, ci=ci, n_boot=n_boot, seed=seed)
            if reached == len(t)
            else (math.nan, math.nan)
        )
        rows.append(
            {
                **dict(zip(keys, _as_tuple(key), strict=True)),
                "runs": len(t),
                "reached": reached,
                "mean_time": float(np.mean(t)),
                "ci_low": lo,
                "ci_high": hi,
                "median_time": float(np.median(t)),
                "mean_rounds": float(np.mean(df["rounds_to_target"])),
                "final": float(df["final"].mean()),
                "note": not_reached_note(reached, len(t)),
            }
        )
    return pd.DataFrame(rows)


def speedup(
    frame: pd.DataFrame,
    metric: str,
    *,
    baseline: Any,
    below: float | None = None,
    above: float | None = None,
    by: str | Sequence[str] = "label",
    ci: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
) -> pd.DataFrame:
    """Speedup of every group over ``baseline`` at equal accuracy: mean time ratio with a CI.

    ``speedup = mean(T_baseline) / mean(T_group)`` over seeds, where ``T`` is the time to
    target. When both groups ran the same seeds (the same fleets), seeds are resampled in pairs;
    otherwise independently. A speedup needs every seed of both groups to reach the target:
    where a seed of either never does, ``speedup`` and its CI are NaN (never 0x, never
    infinite) and ``note`` says which side missed it in how many seeds
    (:func:`not_reached_note`).

    Parameters
    ----------
    baseline
        A value of the first ``by`` column. With several columns
        (``by=["policy", "fleet"]``) every group is compared with the baseline's group that has
        the same values of the others (the same fleet); a group without one gets NaN.

    Returns
    -------
    pandas.DataFrame
        One row per group: the ``by`` columns, ``speedup``, ``ci_low``, ``ci_high``,
        ``mean_time``, ``baseline_time``, ``reached`` of ``runs`` seeds and
        ``baseline_reached`` of ``baseline_runs`` (NaN without a baseline group), and
        ``note`` (empty when both reached the target in every seed).

    Raises
    ------
    ValueError
        If ``baseline`` is not a value of the first ``by`` column, or if a ``(by..., seed)``
        group holds several runs (:func:`check_one_run`).
    """
    keys = by_columns(by, frame, where="speedup")
    per_run = _targets(frame, metric, below, above, keys, "speedup")
    series = keys[0]
    is_base = per_run[series] == baseline
    if not is_base.any():
        raise ValueError(f"baseline {baseline!r} is not a value of column {series!r}")
    bases = {
        _as_tuple(key)[1:]: df.set_index("seed")["time_to_target"]
        for key, df in per_run[is_base].groupby(keys, sort=False, dropna=False)
    }
    rng = np.random.default_rng(seed)
    rows = []
    for key, df in per_run.groupby(keys, sort=False, dropna=False):
        key = _as_tuple(key)
        base = bases.get(key[1:])
        t = df.set_index("seed")["time_to_target"]
        reached = int(np.isfinite(t.to_numpy()).sum())
        base_reached = math.nan if base is None else int(np.isfinite(base.to_numpy()).sum())
        ratio, lo, hi = (
            (math.nan, math.nan, math.nan)
            if base is None
            else _ratio_ci(base, t, rng, ci=ci, n_boot=n_boot)  # drawn even if discarded below:
        )
        if base is None or reached < t.size or base_reached < base.size:  # others' CIs unchanged
            ratio, lo, hi = math.nan, math.nan, math.nan
        note = not_reached_note(reached, t.size)
        if base is not None and key[0] != baseline:
            missed = not_reached_note(int(base_reached), base.size, who=f"baseline {baseline}")
            note = "; ".join(n for n in (note, missed) if n)
        rows.append(
            {
                **dict(zip(keys, key, strict=True)),
                "speedup": ratio,
                "ci_low": lo,
                "ci_high": hi,
                "mean_time": float(t.mean()),
                "baseline_time": math.nan if base is None else float(base.mean()),
                "reached": reached,
                "runs": t.size,
                "baseline_reached": base_reached,
                "baseline_runs": math.nan if base is None else base.size,
                "note": note,
            }
        )
    return pd.DataFrame(rows)


def _ratio_ci(
    base: pd.Series, t: pd.Series, rng: np.random.Generator, *, ci: float, n_boot: int
) -> tuple[float, float, float]:
    """``mean(base) / mean(t)`` and its bootstrap CI (paired by seed when the seeds agree)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = float(np.float64(base.mean()) / np.float64(t.mean()))
    if set(t.index) == set(base.index):
        seeds = t.index.to_numpy()
        idx = rng.integers(0, seeds.size, size=(n_boot, seeds.size))
        b = base.loc[seeds].to_numpy()[idx].mean(axis=1)
        a = t.loc[seeds].to_numpy()[idx].mean(axis=1)
    else:
        b = base.to_numpy()[rng.integers(0, base.size, (n_boot, base.size))].mean(axis=1)
        a = t.to_numpy()[rng.integers(0, t.size, (n_boot, t.size))].mean(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        lo, hi = np.quantile(b / a, [(1 - ci) / 2, (1 + ci) / 2], method="inverted_cdf")
    return ratio, float(lo), float(hi)


def _rounds_with_energy(res: Results) -> pd.DataFrame:
    """The rounds with the initial row and a column ``energy``: joules spent by each."""
    df = _rounds_with_start(res)
    spent = res.cumulative_energy().to_numpy()
    if len(df) > len(spent):  # the initial row, at time 0: nothing spent yet
        spent = np.concatenate([[0.0], spent])
    return df.assign(energy=spent)


def energy_to_target(
    results: Results,
    metric: str,
    *,
    below: float | None = None,
    above: float | None = None,
) -> float:
    """Joules the fleet spent until ``metric`` first reaches the target (``inf`` if never).

    The energy of every job that ended by the aggregation reaching the target (see
    :meth:`simfl.Results.cumulative_energy`): for synchronous policies, every round up to it,
    idle waits included; 0 if the initial model already meets the target.

    Raises
    ------
    ValueError
        If the run recorded no energy (its fleet declared no energy model), or ``metric`` is
        not one of its columns.
    """
    df = _rounds_with_energy(results)
    return time_to_target(df, metric, below=below, above=above, column="energy")


def energy_targets(
    runs: Mapping[str, Iterable[Results]] | Iterable[Results],
    metric: str,
    *,
    below: float | None = None,
    above: float | None = None,
) -> pd.DataFrame:
    """Time and energy to target of every run, one row each.

    Parameters
    ----------
    runs
        ``{label: [Results, ...]}`` or an iterable of Results (labelled by scenario name), as
        for :func:`collect`; every run must have recorded energy.
    metric, below, above
        The target, as for :func:`time_to_target`.

    Returns
    -------
    pandas.DataFrame
        ``label``, ``seed``, ``time_to_target`` (s), ``energy_to_target`` (J; ``inf`` when the
        target is never reached) and ``energy`` (J spent by the whole run).
    """
    items: list[tuple[str, Results]]
    if isinstance(runs, Mapping):
        items = [(str(k), r) for k, group in runs.items() for r in group]
    else:
        items = [(str(r.meta.get("scenario", "run")), r) for r in runs]
    if not items:
        raise ValueError("energy_targets needs at least one Results")
    rows = []
    for label, res in items:
        df = _rounds_with_energy(res)
        rows.append(
            {
                "label": label,
                "seed": res.meta.get("seed", 0),
                "time_to_target": time_to_target(df, metric, below=below, above=above),
                "energy_to_target": time_to_target(
                    df, metric, below=below, above=above, column="energy"
                ),
                "energy": float(res.clients["energy"].sum()),
            }
        )
    return pd.DataFrame(rows)
