"""Who was left out, and what it cost: per-tier participation and energy of three policies.

Fleet: 300 phones in three tiers (``Fleet.tiers``, which labels each device with its tier):
180 fast (Exp(1) s per unit of work), 90 mid (Exp(3) s), 30 slow (Exp(12) s), with 50/100/200
ms of latency per transfer. Each tier declares an energy model (``Profile(energy=...)``): joules
per unit of work (3, 4 and 6 J: older chips are less efficient), per byte received and sent,
and an idle power while a device waits for its synchronous round to close (0.2, 0.15, 0.1 W).
Task: linear FedRep, d=20, k=2, m=10 fresh samples, noise std 1e-3. Policies, on the same
fleet and seeds:

    wait-all    WaitAll(count=30)
    deadline    Deadline(4 s, count=30)
    fedbuff     FedBuff(buffer 10, 30 jobs in flight)

The runs go into a results store and ``simfl report`` is written for them; this script prints
the report's tables (participation per tier, fairness, time and energy to a principal-angle
distance of 1e-3) and copies the report's ``groups_energy.png`` to ``analysis/figures/``.

It writes the numbers the docs quote to ``analysis/results/groups_energy.json``, and
:func:`docs_text` renders the paragraph of ``docs/fleets.md`` from them
(``analysis/docs_tables.py``; a test checks the two agree).

    python analysis/groups_energy.py [--quick] [--seeds S] [--store DIR] [--results FILE]
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import parser

from simfl import (
    Fleet,
    Profile,
    Scenario,
    Store,
    algorithms,
    dists,
    policies,
    sweep,
    sweeps,
    tasks,
)
from simfl.fleet import Energy
from simfl.report import write_report

TARGET = 1e-3

POLICIES = {
    "wait-all": policies.WaitAll(count=30),
    "deadline": policies.Deadline(4.0, count=30),
    "fedbuff": policies.FedBuff(buffer_size=10, concurrency=30),
}


def tier(name: str, mean: float, latency: float, per_work: float, idle: float) -> Profile:
    """A tier of phones: compute, latency and energy model."""
    energy = Energy(per_work=per_work, per_byte_down=1e-6, per_byte_up=3e-6, idle_power=idle)
    return Profile(dists.Exponential(mean), latency=latency, name=name, energy=energy)


def fleet() -> Fleet:
    return Fleet.tiers(
        (180, tier("fast", 1.0, 0.05, per_work=3.0, idle=0.2)),
        (90, tier("mid", 3.0, 0.1, per_work=4.0, idle=0.15)),
        (30, tier("slow", 12.0, 0.2, per_work=6.0, idle=0.1)),
    )


def base(rounds: int) -> Scenario:
    return Scenario(
        name="tiers",
        task=tasks.LinearRepresentation(d=20, k=2, samples_per_client=10, noise_std=1e-3),
        algorithm=algorithms.FedRep(),
        fleet=fleet(),
        policy=POLICIES["wait-all"],
        rounds=rounds,
    )


def _show(title: str, table: pd.DataFrame) -> None:
    print(f"\n{title}")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))


def _split(store: Path) -> pd.DataFrame:
    """Each policy's energy split into compute, transfer and idle, in % of its total."""
    jobs = Store(store).clients()
    parts = ["energy_compute", "energy_transfer", "energy_idle"]
    sums = jobs.groupby("policy", sort=False)[["energy", *parts]].sum()
    split = sums[parts].div(sums["energy"], axis=0) * 100
    return split.rename(columns=lambda c: c.removeprefix("energy_") + " %").reset_index()


def docs_text(r: dict[str, object]) -> str:
    """The docs' paragraph on this figure, from the results file."""
    v: dict[str, dict[str, float]] = r["policies"]  # type: ignore[assignment]
    wa, dl, fb = v["wait-all"], v["deadline"], v["fedbuff"]
    return (
        f"It comes from `python analysis/groups_energy.py` (300 phones in three tiers, 60% fast, "
        f"30% mid, 10% slow; {r['seeds']} seeds; target distance 1e-3). The 4 s deadline took "
        f"{100 * dl['slow_share']:.1f}% of its aggregated updates from the slow tier (wait-all "
        f"{100 * wa['slow_share']:.1f}%, FedBuff {100 * fb['slow_share']:.1f}%); Jain's index "
        f"over tiers is {dl['jain_groups']:.2f} against {wa['jain_groups']:.4f} for wait-all. "
        f"Wait-all needed {wa['energy_to_target']:.0f} J to reach the target, and "
        f"{wa['idle_percent']:.2f}% of all its jobs' joules went to idle waits for the slow tier; "
        f"the deadline needed {dl['energy_to_target']:.0f} J and FedBuff "
        f"{fb['energy_to_target']:.0f} J."
    )


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=None)
    p.add_argument("--store", default=None, help="results store (default: a temporary one)")
    p.add_argument(
        "--results", default=str(Path(__file__).resolve().parent / "results" / "groups_energy.json")
    )
    args = p.parse_args()
    seeds = args.seeds or (2 if args.quick else 5)
    rounds = 60 if args.quick else 120
    cases = sweeps.grid(base(rounds), policy=POLICIES, seed=range(seeds))
    scratch = None if args.store else tempfile.mkdtemp(prefix="groups_energy-")
    store = Path(args.store or scratch) / "store"  # type: ignore[arg-type]
    sweep(cases, store=store, executor="inline", progress=False)
    index = write_report(store, target=("distance", "below", TARGET))
    report = index.parent
    pd.set_option("display.width", 200)
    print(f"{len(cases)} runs ({seeds} seeds), 300 devices in 3 tiers; report: {index}")
    part = pd.read_csv(report / "participation.csv")
    cols = ["policy", "group", "fleet_share", "selected", "arrived", "late", "update_share"]
    _show("participation per tier (jobs summed over seeds)", part[cols])
    _show("fairness (mean over seeds)", pd.read_csv(report / "fairness.csv"))
    energy = pd.read_csv(report / "energy_to_target.csv")
    _show(f"time and energy to distance <= {TARGET:g} (mean over seeds)", energy)
    split = _split(store)
    _show("where the energy of the runs went (% of all their jobs' joules)", split)
    fair = pd.read_csv(report / "fairness.csv").set_index("policy")
    slow = part[part["group"] == "slow"].set_index("policy")["update_share"]
    energy_by = energy.set_index("policy")["energy_to_target"]
    idle = split.set_index("policy")["idle %"]
    results = {
        "seeds": seeds,
        "quick": args.quick,
        "policies": {
            name: {
                "slow_share": float(slow[name]),
                "jain_groups": float(fair.loc[name, "jain_groups"]),
                "energy_to_target": float(energy_by[name]),
                "idle_percent": float(idle[name]),
            }
            for name in POLICIES
        },
    }
    out_json = Path(args.results)
    out_json.parent.mkdir(parents=True, exist_ok=True)
    out_json.write_text(json.dumps(results, indent=1) + "\n")
    print(f"\nresults: {out_json}\n\ndocs paragraph:\n{docs_text(results)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    figure = out / "groups_energy.png"
    shutil.copyfile(report / "groups_energy.png", figure)
    print(f"\nfigure: {figure}")
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
