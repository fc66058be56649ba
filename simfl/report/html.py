"""The report's ``index.html``: the figures with their captions, the tables and the runs.

:func:`write_report` chooses what to show (:mod:`simfl.report.choose`), draws the figures
(:mod:`simfl.report.figures`, and :mod:`simfl.report.searches` for the store's searches) and
writes the page that shows them.
"""

from __future__ import annotations

import html
import math
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from simfl.report import figures
from simfl.report.choose import Choice, Target, choose, speedups, target_table, version_of
from simfl.report.groups import GroupTables, group_tables, groups_figure
from simfl.report.recorded import ReportWarning, recorded_target
from simfl.report.searches import search_files, search_sections
from simfl.sweeps.store import BadRun, Store

__all__ = ["write_report"]

Caption = tuple[str, str]  # (PNG file name, caption as plain text: escaped on the page)


def _text(value: Any) -> str:
    """``value`` as HTML text: ``& < > " '`` escaped, so that it shows literally anywhere.

    Every string the page shows that comes from a store, a scenario or the user (labels,
    scenario and metric names, run ids, errors, paths, captions that quote them) goes through
    here, in element text and in attribute values alike.
    """
    return html.escape(str(value), quote=True)


def _html_table(table: pd.DataFrame) -> str:
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return "" if math.isnan(v) else "not reached" if math.isinf(v) else f"{v:.4g}"
        return _text(v)

    head = "".join(f"<th>{_text(c)}</th>" for c in table.columns)
    rows = "".join(
        "<tr>" + "".join(f"<td>{fmt(v)}</td>" for v in row) + "</tr>"
        for row in table.itertuples(index=False)
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def _interval(mean: float, low: float, high: float) -> str:
    if not math.isfinite(mean):
        return "not reached by every seed"
    return f"{mean:.4g} [{low:.4g}, {high:.4g}]"


def _display(table: pd.DataFrame, by: str, extra: list[str], metric: str) -> pd.DataFrame:
    """The time-to-target table as people read it: intervals in brackets, units in headers."""
    out = pd.DataFrame(
        {
            by: table[by],
            **{c: table[c] for c in extra},
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
            f"{v[0]:.3g} [{v[1]:.3g}, {v[2]:.3g}]" if math.isfinite(v[0]) else "none"
            for v in zip(
                table["speedup"], table["speedup_ci_low"], table["speedup_ci_high"], strict=True
            )
        ]
    if table["note"].astype(bool).any():
        out["note"] = table["note"]
    return out


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
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Write the figures and ``index.html`` of a store's finished runs; return the index path.

    Runs that cannot be read (:meth:`simfl.Store.check`) are left out, with a
    :class:`~simfl.sweeps.store.StoreWarning`, and listed on the page with the reason.

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
        the target ``simfl sweep --target`` recorded in ``STORE/report.json``, if the runs
        report its metric and ``metric`` is not another; else see
        :mod:`simfl.report.choose`). A record that cannot be used is said in a
        :class:`~simfl.report.recorded.ReportWarning`.
    run
        The run id whose jobs the Gantt chart shows (default: among the first seed's runs at
        the smallest fleet size, the one whose first rounds show the most job statuses).
    by
        The column naming the compared series (default: guessed, see
        :mod:`simfl.report.choose`; for a store holding searches, ``label``: one series per
        setting, named by its knobs' values, since a search's knobs take a new value in
        almost every trial).
    baseline
        The series speedups are relative to (default: the first).
    progress
        Told what the report is doing, a line at a time (reading the runs, each figure), as
        ``simfl report`` prints it; ``None``: silent.

    Raises
    ------
    ValueError
        If the store has no finished runs, or an option names something it does not hold.
    """
    import matplotlib

    matplotlib.use("Agg")
    say = progress if progress is not None else _silent
    store = store if isinstance(store, Store) else Store(store)
    folder = Path(out) if out is not None else store.path / "report"
    say(f"checking the files of {store.path}")
    bad = store.check()
    say("reading the runs (rounds, device jobs)")
    recorded, problem = (None, None) if target is not None else recorded_target(store.path)
    if problem is not None:
        warnings.warn(ReportWarning(f"{problem}; the report chooses its own target"), stacklevel=2)
    if by is None and search_files(store.path):
        by = "label"  # a search's runs: one series per setting (its name lists its knobs)
    chosen = choose(
        store,
        metric=metric,
        target=target,
        run=run,
        by=by,
        baseline=baseline,
        recorded=recorded,
    )
    folder.mkdir(parents=True, exist_ok=True)
    # labels are text from the store: never TeX (a "$" in a label would fail or turn to math)
    with matplotlib.rc_context({"text.parse_math": False}):
        shown, table, sections = _draw(store, chosen, folder, say)
        searches = search_sections(store.path, folder, text=_text, table=_html_table, say=say)
    say("writing time_to_target.csv and index.html")
    index = folder / "index.html"
    lines = _page(
        store, chosen, table, shown, bad, sections, _mostly_empty(store, chosen), searches
    )
    index.write_text("\n".join(lines) + "\n")
    return index


def _draw(
    store: Store, chosen: Choice, folder: Path, say: Callable[[str], None]
) -> tuple[list[Caption], pd.DataFrame, list[str]]:
    """Draw every figure and write the CSV tables; the captions, time table and sections."""
    colours = figures.palette(chosen.series)
    say(
        f"{len(chosen.done)} finished runs in {len(chosen.series)} series (by {chosen.by}); "
        f"drawing metric_vs_rounds.png and metric_vs_time.png (bootstrap bands)"
    )
    shown = _metric_figures(chosen, colours, folder)
    say(f"computing the time to {chosen.target_text}; drawing speedup.png")
    speed = speedups(
        chosen.frame,
        chosen.metric,
        chosen.side,
        chosen.value,
        chosen.by,
        chosen.baseline,
        list(chosen.panels),
    )
    shown.append(_speedup_figure(chosen, speed, colours, folder))
    say("drawing gantt.png, utilisation.png and staleness.png")
    shown += _job_figures(store, chosen, colours, folder)
    table = _time_to_target(chosen, speed)
    table.to_csv(folder / "time_to_target.csv", index=False)
    say("reading every run's participation and energy; drawing groups_energy.png")
    tables = _write_group_tables(group_tables(store, chosen), folder)
    caption = groups_figure(
        tables, chosen.by, chosen.target_text, colours=colours, path=folder / "groups_energy.png"
    )
    sections = _group_sections(chosen, tables, caption)
    return shown, table, sections


def _silent(line: str) -> None:
    """The default ``progress`` of :func:`write_report`: says nothing."""


def _time_to_target(chosen: Choice, speed: pd.DataFrame) -> pd.DataFrame:
    """The time-to-target table with the speedups (``time_to_target.csv``)."""
    keys = [chosen.by, *chosen.panels]
    table = target_table(
        chosen.frame, chosen.metric, chosen.side, chosen.value, chosen.by, list(chosen.panels)
    )
    if speed.empty:
        return table
    ci = {"ci_low": "speedup_ci_low", "ci_high": "speedup_ci_high", "note": "speedup_note"}
    cols = [*keys, "speedup", "ci_low", "ci_high", "note"]
    out = table.merge(speed[cols].rename(columns=ci), on=keys, how="left")
    # the speedup's note names the baseline's missed seeds too (a series' own come first)
    note = out.pop("speedup_note").fillna("")
    out["note"] = note.where(note != "", out["note"])
    return out[[c for c in out.columns if c != "note"] + ["note"]]


def _metric_figures(chosen: Choice, colours: dict[str, Any], folder: Path) -> list[Caption]:
    """The metric against rounds and against simulated time."""
    band = (
        f"mean over {chosen.seeds_text} with a 95% bootstrap band, one line per {chosen.by}, "
        f"one panel per {chosen.panels_text}"
    )
    shown = []
    for x in ("rounds", "time"):
        name = f"metric_vs_{x}.png"
        figures.metric_figure(
            chosen.frame,
            chosen.metric,
            chosen.by,
            panels=list(chosen.panels),
            x=x,
            target=chosen.value,
            colours=colours,
            path=folder / name,
        )
        what = "round (aggregations)" if x == "rounds" else "simulated time (s)"
        text = f"{chosen.metric} vs {what}: {band}; dotted line: the target {chosen.target_text}."
        shown.append((name, text))
    return shown


def _speedup_figure(
    chosen: Choice, speed: pd.DataFrame, colours: dict[str, Any], folder: Path
) -> Caption:
    """The speedup over the baseline against the fleet size."""
    by, sizes, tgt, extra = chosen.by, chosen.sizes, chosen.target_text, chosen.extra
    figures.speedup_figure(
        speed,
        by,
        chosen.baseline,
        tgt,
        panels=list(chosen.panels),
        sizes=sizes,
        colours=colours,
        path=folder / "speedup.png",
    )
    one = len(sizes) == 1
    each = ", ".join([by, *extra])
    also = f" with the same {', '.join(extra)}" if extra else ""
    return (
        "speedup.png",
        (f"This store has one fleet size ({sizes[0]} devices): one bar per {each}. " if one else "")
        + f"Speedup = mean time to {tgt} of the baseline {chosen.baseline!r}{also} / that of "
        f"each {by}"
        + (
            ""
            if one
            else f" at each fleet size (devices){', one line per ' + each if extra else ''}"
        )
        + "; bars: paired bootstrap 95% CI over seeds; above 1 is faster than the baseline; "
        f"a {by} without a speedup (a seed of it or of the baseline never reached the target, "
        "the table's note says how many) is named under the figure, never drawn as 0x.",
    )


def _job_figures(
    store: Store, chosen: Choice, colours: dict[str, Any], folder: Path
) -> list[Caption]:
    """The Gantt chart of one run, the devices' utilisation and the updates' staleness."""
    by, run_id = chosen.by, chosen.run_id
    rec = chosen.records[run_id]
    title = f"{rec['name']}, seed {rec['seed']}"
    window = figures.gantt_figure(store.results(run_id), title, folder / "gantt.png")
    panels = list(chosen.panels)
    figures.utilisation_figure(
        chosen.jobs,
        chosen.done,
        by,
        panels=panels,
        colours=colours,
        path=folder / "utilisation.png",
    )
    all_zero, beyond = figures.staleness_figure(
        chosen.jobs, by, panels=panels, colours=colours, path=folder / "staleness.png"
    )
    note = " Every run here is synchronous: all are 0." if all_zero else ""
    if beyond > 0:
        note += f" The {100 * beyond:.2g}% of updates beyond the drawn range are not shown."
    return [
        (
            "gantt.png",
            f"Device jobs of run {run_id} ({title}), "
            f"{window}: one row per device, colour = status, transfers lighter than compute, "
            f"dotted lines = aggregations. Choose another run with --run.",
        ),
        (
            "utilisation.png",
            f"Utilisation: the fraction of its run's simulated time each device spent in a job "
            f"(downloading, computing or uploading), pooled over the devices of the runs (seeds) "
            f"of a {by}, one panel per {chosen.panels_text}; devices never selected count as 0.",
        ),
        (
            "staleness.png",
            "Staleness of the applied updates: server model versions created between a job's "
            f"download and the aggregation that used its update (share per {by}, one panel per "
            f"{chosen.panels_text}).{note}",
        ),
    ]


def _write_group_tables(tables: GroupTables, folder: Path) -> GroupTables:
    """Write ``participation.csv``, ``fairness.csv`` and ``energy_to_target.csv``."""
    tables.participation.to_csv(folder / "participation.csv", index=False)
    tables.fairness.to_csv(folder / "fairness.csv", index=False)
    if tables.energy is not None:
        tables.energy.to_csv(folder / "energy_to_target.csv", index=False)
    return tables


def _group_sections(chosen: Choice, tables: GroupTables, caption: str) -> list[str]:
    """The page's sections on who took part (per group, fairness) and on energy.

    ``caption`` is the caption of ``groups_energy.png`` (plain text), shown after the tables.
    """
    by, tgt = chosen.by, _text(chosen.target_text)
    part = tables.participation
    extra = [c for c in chosen.panels if c != "n_devices"]
    shown = pd.DataFrame(
        {
            by: part[by],
            **{c: part[c] for c in extra},
            "devices": part["n_devices"],
            "group": part["group"],
            "share of fleet": [f"{100 * v:.3g}%" for v in part["fleet_share"]],
            **{("jobs selected" if c == "selected" else c): part[c] for c in _STATUS_COUNTS},
            "devices contributing (mean)": part["devices_arrived"],
            "share of updates": [
                "" if math.isnan(v) else f"{100 * v:.3g}%" for v in part["update_share"]
            ],
        }
    )
    fair = tables.fairness.rename(
        columns={
            "n_devices": "devices",
            "fewest": "fewest updates per device",
            "jain_devices": "Jain over devices",
            "jain_groups": "Jain over groups",
            **{
                c: f"worst group {c[len('worst_group_') :]}"
                for c in tables.fairness.columns
                if c.startswith("worst_group_")
            },
        }
    )
    lines = [
        "<h2>Who took part</h2><p>Jobs of each group of devices (the tiers of "
        "<code>Fleet.tiers</code>, or labels from <code>Fleet.with_groups</code>), summed over "
        "seeds, and each group's share of the aggregated updates beside its share of the fleet "
        "(also in <code>participation.csv</code>).</p>",
        _html_table(shown),
        "<p>Fairness, mean over seeds: Jain's index of the aggregated updates per device "
        "(1: every device contributed equally; 1/n: one did everything), over devices and over "
        "groups; the group with the fewest updates per device; the worst group's mean of each "
        "metric evaluated per client, for the final model (also in "
        "<code>fairness.csv</code>).</p>",
        _html_table(fair),
    ]
    if tables.energy is not None:
        energy = tables.energy.rename(
            columns={
                "n_devices": "devices",
                "time_to_target": "mean time to target (s)",
                "energy_to_target": "mean energy to target (J)",
                "energy": "mean energy of the run (J)",
            }
        )
        lines += [
            f"<h2>Energy to {tgt}</h2><p>Joules spent by every job (work, bytes sent and "
            "received, idle waits for the round, as the fleet declares them) until the target "
            "is reached, mean over seeds; &ldquo;not reached&rdquo; if a seed never reached it "
            "(also in <code>energy_to_target.csv</code>).</p>",
            _html_table(energy),
        ]
    lines.append(
        "<figure><img src='groups_energy.png' alt='groups_energy.png'>"
        f"<figcaption>{_text(caption)}</figcaption></figure>"
    )
    return lines


_STATUS_COUNTS = ("selected", "arrived", "late", "dropped", "cancelled")


def _page(
    store: Store,
    chosen: Choice,
    table: pd.DataFrame,
    shown: list[Caption],
    bad: list[BadRun],
    sections: list[str],
    empty: pd.DataFrame,
    searches: list[str],
) -> list[str]:
    """The lines of ``index.html``.

    ``bad``: the runs left out because they cannot be read; ``sections``: the lines on who
    took part and on energy, shown after the time-to-target table; ``empty``: the runs whose
    rounds were mostly empty, flagged above it; ``searches``: the section on the store's
    searches (:mod:`simfl.report.searches`), shown first.
    """
    by, sizes = chosen.by, chosen.sizes
    failed = chosen.runs[chosen.runs["status"] == "failed"]
    where = _text(str(store.path))
    tgt = _text(chosen.target_text)
    page = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>simfl report: {where}</title><style>{_CSS}</style></head><body>",
        f"<h1>simfl report: <code>{where}</code></h1>",
        f"<p>{len(chosen.done)} finished runs, {len(failed)} failed"
        + (f", {len(bad)} unreadable (left out, listed below)" if bad else "")
        + (
            f", {len(chosen.older)} of older versions of their scenarios (left out, listed below)"
            if len(chosen.older)
            else ""
        )
        + f": {len(chosen.series)} "
        f"{_text(by)} values, fleet size{'s' * (len(sizes) > 1)} "
        f"{', '.join(map(str, sizes))} devices"
        + "".join(f", {chosen.frame[c].nunique()} values of {_text(c)}" for c in chosen.extra)
        + f", {chosen.seeds_text}; one panel and one table row per "
        f"{_text(chosen.panels_text)}. Target: "
        f"<b>{tgt}</b> ({_text(chosen.target_note)}).</p>",
        *searches,
        f"<h2>Time to {tgt}</h2><p>Simulated seconds: mean over seeds with a "
        f"bootstrap 95% CI of the mean, median, mean rounds to reach it, mean final value; "
        f"speedup over {_text(repr(chosen.baseline))} (also in "
        f"<code>time_to_target.csv</code>).</p>",
        *_empty_note(empty),
        _html_table(_display(table, by, chosen.extra, chosen.metric)),
        *sections,
    ]
    for name, caption in shown:
        page.append(
            f"<figure><img src='{_text(name)}' alt='{_text(name)}'>"
            f"<figcaption>{_text(caption)}</figcaption></figure>"
        )
    if not failed.empty:
        last = failed["error"].map(lambda e: str(e).strip().splitlines()[-1] if e else "?")
        errors = failed[["run_id", "label", "seed"]].assign(error=last)
        page += ["<h2>Failed runs</h2>", _html_table(errors)]
    if bad:
        unreadable = pd.DataFrame(
            {"run_id": [b.run_id for b in bad], "reason": [b.reason for b in bad]}
        )
        page += [
            "<h2>Runs left out</h2><p>These run folders cannot be read. "
            f"<code>simfl store check {where} --repair</code> moves them into "
            f"<code>.quarantine/</code>; the next sweep runs them again.</p>",
            _html_table(unreadable),
        ]
    page += _older_section(chosen.older, where)
    runs = chosen.runs.assign(version=[version_of(f) for f in chosen.runs["fingerprint"]])
    cols = ["run_id", "label", "seed", "version", "status", "n_devices", "n_rounds", "sim_time"]
    cols += ["host_seconds", "simfl_version", "git_revision", "host", "finished"]
    page += ["<h2>Runs</h2>", _html_table(runs[cols].astype(object)), "</body></html>"]
    return page


def _older_section(older: pd.DataFrame, where: str) -> list[str]:
    """The runs of older versions of their scenarios, left out (``where``: the store, escaped)."""
    if older.empty:
        return []
    cases = older.drop_duplicates(["label", "version"])
    return [
        "<h2>Older versions left out</h2><p>These finished runs share their scenario name, "
        "grid labels and seed with runs of another version (another fingerprint: the "
        "scenario's values or code changed between sweeps). No figure or table mixes "
        f"versions: the report shows the newest version of each of these {len(cases)} "
        "scenario(s), the one whose last run finished last, and leaves these out. "
        f"<code>simfl store prune {where}</code> sets them aside.</p>",
        _html_table(
            older[["run_id", "label", "seed", "version", "newest", "finished"]]
            .rename(columns={"newest": "version shown"})
            .astype(object)
        ),
    ]


def _empty_note(empty: pd.DataFrame) -> list[str]:
    """A warning and a table of the runs whose rounds were mostly empty (nobody arrived)."""
    if empty.empty:
        return []
    return [
        f"<p><b>Warning:</b> in {len(empty)} run(s) more than half of the rounds were empty "
        "(no update was aggregated: nobody was selected, or nobody arrived in time). Their "
        "times and curves are those of a server that mostly waited; check the fleet's "
        "availability and the policy's deadline.</p>",
        _html_table(empty),
    ]


def _mostly_empty(store: Store, chosen: Choice) -> pd.DataFrame:
    """The shown runs whose ``meta["empty_rounds"]`` is more than half of their rounds.

    Read from each run's stored ``meta.json``, with its ``meta["warnings"]``; for runs that do
    not record it (stored by older versions of simfl), the rounds whose status is ``empty``.
    """
    series = chosen.frame.drop_duplicates("run_id").set_index("run_id")[chosen.by]
    played = chosen.frame[chosen.frame["round"] >= 0]
    counted = (played["status"] == "empty").groupby(played["run_id"]).sum()
    rows = []
    for run_id, name in series.items():
        record = chosen.records[str(run_id)]
        try:
            meta = store.run_meta(record)
        except (OSError, ValueError):
            meta = {}
        empty, total = _count(meta.get("empty_rounds")), _count(record.get("n_rounds"))
        if empty is None:  # stored before runs counted them: the rounds' own statuses
            empty = int(counted.get(run_id, 0))
        if total is None or not 2 * empty > total > 0:
            continue
        notes = meta.get("warnings")
        said = "; ".join(map(str, notes)) if isinstance(notes, list) else ""
        rows.append(
            {
                "run_id": run_id,
                chosen.by: name,
                "seed": record.get("seed"),
                "empty rounds": f"{empty} of {total}",
                "warnings": said,
            }
        )
    return pd.DataFrame(rows)


def _count(value: Any) -> int | None:
    """``value`` if it is a count read from JSON (an int >= 0, not a bool), else ``None``."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return int(value) if ok else None
