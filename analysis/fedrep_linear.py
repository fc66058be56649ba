"""FedRep on the linear representation task (FedRep Alg. 2), against algorithms.md section 1.4.

Setting: d=20, k=2, m=10 fresh samples per client per round, noise std 1e-3, ||w_i*|| = sqrt(k),
method-of-moments initialisation, step 0.25, QR after averaging; an Exp(1) fleet (speeds re-drawn
every round), WaitAll over a fraction r of n clients. Reference [sim] (an independent
re-implementation): the distance falls from about 0.4 (n=100 MoM) to a noise floor of about
1e-4 within about 50 rounds for n=100, r=0.1; the floor is about 6e-5 at n=100, r=1 and about
2e-5 at n=1000, r=1. FedAvg (one shared (B, w)) is shown for contrast.

Prints ours vs the reference and saves distance vs rounds and vs simulated time.

    python analysis/fedrep_linear.py [--quick]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import parser, save

from simfl import Fleet, Scenario, algorithms, dists, policies, run, tasks

REFERENCE_FLOOR = {(100, 0.1): 1e-4, (100, 1.0): 6e-5, (1000, 1.0): 2e-5}


def scenario(alg, n: int, r: float, rounds: int, seed: int) -> Scenario:
    return Scenario(
        name=f"{alg.name} n={n} r={r}",
        task=tasks.LinearRepresentation(d=20, k=2, samples_per_client=10, noise_std=1e-3),
        algorithm=alg,
        fleet=Fleet.homogeneous(n, compute=dists.Exponential(mean=1.0)),
        policy=policies.WaitAll(fraction=r),
        rounds=rounds,
        seed=seed,
    )


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    rounds = 80 if args.quick else 200
    seeds = range(1) if args.quick else range(5)
    settings = [(100, 0.1), (100, 1.0)] if args.quick else list(REFERENCE_FLOOR)
    frames, rows = [], []
    for n, r in settings:
        for alg in (algorithms.FedRep(), algorithms.FedAvg()):
            for seed in seeds:
                res = run(scenario(alg, n, r, rounds, seed), progress=False)
                df = res.rounds[["round", "time", "distance", "test_mse"]].assign(
                    algorithm=alg.name, setting=f"n={n}, r={r}", seed=seed
                )
                frames.append(df)
                below = np.flatnonzero(df["distance"].to_numpy() < 1e-3)
                rows.append(
                    {
                        "algorithm": alg.name,
                        "n": n,
                        "r": r,
                        "seed": seed,
                        "initial distance": res.meta["initial_metrics"]["distance"],
                        "rounds to 1e-3": int(below[0]) + 1 if below.size else np.nan,
                        "time to 1e-3 (s)": df["time"].iloc[below[0]] if below.size else np.nan,
                        "floor (median, last 50)": df["distance"].iloc[-50:].median(),
                        "final test_mse": df["test_mse"].iloc[-1],
                    }
                )
    table = (
        pd.DataFrame(rows)
        .groupby(["algorithm", "n", "r"], sort=False)
        .mean(numeric_only=True)
        .drop(columns="seed")
        .reset_index()
    )
    table["reference floor"] = [
        REFERENCE_FLOOR.get((n, r), np.nan) if a == "FedRep" else np.nan
        for a, n, r in zip(table.algorithm, table.n, table.r, strict=True)
    ]
    pd.set_option("display.width", 160)
    print(f"mean over {len(seeds)} seed(s), {rounds} rounds:")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3g}"))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    data = pd.concat(frames, ignore_index=True)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, x, label in ((axes[0], "round", "round"), (axes[1], "time", "simulated time (s)")):
        sns.lineplot(
            data=data,
            x=x,
            y="distance",
            hue="setting",
            style="algorithm",
            units="seed",
            estimator=None,
            alpha=0.6,
            lw=1,
            ax=ax,
            legend=ax is axes[1],
        )
        ax.set(yscale="log", xlabel=label, ylabel="principal-angle distance to B*")
    axes[1].set_xscale("log")
    fig.suptitle(
        "Linear FedRep vs FedAvg (d=20, k=2, m=10, Exp(1) fleet, wait-all; one line per seed)"
    )
    print(f"figure: {save(fig, args.out, 'fedrep_linear')}")


if __name__ == "__main__":
    main()
