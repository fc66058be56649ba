"""The report's section on the searches of a store (``simfl tune``, :func:`simfl.tune`).

A search saves its outcome as ``STORE/tuning/STUDY.json`` and its Optuna journal as
``STUDY.journal`` beside it. For each outcome the page shows the best setting (or the
settings of the Pareto front) with its mean and 95% CI over the search's seeds and over fresh
seeds, whether it met the constraints, the search's warnings, and its figures
(:mod:`simfl.tuning.figures`): the history of the trials, the knobs' importance and the front.
The trials go to ``search-N-trials.csv``; every file has a fixed name, numbered by the study's
place in the folder, never named after the study.

The outcome is read as JSON and the journal as Optuna's JSON lines (from a copy), so nothing
in a store runs code. The figures need Optuna (``pip install 'simfl[tune]'``); without it the
section shows the tables and says so.
"""

from __future__ import annotations

import functools
import json
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from simfl.report.recorded import ReportWarning

__all__ = ["STUDY_DIR", "search_files", "search_sections"]

#: The folder of a store that holds its searches (as :mod:`simfl.tuning.search` names it).
STUDY_DIR = "tuning"

Emit = Callable[[Any], str]


def search_files(store: Path) -> list[Path]:
    """The saved outcomes of the searches of a store, by name (``[]`` if it holds none)."""
    folder = store / STUDY_DIR
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.glob("*.json") if p.is_file() and not p.name.startswith("."))


def _number(value: Any) -> float:
    """A number of a saved outcome (``"inf"`` and ``"nan"`` as JSON holds them)."""
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value in ("inf", "-inf", "nan"):
        return float(value)
    raise ValueError(f"expected a number, got {value!r}")


def _seeds(seeds: Sequence[Any]) -> str:
    from simfl.sweeps.grid import ranges_text

    return ranges_text(int(s) for s in seeds) if seeds else "none"


def _interval(summary: Mapping[str, Any]) -> str:
    """``mean [low, high]``, or how many seeds did not reach the target."""
    mean, n, reached = _number(summary["mean"]), int(summary["n"]), int(summary["reached"])
    if reached < n:
        return f"not reached in {n - reached} of {n} seeds"
    low, high = _number(summary["ci_low"]), _number(summary["ci_high"])
    if math.isnan(low):
        return f"{mean:.4g}"
    return f"{mean:.4g} [{low:.4g}, {high:.4g}]"


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def best_table(outcome: Mapping[str, Any]) -> pd.DataFrame:
    """One row per chosen setting: its knobs, objectives over both seed sets, constraints."""
    objectives = list(outcome["objectives"])
    constraints = list(outcome.get("constraints") or [])
    seeds, fresh = _seeds(outcome["seeds"]), _seeds(outcome.get("fresh_seeds") or [])
    trials = {int(t["trial"]): t for t in outcome.get("trials") or []}
    rows = []
    for ev in outcome.get("best") or []:
        row: dict[str, Any] = {"trial": int(ev["trial"])}
        row.update({str(p): _short(v) for p, v in dict(ev["params"]).items()})
        for name in objectives:
            row[f"{name} (seeds {seeds})"] = _interval(ev["search"][name])
            again = (ev.get("fresh") or {}).get(name)
            if again:
                row[f"{name} (fresh seeds {fresh})"] = _interval(again)
        own = trials.get(int(ev["trial"]), {})
        for name in constraints:
            words = []
            if name in own:  # a chosen setting met every constraint on the search's seeds
                words.append(f"met ({_number(own[name]):.4g})")
            held = (ev.get("fresh_constraints") or {}).get(name)
            if held:
                word = "met" if held["met"] else "NOT met"
                words.append(f"{word} on fresh seeds ({_number(held['value']):.4g})")
            row[name] = "; ".join(words)
        rows.append(row)
    return pd.DataFrame(rows)


def _states(trials: Sequence[Mapping[str, Any]]) -> str:
    counts = pd.Series([str(t.get("state")) for t in trials]).value_counts()
    return ", ".join(f"{int(counts.get(s, 0))} {s}" for s in ("complete", "pruned", "failed"))


def search_sections(
    store: Path,
    folder: Path,
    *,
    text: Emit,
    table: Callable[[pd.DataFrame], str],
    say: Callable[[str], None],
) -> list[str]:
    """The page's lines on the searches of ``store`` (``[]`` if it holds none).

    ``text`` escapes a value for the page and ``table`` turns a frame into an HTML table (the
    page's own helpers); figures and ``search-N-trials.csv`` go into ``folder``. A saved
    outcome that cannot be read is said in a :class:`~simfl.report.recorded.ReportWarning`
    and on the page.
    """
    files = search_files(store)
    if not files:
        return []
    figures: Any = None
    missing = ""
    try:
        from simfl.tuning import figures
    except ImportError as exc:  # Optuna is not installed: the tables, without figures
        missing = f"the figures need Optuna ({exc}): pip install 'simfl[tune]'"
    lines = [
        "<h2>Searches</h2><p>The searches run into this store (<code>simfl tune</code>): every "
        "trial is one setting of the knobs, run on the same seeds as the others; the best "
        "setting (with two objectives, every setting of the Pareto front) is run again on "
        "fresh seeds the search never saw, whose mean is free of the search's selection bias. "
        "Means with a bootstrap 95% CI over seeds. Their runs are runs of the store like "
        "any other: the figures and tables below show them (one series per setting unless "
        "<code>--by</code> says otherwise).</p>"
    ]
    if missing:
        lines.append(f"<p>{text(missing)}</p>")
    for i, path in enumerate(files, start=1):
        say(f"reading the search {path.name}; drawing its figures")
        try:
            outcome = json.loads(path.read_text())
            lines += _one(i, path, outcome, folder, figures, text, table)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            why = f"{STUDY_DIR}/{path.name} cannot be read ({type(exc).__name__}: {exc})"
            warnings.warn(ReportWarning(f"{why}; the report leaves it out"), stacklevel=3)
            lines.append(f"<h3>Search {text(path.stem)}</h3><p>{text(why)}.</p>")
    return lines


def _one(
    i: int,
    path: Path,
    outcome: Mapping[str, Any],
    folder: Path,
    figures: Any,
    text: Emit,
    table: Callable[[pd.DataFrame], str],
) -> list[str]:
    """The lines of one search: what it searched, the best table, warnings and figures."""
    objectives = [str(o) for o in outcome["objectives"]]
    directions = [str(d) for d in outcome["directions"]]
    constraints = [str(c) for c in outcome.get("constraints") or []]
    records = list(outcome.get("trials") or [])
    knobs = dict(outcome.get("knobs") or {})
    csv = f"search-{i}-trials.csv"
    frame = pd.DataFrame(records)
    frame.to_csv(folder / csv, index=False)
    goals = ", ".join(
        f"{o} ({'lower' if d == 'minimize' else 'higher'} is better)"
        for o, d in zip(objectives, directions, strict=True)
    )
    lines = [
        f"<h3>Search {text(outcome.get('study', path.stem))}</h3>",
        f"<p>Objective: {text(goals)}. Knobs: "
        + "; ".join(f"<code>{text(p)}</code> {text(k)}" for p, k in knobs.items())
        + "."
        + (f" Constraints: {text(', '.join(constraints))}." if constraints else "")
        + f" Seeds {text(_seeds(outcome['seeds']))}, fresh seeds "
        f"{text(_seeds(outcome.get('fresh_seeds') or []))}; {len(records)} trials "
        f"({text(_states(records))}); every trial in <code>{text(csv)}</code>.</p>",
    ]
    best = best_table(outcome)
    if best.empty:
        lines.append("<p><b>No setting met every constraint with a finite objective.</b></p>")
    else:
        lines.append(table(best))
    found = [str(w) for w in outcome.get("warnings") or []]
    if found:
        lines.append(
            "<p>Warnings:</p><ul>" + "".join(f"<li>{text(w)}</li>" for w in found) + "</ul>"
        )
    if figures is None:
        return lines
    trials = figures.trials_frame(records, objectives + constraints)
    study = str(outcome.get("study", path.stem))
    drawn: list[tuple[str, Callable[[Path], str]]] = [
        (
            f"search-{i}-history{'' if j == 0 else f'-{j + 1}'}.png",
            functools.partial(figures.history_figure, trials, name, direction),
        )
        for j, (name, direction) in enumerate(zip(objectives, directions, strict=True))
    ]

    def importance(out: Path) -> str:
        journal = figures.load_study(path.with_suffix(".journal"), study)
        return str(figures.importance_figure(journal, objectives, out))

    drawn.append((f"search-{i}-importance.png", importance))
    if len(objectives) == 2:
        front = functools.partial(figures.front_figure, trials, objectives, directions)
        drawn.append((f"search-{i}-front.png", front))
    for name, draw in drawn:
        try:
            caption = draw(folder / name)
        except figures.NotDrawnError as exc:
            what = name.removeprefix(f"search-{i}-").removesuffix(".png")
            lines.append(f"<p>No {text(what)} figure: {text(exc)}.</p>")
            continue
        lines.append(
            f"<figure><img src='{text(name)}' alt='{text(name)}'>"
            f"<figcaption>{text(caption)}</figcaption></figure>"
        )
    return lines
