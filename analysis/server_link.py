"""How the cloud's ingress capacity changes time-to-accuracy, flat vs edge aggregation.

200 always-online devices behind 5 edge servers (40 per edge), linear FedRep with d=200, k=4
(a 6.4 KB representation each way), 40 devices per round, device uplinks 20 KB/s, edge links to
the cloud 100 KB/s up. The cloud's ingress link is shared by every upload that reaches it: 40
device uploads per round with flat aggregation (WaitAll), 5 edge aggregates with
EdgeAggregation. Sweeping its capacity shows where the shared link becomes the bottleneck
(time to target grows as 1/capacity) and how much edge aggregation relieves it.

Prints the time to a principal-angle distance of 1e-3 (mean over seeds, bootstrap CI) and the
mean round time per capacity, and saves the figure.

    python analysis/server_link.py [--quick] [--seeds S]
"""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import parser, save, write_results

from simfl import Fleet, Scenario, algorithms, compare, dists, plots, policies, sweep, sweeps, tasks
from simfl.network import Network

TARGET = 1e-3
CAPACITIES = (2e3, 5e3, 1e4, 2e4, 5e4, 1e5, math.inf)


def base(rounds: int) -> Scenario:
    return Scenario(
        task=tasks.LinearRepresentation(d=200, k=4, samples_per_client=20, noise_std=1e-3),
        algorithm=algorithms.FedRep(),
        fleet=Fleet.homogeneous(
            200,
            compute=dists.LogNormal.from_mean_std(5.0, 3.0),
            bandwidth_down=200e3,
            bandwidth_up=20e3,
            latency=0.05,
        ),
        policy=policies.WaitAll(count=40),
        rounds=rounds,
        eval_every=2,
    )


def network(capacity: float) -> Network:
    return Network.hierarchical(
        np.arange(200) % 5,
        edge_up=100e3,
        edge_down=1e6,
        edge_latency=0.02,
        server_up=capacity,
        server_down=1e6,
    )


def experiment(capacities, seeds: int, rounds: int) -> pd.DataFrame:  # type: ignore[no-untyped-def]
    cases = []
    for cap in capacities:
        for label, pol in (
            ("flat (wait-all)", policies.WaitAll(count=40)),
            ("edge aggregation", policies.EdgeAggregation(count=40)),
        ):
            for seed in range(seeds):
                sc = dataclasses.replace(
                    base(rounds),
                    policy=pol,
                    network=network(cap),
                    seed=seed,
                    name=f"{label} {cap:g}",
                )
                cases.append(sweeps.Case(sc, {"policy": label, "capacity": cap, "seed": seed}))
    return sweep(cases, progress=False).frame.drop(columns="run_id")


def summarize(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.assign(group=frame["policy"] + "|" + frame["capacity"].astype(str))
    table = compare.summarize_targets(frame, "distance", below=TARGET, by="group")
    table[["policy", "capacity"]] = table["group"].str.split("|", expand=True)
    table["capacity"] = table["capacity"].astype(float)
    rounds = frame[frame["round"] >= 0].groupby(["policy", "capacity"])["duration"].mean()
    table = table.join(rounds.rename("mean round (s)"), on=["policy", "capacity"])
    return table.drop(columns="group")


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=None)
    args = p.parse_args()
    capacities = (5e3, 5e4, math.inf) if args.quick else CAPACITIES
    seeds = args.seeds or (1 if args.quick else 3)
    rounds = 80 if args.quick else 120
    frame = experiment(capacities, seeds, rounds)
    table = summarize(frame)
    pd.set_option("display.width", 160)
    print(
        f"time to distance <= {TARGET:g} (simulated s), mean over {seeds} seeds, by cloud "
        f"ingress capacity (bytes/s)"
    )
    cols = [
        "policy",
        "capacity",
        "reached",
        "mean_time",
        "ci_low",
        "ci_high",
        "mean_rounds",
        "mean round (s)",
    ]
    print(table[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    cap = lambda c: "no limit" if math.isinf(c) else f"{c / 1e3:g} KB/s"  # noqa: E731
    by_cap = {
        c: dict(zip(t["policy"], t["mean_time"], strict=True))
        for c, t in table.groupby("capacity", sort=True)
    }
    write_results(
        args,
        "server_link",
        {"seeds": seeds, "rounds": rounds, "table": table[cols].to_dict(orient="records")},
        [],
        checks=f"time to distance {TARGET:g} vs the cloud ingress capacity, flat vs edge "
        "aggregation (200 devices, 5 edges, 40 per round)",
        measured=f"{seeds} seeds: "
        + "; ".join(
            f"{cap(c)}: " + ", ".join(f"{p} {v:,.0f} s" for p, v in times.items())
            for c, times in by_cap.items()
        ),
    )

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.3))
    ax = axes[0]
    for label, t in table.groupby("policy", sort=False):
        t = t.sort_values("capacity")
        x = t["capacity"].replace(math.inf, 1e7)
        err = np.vstack([t["mean_time"] - t["ci_low"], t["ci_high"] - t["mean_time"]])
        ax.errorbar(
            x, t["mean_time"], yerr=np.clip(err, 0, None), marker="o", capsize=3, label=label
        )
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="cloud ingress capacity (bytes/s; right: no limit)",
        ylabel=f"time to distance {TARGET:g} (simulated s)",
        title="Shared cloud link: time to accuracy",
    )
    ax.legend()
    ax.grid(alpha=0.3)
    slow = frame[frame["capacity"] == min(capacities)]
    plots.metric_vs_time(slow, "distance", by="policy", ax=axes[1], target=TARGET)
    axes[1].set_title(f"Distance vs time at {min(capacities):g} bytes/s")
    fig.tight_layout()
    print(f"figure: {save(fig, args.out, 'server_link')}")


if __name__ == "__main__":
    main()
