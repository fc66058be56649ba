"""A deadline found by search against the same deadline found by an exhaustive grid.

Fleet: 100 devices in two tiers (``Fleet.tiers``), 80 fast (compute Exp with mean 1 s) and 20
slow (mean 8 s), 0.5 s of latency per transfer. Task: linear FedRep, d=20, k=2, 5 fresh samples
per client, noise std 1e-3, at most 200 rounds. Policy: ``Deadline(seconds, count=10)``. The
objective is the simulated time until the principal-angle distance first falls to 1e-3 (mean
over the seeds, ``inf`` when a seed never gets there): below about 1.1 s too few updates arrive
for the model to converge in 200 rounds, and above about 2 s every round waits for stragglers,
so the best deadline lies inside the range.

* **grid**: ``GRID`` deadlines log-spaced over the knob's range, each run on the same seeds;
* **search**: :func:`simfl.tune` with ``Float(0.8, 8, log=True)`` on ``policy.seconds``, the
  same seeds, and a budget of a quarter of the grid's runs (``max_runs``; pruned trials and
  trials that missed the target use fewer seeds than the others). Its best setting is then run
  on fresh seeds it never saw.

The goal: the search's best within 5% of the grid's best, for at most a quarter of the grid's
runs. The search is run with ``search_seed`` 0 (the page's headline) to ``SEARCH_SEEDS - 1``
on the same grid, to count how often it meets that goal.

Writes ``analysis/results/tune_deadline.json`` (a ``--quick`` run writes beside its figure in
``--out`` instead); ``analysis/tune_docs.py`` renders the numbers of ``docs/policy-search.md``
from it.

    python analysis/tune_deadline.py [--quick] [--workers N]
"""

from __future__ import annotations

import dataclasses
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import parser
from _tune_common import write

import simfl
from simfl import (
    Fleet,
    Profile,
    Scenario,
    Target,
    algorithms,
    dists,
    policies,
    sweeps,
    tasks,
    tuning,
)
from simfl.engine import simfl_version

#: The knob searched, and the range the grid covers.
KNOB = tuning.Float(0.8, 8.0, log=True)
OBJECTIVE = tuning.TimeToTarget("distance", below=1e-3)
#: Full size: grid points, seeds, and the search seeds whose searches are counted.
GRID, SEEDS, SEARCH_SEEDS = 40, 4, 8
#: The search's budget of runs: a quarter of the grid's.
BUDGET = GRID * SEEDS // 4
#: --quick (the tests): a handful of each.
QUICK = {"grid": 4, "seeds": 2, "max_runs": 6, "search_seeds": 2, "rounds": 200}
#: The goal: the search's best within this fraction of the grid's best.
NEAR = 0.05


def base(rounds: int = 200) -> Scenario:
    """The scenario whose deadline is searched (see the module docstring)."""
    fleet = Fleet.tiers(
        (80, Profile(compute=dists.Exponential(mean=1.0), latency=0.5, name="fast")),
        (20, Profile(compute=dists.Exponential(mean=8.0), latency=0.5, name="slow")),
    )
    return Scenario(
        task=tasks.LinearRepresentation(d=20, k=2, samples_per_client=5, noise_std=1e-3),
        algorithm=algorithms.FedRep(),
        fleet=fleet,
        policy=policies.Deadline(2.0, count=10),
        rounds=rounds,
        target=Target("distance", below=1e-3),
        name="deadline",
    )


def grid_points(n: int) -> np.ndarray:
    """``n`` deadlines log-spaced over the knob's range, ends included."""
    return np.geomspace(KNOB.low, KNOB.high, n)


def run_grid(
    scenario: Scenario, points: np.ndarray, seeds: range, executor: str, workers: int | None
) -> list[dict[str, Any]]:
    """Every grid point's time to target per seed and combined as the search combines it."""
    cases = [
        sweeps.Case(
            dataclasses.replace(
                scenario,
                policy=dataclasses.replace(scenario.policy, seconds=float(x)),
                seed=s,
                name=f"grid {x:.6g}",
            ),
            {"seconds": float(x), "seed": s},
        )
        for x in points
        for s in seeds
    ]
    out = simfl.sweep(cases, executor=executor, workers=workers, progress=False)
    if out.failed:
        raise RuntimeError(f"grid runs failed: {out.failed}")
    results = [out.store.results(r) for r in out.run_ids]
    rows = []
    for i, x in enumerate(points):
        runs = results[i * len(seeds) : (i + 1) * len(seeds)]
        per = [OBJECTIVE.per_run(r) for r in runs]
        rows.append({"seconds": float(x), "value": OBJECTIVE.combine(per, runs), "per_seed": per})
    return rows


def near_fraction(rows: list[dict[str, Any]], best: float, near: float = NEAR) -> float:
    """The fraction of the (log-spaced) grid whose value is within ``near`` of ``best``."""
    return sum(r["value"] <= (1 + near) * best for r in rows) / len(rows)


def search(
    scenario: Scenario, seeds: range, max_runs: int, search_seed: int
) -> simfl.tuning.TuneOutcome:
    """The search of the deadline with a budget of ``max_runs`` runs (inline: one process)."""
    return simfl.tune(
        scenario,
        {"policy.seconds": KNOB},
        OBJECTIVE,
        seeds=seeds,
        max_runs=max_runs,
        trials=max_runs,  # every trial uses a run at least: the budget stops the search
        search_seed=search_seed,
        executor="inline",
        progress=False,
    )


def searched(out: simfl.tuning.TuneOutcome, grid_best: float) -> dict[str, Any]:
    """What a search found and used, against the grid's best (ratio ``inf``: found nothing)."""
    trials = out.trials
    name = OBJECTIVE.name
    missed = trials[(trials["state"] == "complete") & (trials["reached"] < trials["seeds_run"])]
    found: dict[str, Any] = {
        "trials": len(trials),
        "complete": int((trials["state"] == "complete").sum()),
        "pruned": int((trials["state"] == "pruned").sum()),
        "missed": len(missed),
        "used": out.used,
        "best_seconds": None,
        "best_value": math.inf,
        "ratio": math.inf,
    }
    if out.best:
        best = out.best[0]
        found.update(
            best_seconds=float(best.params["policy.seconds"]),
            best_value=float(best.values[0]),
            ratio=float(best.values[0]) / grid_best,
            fresh_mean=float(best.fresh[name]["mean"]) if best.fresh else None,
        )
    return found


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=None, help="grid processes (default: CPUs)")
    args = p.parse_args()
    size = (
        QUICK
        if args.quick
        else {
            "grid": GRID,
            "seeds": SEEDS,
            "max_runs": BUDGET,
            "search_seeds": SEARCH_SEEDS,
            "rounds": 200,
        }
    )
    scenario = base(size["rounds"])
    seeds = range(size["seeds"])
    points = grid_points(size["grid"])
    max_runs = size["max_runs"]

    started = time.perf_counter()
    rows = run_grid(scenario, points, seeds, "inline" if args.quick else "processes", args.workers)
    grid_seconds = time.perf_counter() - started
    best_row = min(rows, key=lambda r: r["value"])
    for r in rows:
        mark = "  <- best" if r is best_row else ""
        print(f"grid  deadline {r['seconds']:6.3f} s: time to target {r['value']:8.2f} s{mark}")
    grid_runs = len(points) * len(seeds)

    started = time.perf_counter()
    out = search(scenario, seeds, max_runs, 0)
    search_seconds = time.perf_counter() - started
    print(out.summary())
    if not out.best and not args.quick:
        raise RuntimeError("the search found no setting that reached the target")
    name = OBJECTIVE.name
    fresh_runs = len(out.fresh_seeds) * len(out.best)
    trials = out.trials
    headline = searched(out, best_row["value"])
    if out.best:
        best = out.best[0]
        headline.update(
            best_trial=best.trial,
            fresh={k: best.fresh[name][k] for k in ("mean", "ci_low", "ci_high", "reached")},
            fresh_per_seed=best.fresh[name]["per_seed"],
            search_ci=[best.search[name]["ci_low"], best.search[name]["ci_high"]],
        )
    headline.update(
        max_runs=max_runs,
        executed=out.runs,
        fresh_runs=fresh_runs,
        warnings=list(out.warnings),
        wall_seconds=search_seconds,
        trials_table=[
            {
                "trial": int(t["trial"]),
                "state": t["state"],
                "seconds": float(t["policy.seconds"]),
                "value": float(t[name]),
                "seeds_run": int(t["seeds_run"]),
                "reached": int(t["reached"]),
            }
            for _, t in trials.iterrows()
        ],
    )
    others = [{"search_seed": 0, **searched(out, best_row["value"])}]
    for k in range(1, size["search_seeds"]):
        found = searched(search(scenario, seeds, max_runs, k), best_row["value"])
        others.append({"search_seed": k, **found})
        print(
            f"search seed {k}: best {found['best_value']:.2f} s at {found['best_seconds']} s, "
            f"ratio {found['ratio']:.4f}, {found['used']} runs"
        )
    met = [r for r in others if r["ratio"] <= 1 + NEAR and r["used"] <= grid_runs / 4]
    numbers = {
        "scenario": (
            "Fleet.tiers: 80 fast Exp(1 s) + 20 slow Exp(8 s), latency 0.5 s; linear FedRep "
            "d=20 k=2, 5 samples per client; Deadline(seconds, count=10); at most "
            f"{size['rounds']} rounds; target distance <= 1e-3"
        ),
        "knob": {"path": "policy.seconds", "low": KNOB.low, "high": KNOB.high, "log": KNOB.log},
        "objective": name,
        "seeds": list(seeds),
        "fresh_seeds": list(out.fresh_seeds),
        "grid": {
            "points": len(points),
            "runs": grid_runs,
            "best_seconds": best_row["seconds"],
            "best_value": best_row["value"],
            "best_per_seed": best_row["per_seed"],
            "near_fraction": near_fraction(rows, best_row["value"]),
            "never_reached": [r["seconds"] for r in rows if math.isinf(r["value"])],
            "rows": [{"seconds": r["seconds"], "value": r["value"]} for r in rows],
            "wall_seconds": grid_seconds,
        },
        "search": headline,
        "ratio": headline["ratio"],
        "runs_fraction": out.used / grid_runs,
        "near": NEAR,
        "search_seeds": others,
        "goal_met": len(met),
        "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} CPUs",
        "versions": {"simfl": simfl_version(), "optuna": __import__("optuna").__version__},
    }
    print(
        f"\ngrid   best {best_row['value']:.2f} s at {best_row['seconds']:.3f} s "
        f"({grid_runs} runs, {grid_seconds:.0f} s)\nsearch best {headline['best_value']:.2f} s "
        f"at {headline['best_seconds']} s ({out.used} runs used of {max_runs} + {fresh_runs} "
        f"on fresh seeds, {search_seconds:.0f} s)\nratio {numbers['ratio']:.4f}; runs "
        f"{numbers['runs_fraction']:.3f} of the grid's; "
        f"{100 * numbers['grid']['near_fraction']:.0f}% of the grid within {100 * NEAR:.0f}% "
        f"of its best; goal met by {len(met)} of {len(others)} search seeds"
    )
    write(args, "tune_deadline", numbers)


if __name__ == "__main__":
    main()
