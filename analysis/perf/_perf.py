"""Helpers of the benchmark suite: the common command line and the result table/files."""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
COLUMNS = ("target", "setting", "simfl", "baseline", "unit", "ratio", "goal", "passed", "note")


def parser(description: str | None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=(description or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--quick", action="store_true", help="reduced sizes (seconds; for tests)")
    p.add_argument("--repeats", type=int, default=5, help="repeats; medians are reported")
    p.add_argument("--out", default=str(RESULTS), help="directory for the JSON/CSV figures")
    return p


def shown(value: float, digits: int, *, at_least: bool) -> float:
    """``value`` to ``digits`` decimals, rounded toward missing its goal.

    A row's ratio is judged unrounded; shown this way it never contradicts the verdict: a
    goal ``ratio >= g`` (``at_least``) is shown rounded down, ``ratio <= g`` rounded up, so a
    ratio of 0.996 against ">= 1" reads 0.99 beside "missed", not 1.0 (goals ``g`` with at
    most ``digits`` decimals). Float fuzz in ``value * 10**digits`` is removed first.
    """
    scaled = round(value * 10**digits, 9)
    return (math.floor(scaled) if at_least else math.ceil(scaled)) / 10**digits


def cpu_model() -> str:
    """The CPU's model name (Linux), else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    import numpy

    return {
        "cpu": cpu_model(),
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
    }


def fresh_runs(script: str, args: list[str], repeats: int) -> list[dict[str, Any]]:
    """Run ``script`` (beside this file) ``repeats`` times in fresh processes; the JSON object
    each prints on its last line."""
    runs = []
    for _ in range(repeats):
        out = subprocess.run(
            [sys.executable, str(HERE / script), *args],
            capture_output=True,
            text=True,
            check=True,
        )
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return runs


def budget_row(
    target: str, setting: str, runs: list[dict[str, Any]], note: str = ""
) -> dict[str, Any]:
    """The suite row of a whole-process run against the 60 s and 2 GiB budget.

    ``runs`` are :func:`fresh_runs`' rows (``total_s``, ``run_s``, ``peak_rss_mb``): the median
    total and run seconds, the highest peak RSS; ``note`` goes between the two in the note.
    """
    total = statistics.median(r["total_s"] for r in runs)
    rss = max(r["peak_rss_mb"] for r in runs)
    return {
        "target": target,
        "setting": setting,
        "simfl": round(total, 2),
        "baseline": 60.0,
        "unit": "s (whole process)",
        "ratio": round(total / 60.0, 3),
        "goal": "< 60 s and < 2048 MiB",
        "passed": total < 60.0 and rss < 2048.0,
        "note": f"run only {statistics.median(r['run_s'] for r in runs):.2f} s; {note}"
        f"peak RSS {rss:.0f} MiB",
    }


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, MiB (``ru_maxrss`` is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        lines.append("| " + " | ".join(str(r.get(c, "")) for c in COLUMNS) + " |")
    return "\n".join(lines)


def report(rows: list[dict[str, Any]], out: str, name: str) -> None:
    """Print the rows and write them to ``out/name.json`` and ``out/name.csv``."""
    print(table(rows))
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    doc = {"machine": machine(), "rows": rows}
    (path / f"{name}.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    with open(path / f"{name}.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(COLUMNS), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {path / name}.json and .csv")
