"""The figures of a search: its history, the knobs' importance and the Pareto front.

Each function draws one PNG (matplotlib, Agg, saved as :mod:`simfl.report.figures` saves its
figures) and returns its caption, plain text; one that has nothing meaningful to draw raises
:class:`NotDrawnError` with the reason, which ``simfl report`` shows in the figure's place.

* :func:`history_figure`: each trial's objective by trial number, with the best feasible
  value so far;
* :func:`importance_figure`: how much of the objective's variation each knob explains
  (fANOVA), from the study's journal (:func:`load_study`);
* :func:`front_figure`: two objectives against each other, the Pareto front joined.

They read the trials as :attr:`simfl.tuning.TuneOutcome.trials` holds them, or as
:func:`trials_frame` rebuilds them from a saved outcome (``STORE/tuning/STUDY.json``).
"""

from __future__ import annotations

import importlib.util
import math
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pandas as pd
from optuna.trial import TrialState

from simfl.report.figures import _save

__all__ = [
    "NotDrawnError",
    "front_figure",
    "history_figure",
    "importance_figure",
    "load_study",
    "trials_frame",
]

#: Seed of the fANOVA forest, so that a report draws the same importances every time.
_FOREST_SEED = 0


class NotDrawnError(Exception):
    """A figure that has nothing meaningful to show; the message says why."""


def trials_frame(records: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> pd.DataFrame:
    """The trials of a saved outcome as a frame, ``columns`` (the measures) as numbers.

    A saved outcome writes ``inf`` and NaN as the strings ``"inf"`` and ``"nan"`` (JSON holds
    neither); they are numbers again here.
    """
    frame = pd.DataFrame(list(records))
    for col in columns:
        if col in frame.columns:
            frame[col] = pd.to_numeric(frame[col], errors="coerce").astype(np.float64)
    return frame


def _values(trials: pd.DataFrame, column: str) -> np.ndarray:
    if column not in trials.columns:
        raise NotDrawnError(f"the trials have no column {column!r}")
    return pd.to_numeric(trials[column], errors="coerce").to_numpy(dtype=np.float64)


def _feasible(trials: pd.DataFrame) -> np.ndarray:
    if "feasible" not in trials.columns:
        return np.ones(len(trials), dtype=bool)
    return trials["feasible"].map(lambda v: v is True or v == "True").to_numpy(dtype=bool)


def _better(direction: str) -> str:
    return "lower is better" if direction == "minimize" else "higher is better"


def _log_scale(finite: np.ndarray) -> bool:
    positive = finite[finite > 0]
    return bool(
        finite.size and positive.size == finite.size and positive.max() > 100 * positive.min()
    )


def _edge_room(ax: Any, values: np.ndarray, *, top: bool, bottom: bool) -> None:
    """Widen the y axis so that ``values`` keep clear of the top and bottom edges' markers.

    The ticks beyond ``values`` go, so that no number stands beside the edges' markers.
    """
    log = ax.get_yscale() == "log"
    lo, hi = (np.log10(v) if log else v for v in ax.get_ylim())
    span = hi - lo
    lo, hi = lo - 0.15 * span * bottom, hi + 0.15 * span * top
    limits = (10**lo, 10**hi) if log else (lo, hi)
    ticks = [t for t in ax.get_yticks() if limits[0] <= t <= limits[1]]
    low, high = float(values.min()), float(values.max())
    ticks = [t for t in ticks if (not top or t <= high) and (not bottom or t >= low)]
    if ticks:
        ax.set_yticks(ticks)
    ax.set_ylim(*limits)


def history_figure(trials: pd.DataFrame, objective: str, direction: str, path: str | Path) -> str:
    """Each trial's ``objective`` by trial number, and the best feasible value so far.

    Complete trials that met every constraint are filled dots, those that did not are hollow,
    pruned trials (their value over the seeds they ran) are triangles, failed trials are
    crosses on the bottom edge; a value that is ``inf`` (a target not reached) is drawn on the
    top edge, since it has no place on the axis.

    Raises
    ------
    NotDrawnError
        If there are no trials.
    """
    import matplotlib.pyplot as plt
    import matplotlib.transforms as mtransforms
    from matplotlib.ticker import MaxNLocator

    if trials.empty:
        raise NotDrawnError("the search has no finished trial")
    x = trials["trial"].to_numpy(dtype=np.float64)
    y = _values(trials, objective)
    state = trials["state"].astype(str).to_numpy()
    ok = _feasible(trials)
    finite = np.isfinite(y)
    fig, ax = plt.subplots(figsize=(7.5, 4.2), layout="constrained")
    edge = mtransforms.blended_transform_factory(ax.transData, ax.transAxes)
    kinds = [
        ("complete, constraints met", (state == "complete") & ok, "o", "C0", "C0"),
        ("complete, a constraint not met", (state == "complete") & ~ok, "o", "none", "0.45"),
        ("pruned (over the seeds it ran)", state == "pruned", "v", "0.6", "0.6"),
    ]
    for name, where, marker, face, line in kinds:
        shown, top = where & finite, where & np.isinf(y)
        label: str | None = name
        if shown.any():
            ax.scatter(
                x[shown],
                y[shown],
                marker=marker,
                facecolors=face,
                edgecolors=line,
                s=36,
                label=label,
                zorder=3,
            )
            label = None
        if top.any():  # no place on the axis: on its top edge, in the trial's own style
            ax.scatter(
                x[top],
                np.full(top.sum(), 0.97),
                marker=marker,
                facecolors=face,
                edgecolors=line,
                s=36,
                transform=edge,
                clip_on=False,
                label=label,
                zorder=3,
            )
    failed = state == "failed"
    if failed.any():
        ax.scatter(
            x[failed],
            np.full(failed.sum(), 0.03),
            marker="x",
            color="C3",
            s=40,
            transform=edge,
            clip_on=False,
            label="failed (on the bottom edge)",
            zorder=3,
        )
    missed = int((~finite & ~failed).sum())
    if missed:  # the top edge, where the values that are inf stand, says so on its right
        ax.plot([0, 1], [0.97, 0.97], color="0.6", lw=0.8, ls=":", transform=ax.transAxes)
        ax.annotate(
            "not reached\n(inf)",
            xy=(1.01, 0.97),
            xycoords="axes fraction",
            va="center",
            ha="left",
            fontsize="small",
            color="0.3",
            annotation_clip=False,
        )
    best = (state == "complete") & ok & finite
    if best.any():
        pick = np.minimum.accumulate if direction == "minimize" else np.maximum.accumulate
        order = np.argsort(x[best], kind="stable")
        bx, by = x[best][order], pick(y[best][order])
        bx = np.append(bx, x.max())
        by = np.append(by, by[-1])
        ax.step(bx, by, where="post", color="C1", lw=1.6, label="best feasible so far", zorder=2)
    shown_y = y[finite]
    if _log_scale(shown_y):
        ax.set_yscale("log")
    if not shown_y.size:
        ax.set_yticks([])
    else:  # room at the edges for the trials drawn there, apart from the values on the axis
        _edge_room(ax, shown_y, top=missed > 0, bottom=bool(failed.any()))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(xlabel="trial", ylabel=f"{objective} ({_better(direction)})")
    ax.set_title(f"Search history: {objective}")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small", loc="best")
    _save(fig, Path(path))
    counts = pd.Series(state).value_counts()
    parts = [f"{int(counts.get(s, 0))} {s}" for s in ("complete", "pruned", "failed")]
    return (
        f"{objective} of each of the {len(trials)} trials by trial number ({', '.join(parts)}; "
        f"{_better(direction)}): filled dots met every constraint, hollow ones did not; "
        "triangles are pruned trials, their value over the seeds they ran before they could "
        "no longer win; crosses on the bottom edge failed; the line is the best value of a "
        "feasible trial so far."
        + (
            f" {missed} trial{'s' * (missed > 1)} never reached the target on some seed "
            "(infinite time): drawn on the top edge."
            if missed
            else ""
        )
    )


def _pareto(points: np.ndarray, directions: Sequence[str]) -> np.ndarray:
    """Which rows of ``points`` no other row dominates (as good everywhere, better somewhere)."""
    sign = np.array([1.0 if d == "minimize" else -1.0 for d in directions])
    p = points * sign
    keep = np.ones(len(p), dtype=bool)
    for i in range(len(p)):
        others = np.delete(p, i, axis=0)
        dominated = (others <= p[i]).all(axis=1) & (others < p[i]).any(axis=1)
        keep[i] = not dominated.any()
    return keep


def front_figure(
    trials: pd.DataFrame,
    objectives: Sequence[str],
    directions: Sequence[str],
    path: str | Path,
) -> str:
    """Two objectives of every complete trial against each other, the Pareto front joined.

    Feasible trials are dots, the front among them (no feasible trial at least as good in
    both objectives and better in one) is highlighted and joined; trials that did not meet a
    constraint are grey.

    Raises
    ------
    NotDrawnError
        Unless there are two objectives and a feasible complete trial with finite values.
    """
    import matplotlib.pyplot as plt

    if len(objectives) != 2:
        raise NotDrawnError("a front needs two objectives; this search has one")
    if trials.empty:
        raise NotDrawnError("the search has no finished trial")
    a, b = (_values(trials, o) for o in objectives)
    complete = trials["state"].astype(str).to_numpy() == "complete"
    finite = np.isfinite(a) & np.isfinite(b)
    ok = _feasible(trials)
    good = complete & finite & ok
    grey = complete & finite & ~ok
    if not good.any():
        raise NotDrawnError(
            "no complete trial met every constraint with both objectives finite, so there is "
            "no front"
        )
    number = trials["trial"].to_numpy()
    points = np.column_stack([a[good], b[good]])
    front = _pareto(points, directions)
    fig, ax = plt.subplots(figsize=(6.8, 4.8), layout="constrained")
    if grey.any():
        ax.scatter(a[grey], b[grey], color="0.75", s=28, label="a constraint not met", zorder=2)
    ax.scatter(points[~front, 0], points[~front, 1], color="C0", s=30, label="feasible", zorder=3)
    line = points[front][np.argsort(points[front, 0], kind="stable")]
    ax.plot(line[:, 0], line[:, 1], color="C3", lw=1.4, zorder=3)
    ax.scatter(line[:, 0], line[:, 1], color="C3", edgecolors="k", s=54, label="front", zorder=4)
    for n, (u, v) in zip(number[good][front], points[front], strict=True):
        ax.annotate(str(n), (u, v), xytext=(4, 4), textcoords="offset points", fontsize="small")
    for axis, values in ((ax.set_xscale, a), (ax.set_yscale, b)):
        if _log_scale(values[complete & finite]):
            axis("log")
    ax.set(
        xlabel=f"{objectives[0]} ({_better(directions[0])})",
        ylabel=f"{objectives[1]} ({_better(directions[1])})",
    )
    ax.set_title("Pareto front of the search")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    _save(fig, Path(path))
    left = len(trials) - int(good.sum() + grey.sum())
    return (
        f"{objectives[1]} against {objectives[0]} for every complete trial with both finite: "
        f"the {int(front.sum())} trial(s) of the front (red, joined, labelled by trial number: "
        "no other feasible trial is at least as good in both and better in one), the other "
        f"feasible trials (blue) and those that did not meet a constraint (grey)."
        + (
            f" {left} trial(s) are not shown (pruned, failed, or a target not reached)."
            if left
            else ""
        )
    )


def load_study(journal: str | Path, name: str) -> optuna.Study:
    """The study ``name`` of an Optuna journal file, read from a copy (the file is not touched).

    Raises
    ------
    NotDrawnError
        If the file does not exist or holds no study of that name.
    """
    source = Path(journal)
    if not source.is_file():
        raise NotDrawnError(f"the study's journal {source.name} is not in the store")
    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        with tempfile.TemporaryDirectory(prefix="simfl-journal-") as tmp:
            copy = Path(tmp) / "study.journal"
            shutil.copyfile(source, copy)
            try:
                storage = optuna.storages.JournalStorage(
                    optuna.storages.journal.JournalFileBackend(str(copy))
                )
                study = optuna.load_study(study_name=name, storage=storage)
                trials = study.get_trials(deepcopy=True)
            except KeyError:
                raise NotDrawnError(f"the journal {source.name} holds no study {name!r}") from None
            except (ValueError, TypeError) as exc:  # a line that is not a journal's JSON
                raise NotDrawnError(f"the journal {source.name} cannot be read: {exc}") from None
            out = optuna.create_study(directions=study.directions)
            out.add_trials(trials)
            return out
    finally:
        optuna.logging.set_verbosity(level)


def _evaluator() -> tuple[optuna.importance.BaseImportanceEvaluator, str]:
    """The importance evaluator and its name: fANOVA if scikit-learn is there, else PED-ANOVA."""
    if importlib.util.find_spec("sklearn") is None:
        return (
            optuna.importance.PedAnovaImportanceEvaluator(),
            "PED-ANOVA (Optuna's; fANOVA needs scikit-learn, which is not installed)",
        )
    return (
        optuna.importance.FanovaImportanceEvaluator(seed=_FOREST_SEED),
        f"fANOVA (a random forest of 64 trees, seed {_FOREST_SEED})",
    )


def importance_figure(
    study: optuna.Study,
    objectives: Sequence[str],
    path: str | Path,
) -> str:
    """How much of each objective's variation over the trials each knob explains.

    The share of the variance of the objective that each knob explains alone, estimated by
    fANOVA (Optuna's ``get_param_importances``) on the complete trials whose objective is
    finite, one bar per knob and objective.

    Raises
    ------
    NotDrawnError
        With fewer than two knobs (one knob explains everything by definition), fewer than two
        complete trials with a finite objective, or knobs that took one value in all of them.
    """
    import matplotlib.pyplot as plt

    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    knobs = sorted({p for t in trials for p in t.params}, key=str)
    if not knobs and study.trials:
        knobs = sorted({p for t in study.trials for p in t.params}, key=str)
    if len(knobs) < 2:
        raise NotDrawnError(
            "the search has one knob, which explains all the variation it causes by definition"
        )
    evaluator, how = _evaluator()
    shares: dict[str, dict[str, float]] = {}
    used = 0
    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    try:
        for i, (name, direction) in enumerate(zip(objectives, study.directions, strict=True)):
            kept = [t for t in trials if math.isfinite(t.values[i])]
            if len(kept) < 2:
                continue
            varied = [p for p in knobs if len({repr(t.params.get(p)) for t in kept}) > 1]
            if not varied:
                continue
            one = optuna.create_study(direction=direction)
            one.add_trials(
                [
                    optuna.trial.create_trial(
                        params=t.params, distributions=t.distributions, value=t.values[i]
                    )
                    for t in kept
                ]
            )
            shares[name] = optuna.importance.get_param_importances(one, evaluator=evaluator)
            used = max(used, len(kept))
    except (ValueError, RuntimeError) as exc:
        raise NotDrawnError(f"the importances could not be estimated: {exc}") from None
    finally:
        optuna.logging.set_verbosity(level)
    if not shares:
        raise NotDrawnError(
            "fewer than two complete trials with a finite objective, or knobs that took one "
            "value in all of them: nothing to attribute"
        )
    fig, ax = plt.subplots(
        figsize=(6.8, 0.6 + 0.5 * len(knobs) * len(shares)), layout="constrained"
    )
    height = 0.8 / len(shares)
    pos = np.arange(len(knobs))
    for j, (name, share) in enumerate(shares.items()):
        ax.barh(
            pos + j * height - 0.4 + height / 2,
            [float(share.get(k, 0.0)) for k in knobs],
            height=height,
            color=f"C{j}",
            label=name,
        )
    ax.set_yticks(pos, knobs)
    ax.invert_yaxis()
    ax.set(xlabel="importance (share of the objective's variance)", xlim=(0, 1))
    ax.set_title("Importance of the knobs")
    ax.grid(alpha=0.3, axis="x")
    if len(shares) > 1:
        ax.legend(fontsize="small")
    _save(fig, Path(path))
    return (
        f"Importance of each knob for {', '.join(shares)}: the share of the objective's "
        f"variance over the knobs' ranges that the knob explains alone, by {how}, from up to "
        f"{used} complete trials with a finite value; with tens of trials it is a rough guide, "
        "and a knob the sampler kept near one value can look unimportant."
    )
