"""FedDAR Fig. 2: domain-mixed linear regression, FedDAR-SA vs FedAvg, FedRep and Local-only.

Zhong et al., "FedDAR: Federated Domain-Aware Representation Learning", ICLR 2023, Section 5.1.
Paper setting: n=100 clients, M=5 domains, k=2, 5..20 training samples per client, label noise
1e-3, pi_i ~ Dir(alpha p). Paper claim [seed]: FedDAR-SA reaches an error "four orders of
magnitude" below Local-only, FedAvg and FedRep; FedDAR-WA "fails to converge". Not in the paper
(our choices, see simfl/tasks/domain_mixture.py): d=20, alpha=0.5, unit-norm heads, noise std
1e-3, a fixed training set per client, clean test labels, 200 rounds of full participation
(wait-all on an Exp(1) fleet, so every round costs the slowest of the 100 clients).

Step sizes (picked on a grid on seed 1000, kept apart from the reported seeds): FedDAR 1.0 on B
(GD head solver: 5 steps of 0.1 from the server head), FedRep 0.25, FedAvg 5 local steps of 0.1.
FedDAR-WA is run with both local head solvers: minimum-norm least squares and GD steps.

Prints the final equal-weight-per-domain test MSE (the paper's objective), ours beside the
paper's ratio and the closed forms, what WA does with each solver, and simulated times; repeats
SA, WA and the baselines with the paper's sigma=1e-3 read as a variance instead of a standard
deviation; saves error vs samples per client, and error vs rounds and vs simulated time for m=10.

    python analysis/feddar.py [--quick]
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import claim, parser, save, write_results

from simfl import Fleet, Scenario, Streams, algorithms, compare, dists, policies, sweep, sweeps
from simfl.algorithms.feddar import FedDAR
from simfl.tasks.domain_mixture import DomainMixture

N_CLIENTS = 100
SAMPLES = (5, 8, 10, 12, 15, 20)
ROUNDS = 200
PAPER_ORDERS = 4.0  # "four orders of magnitude" [seed]
SA = "FedDAR-SA"
WA_LSTSQ = "FedDAR-WA (min-norm heads)"
WA_GD = "FedDAR-WA (GD heads)"
SA_GD = "FedDAR-SA (GD heads)"
BASELINES = ("FedRep", "FedAvg", "Local-only")
FOCUS_M = 10  # the setting of the vs-rounds and vs-time panels


def methods() -> dict[str, algorithms.Algorithm]:  # type: ignore[type-arg]
    """The compared algorithms, by the label used in tables and figures."""
    return {
        SA: FedDAR(aggregation="sa", step_size=1.0),
        WA_LSTSQ: FedDAR(aggregation="wa", step_size=1.0),
        SA_GD: FedDAR(aggregation="sa", head_solver="gd", step_size=1.0),
        WA_GD: FedDAR(aggregation="wa", head_solver="gd", step_size=1.0),
        "FedRep": algorithms.FedRep(step_size=0.25),
        "FedAvg": algorithms.FedAvg(step_size=0.1, local_steps=5),
        "Local-only": algorithms.LocalOnly(),
    }


def task(m: int, noise_std: float = 1e-3) -> DomainMixture:
    """The paper's task with ``m`` training samples per client."""
    return DomainMixture(
        d=20, k=2, n_domains=5, samples_per_client=m, alpha=0.5, noise_std=noise_std
    )


def base_scenario(n: int, rounds: int) -> Scenario:
    return Scenario(
        name="feddar",
        task=task(10),
        algorithm=FedDAR(),
        fleet=Fleet.homogeneous(n, compute=dists.Exponential(mean=1.0)),
        policy=policies.WaitAll(),
        rounds=rounds,
        eval_every=5,
    )


def experiment(
    samples=SAMPLES,  # type: ignore[no-untyped-def]
    seeds=(0, 1, 2),
    rounds: int = ROUNDS,
    n: int = N_CLIENTS,
    names=None,
    workers: int = 2,
    noise_std: float = 1e-3,
) -> pd.DataFrame:
    """Tidy rounds of every (method, samples per client, seed), with the initial row."""
    algs = methods()
    if names is not None:
        algs = {k: algs[k] for k in names}
    cases = sweeps.grid(
        base_scenario(n, rounds),
        algorithm=algs,
        task={m: task(m, noise_std) for m in samples},
        seed=list(seeds),
    )
    frame = sweep(cases, workers=workers, progress=False).frame.drop(columns="run_id")
    return frame.rename(columns={"algorithm": "method", "task": "m"})


def final_errors(frame: pd.DataFrame, metric: str = "domain_mse") -> pd.DataFrame:
    """Final ``metric`` (last evaluation) per method and m: median over seeds."""
    last = frame.dropna(subset=[metric]).groupby(["method", "m", "seed"], sort=False)[metric].last()
    return last.groupby(["method", "m"], sort=False).median().unstack("m")


def wa_behaviour(frame: pd.DataFrame, metric: str = "domain_mse") -> pd.DataFrame:
    """For each FedDAR variant: error at half the rounds, at the end, and their ratio."""
    rows = []
    for (method, m), df in frame.dropna(subset=[metric]).groupby(["method", "m"], sort=False):
        if not str(method).startswith("FedDAR"):
            continue
        half = df["round"].max() // 2
        at_half = df[df["round"] <= half].groupby("seed")[metric].last().median()
        final = df.groupby("seed")[metric].last().median()
        rows.append({"method": method, "m": m, "half": at_half, "final": final})
    out = pd.DataFrame(rows)
    out["final/half"] = out["final"] / out["half"]
    return out


def closed_forms(m: int, n: int = N_CLIENTS, seeds=(0,)) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Population floors with ``B*`` known, median over the tasks of ``seeds``.

    ``best single model``: ``(1/M) sum_m ||w_m* - mean w*||^2``, the least domain MSE of any one
    shared model (FedAvg). ``best client heads``: the domain MSE of each client using the head
    ``sum_m pi_im w_m*`` (the best per-client head under its mixture; FedRep's floor).
    ``SA noise floor``: ``sigma^2 k / L_m`` averaged over domains, the error of pooled least
    squares with ``B*`` known.
    """
    spec = task(m)
    rows = []
    for seed in seeds:
        data = spec.build(n, Streams(seed))
        w = data.domain_heads
        single = float(np.mean(np.sum((w - w.mean(axis=0)) ** 2, axis=1)))
        pi = data.mixtures(np.arange(n, dtype=np.int64))  # (n, M)
        client_heads = pi @ w  # (n, k)
        gap = np.sum((w[None, :, :] - client_heads[:, None, :]) ** 2, axis=2)  # (n, M)
        per_domain = (pi * gap).sum(axis=0) / pi.sum(axis=0)
        totals = data.domain_totals()
        noise = spec.noise_std**2 * spec.k / totals[totals > 0]
        rows.append(
            {
                "best single model": single,
                "best client heads": float(np.mean(per_domain)),
                "SA noise floor": float(np.mean(noise)),
            }
        )
    return {key: float(np.median([r[key] for r in rows])) for key in rows[0]}


def time_table(frame: pd.DataFrame, m: int, target: float = 1e-4) -> pd.DataFrame:
    """Simulated time (Exp(1) fleet) per method at ``m``: per round, total, and to ``target``."""
    sub = frame[frame["m"] == m]
    t = compare.targets(sub, "domain_mse", below=target, by="method")
    per_round = sub[sub["round"] >= 0].groupby(["method", "seed"])["duration"].mean()
    t["s/round"] = [per_round[(a, s)] for a, s in zip(t["method"], t["seed"], strict=True)]
    cols = ["s/round", "end_time", "rounds_to_target", "time_to_target"]
    return t.groupby("method", sort=False)[cols].median()


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    samples = (5, FOCUS_M, 20) if args.quick else SAMPLES
    seeds = (0,) if args.quick else (0, 1, 2)
    rounds = 100 if args.quick else ROUNDS
    frame = experiment(samples, seeds, rounds)
    pd.set_option("display.width", 170)
    fmt = "{:.3g}".format

    table = final_errors(frame)
    print(f"final domain MSE (median of {len(seeds)} seed(s), {rounds} rounds):")
    print(table.to_string(float_format=fmt))
    ratio = table.loc[list(BASELINES)].min(axis=0) / table.loc[SA]
    print("\nbest baseline / FedDAR-SA, ours vs paper:")
    for m, r in ratio.items():
        print(
            f"  m={m:>2}: {r:9.3g} = 10^{np.log10(r):.1f}  (paper: ~10^{PAPER_ORDERS:.0f});"
            f"  >= 1000: {'yes' if r >= 1e3 else 'NO'}"
        )
    print(f"\nclosed forms (B* known, median over the {len(seeds)} task(s)) vs ours:")
    for m in samples:
        cf = closed_forms(m, seeds=seeds)
        print(
            f"  m={m:>2}: best single model {cf['best single model']:.3g} (FedAvg ours "
            f"{table.loc['FedAvg', m]:.3g}); best client heads {cf['best client heads']:.3g} "
            f"(FedRep ours {table.loc['FedRep', m]:.3g}); SA noise floor "
            f"{cf['SA noise floor']:.2g} (FedDAR-SA ours {table.loc[SA, m]:.2g})"
        )
    wa = wa_behaviour(frame)
    print("\nFedDAR variants: error at half the rounds and at the end (final/half ~ 1: settled)")
    print(wa.to_string(index=False, float_format=fmt))
    for label in (WA_LSTSQ, WA_GD):
        r = (table.loc[label] / table.loc[SA]).to_numpy()
        print(f"  {label} / FedDAR-SA over m: {', '.join(fmt(v) for v in r)}")
    print(f"\nsimulated time, Exp(1) fleet, wait-all over {N_CLIENTS}, m={FOCUS_M}:")
    print(time_table(frame, FOCUS_M).to_string(float_format=fmt))
    print("\nthe paper's sigma=1e-3 read as a variance (noise std sqrt(1e-3) = 0.032), seed 0:")
    noisy = final_errors(
        experiment(
            (FOCUS_M,) if args.quick else (5, FOCUS_M, 20),
            (0,),
            rounds,
            names=(SA, WA_LSTSQ, *BASELINES),
            noise_std=math.sqrt(1e-3),
        )
    )
    print(noisy.to_string(float_format=fmt))
    for m, r in (noisy.loc[list(BASELINES)].min(axis=0) / noisy.loc[SA]).items():
        print(f"  m={m:>2}: best baseline / FedDAR-SA {r:.3g} = 10^{np.log10(r):.1f}")
    var_ratio = noisy.loc[list(BASELINES)].min(axis=0) / noisy.loc[SA]
    wa_ratio = table.loc[WA_LSTSQ] / table.loc[SA]
    gd_ratio = table.loc[WA_GD] / table.loc[SA]
    orders = np.log10(ratio.to_numpy())
    var_orders = np.log10(var_ratio.to_numpy())
    span = lambda o: f"10^{o.min():.1f}-10^{o.max():.1f}"  # noqa: E731
    write_results(
        args,
        "feddar",
        {
            "samples": list(samples),
            "seeds": list(seeds),
            "rounds": rounds,
            "final": {k: {str(m): v for m, v in row.items()} for k, row in table.iterrows()},
            "ratio_std_reading": {str(m): float(v) for m, v in ratio.items()},
            "ratio_variance_reading": {str(m): float(v) for m, v in var_ratio.items()},
            "wa_lstsq_over_sa": {str(m): float(v) for m, v in wa_ratio.items()},
            "wa_gd_over_sa": {str(m): float(v) for m, v in gd_ratio.items()},
        },
        [
            claim(
                "FedDAR",
                "Fig. 2: FedDAR-SA's error ~4 orders of magnitude below FedAvg, FedRep and "
                "Local-only (synthetic domain mixture, n=100, M=5, k=2)",
                "~10^4",
                f"best baseline / SA: {span(orders)} with noise std 1e-3, {span(var_orders)} "
                f"with noise variance 1e-3 (m = {min(samples)}..{max(samples)})",
                "qualitative",
                "the ratio depends on reading the paper's noise 1e-3 as a std or a variance "
                "(not stated); d and alpha are not in the paper (ours: d=20, alpha=0.5)",
            ),
            claim(
                "FedDAR",
                "Fig. 2: FedDAR-WA fails to converge",
                "WA does not converge",
                f"WA with minimum-norm local heads ends {span(np.log10(wa_ratio.to_numpy()))} "
                f"above SA; with gradient-step heads {span(np.log10(gd_ratio.to_numpy()))}",
                "qualitative",
                "WA stalls with minimum-norm local heads but converges with gradient-step heads "
                "(the paper does not say which local solver)",
            ),
        ],
        checks=f"FedDAR Fig. 2, n={N_CLIENTS}, M=5, k=2, m = {min(samples)}..{max(samples)}",
        measured=f"FedDAR-SA {span(orders)} below the best of FedAvg/FedRep/Local-only "
        f"(paper: ~10^4; {span(var_orders)} if the paper's 1e-3 is a variance); WA stalls with "
        "minimum-norm local heads and converges with gradient-step heads",
    )
    figure(frame, table, args.out)


def figure(frame: pd.DataFrame, table: pd.DataFrame, out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    fig, axes = plt.subplots(1, 3, figsize=(17, 4.6))
    long = table.T.reset_index().melt(id_vars="m", var_name="method", value_name="domain_mse")
    sns.lineplot(data=long, x="m", y="domain_mse", hue="method", marker="o", ax=axes[0])
    axes[0].set(yscale="log", xlabel="training samples per client", ylabel="final test MSE")
    axes[0].set_title("Fig. 2: final domain-averaged test MSE")
    focus = frame[frame["m"] == FOCUS_M].dropna(subset=["domain_mse"])
    for ax, x, label in ((axes[1], "round", "round"), (axes[2], "time", "simulated time (s)")):
        sns.lineplot(
            data=focus,
            x=x,
            y="domain_mse",
            hue="method",
            units="seed",
            estimator=None,
            lw=1,
            ax=ax,
            legend=False,
        )
        ax.set(yscale="log", xlabel=label, ylabel="test MSE (equal weight per domain)")
        ax.set_title(f"m={FOCUS_M}, Exp(1) fleet, wait-all over {N_CLIENTS}")
    axes[0].legend(fontsize="small")
    print(f"figure: {save(fig, out, 'feddar')}")


if __name__ == "__main__":
    main()
