"""Straggler policies side by side on one seeded fleet, training linear FedRep.

Fleet: 100 devices whose compute time per round is Exp(1) scaled by a persistent per-device
factor drawn from a log-normal with mean 1 and std 1 (some devices are reliably slow), 50 ms
latency per transfer and a 2% per-second dropout hazard while busy. Task: linear FedRep, d=20,
k=2, m=10 fresh samples, noise std 1e-3. Every policy draws on the same fleet and seeds:

    wait-all            WaitAll(count=20)
    deadline            Deadline(2 s, count=20)
    adaptive-deadline   AdaptiveDeadline(0.8 quantile of recent jobs, count=20)
    fastest-k           FastestK(k=10 of 20 started)
    over-selection      FastestK(k=20, overcommit=0.3): start 26, keep the first 20
    fedbuff             FedBuff(buffer 10, 20 jobs in flight)
    srpfl               SRPFL(n0=5, pools of 20 per stage, tau_r=10)

Prints time to a principal-angle distance of 1e-3 (mean over seeds, bootstrap 95% CI) and the
speedup over wait-all; saves distance vs simulated time and a Gantt chart of a deadline run.

    python analysis/policy_shootout.py [--quick] [--seeds S]
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import parser, save, write_results

from simfl import (
    Fleet,
    Scenario,
    algorithms,
    compare,
    dists,
    plots,
    policies,
    run,
    sweep,
    sweeps,
    tasks,
)

TARGET = 1e-3

POLICIES = {
    "wait-all": policies.WaitAll(count=20),
    "deadline": policies.Deadline(2.0, count=20),
    "adaptive-deadline": policies.AdaptiveDeadline(quantile=0.8, count=20),
    "fastest-k": policies.FastestK(k=10, overcommit=1.0),
    "over-selection": policies.FastestK(k=20, overcommit=0.3),
    "fedbuff": policies.FedBuff(buffer_size=10, concurrency=20),
    "srpfl": policies.SRPFL(n0=5, count=20, rounds_per_stage=10),
}


def fleet() -> Fleet:
    return Fleet.homogeneous(
        100,
        compute=dists.Exponential(mean=1.0),
        scale=dists.LogNormal.from_mean_std(mean=1.0, std=1.0),
        latency=0.05,
        dropout_rate=0.02,
        seed=7,
    )


def base(rounds: int) -> Scenario:
    return Scenario(
        name="shootout",
        task=tasks.LinearRepresentation(d=20, k=2, samples_per_client=10, noise_std=1e-3),
        algorithm=algorithms.FedRep(),
        fleet=fleet(),
        policy=POLICIES["wait-all"],
        rounds=rounds,
    )


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=None)
    args = p.parse_args()
    seeds = args.seeds or (3 if args.quick else 10)
    rounds = 150 if args.quick else 300
    cases = sweeps.grid(base(rounds), policy=POLICIES, seed=range(seeds))
    frame = sweep(cases, progress=False).frame.drop(columns="run_id")
    table = compare.summarize_targets(frame, "distance", below=TARGET, by="policy")
    speed = compare.speedup(frame, "distance", below=TARGET, baseline="wait-all", by="policy")
    table = table.merge(speed[["policy", "speedup"]], on="policy")
    table = table.rename(columns={"ci_low": "time ci_low", "ci_high": "time ci_high"})
    speed = speed.rename(columns={"ci_low": "speedup ci_low", "ci_high": "speedup ci_high"})
    table = table.merge(speed[["policy", "speedup ci_low", "speedup ci_high"]], on="policy")
    pd.set_option("display.width", 200)
    print(
        f"time to distance <= {TARGET:g} (simulated s) over {seeds} seeds; speedup vs wait-all "
        f"with a paired bootstrap 95% CI"
    )
    cols = [
        "policy",
        "reached",
        "mean_time",
        "time ci_low",
        "time ci_high",
        "mean_rounds",
        "speedup",
        "speedup ci_low",
        "speedup ci_high",
        "final",
    ]
    print(
        table[cols]
        .sort_values("mean_time")
        .to_string(index=False, float_format=lambda v: f"{v:.4g}")
    )
    ranked = table.sort_values("mean_time")
    write_results(
        args,
        "policy_shootout",
        {"seeds": seeds, "rounds": rounds, "table": table[cols].to_dict(orient="records")},
        [],
        checks=f"{len(POLICIES)} policies on one seeded fleet, time to distance {TARGET:g}",
        measured="speedup over wait-all: "
        + ", ".join(
            f"{p} {s:.2g}x [{lo:.2g}, {hi:.2g}]"
            for p, s, lo, hi in zip(
                ranked["policy"],
                ranked["speedup"],
                ranked["speedup ci_low"],
                ranked["speedup ci_high"],
                strict=True,
            )
            if p != "wait-all"
        )
        + f" ({seeds} seeds, 95% paired bootstrap CIs)",
    )

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    plots.metric_vs_time(frame, "distance", by="policy", ax=ax, target=TARGET)
    ax.set_xlim(0, 2.0 * table.loc[table["reached"] > 0, "mean_time"].max())
    ax.set_title("Linear FedRep under straggler policies (100 devices, one seeded fleet)")
    print(f"figure: {save(fig, args.out, 'policy_shootout')}")
    deadline_run = run(cases[1 * seeds].scenario, progress=False)  # the "deadline" policy
    fig, ax = plt.subplots(figsize=(9, 6))
    plots.gantt(deadline_run, rounds=range(3), ax=ax)
    print(f"figure: {save(fig, args.out, 'gantt_deadline')}")


if __name__ == "__main__":
    main()
