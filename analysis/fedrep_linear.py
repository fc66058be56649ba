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
from _common import claim, parser, save, write_results

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


def fedrep_floors(table: pd.DataFrame) -> list[tuple[int, float, float]]:
    """(n, r, floor) of FedRep's rows."""
    fedrep = table[table.algorithm == "FedRep"]
    return [
        (int(n), float(r), float(f))
        for n, r, f in zip(fedrep.n, fedrep.r, fedrep["floor (median, last 50)"], strict=True)
    ]


def claims(table: pd.DataFrame) -> list[dict[str, str]]:
    """algorithms.md 1.4/6.1: FedRep's floors (to one significant figure), 1e-3 within ~50
    rounds at n=100, r=0.1, and FedAvg stalling far from B*."""
    fedrep = table[table.algorithm == "FedRep"]
    fedavg = table[table.algorithm == "FedAvg"]
    floors = [(n, r, f, REFERENCE_FLOOR[(n, r)]) for n, r, f in fedrep_floors(table)]
    # the references are given to one significant figure: "~1e-4" means within 0.5e-4..1.5e-4
    off = [(n, r, f, ref) for n, r, f, ref in floors if not ref / 2 <= f <= 1.5 * ref]
    within = not off
    by = {(n, r): f for n, r, f, _ in floors}
    scaling = by[(100, 0.1)] / by[(100, 1.0)] if {(100, 0.1), (100, 1.0)} <= set(by) else None
    first = fedrep[(fedrep.n == 100) & (fedrep.r == 0.1)]["rounds to 1e-3"]
    fast = bool(len(first)) and float(first.iloc[0]) <= 50
    stalls = float(fedavg["floor (median, last 50)"].min())
    return [
        claim(
            "FedRep",
            "Alg. 2 (MoM init, exact head, one GD step on B, QR): distance decays linearly "
            "on a log scale to a noise floor (d=20, k=2, m=10, noise std 1e-3)",
            "; ".join(f"n={n}, r={r}: ~{ref:.0e}" for n, r, _, ref in floors)
            + " ([sim] reference, 1 significant figure)",
            "; ".join(f"n={n}, r={r}: {f:.1e}" for n, r, f, _ in floors)
            + f"; 1e-3 reached in {float(first.iloc[0]):.0f} rounds at n=100, r=0.1"
            if len(first)
            else "",
            "reproduced" if within and fast else "qualitative",
            ""
            if within and fast
            else "; ".join(
                f"at n={n}, r={r} ours {f:.1e} vs the reference's ~{ref:.0e}"
                for n, r, f, ref in off
            )
            + (
                f" (ours / the r=1 floor: {scaling:.2f}; 1/sqrt(r) predicts {10**0.5:.2f})"
                if off and scaling
                else ""
            )
            + ("" if fast else "; 1e-3 takes more than 50 rounds"),
        ),
        claim(
            "FedRep",
            "FedAvg (one shared B, w) cannot recover col(B*) when heads differ (Sec. 4)",
            "stalls at a large distance",
            f"FedAvg's distance at the end >= {stalls:.2f}",
            "reproduced" if stalls > 0.5 else "qualitative",
            "" if stalls > 0.5 else "FedAvg got closer than 0.5",
        ),
    ]


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
    fedavg = table[table.algorithm == "FedAvg"]
    write_results(
        args,
        "fedrep_linear",
        {"rounds": rounds, "seeds": len(seeds), "table": table.to_dict(orient="records")},
        claims(table),
        checks="linear FedRep noise floor vs algorithms.md 1.4",
        measured="floor "
        + ", ".join(
            f"{f:.1e} (n={n}, r={r:g}; ref ~{REFERENCE_FLOOR[(n, r)]:.0e})"
            for n, r, f in fedrep_floors(table)
        )
        + f"; FedAvg stays at distance {fedavg['floor (median, last 50)'].min():.2f}, "
        f"test MSE {fedavg['final test_mse'].mean():.2g} ({len(seeds)} seeds)",
    )

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
