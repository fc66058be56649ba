"""The seed papers' neural baselines beside FedAvg and FedRep (FedRep Table 1's baseline rows).

Setting (the FedRep code's, reduced): 100 clients with S=2 classes each (the FedRep code's
shards; each client's test set has its own classes), fraction r=0.1 per round, FedRep's MLP
784-512-256-64-10 on Fashion-MNIST (/usr/share/datasets/fashion-mnist; 5,000 of its 60,000
training images, 50 per client, so that 3 seeds of 11 methods run on a core shared by many
jobs), SGD lr 0.01, momentum 0.5, weight decay 1e-4, batch 10. FedRep runs 10 head epochs and
1 body epoch; every other method 1 local epoch per round ("the same number of local epochs as
FedRep does for updating the representation"; FedRep's CIFAR-10 scripts). Reduced rounds:
T = 20 (the paper: 100 for CIFAR, 200 for FEMNIST; here each client takes part about twice and
about 12% never do, which handicaps the methods whose personal models only train when chosen).
Accuracy: the average local test accuracy (each client's own test split, with its personalised
model where the method has one) after the last round ("+FT" methods once every client has
fine-tuned the head 10 epochs); the paper averages its final 10 rounds. Per-FedAvg and HF-MAML
use SRPFL's alpha=1e-2 and delta=1e-3 with beta=0.05 (SRPFL's beta=0.1 made HF-MAML diverge
here); pFedMe its MNIST settings (lambda 15, K 5, personal lr 0.1, eta 0.005, batch 20); Ditto
lambda 0.1; APFL alpha 0.25 (adaptive); L2GD mix 0.5. Simulated time: an Exp(1) fleet in
seconds per GMAC of local work.

The paper's numbers are FedRep Table 1's FEMNIST (150 clients, 3 classes each) column, verified
from the PMLR PDF transcription in /work/shared/reference/algorithms.md; its CIFAR-10 column
has no baseline rows there. pFedMe, HF-MAML and FedNova are not in Table 1. The data sets and
models differ (FEMNIST's 62-way handwriting vs Fashion-MNIST 2-class clients), so the claims
are the table's pattern, not its values. 95% intervals: mean +- t(0.975, seeds-1) sd / sqrt(seeds).

    python analysis/neural_baselines.py [--quick] [--out DIR] [--results DIR]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import HERE, parser, save, write_results

from simfl import Fleet, Scenario, compare, dists, policies, run
from simfl.neural import (
    APFL,
    HFMAML,
    L2GD,
    MLP,
    SCAFFOLD,
    SCAFFOLDFT,
    DataSource,
    Digits,
    Ditto,
    FashionMNIST,
    ImageClassification,
    ModelSpec,
    NeuralAlgorithm,
    NeuralFedAvg,
    NeuralFedNova,
    NeuralFedRep,
    PerFedAvg,
    PFedMe,
    Shards,
)
from simfl.neural.train import SGD

#: FedRep Table 1, FEMNIST (150, 3), average local test accuracy in % (verified).
PAPER = {
    "FedAvg": 51.64,
    "FedRep": 78.56,
    "SCAFFOLD": 17.65,
    "SCAFFOLD+FT": 52.11,
    "PerFedAvg": 71.51,
    "L2GD": 66.18,
    "APFL": 70.74,
    "Ditto": 68.28,
}
#: Methods personalised per client (each evaluated with its own model).
PERSONALISED = ("Ditto", "APFL", "PerFedAvg", "HF-MAML", "pFedMe", "L2GD", "FedRep")
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776}
#: Fashion-MNIST training images used (50 per client; the first of each class in file order).
LIMIT = 5000
#: Rounds of the full run (reduced from the paper's 100-200 to fit minutes on a shared core).
ROUNDS = 20
#: Per-FedAvg's and HF-MAML's outer step beta here: SRPFL's 0.1 diverged (NaN loss by round 5
#: of seed 0) for HF-MAML on this MLP.
BETA = 0.05
#: Chance accuracy (%) of a 10-way classifier (Fashion-MNIST and the digits have 10 classes).
CHANCE = 10.0
#: The quick run (tests): scikit-learn's 8x8 digits, 20 clients, 5 per round, 20 rounds.
QUICK = {"n": 20, "fraction": 0.25, "rounds": 20}
QUICK_MLP = MLP((64, 32))


def methods(epochs: int = 1) -> list[NeuralAlgorithm]:
    """FedAvg and FedRep (references), then every baseline, ``epochs`` local epochs each."""
    e = epochs
    return [
        NeuralFedAvg(epochs=e),
        NeuralFedRep(head_epochs=10, body_epochs=e),
        SCAFFOLD(epochs=e),
        SCAFFOLDFT(epochs=e),
        Ditto(epochs=e, personal_epochs=e),
        APFL(epochs=e),
        PerFedAvg(epochs=e, optimizer=SGD(lr=BETA, momentum=0.0, weight_decay=0.0)),
        HFMAML(epochs=e, optimizer=SGD(lr=BETA, momentum=0.0, weight_decay=0.0)),
        PFedMe(epochs=e),
        L2GD(epochs=e),
        NeuralFedNova(epochs=e),
    ]


def scenario(
    data: DataSource,
    alg: NeuralAlgorithm,
    model: ModelSpec,
    n: int,
    rounds: int,
    seed: int,
    fraction: float = 0.1,
) -> Scenario:
    return Scenario(
        name=alg.name,
        task=ImageClassification(data, Shards(2), model),
        algorithm=alg,
        fleet=Fleet.homogeneous(n, compute=dists.Exponential(mean=1.0)),
        policy=policies.WaitAll(fraction=fraction),
        rounds=rounds,
        eval_every=rounds,
        seed=seed,
    )


def experiment(
    data: DataSource,
    *,
    n: int = 100,
    fraction: float = 0.1,
    rounds: int = ROUNDS,
    seeds: tuple[int, ...] = (0, 1, 2),
    model: ModelSpec | None = None,
    algorithms: list[NeuralAlgorithm] | None = None,
    cache: Path | None = None,
) -> pd.DataFrame:
    """Tidy rounds of every (method, seed) run (``compare.collect`` format).

    With ``cache``, each method's rounds are kept in ``cache/<method>.csv`` and read back from
    there when present (so a full run can be split over processes and resumed).
    """
    frames = []
    for alg in algorithms or methods():
        file = None if cache is None else cache / f"{alg.name}.csv"
        if file is not None and file.exists():
            frames.append(pd.read_csv(file))
            continue
        runs = [
            run(
                scenario(data, alg, model or MLP.fedrep(), n, rounds, s, fraction),
                progress=False,
            )
            for s in seeds
        ]
        frame = compare.collect({alg.name: runs})
        if file is not None:
            file.parent.mkdir(parents=True, exist_ok=True)
            frame.to_csv(file, index=False)
        frames.append(frame)
        print(f"{alg.name}: done", flush=True)
    return pd.concat(frames, ignore_index=True)


def table(frame: pd.DataFrame, rounds: int) -> pd.DataFrame:
    """Accuracy (%) per method: the final 10 rounds' mean per seed; mean, 95% interval."""
    last = frame[(frame["round"] >= rounds - 10) & frame["accuracy"].notna()]
    per_seed = last.groupby(["label", "seed"])["accuracy"].mean() * 100
    g = per_seed.groupby("label")
    out = pd.DataFrame({"mean": g.mean(), "sd": g.std(ddof=1), "seeds": g.size()})
    t = out["seeds"].map(lambda k: T_975.get(int(k) - 1, 1.96) if k > 1 else np.nan)
    out["ci95"] = t * out["sd"] / np.sqrt(out["seeds"])
    time_col = frame.groupby(["label", "seed"])["time"].max().groupby("label").mean()
    out["sim_time"] = time_col
    order = [a.name for a in methods()]
    return out.reindex([m for m in order if m in out.index])


def claims(tab: pd.DataFrame, chance: float, data: str) -> list[dict[str, object]]:
    """Table 1's pattern on our numbers (each with the margin it rests on)."""
    acc = tab["mean"]
    why = (
        f"FedRep Table 1 reports FEMNIST (150 clients, 3 classes, 62-way); here {data}, "
        "clients with 2 classes, 1 local epoch, reduced rounds"
    )
    out: list[dict[str, object]] = []
    for m, value in PAPER.items():
        if m in acc:
            out.append(
                {
                    "paper": "FedRep",
                    "claim": f"Table 1 (FEMNIST): {m} average local test accuracy",
                    "paper_value": f"{value:.2f}%",
                    "ours": f"{acc[m]:.2f}% +- {tab.loc[m, 'ci95']:.2f}",
                    "status": "qualitative",
                    "why": why,
                }
            )
    pers = [m for m in ("Ditto", "APFL", "PerFedAvg", "L2GD") if m in acc]
    margins = {m: acc[m] - acc["FedAvg"] for m in pers}
    shown = ", ".join(f"{m} {v:+.2f}" for m, v in margins.items())
    out.append(
        {
            "paper": "FedRep",
            "claim": "Table 1: Ditto, APFL, PerFedAvg and L2GD beat FedAvg on few-class clients",
            "paper_value": "+14.5 (L2GD) to +19.9 (PerFedAvg) points (FEMNIST)",
            "ours": f"{shown} points; holds: {all(v > 0 for v in margins.values())}",
            "status": "qualitative" if all(v > 0 for v in margins.values()) else "not reproduced",
            "why": why,
        }
    )
    rest = [m for m in acc.index if m != "FedRep"]
    best_other = max(rest, key=lambda m: acc[m])
    margin = acc["FedRep"] - acc[best_other]
    out.append(
        {
            "paper": "FedRep",
            "claim": "Table 1: FedRep above every baseline",
            "paper_value": "78.56 vs 71.51 (PerFedAvg, best baseline, FEMNIST)",
            "ours": f"FedRep - {best_other} = {margin:+.2f} points; holds: {bool(margin > 0)}",
            "status": "qualitative" if margin > 0 else "not reproduced",
            "why": why
            + "; a likely cause, not isolated here: with so few rounds some clients never take "
            "part and FedRep scores them with "
            "their initial heads, while the +FT methods, Per-FedAvg and HF-MAML adapt every "
            "client to its own data before it is evaluated",
        }
    )
    above = min(acc) - chance
    out.append(
        {
            "paper": "SRPFL",
            "claim": "HF-MAML (alpha 1e-2, beta 1e-1, delta 1e-3) as SRPFL's baseline",
            "paper_value": "SRPFL figures (values not retrieved)",
            "ours": f"HF-MAML {acc.get('HF-MAML', float('nan')):.2f}%",
            "status": "not attempted",
            "why": (
                "SRPFL's figure values were not available, so nothing to compare with; run here "
                f"with beta={BETA} (beta 0.1 diverged on this MLP)"
            ),
        }
    )
    out.append(
        {
            "paper": "FedRep",
            "claim": f"every method learns: accuracy above chance ({chance:.0f}%, 10 classes)",
            "paper_value": "all Table 1 entries above chance",
            "ours": f"lowest method {above:+.2f} points above chance",
            "status": "qualitative",
            "why": why,
        }
    )
    return out


def results(
    tab: pd.DataFrame, size: str, n: int, fraction: float, rounds: int, chance: float
) -> dict:
    """The results file's content (numbers printed, size, claims)."""
    rows = {
        m: {k: (None if pd.isna(v) else float(v)) for k, v in tab.loc[m].items()} for m in tab.index
    }
    return {
        "size": size,
        "setting": {"clients": n, "classes_per_client": 2, "fraction": fraction, "rounds": rounds},
        "accuracy": rows,
        "paper_femnist": PAPER,
        "claims": claims(tab, chance, "the 8x8 digits" if size == "quick" else "Fashion-MNIST"),
    }


def write(content: dict, directory: Path) -> Path:
    """The results file in the shared format (``_common.write_results``)."""
    content = dict(content)
    size, claims_ = content.pop("size"), content.pop("claims")
    acc = content["accuracy"]
    args = argparse.Namespace(quick=size == "quick", out=str(directory), results=str(directory))
    s = content["setting"]
    return write_results(
        args,
        "neural_baselines",
        content,
        claims_,
        checks=f"the seed papers' baselines on Fashion-MNIST (MLP, {s['clients']} clients, 2 "
        f"classes each, r={s['fraction']}, T={s['rounds']}), accuracy % with 95% intervals",
        measured=", ".join(
            f"{m} {v['mean']:.1f} +- {v['ci95']:.1f}"
            for m, v in acc.items()
            if v["mean"] is not None
        ),
    )


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--results", default=str(HERE / "results"), help="directory for the JSON")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--only", default=None, help="comma-separated method names (with --cache)")
    p.add_argument("--cache", default=None, help="directory keeping each method's rounds")
    args = p.parse_args()
    import torch

    torch.set_num_threads(1)
    if args.quick:
        data: DataSource = Digits()
        n, fraction, rounds, model = QUICK["n"], QUICK["fraction"], QUICK["rounds"], QUICK_MLP
        if Path(args.results).resolve() == (HERE / "results").resolve():
            raise SystemExit("--quick writes elsewhere: pass --results DIR")
    else:
        data, n, fraction, rounds = FashionMNIST(limit=LIMIT), 100, 0.1, ROUNDS
        model = MLP.fedrep()
    results_dir = Path(args.results)
    seeds = tuple(range(args.seeds))
    started = time.perf_counter()
    cache = None if args.cache is None else Path(args.cache)
    algorithms = methods()
    if args.only:
        algorithms = [a for a in algorithms if a.name in args.only.split(",")]
        kw = {"n": n, "fraction": fraction, "rounds": rounds, "seeds": seeds, "model": model}
        experiment(data, algorithms=algorithms, cache=cache, **kw)
        return
    frame = experiment(
        data, n=n, fraction=fraction, rounds=rounds, seeds=seeds, model=model, cache=cache
    )
    tab = table(frame, rounds)
    shown = tab[["mean", "ci95", "sim_time"]].copy()
    shown["paper FEMNIST (150,3)"] = [PAPER.get(m, np.nan) for m in shown.index]
    pd.set_option("display.width", 200)
    print(
        f"average local test accuracy (%), {'Digits' if args.quick else 'Fashion-MNIST'}, "
        f"n={n}, S=2, r={fraction}, T={rounds}, {len(seeds)} seeds (mean, 95% interval); "
        f"after the last round; paper: FedRep Table 1 FEMNIST (different data set)"
    )
    print(shown.to_string(float_format=lambda v: f"{v:.2f}"))
    size = "quick" if args.quick else "full"
    content = results(tab, size, n, fraction, rounds, CHANCE)
    for c in content["claims"]:
        print(f"- [{c['status']}] {c['claim']}: paper {c['paper_value']}; ours {c['ours']}")
    print(f"results: {write(content, results_dir)}")
    print(f"host time {time.perf_counter() - started:.0f} s")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    bars = tab.reset_index()
    axes[0].barh(bars["label"], bars["mean"], xerr=bars["ci95"], color="tab:blue", label="ours")
    axes[0].scatter(
        [PAPER.get(m, np.nan) for m in bars["label"]],
        bars["label"],
        color="tab:red",
        zorder=3,
        label="paper (FEMNIST)",
    )
    axes[0].axvline(CHANCE, color="grey", linestyle=":", label="chance")
    axes[0].set(xlabel="average local test accuracy (%), 95% interval", title="ours vs paper")
    axes[0].set_xlim(0, 130)
    axes[0].legend(loc="upper right", fontsize=8)
    last = frame[frame["accuracy"].notna() & (frame["round"] == rounds - 1)].copy()
    last["accuracy"] *= 100
    sns.scatterplot(data=last, x="time", y="accuracy", hue="label", style="label", ax=axes[1])
    axes[1].set(xlabel="simulated time at the end (s)", ylabel="accuracy (%)", title="per seed")
    axes[1].legend(fontsize=7, ncol=2)
    fig.suptitle(f"Baselines, {n} clients with 2 classes, r={fraction}, T={rounds}")
    fig.tight_layout()
    print(f"figure: {save(fig, args.out, 'neural_baselines')}")


if __name__ == "__main__":
    main()
