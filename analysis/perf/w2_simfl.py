"""Workload W2 on simfl: FedAvg, LeNet-5 on Fashion-MNIST shards, Exp client latencies.

The simfl side of the peers' W2 benchmark (``shared/peers``: FLGo, Flower and pfl-research on
the same workload). Same flags (``w2_data.add_cli``) and the same JSON last stdout line as the
peers' ``flgo_w2.py``, so that the peers' harness runs it beside them::

    python bench.py --workload w2 --peer "simfl=PYTHON analysis/perf/w2_simfl.py"
    python analysis/perf/w2_simfl.py --rounds 50 --clients 100 --per-round 10 --seed 0

Everything the peers share comes from their ``w2_data.py`` (found in ``$SIMFL_PEERS`` or
``../shared/peers`` beside the checkout), so the three frameworks and simfl train on identical
arrays from identical weights:

- Data: ``w2_data.load_fmnist`` (pixels / 255, then ``(x - 0.2860) / 0.3530``) as a simfl
  data source, and ``w2_data.shard_partition`` (seed ``--seed``) as the partition: each
  client's 600 training images, and for every client the whole 10,000-image test set, so
  that the accuracy of one evaluated client (``eval_clients=1``) is the global model's test
  accuracy, what the peers report.
- Model: ``CNN.lenet5_classic()`` (conv1 padded by 2; 61,706 parameters), starting from
  ``w2_data.make_model(seed)``'s weights (torch's default init after ``manual_seed``).
- Algorithm: ``NeuralFedAvg`` with plain SGD (``--lr``, batch ``--batch``, no momentum, no
  weight decay), ``--epochs`` local epochs, size-weighted averaging.
- Fleet: as W1: compute time Exp with mean ``--mean-latency`` per whole local update,
  re-drawn every round (one distribution per GMAC of work, all clients the same size), free
  links; ``WaitAll(count=per_round)``: a uniform draw without replacement each round.
- Threads: one torch/BLAS thread (the peers' setting) unless ``--threads`` says otherwise.
- ``host_wall_s`` times the ``simfl.run`` call only: every round plus the evaluations at
  round 0, every ``--eval-every`` rounds and after the last (what the peers time).
  ``host_cpu_s_per_round`` is the process's CPU time over the same call per round: with one
  thread, what the wall time would be on an otherwise idle core (the machine is shared).

``--sim-seed S`` reseeds simfl's own streams (client sampling, latencies, batch order) while
the data and initial weights stay those of ``--seed``: the spread of accuracy over ``S`` is
the noise against which simfl's and the peers' accuracies are compared. ``--device cuda``
trains on a GPU. Logs go to stderr; ``--profile N`` prints torch's profiler table (top N
operators by own time) to stderr.
"""

from __future__ import annotations

import os
import time

T0 = time.perf_counter()

import sys  # noqa: E402


def _early_threads(argv: list[str]) -> str:
    """The ``--threads`` flag's value before argparse runs (default 1)."""
    for i, arg in enumerate(argv):
        if arg.startswith("--threads="):
            return arg.split("=", 1)[1]
        if arg == "--threads" and i + 1 < len(argv):
            return argv[i + 1]
    return "1"


# one compute thread per process, as the peers measure (set before numpy and torch load)
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, _early_threads(sys.argv))

import argparse  # noqa: E402
import importlib  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
from dataclasses import dataclass, replace  # noqa: E402
from pathlib import Path  # noqa: E402
from types import ModuleType  # noqa: E402
from typing import Any  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # this checkout's simfl whatever the working directory

import numpy as np  # noqa: E402
import torch  # noqa: E402

import simfl  # noqa: E402
from simfl import Fleet, Scenario, dists, policies  # noqa: E402
from simfl.neural import (  # noqa: E402
    CNN,
    SGD,
    ImageClassification,
    Model,
    ModuleNet,
    NeuralFedAvg,
    NeuralState,
)
from simfl.neural.base import GMAC  # noqa: E402
from simfl.neural.data import Dataset, DataSource  # noqa: E402
from simfl.neural.partition import Partition  # noqa: E402
from simfl.neural.task import ClientImages  # noqa: E402
from simfl.rng import Streams  # noqa: E402

#: Where the peers' scripts live (``w2_data.py``).
PEERS = Path(os.environ.get("SIMFL_PEERS", ROOT.parent / "shared" / "peers"))
#: The peers' LeNet-5 (``torch.nn.Sequential``) parameter names -> simfl's.
PEER_NAMES = {"0": "conv1", "3": "conv2", "7": "fc1", "9": "fc2", "11": "fc3"}


def peers_data() -> ModuleType:
    """The peers' ``w2_data`` module (ImportError naming the directory if it is missing)."""
    if str(PEERS) not in sys.path:
        sys.path.insert(0, str(PEERS))
    try:
        return importlib.import_module("w2_data")
    except ImportError as exc:
        raise ImportError(f"the peers' w2_data.py is not in {PEERS} (set SIMFL_PEERS)") from exc


@dataclass(frozen=True)
class PeerFashionMNIST(DataSource):
    """Fashion-MNIST as the peers' ``w2_data.load_fmnist`` reads and normalises it."""

    data_dir: str
    limit: int | None = None

    def _load(self) -> Dataset:
        xtr, ytr, xte, yte = peers_data().load_fmnist(self.data_dir)
        return Dataset("fashion-mnist (peers' W2 arrays)", xtr, ytr, xte, yte, 10)


@dataclass(frozen=True)
class PeerShards(Partition):
    """The peers' ``w2_data.shard_partition``; every client tests on the whole test set."""

    shards_per_client: int = 2
    seed: int = 0

    def split(
        self,
        labels: Any,
        n_clients: int,
        n_classes: int,
        rng: np.random.Generator,
        groups: Any = None,
    ) -> list[Any]:
        parts = peers_data().shard_partition(labels, n_clients, self.shards_per_client, self.seed)
        return [np.sort(p).astype(np.int64) for p in parts]

    def split_test(
        self,
        train_parts: list[Any],
        train_labels: Any,
        test_labels: Any,
        n_classes: int,
        rng: np.random.Generator,
        groups: Any = None,
    ) -> list[Any]:
        everything = np.arange(len(test_labels), dtype=np.int64)
        return [everything] * len(train_parts)


@dataclass(frozen=True)
class PeerInitFedAvg(NeuralFedAvg):
    """``NeuralFedAvg`` starting from the peers' initial LeNet-5 (``w2_data.make_model``)."""

    init_seed: int = 0

    def initial_state(self, data: ClientImages, streams: Streams) -> NeuralState:
        state = super().initial_state(data, streams)
        module = isinstance(data.network, ModuleNet)
        return replace(state, shared=peer_weights(self.init_seed, transpose=not module))


def peer_weights(seed: int, transpose: bool = True) -> dict[str, torch.Tensor]:
    """The peers' initial LeNet-5 as simfl parameters.

    Linear weights stored ``(in, out)`` for the paper network's fast path (``transpose``),
    as ``torch.nn.Linear`` stores them for the module.
    """
    model = peers_data().make_model(seed)
    out = {}
    for key, value in model.state_dict().items():
        index, kind = key.split(".")
        name = f"{PEER_NAMES[index]}.{kind}"
        is_linear = PEER_NAMES[index].startswith("fc") and kind == "weight"
        flip = is_linear and transpose
        out[name] = (value.T if flip else value).detach().clone().contiguous()
    return out


def scenario(a: argparse.Namespace) -> Scenario:
    """The W2 scenario for parsed flags."""
    model = replace(CNN.lenet5_classic(), conv_kernel=a.conv_kernel)
    net = model.build((1, 28, 28), 10)
    samples = 60000 // (a.clients * a.shards_per_client) * a.shards_per_client
    gmac = a.epochs * samples * net.train_macs(net.layer_names) / GMAC
    chosen: Any = model
    if a.path == "module":  # LeNet-5 as a torch.nn.Module on the generic trainer
        chosen = Model(model.factory((1, 28, 28), 10), trainer=a.trainer)
    task = ImageClassification(
        PeerFashionMNIST(a.data_dir),
        PeerShards(a.shards_per_client, a.seed),
        chosen,
        eval_clients=1,
        device=a.device,
        threads=a.threads,
    )
    sgd = SGD(lr=a.lr, momentum=0.0, weight_decay=0.0, batch_size=a.batch)
    return Scenario(
        task=task,
        algorithm=PeerInitFedAvg(optimizer=sgd, epochs=a.epochs, init_seed=a.seed),
        fleet=Fleet.homogeneous(
            a.clients, compute=dists.Exponential(mean=a.mean_latency / gmac), redraw="round"
        ),
        policy=policies.WaitAll(count=a.per_round),
        rounds=a.rounds,
        eval_every=a.eval_every,
        seed=a.seed if a.sim_seed is None else a.sim_seed,
        name="w2",
    )


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The peers' W2 flags plus simfl's own (``--sim-seed``, ``--device``, ...)."""
    p = peers_data().add_cli(argparse.ArgumentParser(description=__doc__.splitlines()[0]))
    p.add_argument("--sim-seed", type=int, default=None, help="seed of simfl's own streams")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--profile", type=int, default=0, help="torch profiler's top N to stderr")
    p.add_argument(
        "--path",
        default="module",
        choices=("module", "paper"),
        help="LeNet-5 as a torch.nn.Module on the generic trainer (default) or the paper "
        "network's fast path",
    )
    p.add_argument(
        "--trainer",
        default="auto",
        choices=("auto", "loop", "cohort"),
        help="the generic trainer's path (Model.trainer; default auto)",
    )
    p.add_argument(
        "--conv-kernel",
        default="onednn",
        choices=("onednn", "patches"),
        help="conv1's kernel (CNN.conv_kernel; default onednn)",
    )
    return p.parse_args(argv)


def run(a: argparse.Namespace) -> dict[str, Any]:
    """Run W2 once; the peers' JSON row."""
    torch.set_num_threads(a.threads)
    sc = scenario(a)
    sc.task.dataset.load()  # reading the files is set-up, as for the peers
    setup_s = time.perf_counter() - T0
    cpu = time.process_time()
    t = time.perf_counter()
    if a.profile:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            res = simfl.run(sc, progress=False, on_error="raise")
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=a.profile)
        print(table, file=sys.stderr)
    else:
        res = simfl.run(sc, progress=False, on_error="raise")
    wall = time.perf_counter() - t
    cpu = time.process_time() - cpu
    acc = float(res.rounds["accuracy"].iloc[-1])
    print(
        f"simfl W2: {len(res.rounds)} rounds in {wall:.3f} s, final accuracy {acc:.4f}, "
        f"simulated {res.meta['sim_time']:.1f} s, device {a.device}",
        file=sys.stderr,
    )
    return {
        "framework": f"simfl {res.meta['simfl_version']} (neural FedAvg, {a.path} path)",
        "path": a.path,
        "trainer": res.meta.get("training", {}).get("trainer", "paper"),
        "rounds": a.rounds,
        "clients": a.clients,
        "per_round": a.per_round,
        "setup_s": round(setup_s, 3),
        "host_wall_s": round(wall, 3),
        "host_wall_s_per_round": round(wall / a.rounds, 5),
        "final_test_acc": round(acc, 4),
        "virtual_clock_end": round(float(res.meta["sim_time"]), 3),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
        "host_cpu_s_per_round": round(cpu / a.rounds, 5),
        "device": a.device,
        "torch_threads": torch.get_num_threads(),
    }


def main(argv: list[str] | None = None) -> None:
    print(json.dumps(run(parse(argv))))


if __name__ == "__main__":
    main()
