"""FedDAR: the effect of the representation dimension k and robustness to the Dirichlet alpha.

Zhong et al., ICLR 2023. The paper studies both on FairFace (Table 1: alpha in {0.1, 0.5, 1,
...}, "the performance of FedDAR-SA is very stable no matter how heterogeneous the domain
mixtures are. However the baselines' accuracy decrease when alpha becomes smaller"; the "effect
of k" figure varies the projection dimension of the ResNet-34 features). FairFace cannot ship
("needs your copy of FairFace"), so both are run on the paper's synthetic domain mixture (the
setting of ``analysis/feddar.py``: n=100 clients, M=5 domains, d=20, m=10 samples per client,
noise std 1e-3, the same step sizes, except FedDAR-SA's step on B, chosen per k by
feddar.py's rule: the lowest final error on a grid on the separate tuning seed 1000), varying

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
from _common import claim, parser, save, tune, write_results

from simfl import Streams, sweep, sweeps
from simfl.algorithms.feddar import FedDAR
from simfl.tasks.domain_mixture import DomainMixture

ALPHAS = (0.1, 0.5, 1.0, 10.0)
KS = (1, 2, 4)
M_SAMPLES = 10
NAMES = (feddar.SA, "FedRep", "FedAvg", "Local-only")
#: FedDAR-SA's step on B is chosen per k by feddar.py's rule: the value of this grid with the
#: lowest final domain MSE (``_common.tune``, score "tail": the median of the last 20
#: evaluations) on the separate tuning seed, at alpha = 0.5 and the run's number of rounds.
#: At k = 2 the rule gives feddar.py's 1.0 (0.5 has not reached the floor after 150 rounds, 4.0
#: diverges to 0.05). The baselines keep feddar.py's steps.
STEP_GRID = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
QUICK_STEP_GRID = (0.5, 1.0, 2.0)
TUNING_SEED = 1000


def cases(alphas: tuple[float, ...], ks: tuple[int, ...]) -> list[tuple[str, float, int]]:
    """(sweep, alpha, k) of every task: alpha at k=2, then k at alpha=0.5 (shared point once)."""
    out = [("alpha", a, 2) for a in alphas]
    out += [("k", 0.5, k) for k in ks if not (k == 2 and 0.5 in alphas)]
    return out


def spec(alpha: float, k: int) -> DomainMixture:
    """The synthetic task of feddar.py with another alpha and k."""
    return dataclasses.replace(feddar.task(M_SAMPLES), alpha=alpha, k=k)


def tuned_steps(ks: tuple[int, ...], rounds: int, grid: tuple[float, ...]) -> dict[int, float]:
    """FedDAR-SA's step on ``B`` for every k, by the rule of :data:`STEP_GRID` (tuning seed)."""
    steps = {}
    for k in ks:
        base = dataclasses.replace(
            feddar.base_scenario(feddar.N_CLIENTS, rounds), task=spec(0.5, k)
        )

        def make(step: float, base=base):  # type: ignore[no-untyped-def]
            return dataclasses.replace(base, algorithm=FedDAR(aggregation="sa", step_size=step))

        steps[k] = float(tune(make, grid, "domain_mse", seeds=(TUNING_SEED,), score="tail"))
    return steps


def experiment(
    alphas: tuple[float, ...],
    ks: tuple[int, ...],
    seeds: tuple[int, ...],
    rounds: int,
    steps: dict[int, float],
    names: tuple[str, ...] = NAMES,
) -> pd.DataFrame:
    """Final domain MSE per (alpha, k, method, seed): the last evaluation of each run.

    FedDAR-SA runs with ``steps[k]`` at every k (:func:`tuned_steps`).
    """
    grid = []
    for _, alpha, k in cases(alphas, ks):
        algs = {key: v for key, v in feddar.methods().items() if key in names}
        if feddar.SA in algs:
            algs[feddar.SA] = FedDAR(aggregation="sa", step_size=steps[k])
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


def longer_run(k: int, step: float, rounds: int, seeds: tuple[int, ...]) -> float:
    """FedDAR-SA's final domain MSE (median over ``seeds``) at alpha = 0.5 after ``rounds``."""
    base = dataclasses.replace(feddar.base_scenario(feddar.N_CLIENTS, rounds), task=spec(0.5, k))
    algs = {feddar.SA: FedDAR(aggregation="sa", step_size=step)}
    cases = sweeps.grid(base, algorithm=algs, seed=list(seeds))
    frame = sweep(cases, workers=1, progress=False).frame.dropna(subset=["domain_mse"])
    return float(frame.groupby("seed")["domain_mse"].last().median())


def head_conditioning(k: int, seeds: tuple[int, ...]) -> float:
    """Median over ``seeds`` of the smallest eigenvalue of ``(1/M) sum_m w_m w_m^T``.

    The gradient step on ``B`` contracts the error along ``col(B*)`` at a rate proportional to
    the eigenvalues of the domain heads' second moment, and the stable step is bounded by the
    largest: with M = 5 unit heads in R^k the smallest one collapses as k approaches M.
    """
    values = []
    for seed in seeds:
        w = spec(0.5, k).build(feddar.N_CLIENTS, Streams(seed)).domain_heads
        values.append(float(np.linalg.eigvalsh(w.T @ w / w.shape[0])[0]))
    return float(np.median(values))


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
    floors_ = t[["best single model", "best client heads"]].min(axis=1)
    t["best floor / SA"] = floors_ / t[feddar.SA]
    return t


def slow_ks(t: pd.DataFrame, ks: tuple[int, ...]) -> list[int]:
    """The k at which FedDAR-SA ends more than 10x above its noise floor (k = 2: 8.6x)."""
    at_a = t.xs(0.5, level="alpha").loc[list(ks)]
    return [k for k in ks if at_a.loc[k, feddar.SA] > 10 * at_a.loc[k, "SA noise floor"]]


def k_story(
    t: pd.DataFrame,
    ks: tuple[int, ...],
    steps: dict[int, float],
    rounds: int,
    longer: dict[int, tuple[int, float]],
) -> str:
    """What the k sweep shows about convergence: which k are at their noise floor, and why not.

    ``longer``: for each slow k, (rounds, final MSE) of a longer run with the same step.
    """
    at_a = t.xs(0.5, level="alpha").loc[list(ks)]
    slow = slow_ks(t, ks)
    text = (
        "the paper's k is a projection dimension on FairFace; here the synthetic B* has k "
        "columns. FedDAR-SA's step on B is chosen per k by feddar.py's rule (lowest final "
        f"error on the grid {STEP_GRID} on tuning seed {TUNING_SEED}): "
        + ", ".join(f"k={k}: {steps[k]:g}" for k in ks)
        + "; the baselines keep feddar.py's steps (their closed-form floors bound what tuning "
        "could give them)"
    )
    if not slow:
        return text + f"; every k ends within 10x its noise floor after {rounds} rounds"
    lam = {k: head_conditioning(k, (0,)) for k in ks}
    parts = []
    for k in slow:
        part = (
            f"at k = {k} FedDAR-SA ends {rounds} rounds at {at_a.loc[k, feddar.SA]:.2g}, "
            f"{at_a.loc[k, feddar.SA] / at_a.loc[k, 'SA noise floor']:.2g}x its noise floor"
        )
        if k in longer:
            n, v = longer[k]
            part += (
                f" (a {n}-round run with the same step ends at {v:.2g}, "
                f"{v / at_a.loc[k, 'SA noise floor']:.2g}x the floor)"
            )
        parts.append(part)
    return (
        text
        + ". Not converged in the reported runs: "
        + "; ".join(parts)
        + ". The step on B contracts each direction of col(B*) at a rate proportional to an "
        "eigenvalue of the domain heads' second moment (1/M) sum w_m w_m^T, whose smallest "
        "eigenvalue (seed 0) is "
        + ", ".join(f"{lam[k]:.2g} (k={k})" for k in ks)
        + ": with M = 5 unit heads in R^k it collapses as k nears M, so larger k needs many "
        "more rounds at any stable step"
    )


def claims(
    t: pd.DataFrame,
    alphas: tuple[float, ...],
    ks: tuple[int, ...],
    steps: dict[int, float],
    rounds: int,
    longer: dict[int, tuple[int, float]],
) -> list[dict[str, str]]:
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
            f"best baseline / FedDAR-SA by k: {row(at_a, 'best baseline / SA')}; best "
            f"baseline floor (closed form) / FedDAR-SA: {row(at_a, 'best floor / SA')}; "
            f"FedDAR-SA {row(at_a, feddar.SA)} vs SA noise floor {row(at_a, 'SA noise floor')} "
            f"({rounds} rounds, step per k)",
            "qualitative",
            k_story(t, ks, steps, rounds, longer),
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
    steps = tuned_steps(ks, rounds, QUICK_STEP_GRID if args.quick else STEP_GRID)
    print(f"FedDAR-SA step on B per k (tuning seed {TUNING_SEED}): {steps}")
    final = experiment(alphas, ks, seeds, rounds, steps, names)
    t = table(final, seeds)
    pd.set_option("display.width", 220)
    print(
        f"final domain MSE (median of {len(seeds)} seed(s), {rounds} rounds, n=100, M=5, "
        f"d=20, m={M_SAMPLES}) and closed-form floors:"
    )
    print(t.to_string(float_format="{:.3g}".format))
    # a k that ends far above its floor: how far a run 4x as long gets (same step and seed)
    longer = {k: (4 * rounds, longer_run(k, steps[k], 4 * rounds, seeds)) for k in slow_ks(t, ks)}
    for k, (n, v) in longer.items():
        print(f"k={k}: FedDAR-SA after {n} rounds (step {steps[k]:g}): {v:.3g}")
    cl = claims(t, alphas, ks, steps, rounds, longer)
    for c in cl:
        print(f"[{c['status']}] {c['claim']}: paper {c['paper_value']}; ours {c['ours']}")
    numbers = {
        "table": [{"alpha": a, "k": k, **row} for (a, k), row in t.to_dict(orient="index").items()],
        "seeds": len(seeds),
        "rounds": rounds,
        "samples_per_client": M_SAMPLES,
        "sa_step_by_k": {str(k): v for k, v in steps.items()},
        "sa_longer_run": {str(k): {"rounds": n, "FedDAR-SA": v} for k, (n, v) in longer.items()},
        "tuning_seed": TUNING_SEED,
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
