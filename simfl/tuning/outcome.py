"""What a search found: its trials, the best setting (or the Pareto front) and its warnings."""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pandas as pd
from optuna.trial import TrialState

from simfl import compare
from simfl.results import Results
from simfl.sweeps.grid import ranges_text
from simfl.sweeps.store import Store
from simfl.tuning.measures import Constraint, Measure
from simfl.tuning.space import Knob

__all__ = ["Evaluation", "TuneInterrupted", "TuneOutcome"]

_STATES = {TrialState.COMPLETE: "complete", TrialState.PRUNED: "pruned", TrialState.FAIL: "failed"}


def _plain(value: Any) -> Any:
    """A JSON-friendly value (``inf`` and NaN kept as the strings JSON cannot hold)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, (np.floating, np.integer)):
        return _plain(value.item())
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _summary(values: Sequence[float]) -> dict[str, Any]:
    """Mean, bootstrap 95% CI of the mean, and how many seeds reached a finite value."""
    x = np.asarray(values, dtype=np.float64)
    finite = int(np.isfinite(x).sum())
    if x.size == 0:
        return {"mean": math.nan, "ci_low": math.nan, "ci_high": math.nan, "reached": 0, "n": 0}
    if finite < x.size:  # a target missed: the mean is infinite and has no interval
        mean = float(x[~np.isfinite(x)][0])
        return {
            "mean": mean,
            "ci_low": math.nan,
            "ci_high": math.nan,
            "reached": finite,
            "n": x.size,
        }
    lo, hi = compare.bootstrap_ci(x)
    return {"mean": float(x.mean()), "ci_low": lo, "ci_high": hi, "reached": finite, "n": x.size}


@dataclass(frozen=True)
class Evaluation:
    """A chosen setting: its values over the search's seeds and over fresh seeds.

    Attributes
    ----------
    trial
        The trial that found it.
    params
        The knobs' values (labels for choices).
    values
        The objectives' combined values over the search's seeds (what the search compared).
    search
        Per objective: ``mean``, ``ci_low``, ``ci_high`` (bootstrap 95% CI of the mean over
        seeds), ``reached`` of ``n`` seeds with a finite value.
    fresh
        The same on the fresh seeds (empty without fresh seeds), plus ``per_seed``.
    fresh_constraints
        Per constraint: its combined value on the fresh seeds and whether it is met.
    """

    trial: int
    params: dict[str, Any]
    values: tuple[float, ...]
    search: dict[str, dict[str, Any]]
    fresh: dict[str, dict[str, Any]]
    fresh_constraints: dict[str, dict[str, Any]]

    @classmethod
    def of(
        cls,
        trial: optuna.trial.FrozenTrial,
        objectives: Sequence[Measure],
        constraints: Sequence[Constraint],
        seeds: Sequence[int],
        fresh: Sequence[int],
        runs: Sequence[Results],
    ) -> Evaluation:
        """Summarise ``trial`` and its ``runs`` on the fresh seeds."""
        search = {m.name: _summary(trial.user_attrs[f"per_seed:{m.name}"]) for m in objectives}
        again: dict[str, dict[str, Any]] = {}
        held: dict[str, dict[str, Any]] = {}
        if runs:
            for m in objectives:
                per = [m.per_run(r) for r in runs]
                again[m.name] = {
                    **_summary(per),
                    "combined": m.combine(per, runs),
                    "per_seed": per,
                    "seeds": list(fresh),
                }
            for c in constraints:
                value = c.measure.combine([c.measure.per_run(r) for r in runs], runs)
                held[c.name] = {"value": value, "met": c.violation(value) <= 0}
        return cls(
            trial=trial.number,
            params=dict(trial.params),
            values=tuple(float(v) for v in trial.values),
            search=search,
            fresh=again,
            fresh_constraints=held,
        )


class TuneInterrupted(KeyboardInterrupt):
    """A search stopped by Ctrl-C; ``outcome`` holds its trials so far (the same call resumes)."""

    def __init__(self, outcome: TuneOutcome) -> None:
        super().__init__(f"search interrupted after {len(outcome.trials)} trials")
        self.outcome = outcome


@dataclass(frozen=True)
class TuneOutcome:
    """What :func:`simfl.tune` did and found.

    Attributes
    ----------
    study
        The study's name (its journal is ``STORE/tuning/STUDY.journal``).
    store
        The results store holding every run of the search (``None``: in memory).
    trials
        One row per finished trial: ``trial``, ``state`` (complete, pruned, failed), the knobs
        (one column per path), each objective's value over the seeds it ran, ``reached`` (the
        seeds whose objectives are finite, of ``seeds_run``), each constraint's value,
        ``feasible`` and ``error``.
    best
        The best feasible setting (one objective), or every setting of the Pareto front of the
        feasible ones (two objectives), with its values on the fresh seeds; empty when no
        setting was feasible with finite objectives.
    warnings
        What could mislead the search (:mod:`simfl.tuning.advice`).
    runs, reused
        Runs executed by this call, and runs found already stored.
    used
        Runs the finished trials used (their seeds up to where they stopped; a failed trial
        counts all its seeds): what ``max_runs`` budgets.
    """

    study: str
    store: Store | None
    knobs: dict[str, Knob]
    objectives: tuple[Measure, ...]
    directions: tuple[str, ...]
    constraints: tuple[Constraint, ...]
    seeds: tuple[int, ...]
    fresh_seeds: tuple[int, ...]
    trials: pd.DataFrame
    best: tuple[Evaluation, ...]
    warnings: tuple[str, ...]
    runs: int
    reused: int
    used: int

    @staticmethod
    def table(
        trials: Sequence[optuna.trial.FrozenTrial],
        knobs: Mapping[str, Knob],
        objectives: Sequence[Measure],
        constraints: Sequence[Constraint],
    ) -> pd.DataFrame:
        """The trials as a tidy frame (see :attr:`trials`)."""
        rows = []
        for t in trials:
            attrs = t.user_attrs
            values = attrs.get("values") or [math.nan] * len(objectives)
            per = [attrs.get(f"per_seed:{m.name}", []) for m in objectives]
            run = len(attrs.get("seeds", []))
            reached = (
                int(np.all(np.isfinite(np.asarray(per, dtype=np.float64)), axis=0).sum())
                if run
                else 0
            )
            row: dict[str, Any] = {"trial": t.number, "state": _STATES.get(t.state, "failed")}
            row.update({p: t.params.get(p) for p in knobs})
            row.update({m.name: float(v) for m, v in zip(objectives, values, strict=True)})
            row["seeds_run"] = run
            row["reached"] = reached
            for c, v in zip(constraints, attrs.get("constraint_values", []), strict=False):
                row[c.name] = float(v)
            row["feasible"] = bool(attrs.get("feasible", False))
            row["error"] = attrs.get("error", "")
            rows.append(row)
        return pd.DataFrame(rows)

    def summary(self) -> str:
        """A few lines: trials, runs, the best setting (or front) with its CIs, and warnings."""
        states = self.trials["state"].value_counts() if len(self.trials) else pd.Series(dtype=int)
        where = self.store.path if self.store is not None else "memory"
        lines = [
            f"study      {self.study}: {len(self.trials)} trials ({int(states.get('complete', 0))} "
            f"complete, {int(states.get('pruned', 0))} pruned, {int(states.get('failed', 0))} "
            f"failed) using {self.used} runs; {self.runs} runs executed, {self.reused} found "
            f"stored; runs in {where}"
        ]
        if not self.best:
            lines.append(
                "best       none: no trial met every constraint with a finite objective"
                + (" (see warnings)" if self.warnings else "")
            )
        for ev in self.best:
            setting = ", ".join(f"{p}={_short(v)}" for p, v in ev.params.items())
            lines.append(f"best       trial {ev.trial}: {setting}")
            for m in self.objectives:
                s = ev.search[m.name]
                lines.append(f"  {m.name:<28} {_interval(s)} over seeds {_seeds(self.seeds)}")
                f = ev.fresh.get(m.name)
                if f:
                    lines.append(
                        f"  {'':<28} {_interval(f)} on fresh seeds {_seeds(self.fresh_seeds)}"
                    )
            for name, held in ev.fresh_constraints.items():
                word = "met" if held["met"] else "NOT met"
                lines.append(f"  {name:<28} {word} on fresh seeds ({held['value']:.4g})")
        lines += [f"warning    {w}" for w in self.warnings]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """Everything :meth:`save` writes."""
        out: dict[str, Any] = _plain(
            {
                "study": self.study,
                "knobs": {p: repr(k) for p, k in self.knobs.items()},
                "objectives": [m.name for m in self.objectives],
                "directions": list(self.directions),
                "constraints": [c.name for c in self.constraints],
                "seeds": list(self.seeds),
                "fresh_seeds": list(self.fresh_seeds),
                "trials": self.trials.to_dict(orient="records"),
                "best": [ev.__dict__ for ev in self.best],
                "warnings": list(self.warnings),
                "runs": self.runs,
                "reused": self.reused,
                "used": self.used,
            }
        )
        return out

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write :meth:`to_dict` as JSON, atomically (a reader never sees half a file)."""
        target = Path(path)
        text = json.dumps(self.to_dict(), indent=1, sort_keys=False)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return target


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _interval(s: Mapping[str, Any]) -> str:
    if s["reached"] < s["n"]:
        return f"{s['mean']} (not reached in {s['n'] - s['reached']} of {s['n']} seeds)"
    return f"{s['mean']:.4g}  [95% CI {s['ci_low']:.4g}, {s['ci_high']:.4g}]"


def _seeds(seeds: Sequence[int]) -> str:
    return ranges_text(seeds)
