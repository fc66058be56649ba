"""Render the numbers of docs/policy-search.md's worked examples from their results files.

* ``tune-capacity``: ``analysis/results/tune_capacity.json`` (``analysis/tune_capacity.py``);
* ``tune-deadline``: ``analysis/results/tune_deadline.json`` (``analysis/tune_deadline.py``).

Each block sits in the page between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->``, as the
other generated blocks of the docs do (``analysis/docs_tables.py``).

    python analysis/tune_docs.py            # rewrite the page's blocks
    python analysis/tune_docs.py --check    # exit 1 if the page differs (tests run this)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from docs_tables import replace_block

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
CAPACITY = RESULTS / "tune_capacity.json"
DEADLINE = RESULTS / "tune_deadline.json"
PAGE = HERE.parent / "docs" / "policy-search.md"


def _load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    if data.get("size") != "full":
        raise ValueError(f"{path} holds a {data.get('size')!r} run; the page needs a full one")
    return data


def _seeds(seeds: list[int]) -> str:
    return (
        f"{seeds[0]}-{seeds[-1]}" if seeds == list(range(seeds[0], seeds[-1] + 1)) else str(seeds)
    )


def _ci(s: dict[str, Any], digits: int = 1) -> str:
    return f"{s['mean']:.{digits}f} [95% CI {s['ci_low']:.{digits}f}, {s['ci_high']:.{digits}f}]"


def capacity_block(data: dict[str, Any]) -> str:
    """The capacity-planning example's outcome: its summary, the best trials, the devices online."""
    n = data["numbers"]
    b = n["best"]
    lines = [
        "```text",
        n["summary"],
        "```",
        "",
        f"{n['trials']} trials on seeds {_seeds(n['seeds'])}, {n['complete']} complete and "
        f"{n['pruned']} pruned, used {n['used']} runs; the best setting ran "
        f"{n['fresh_runs']} more on fresh seeds {_seeds(n['fresh_seeds'])} ({n['runs']} runs, "
        f"{n['wall_seconds']:.0f} s on {n['machine']}). Of the complete trials, "
        f"{n['feasible_trials']} met the constraint and {n['infeasible_trials']} did not. The "
        f"best, trial {b['trial']}: **`count={b['count']}`, `seconds={b['seconds']:.1f}`**, "
        f"{_ci(b['search'])} updates per hour over the search's seeds and {_ci(b['fresh'])} on "
        f"the fresh seeds, where 95% of rounds lasted at most {b['constraint_fresh']:.1f} s "
        f"(constraint {'met' if b['constraint_fresh_met'] else 'NOT met'}). The five best "
        f"feasible trials:",
        "",
        "| trial | `policy.count` | `policy.seconds` | updates per hour | 95% of rounds within |",
        "|---|---|---|---|---|",
    ]
    for t in n["top"]:
        lines.append(
            f"| {t['trial']} | {t['count']} | {t['seconds']:.1f} | {t['value']:.1f} | "
            f"{t['round_time']:.1f} s |"
        )
    over = max(
        (t for t in n["trials_table"] if t["state"] == "complete" and not t["feasible"]),
        key=lambda t: t["value"],
    )
    lines += [
        "",
        f"The best complete trial that broke the constraint, trial {over['trial']}, reached "
        f"{over['value']:.1f} updates per hour with a {over['seconds']:.1f} s deadline (95% of "
        f"rounds within {over['round_time']:.1f} s). At most {n['most_online']} of the "
        f"{n['devices']} clients are online at any moment of the {_hours(n)} simulated, and no "
        f"round of any run selected more than {n['largest_cohort']} devices.",
    ]
    return "\n".join(lines)


def _hours(n: dict[str, Any]) -> str:
    return f"{n['hours']:g} hour" + ("" if n["hours"] == 1 else "s")


def _and(items: list[str]) -> str:
    return ", ".join(items[:-1]) + f" and {items[-1]}" if len(items) > 1 else "".join(items)


def _s(seconds: float) -> str:
    return f"{seconds:.3f} s"


def deadline_block(data: dict[str, Any]) -> str:
    """The grid-against-search example: both bests, their runs, the ratio, the search seeds."""
    n = data["numbers"]
    g, s = n["grid"], n["search"]
    never = g["never_reached"]
    missed_grid = (
        f"Every grid deadline up to {max(never):.2f} s missed the target on at least one seed "
        f"({len(never)} of {g['points']} points: time to target infinite), and "
        if never
        else "No grid deadline missed the target; "
    )
    missed = [
        t for t in s["trials_table"] if t["state"] == "complete" and t["reached"] < t["seeds_run"]
    ]
    many = len(missed) > 1
    where = (
        "on the first seed they ran, and stopped there"
        if all(t["seeds_run"] == 1 for t in missed)
        else f"and stopped at the seed that missed ({sum(t['seeds_run'] for t in missed)} runs)"
    )
    stopped = (
        f" Trial{'s' * many} {_and([str(t['trial']) for t in missed])} (deadline{'s' * many} "
        f"{_and([_s(t['seconds']) for t in missed])}) missed the target {where}."
        if missed
        else ""
    )
    near = 100 * n["near"]
    lines = [
        "| | runs | best deadline | time to target, search seeds | on fresh seeds |",
        "|---|---|---|---|---|",
        f"| grid: {g['points']} deadlines, log-spaced | {g['runs']} | {g['best_seconds']:.3f} s "
        f"| {g['best_value']:.1f} s | |",
        f"| search: at most {s['max_runs']} runs; {s['trials']} trials ({s['complete']} "
        f"complete, {s['pruned']} pruned) | {s['used']} (+{s['fresh_runs']} on fresh seeds) | "
        f"{s['best_seconds']:.3f} s | {s['best_value']:.1f} s | {_ci(s['fresh'])} s |",
        "",
        f"Seeds {_seeds(n['seeds'])} for both, fresh seeds {_seeds(n['fresh_seeds'])}. The "
        f"search's best is **{n['ratio']:.3f}x** the grid's best time to target, for "
        f"**{100 * n['runs_fraction']:.0f}%** of the grid's runs ({s['used']} of {g['runs']}; "
        f"{s['used'] + s['fresh_runs']} with the fresh seeds). "
        f"{100 * g['near_fraction']:.0f}% of the grid (of the range, on its log scale) is "
        f"within {near:.0f}% of the grid's best.{stopped} {missed_grid}above the best the time "
        f"grows to {g['rows'][-1]['value']:.0f} s at {g['rows'][-1]['seconds']:g} s. The grid "
        f"took {g['wall_seconds']:.0f} s (several processes), the search "
        f"{s['wall_seconds']:.0f} s (one), on {n['machine']}.",
    ]
    if s["warnings"]:
        lines += ["", "```text", *(f"warning    {w}" for w in s["warnings"]), "```"]
    runs = n["search_seeds"]
    lines += [
        "",
        f"The same search with search seeds {_seeds([r['search_seed'] for r in runs])} (the "
        f"same grid, seeds and budget):",
        "",
        "| search seed | trials (complete, pruned) | runs used | best deadline | time to target "
        "| of the grid's best |",
        "|---|---|---|---|---|---|",
    ]
    for r in runs:
        found = r["best_seconds"] is not None
        best = (
            f"{_s(r['best_seconds'])} | {r['best_value']:.1f} s | {r['ratio']:.3f}x"
            if found
            else "none | not reached | "
        )
        lines.append(
            f"| {r['search_seed']} | {r['trials']} ({r['complete']}, {r['pruned']}) | "
            f"{r['used']} | {best} |"
        )
    lines += [
        "",
        f"The goal, within {near:.0f}% of the grid's best for at most a quarter of its runs, "
        f"was met with **{n['goal_met']} of {len(runs)}** search seeds.",
    ]
    return "\n".join(lines)


def render_all() -> dict[str, str]:
    """The text of every block, by marker name."""
    return {
        "tune-capacity": capacity_block(_load(CAPACITY)),
        "tune-deadline": deadline_block(_load(DEADLINE)),
    }


def rendered_page(text: str) -> str:
    for name, body in render_all().items():
        text = replace_block(text, name, body)
    return text


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 if the page differs")
    args = p.parse_args()
    text = PAGE.read_text()
    new = rendered_page(text)
    if args.check:
        if new != text:
            print(f"{PAGE} differs from the results files: run analysis/tune_docs.py")
            sys.exit(1)
        print(f"{PAGE}'s blocks match the results files")
        return
    PAGE.write_text(new)
    print(f"rendered {', '.join(render_all())} into {PAGE}")


if __name__ == "__main__":
    main()
