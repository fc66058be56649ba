"""Warnings where a search would mislead: knobs without effect, seeds without randomness, slack.

Read from the trials' own runs (a digest of each run's recorded rounds and jobs), after the
search:

* a knob whose different values gave identical runs on every seed has no effect over those
  values (a cohort larger than the devices ever online is capped, a deadline longer than every
  job never binds), so the search's choice among them means nothing; a cohort size
  (``*.count``) larger than any round of its runs selected is reported even when other knobs
  vary with it;
* seeds that gave identical runs: nothing in the scenario is random, and more seeds only cost
  time (nor does a confidence interval over them say anything);
* a constraint every trial met did not constrain the search; one no trial met leaves no answer;
* a target no trial reached on any seed leaves the objective undefined everywhere.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import optuna
from optuna.trial import TrialState

from simfl.scenario import Scenario
from simfl.sweeps.grid import ranges_text
from simfl.tuning.measures import Constraint, Measure
from simfl.tuning.space import Knob

__all__ = ["advise"]


def _list(values: Sequence[Any]) -> str:
    shown = [f"{v:.4g}" if isinstance(v, float) else str(v) for v in values]
    return ", ".join(shown[:-1]) + f" and {shown[-1]}" if len(shown) > 1 else "".join(shown)


def advise(
    base: Scenario,
    knobs: Mapping[str, Knob],
    objectives: Sequence[Measure],
    constraints: Sequence[Constraint],
    trials: Sequence[optuna.trial.FrozenTrial],
    seeds: Sequence[int],
) -> list[str]:
    """The warnings of a search's finished trials (see the module docstring)."""
    out: list[str] = []
    full = [
        t
        for t in trials
        if t.state == TrialState.COMPLETE and len(t.user_attrs.get("digests", [])) == len(seeds)
    ]
    out += _no_effect(knobs, full)
    out += _capped(knobs, full)
    out += _same_seeds(full, seeds)
    out += _slack(constraints, [t for t in trials if t.state != TrialState.FAIL])
    out += _never_reached(objectives, [t for t in trials if t.state != TrialState.FAIL])
    return out


def _no_effect(knobs: Mapping[str, Knob], trials: Sequence[optuna.trial.FrozenTrial]) -> list[str]:
    groups: dict[tuple[str, ...], list[optuna.trial.FrozenTrial]] = defaultdict(list)
    for t in trials:
        groups[tuple(t.user_attrs["digests"])].append(t)
    lines = []
    for path in knobs:
        same: list[tuple[list[Any], list[int], int]] = []
        for group in groups.values():
            values = sorted({t.params[path] for t in group}, key=_order_key)
            if len(values) > 1:
                cap = max(int(t.user_attrs.get("max_selected", 0)) for t in group)
                same.append((values, [t.number for t in group], cap))
        if not same:
            continue
        values, numbers, cap = max(same, key=lambda s: len(s[0]))
        why = ""
        if path.rsplit(".", 1)[-1] in ("count", "k", "concurrency", "buffer_size") and all(
            isinstance(v, (int, float)) and v > cap for v in values[1:]
        ):
            why = (
                f"; no round selected more than {cap} devices, so larger values are capped "
                f"(at the devices online)"
            )
        everywhere = len(groups) == 1
        lines.append(
            f"knob {path}: {'every value tried' if everywhere else 'values ' + _list(values)} "
            f"gave identical runs on every seed (trials {ranges_text(numbers)}): it has no "
            f"effect {'in the range searched' if everywhere else 'between these values'}{why}"
        )
    return lines


def _capped(knobs: Mapping[str, Knob], trials: Sequence[optuna.trial.FrozenTrial]) -> list[str]:
    """Cohort sizes (``*.count`` knobs) larger than any round of their runs ever selected."""
    lines = []
    for path in knobs:
        if path.rsplit(".", 1)[-1] != "count":
            continue
        over = [
            t
            for t in trials
            if isinstance(t.params.get(path), int)
            and t.params[path] > int(t.user_attrs.get("max_selected", 0))
        ]
        if not over:
            continue
        cap = max(int(t.user_attrs.get("max_selected", 0)) for t in over)
        values = sorted({t.params[path] for t in over})
        lines.append(
            f"knob {path}: {len(over)} trials asked for cohorts of {values[0]}-{values[-1]} "
            f"devices, but no round of theirs selected more than {cap}: the cohort is capped "
            f"(at the devices online), so values above {cap} have no effect there"
        )
    return lines


def _order_key(value: Any) -> tuple[int, Any]:
    """Numbers in numeric order, then everything else by its text."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, value)
    return (1, repr(value))


def _same_seeds(trials: Sequence[optuna.trial.FrozenTrial], seeds: Sequence[int]) -> list[str]:
    if len(seeds) < 2:
        return []
    flat = [t.number for t in trials if len(set(t.user_attrs["digests"])) == 1]
    if not flat:
        return []
    return [
        f"seeds {ranges_text(seeds)} gave identical runs in {len(flat)} of {len(trials)} trials "
        f"(trials {ranges_text(flat)}): nothing in those settings is random, so more seeds only "
        f"cost time and a confidence interval over them says nothing"
    ]


def _slack(
    constraints: Sequence[Constraint], trials: Sequence[optuna.trial.FrozenTrial]
) -> list[str]:
    lines: list[str] = []
    if len(trials) < 2:
        return lines
    for i, c in enumerate(constraints):
        values = [
            t.user_attrs["constraint_values"][i]
            for t in trials
            if len(t.user_attrs.get("constraint_values", [])) > i
        ]
        if len(values) < 2:
            continue
        met = [c.violation(v) <= 0 for v in values]
        if all(met):
            lines.append(
                f"constraint {c.name} was met by every trial ({len(values)} of {len(values)}): "
                f"it did not constrain the search (tighten it or widen the knobs' ranges)"
            )
        elif not any(met):
            closest = min(values, key=c.violation)
            lines.append(
                f"constraint {c.name} was met by no trial ({len(values)} tried; the closest "
                f"gave {closest:.4g}): no setting in the ranges searched meets it"
            )
    return lines


def _never_reached(
    objectives: Sequence[Measure], trials: Sequence[optuna.trial.FrozenTrial]
) -> list[str]:
    lines = []
    for m in objectives:
        per = [t.user_attrs.get(f"per_seed:{m.name}", []) for t in trials]
        values = [v for p in per for v in p]
        if values and all(math.isinf(v) for v in values):
            lines.append(
                f"{m.name}: no trial reached it on any seed: raise the scenario's rounds or "
                f"max_time, or ease the target"
            )
    return lines
