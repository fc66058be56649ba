"""FedDAR: the effect of the representation dimension k and robustness to the Dirichlet alpha.

Zhong et al., ICLR 2023. The paper studies both on FairFace (Table 1: alpha in {0.1, 0.5, 1,
...}, "the performance of FedDAR-SA is very stable no matter how heterogeneous the domain
mixtures are. However the baselines' accuracy decrease when alpha becomes smaller"; the "effect
of k" figure varies the projection dimension of the ResNet-34 features). FairFace cannot ship
("needs your copy of FairFace"), so both are run on the paper's synthetic domain mixture (the
setting of ``analysis/feddar.py``: n=100 clients, M=5 domains, d=20, m=10 samples per client,
noise std 1e-3, the same step sizes), varying

* alpha in {0.1, 0.5, 1, 10} at k = 2, and
* the representation dimension k in {1, 2, 4} (true and learned) at alpha = 0.5.

Prints the final equal-weight-per-domain test MSE (one seed, 150 rounds; quick: 60 rounds) of
FedDAR-SA, FedRep, FedAvg and Local-only (quick: without Local-only) beside the closed-form
floors of ``feddar.closed_forms`` (B* known): the best single model (FedAvg's floor), the best
per-client heads (FedRep's floor; it *falls* as alpha -> 0, where each client holds one domain)
and the SA noise floor sigma^2 k / L_m.

    python analysis/feddar_k_alpha.py [--quick] [--results DIR]
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import feddar
from _common import claim, parser, save, write_results

from simfl import Streams, sweep, sweeps
from simfl.tasks.domain_mixture import DomainMixture

ALPHAS = (0.1, 0.5, 1.0, 10.0)
KS = (1, 2, 4)
M_SAMPLES = 10
NAMES = (feddar.SA, "FedRep", "FedAvg", "Local-only")


def cases(alphas: tuple[float, ...], ks: tuple[int, ...]) -> list[tuple[str, float, int]]:
    """(sweep, alpha, k) of every task: alpha at k=2, then k at alpha=0.5 (shared point once)."""
    out = [("alpha", a, 2) for a in alphas]
    out += [("k", 0.5, k) for k in ks if not (k == 2 and 0.5 in alphas)]
    return out


def spec(alpha: float, k: int) -> DomainMixture:
    """The synthetic task of feddar.py with another alpha and k."""
    return dataclasses.replace(feddar.task(M_SAMPLES), alpha=alpha, k=k)


def experiment(
    alphas: tuple[float, ...],
    ks: tuple[int, ...],
    seeds: tuple[int, ...],
    rounds: int,
    names: tuple[str, ...] = NAMES,
) -> pd.DataFrame:
    """Final domain MSE per (alpha, k, method, seed): the last evaluation of each run."""
    algs = {k: v for k, v in feddar.methods().items() if k in names}
    grid = []
    for _, alpha, k in cases(alphas, ks):
        base = dataclasses.replace(
            feddar.base_scenario(feddar.N_CLIENTS, rounds), task=spec(alpha, k)
        )
        for c in sweeps.grid(base, algorithm=algs, seed=list(seeds)):
            grid.append(sweeps.Case(c.scenario, {**c.labels, "alpha": alpha, "k": k}))
    frame = sweep(grid, workers=1, progress=False).frame
    frame = frame.dropna(subset=["domain_mse"])
    keys = ["algorithm", "alpha", "k", "seed"]
    last = frame.groupby(keys, sort=False)["domain_mse"].last()
    return last.reset_index().rename(columns={"algorithm": "method"})


def floors(alpha: float, k: int, seeds: tuple[int, ...]) -> dict[str, float]:
    """``feddar.closed_forms`` for this alpha and k (median over the seeds' tasks)."""
    s = spec(alpha, k)
    rows = []
    for seed in seeds:
        data = s.build(feddar.N_CLIENTS, Streams(seed))
        w = data.domain_heads
        pi = data.mixtures(np.arange(feddar.N_CLIENTS, dtype=np.int64))
        gap = np.sum((w[None, :, :] - (pi @ w)[:, None, :]) ** 2, axis=2)
        totals = data.domain_totals()
        rows.append(
            {
                "best single model": float(np.mean(np.sum((w - w.mean(axis=0)) ** 2, axis=1))),
                "best client heads": float(np.mean((pi * gap).sum(axis=0) / pi.sum(axis=0))),
                "SA noise floor": float(np.mean(s.noise_std**2 * k / totals[totals > 0])),
            }
        )
    return {key: float(np.median([r[key] for r in rows])) for key in rows[0]}


def table(final: pd.DataFrame, seeds: tuple[int, ...]) -> pd.DataFrame:
    """Median final MSE over seeds, one row per (alpha, k), one column per method + floors."""
    t = final.groupby(["alpha", "k", "method"])["domain_mse"].median().unstack("method")
    for (alpha, k), _ in t.iterrows():
        for key, value in floors(alpha, k, seeds).items():
            t.loc[(alpha, k), key] = value
    base = [c for c in ("FedRep", "FedAvg", "Local-only") if c in t.columns]
    t["best baseline / SA"] = t[base].min(axis=1) / t[feddar.SA]
    return t


def claims(t: pd.DataFrame, alphas: tuple[float, ...], ks: tuple[int, ...]) -> list[dict[str, str]]:
    """The paper's claims next to ours."""
    at_k2 = t.xs(2, level="k").loc[list(alphas)]
    at_a = t.xs(0.5, level="alpha").loc[list(ks)]
    sa = at_k2[feddar.SA]

    def row(frame: pd.DataFrame, col: str) -> str:
        return ", ".join(f"{i:g}: {v:.2g}" for i, v in frame[col].items())

    return [
        claim(
            "FedDAR",
            "robustness to alpha (Table 1, FairFace): FedDAR-SA stable for every alpha, the "
            "baselines get worse as alpha gets smaller",
            "accuracies not retrieved; FedDAR-SA stable across alpha",
            f"synthetic, domain MSE by alpha: FedDAR-SA {row(at_k2, feddar.SA)} (max/min "
            f"{sa.max() / sa.min():.2g}); FedRep {row(at_k2, 'FedRep')}; FedAvg "
            f"{row(at_k2, 'FedAvg')}",
            "qualitative",
            "synthetic domain mixture instead of FairFace (needs your copy of FairFace). In the "
            "linear model FedRep's floor falls as alpha -> 0 (each client holds one domain), "
            "so only SA's stability and its lead carry over, not the baselines' trend",
        ),
        claim(
            "FedDAR",
            "effect of k (FairFace, dimension of the projection head)",
            "figure values not retrieved",
            "not run on FairFace",
            "not attempted",
            "needs your copy of FairFace and an ImageNet-pretrained ResNet-34",
        ),
        claim(
            "FedDAR",
            "synthetic stand-in for the effect of k: FedDAR-SA keeps its lead over the "
            "baselines for every representation dimension k (Sec. 5.1 setting)",
            "~4 orders of magnitude below the baselines at k = 2 (Fig. 2)",
            f"best baseline / FedDAR-SA by k: {row(at_a, 'best baseline / SA')}; FedDAR-SA "
            f"{row(at_a, feddar.SA)} vs SA noise floor {row(at_a, 'SA noise floor')}",
            "qualitative",
            "the paper's k is a projection dimension on FairFace; here the synthetic B* has "
            "k columns. The step sizes tuned at k = 2 are kept for every k: at k = 4 FedDAR-SA "
            "converges much more slowly and is not at its noise floor when the run ends (a "
            "one-off check with step 2.0 instead of 1.0 reached 5e-3 after 150 rounds, still "
            "falling)",
        ),
    ]


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--results", default=None, help="directory of the results file")
    args = p.parse_args()
    alphas = (0.1, 10.0) if args.quick else ALPHAS
    ks = (1, 2) if args.quick else KS
    seeds = (0,)  # one seed: the ratios are orders of magnitude (2 shared cores)
    rounds = 60 if args.quick else 150
    names = (feddar.SA, "FedRep", "FedAvg") if args.quick else NAMES
    final = experiment(alphas, ks, seeds, rounds, names)
    t = table(final, seeds)
    pd.set_option("display.width", 220)
    print(
        f"final domain MSE (median of {len(seeds)} seed(s), {rounds} rounds, n=100, M=5, "
        f"d=20, m={M_SAMPLES}) and closed-form floors:"
    )
    print(t.to_string(float_format="{:.3g}".format))
    cl = claims(t, alphas, ks)
    for c in cl:
        print(f"[{c['status']}] {c['claim']}: paper {c['paper_value']}; ours {c['ours']}")
    numbers = {
        "table": [{"alpha": a, "k": k, **row} for (a, k), row in t.to_dict(orient="index").items()],
        "seeds": len(seeds),
        "rounds": rounds,
        "samples_per_client": M_SAMPLES,
    }
    write_results(
        args,
        "feddar_k_alpha",
        numbers,
        cl,
        checks="FedDAR robustness to alpha in {0.1, 0.5, 1, 10} and effect of k in "
        "{1, 2, 4} (synthetic domain mixture)",
        measured="; ".join(c["ours"] for c in cl if c["ours"] and c["status"] != "not attempted"),
    )
    figure(t, alphas, ks, args.out)


def figure(t: pd.DataFrame, alphas: tuple[float, ...], ks: tuple[int, ...], out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.3))
    methods = [c for c in NAMES if c in t.columns]
    for ax, sub, x, xlabel in (
        (axes[0], t.xs(2, level="k").loc[list(alphas)], "alpha", "Dirichlet alpha (k = 2)"),
        (axes[1], t.xs(0.5, level="alpha").loc[list(ks)], "k", "representation dim k (alpha=0.5)"),
    ):
        for name in methods:
            ax.plot(sub.index, sub[name], marker="o", label=name)
        ax.plot(sub.index, sub["SA noise floor"], ls=":", color="grey", label="SA noise floor")
        ax.set(yscale="log", xlabel=xlabel, ylabel="final domain MSE")
        if x == "alpha":
            ax.set_xscale("log")
    axes[0].legend(fontsize="small")
    fig.suptitle("FedDAR synthetic: robustness to alpha and effect of k")
    fig.tight_layout()
    print(f"figure: {save(fig, out, 'feddar_k_alpha')}")


if __name__ == "__main__":
    main()
