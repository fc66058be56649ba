"""A/B: the same workloads on this tree and on another checkout (e.g. before a refactor).

Each workload runs in a fresh process per repeat, alternating between the two trees, and the
host seconds of ``simfl.run`` alone are timed (imports and scenario building excluded). Prints
the median per tree and the ratio new / old, and writes ``results/refactor_ab.json``.

    git worktree add --detach /tmp/simfl-old 66b0026
    python analysis/perf/refactor_ab.py --old /tmp/simfl-old [--repeats 5] [--quick]

Both trees must accept the workloads' public API (``simfl.run``, ``Scenario``, ``Fleet``,
``policies``, ``algorithms``, ``tasks``, ``simfl.fleet.Availability``, ``simfl.network.Network``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

SETUP = """
import time
import numpy as np
import simfl
from simfl import Fleet, Scenario, algorithms, dists, policies, tasks
from simfl.fleet import Availability
from simfl.network import Network
Q = {quick}
def timing(policy, n=10_000, rounds=2000, **kw):
    return Scenario(task=None, algorithm=algorithms.TimingOnly(),
                    fleet=Fleet.homogeneous(n, compute=dists.Exponential(1.0), **kw),
                    policy=policy, rounds=rounds // (10 if Q else 1))
"""

WORKLOADS = {
    "sync timing-only, 100-job rounds (batched)": "sc = timing(policies.WaitAll(count=100))",
    "sync timing-only, one process per job": (
        "sc = timing(policies.WaitAll(count=100)); KW = {'batched': False}"
    ),
    "SRPFL timing-only, n0=10 of 100": (
        "sc = timing(policies.SRPFL(n0=10, count=100, rounds_per_stage=50), redraw='stage')"
    ),
    "FedBuff timing-only, 20 in flight": (
        "sc = timing(policies.FedBuff(buffer_size=10, concurrency=20), rounds=1000)"
    ),
    "FedAsync timing-only, 20 in flight": (
        "sc = timing(policies.FedAsync(concurrency=20), rounds=20000)"
    ),
    "hierarchy of 10 edges, shared links, WaitAll": (
        "sc = Scenario(task=None, algorithm=algorithms.TimingOnly(),"
        " fleet=Fleet.homogeneous(1000, compute=dists.Exponential(1.0), bandwidth_up=1e5),"
        " network=Network.hierarchical(np.arange(1000) % 10, edge_up=5e5, server_up=2e6),"
        " policy=policies.WaitAll(count=100), rounds=30 if Q else 300)"
    ),
    "FedRep linear, n=1000, 10% per round": (
        "sc = Scenario(task=tasks.LinearRepresentation(d=20, k=2), algorithm=algorithms.FedRep(),"
        " fleet=Fleet.homogeneous(1000, compute=dists.Exponential(1.0)),"
        " policy=policies.Deadline(2.0, fraction=0.1), rounds=20 if Q else 200)"
    ),
    "availability + shared star link, Deadline": (
        "av = Availability.exponential(200, mean_on=50.0, mean_off=10.0, horizon=1e6, seed=1)\n"
        "sc = Scenario(task=None, algorithm=algorithms.TimingOnly(),"
        " fleet=Fleet.homogeneous(200, compute=dists.Exponential(1.0), bandwidth_up=1e5)"
        ".with_availability(av, offline='pause'), network=Network.star(server_up=1e6),"
        " policy=policies.Deadline(3.0, count=20), rounds=30 if Q else 300)"
    ),
}

MEASURE = """
KW = {{}}
{workload}
t = time.perf_counter()
res = simfl.run(sc, progress=False, **KW)
print(time.perf_counter() - t, len(res.rounds), len(res.clients))
"""


def measure(tree: Path, workload: str, quick: bool) -> tuple[float, int, int]:
    """Host seconds of one run of ``workload`` in ``tree`` (a fresh process)."""
    code = SETUP.format(quick=quick) + MEASURE.format(workload=workload)
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    return float(out[0]), int(out[1]), int(out[2])


def main(argv: list[str] | None = None) -> int:
    """Run every workload on both trees, alternating; print medians and ratios."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--old", type=Path, required=True, help="the other checkout")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    rows = []
    print(f"{'workload':48s} {'old s':>8s} {'new s':>8s} {'new/old':>8s}  rows (old, new)")
    for name, workload in WORKLOADS.items():
        times: dict[str, list[float]] = {"old": [], "new": []}
        shape: dict[str, tuple[int, int]] = {}
        for _ in range(args.repeats):
            for label, tree in (("old", args.old), ("new", ROOT)):
                seconds, n_rounds, n_jobs = measure(tree, workload, args.quick)
                times[label].append(seconds)
                shape[label] = (n_rounds, n_jobs)
        old, new = statistics.median(times["old"]), statistics.median(times["new"])
        rows.append(
            {
                "workload": name,
                "old_s": old,
                "new_s": new,
                "ratio": new / old,
                "repeats": args.repeats,
                "rows_old": shape["old"],
                "rows_new": shape["new"],
            }
        )
        print(f"{name:48s} {old:8.3f} {new:8.3f} {new / old:8.2f}  {shape['old']} {shape['new']}")
    out = HERE / "results" / "refactor_ab.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"old": str(args.old), "rows": rows}, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
