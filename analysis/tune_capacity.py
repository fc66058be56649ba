"""Capacity planning on a device trace: the cohort and deadline with the most updates per hour.

Fleet: the FedScale-format sample trace shipped with simfl (:func:`simfl.fleet.sample_trace`:
40 clients, each with its own compute speed and bandwidth, online only during the intervals of
its two-day behaviour trace), read with ``samples_per_unit=200`` (about a minute of compute per
job for the median client) and 0.5 s of latency per transfer. The trace gives each client one
speed; each job's compute time varies around it (log-normal, mean 1, std 0.3, times the
client's trace speed), so seeds differ. No training (``TimingOnly``: 2 MB down and up per
job), four simulated hours per run (``max_time``).

The question: which ``Deadline(seconds, count=...)`` gives the most arrived updates per
simulated hour while 95% of rounds last at most 60 s? Knobs ``policy.count`` in 2..40 and
``policy.seconds`` in 10..300 s (log scale); objective :class:`~simfl.tuning.UpdatesPerHour`,
constraint ``RoundTime(0.95) <= 60``. At most 21 of the 40 clients are online at once in those
four hours, so every cohort size above that selects the same devices: the search warns that
the cohort is capped.

Writes ``analysis/results/tune_capacity.json`` (a ``--quick`` run writes beside its figure in
``--out`` instead); ``analysis/tune_docs.py`` renders the numbers of ``docs/policy-search.md``
from it.

    python analysis/tune_capacity.py [--quick] [--store DIR]
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import parser
from _tune_common import write

import simfl
from simfl import Fleet, Scenario, algorithms, dists, policies, tuning
from simfl.engine import simfl_version
from simfl.fleet import Availability, fleet_from_fedscale, sample_trace

#: Four simulated hours per run.
HORIZON = 4 * 3600.0
KNOBS: dict[str, tuning.Knob] = {
    "policy.count": tuning.Int(2, 40),
    "policy.seconds": tuning.Float(10.0, 300.0, log=True),
}
OBJECTIVE = tuning.UpdatesPerHour()
CONSTRAINT = tuning.Constraint(tuning.RoundTime(0.95), at_most=60.0)
#: Full size: seeds and trials; --quick: a handful.
SEEDS, TRIALS = 4, 40
QUICK = {"seeds": 2, "trials": 4, "horizon": 600.0}


def fleet() -> Fleet:
    """The sample trace's 40 clients, each job's compute time varying around its trace speed."""
    traced = fleet_from_fedscale(*sample_trace(), samples_per_unit=200, latency=0.5)
    return Fleet(
        [dists.LogNormal.from_mean_std(1.0, 0.3)],
        traced.group,
        scale=traced.scale,
        bandwidth_down=traced.bandwidth_down,
        bandwidth_up=traced.bandwidth_up,
        latency=traced.latency,
        availability=traced.availability,
        offline=traced.offline,
        group_names=["trace"],
    )


def base(horizon: float = HORIZON) -> Scenario:
    """The scenario whose cohort and deadline are searched (see the module docstring)."""
    return Scenario(
        task=None,
        algorithm=algorithms.TimingOnly(bytes_down=2_000_000, bytes_up=2_000_000),
        fleet=fleet(),
        policy=policies.Deadline(30, count=10),
        max_time=horizon,
        name="capacity",
    )


def most_online(availability: Availability, horizon: float) -> int:
    """The most devices online at the same time within ``[0, horizon)``."""
    events: list[tuple[float, int]] = []
    for d in range(availability.size):
        starts, ends = availability.intervals(d)
        for s, e in zip(starts, ends, strict=True):
            if s < horizon and e > 0:
                events += [(max(float(s), 0.0), 1), (min(float(e), horizon), -1)]
    online = peak = 0
    for _, step in sorted(events, key=lambda ev: (ev[0], ev[1])):  # an end before a start
        online += step
        peak = max(peak, online)
    return peak


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--store", default=None, help="results store (default: a temporary one)")
    args = p.parse_args()
    size = QUICK if args.quick else {"seeds": SEEDS, "trials": TRIALS, "horizon": HORIZON}
    scenario = base(size["horizon"])
    assert scenario.fleet.availability is not None
    scratch = None if args.store else tempfile.mkdtemp(prefix="tune_capacity-")
    store = Path(args.store or scratch) / "store"  # type: ignore[arg-type]

    started = time.perf_counter()
    out = simfl.tune(
        scenario,
        KNOBS,
        OBJECTIVE,
        constraints=[CONSTRAINT],
        seeds=range(size["seeds"]),
        trials=size["trials"],
        store=store,
        executor="inline",
        progress=False,
    )
    wall = time.perf_counter() - started
    print(out.summary())
    trials = out.trials
    name, cname = OBJECTIVE.name, CONSTRAINT.name
    best: dict[str, Any] = {}
    if out.best:
        ev = out.best[0]
        row = trials[trials["trial"] == ev.trial].iloc[0]
        best = {
            "trial": ev.trial,
            "count": int(ev.params["policy.count"]),
            "seconds": float(ev.params["policy.seconds"]),
            "search": {k: ev.search[name][k] for k in ("mean", "ci_low", "ci_high", "reached")},
            "fresh": {k: ev.fresh[name][k] for k in ("mean", "ci_low", "ci_high", "reached")},
            "fresh_per_seed": ev.fresh[name]["per_seed"],
            "constraint_search": float(row[cname]),
            "constraint_fresh": float(ev.fresh_constraints[cname]["value"]),
            "constraint_fresh_met": bool(ev.fresh_constraints[cname]["met"]),
        }
    complete = trials[trials["state"] == "complete"]
    feasible = trials[trials["feasible"]].sort_values(name, ascending=False)
    numbers = {
        "scenario": (
            "FedScale-format sample trace (40 clients, availability replayed), "
            "samples_per_unit=200, latency 0.5 s, each job's compute x LogNormal(mean 1, std "
            f"0.3); TimingOnly, 2 MB each way; {size['horizon'] / 3600:g} simulated hours per run"
        ),
        "hours": size["horizon"] / 3600,
        "devices": scenario.fleet.size,
        "most_online": most_online(scenario.fleet.availability, size["horizon"]),
        "largest_cohort": int(out.store.rounds()["n_selected"].max()) if out.store else None,
        "knobs": {p: repr(k) for p, k in KNOBS.items()},
        "objective": name,
        "constraint": cname,
        "seeds": list(out.seeds),
        "fresh_seeds": list(out.fresh_seeds),
        "trials": len(trials),
        "complete": len(complete),
        "pruned": int((trials["state"] == "pruned").sum()),
        "feasible_trials": len(feasible),
        "infeasible_trials": int((complete[cname] > CONSTRAINT.at_most).sum()),
        "used": out.used,
        "runs": out.runs,
        "fresh_runs": len(out.fresh_seeds) * len(out.best),
        "best": best,
        "top": [
            {
                "trial": int(t["trial"]),
                "count": int(t["policy.count"]),
                "seconds": float(t["policy.seconds"]),
                "value": float(t[name]),
                "round_time": float(t[cname]),
            }
            for _, t in feasible.head(5).iterrows()
        ],
        "trials_table": [
            {
                "trial": int(t["trial"]),
                "count": int(t["policy.count"]),
                "seconds": float(t["policy.seconds"]),
                "value": float(t[name]),
                "round_time": float(t[cname]),
                "state": t["state"],
                "seeds_run": int(t["seeds_run"]),
                "feasible": bool(t["feasible"]),
            }
            for _, t in trials.iterrows()
        ],
        "warnings": list(out.warnings),
        "summary": out.summary().replace(str(store), "<store>"),
        "wall_seconds": wall,
        "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} CPUs",
        "versions": {"simfl": simfl_version(), "optuna": __import__("optuna").__version__},
    }
    print(
        f"\n{len(trials)} trials, {out.runs} runs in {wall:.0f} s; at most "
        f"{numbers['most_online']} of {numbers['devices']} devices online at once; no round "
        f"selected more than {numbers['largest_cohort']}"
    )
    write(args, "tune_capacity", numbers)
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
