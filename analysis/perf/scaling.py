"""Target 5: time per round and peak memory against fleet size and cohort size.

FedAvg on the linear task (as ``million.py``, evaluated on 10 clients at the start and the
end only, since evaluation is not what is measured), each point a fresh process (so its peak RSS is
its own): fleet sizes 10^3 ... 10^6 with 100 devices per round, and cohort sizes 10 ... 10^4
on a 10^6-device fleet. Time per round is the marginal cost of a round (a run of a quarter of
the rounds is subtracted, so set-up and evaluation cancel out). It should not grow with the
fleet (only the selected devices are simulated) and at most linearly with the cohort; memory
grows with the fleet's columns and the recorded job rows. Prints the log-log slopes and saves
``analysis/figures/perf_scaling.png``.

    python analysis/perf/scaling.py [--quick] [--repeats 3]
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _perf import HERE, parser, report, shown

FIGURES = HERE.parent / "figures"


def point(devices: int, cohort: int, rounds: int) -> dict[str, Any]:
    """One run of ``million.py`` in a fresh process; its JSON line."""
    cmd = [sys.executable, str(HERE / "million.py"), "--devices", str(devices)]
    cmd += ["--cohort", str(cohort), "--rounds", str(rounds), "--eval-every", str(rounds)]
    cmd += ["--eval-clients", "10", "--marginal"]  # evaluation is not what is measured here
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    row: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return row


def slope(x: list[float], y: list[float]) -> float:
    """Least-squares slope of log y against log x."""
    return float(np.polyfit(np.log10(x), np.log10(y), 1)[0])


def sweep(quick: bool, repeats: int) -> dict[str, list[dict[str, Any]]]:
    """Median time per round and peak RSS at every point of both sweeps."""
    top = 5 if quick else 6
    rounds = 20 if quick else 80
    grids = {
        "fleet": [(10**e, 100) for e in range(3, top + 1)],
        "cohort": [(10**top, 10**e) for e in range(1, top - 1)],
    }
    out: dict[str, list[dict[str, Any]]] = {}
    for name, grid in grids.items():
        rows = []
        for devices, cohort in grid:
            runs = [point(devices, cohort, rounds) for _ in range(repeats)]
            rows.append(
                {
                    "devices": devices,
                    "cohort": cohort,
                    "rounds": rounds,
                    "s_per_round": statistics.median(r["marginal_s_per_round"] for r in runs),
                    "peak_rss_mb": statistics.median(r["peak_rss_mb"] for r in runs),
                }
            )
            print(f"# {name}: {rows[-1]}", file=sys.stderr, flush=True)
        out[name] = rows
    return out


def figure(data: dict[str, list[dict[str, Any]]], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(9, 6.5), constrained_layout=True)
    for col, (name, x_key, label) in enumerate(
        (
            ("fleet", "devices", "fleet size (devices), 100 per round"),
            ("cohort", "cohort", f"devices per round, fleet of {data['cohort'][0]['devices']:,}"),
        )
    ):
        rows = data[name]
        x = np.array([r[x_key] for r in rows], dtype=float)
        panels = (
            ("s_per_round", "host seconds per round (marginal)"),
            ("peak_rss_mb", "peak RSS (MiB)"),
        )
        for row, (y_key, y_label) in enumerate(panels):
            ax = axes[row, col]
            y = np.array([r[y_key] for r in rows], dtype=float)
            ax.loglog(x, y, "o-", label="simfl")
            ax.loglog(x, y[0] * x / x[0], ":", color="grey", label="linear growth")
            ax.set_xlabel(label)
            ax.set_ylabel(y_label)
            ax.grid(True, which="both", alpha=0.3)
            ax.set_title(f"slope {slope(list(x), list(y)):.2f} (log-log)", fontsize=9)
            ax.legend(fontsize=8)
    fig.suptitle("simfl scaling: FedAvg on the linear task, one process per point")
    out.mkdir(parents=True, exist_ok=True)
    path = out / "perf_scaling.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def measure(quick: bool = False, repeats: int = 3) -> list[dict[str, Any]]:
    """Both sweeps, the figure, and the growth exponents as rows."""
    data = sweep(quick, repeats)
    path = figure(data, FIGURES)
    f, c = data["fleet"], data["cohort"]
    s_fleet = slope([r["devices"] for r in f], [r["s_per_round"] for r in f])
    s_cohort = slope([r["cohort"] for r in c], [r["s_per_round"] for r in c])
    m_fleet = slope([r["devices"] for r in f], [r["peak_rss_mb"] for r in f])

    def points(rows: list[dict[str, Any]], key: str) -> str:
        return ", ".join(f"{r[key]:.0e}: {r['s_per_round'] * 1e3:.1f} ms" for r in rows)

    return [
        {
            "target": "5 scaling: fleet size",
            "setting": f"{f[0]['devices']:.0e}..{f[-1]['devices']:.0e} devices, 100/round",
            "simfl": round(s_fleet, 2),
            "baseline": 1.0,
            "unit": "log-log slope of s/round",
            "ratio": shown(s_fleet, 2, at_least=False),
            "goal": "slope <= 1 (flat expected)",
            "passed": s_fleet <= 1.0,
            "note": points(f, "devices") + f"; memory slope {m_fleet:.2f}; figure {path.name}",
        },
        {
            "target": "5 scaling: cohort size",
            "setting": f"{c[0]['cohort']}..{c[-1]['cohort']}/round, {c[0]['devices']:.0e} fleet",
            "simfl": round(s_cohort, 2),
            "baseline": 1.0,
            "unit": "log-log slope of s/round",
            "ratio": shown(s_cohort, 2, at_least=False),
            "goal": "slope <= 1",
            "passed": s_cohort <= 1.0,
            "note": points(c, "cohort"),
        },
    ]


if __name__ == "__main__":
    args = parser(__doc__).parse_args()
    report(measure(args.quick, args.repeats), args.out, "scaling")
