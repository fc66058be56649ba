"""Workload W3 on simfl: FedAvg, the docs' ResNet on Fashion-MNIST shards, Exp client latencies.

W2's set-up (``w2_simfl.py``) with W3's model: the small ResNet of the docs example
``docs/examples/resnet_fmnist.py`` (``w3_model.ResNet``: residual blocks with GroupNorm, 35,242
parameters) as a ``torch.nn.Module`` on simfl's generic trainer. Same flags (``w2_data.add_cli``)
and the same JSON last stdout line as the peers' scripts, so that their harness runs it beside
them, as it runs ``w3_pfl.py`` (pfl-research on the same workload)::

    python analysis/perf/w3_simfl.py --rounds 20 --per-round 10 --seed 0 --trainer loop

Everything both frameworks share comes from the peers' ``w2_data.py`` (``$SIMFL_PEERS`` or
``../shared/peers`` beside the checkout) and from ``w3_model.py``, so that simfl and pfl train
on identical arrays from identical weights:

- Data: ``w2_data.load_fmnist`` and ``w2_data.shard_partition`` (seed ``--seed``) through
  ``w2_simfl.PeerFashionMNIST`` and ``w2_simfl.PeerShards``: each client's 600 training images,
  and for every client the whole 10,000-image test set, so that the accuracy of one evaluated
  client (``eval_clients=1``) is the global model's test accuracy, what pfl reports.
- Model: ``Model(w3_model.ResNet, trainer=--trainer)``, starting from
  ``w3_model.make_model(seed)``'s weights (torch's default init after ``manual_seed``).
- Algorithm: ``NeuralFedAvg`` with plain SGD (``--lr``, batch ``--batch``, no momentum, no
  weight decay), ``--epochs`` local epochs, size-weighted averaging of the parameters (and of
  float buffers, with ``num_batches_tracked`` rounded: the ResNet's GroupNorm has none).
- Fleet: as W2: compute time Exp with mean ``--mean-latency`` per whole local update, re-drawn
  every round, free links; ``WaitAll(count=per_round)``: a uniform draw without replacement.
- Threads: one torch/BLAS thread unless ``--threads`` says otherwise.
- Evaluation: simfl scores the test set in pieces of 1,024 images (``simfl.neural.train.CHUNK``),
  as pfl does with the peers' ``--eval-batch 1024`` (which simfl does not read). After the last
  round simfl also scores the final model once per evaluated client for
  ``res.meta["client_metrics"]``: one more pass over the test set, inside the timed call (pfl
  has its own extra: its per-user metrics of the first round's ten users, before and after
  training).
- ``host_wall_s`` times the ``simfl.run`` call only (every round and the evaluations at round
  0, every ``--eval-every`` rounds and after the last); ``host_cpu_s_per_round`` is the
  process's CPU time over the same call per round. Set-up (``setup_s``) includes counting the
  model's work (``train_macs_per_sample``), whose ``FlopCounterMode`` imports ``torch._dynamo``
  (about a second), as pfl's set-up does when it builds its first optimiser.

``--trainer loop`` trains the cohort client by client, ``--trainer cohort`` all clients of a
round in one ``torch.func.vmap`` call per minibatch step (``auto``: the loop on a CPU).
``--test-limit N`` evaluates on the first ``N`` test images only (quick checks).
``--sim-seed S`` reseeds simfl's own streams (client sampling, latencies, batch order) while the
data and initial weights stay those of ``--seed``. ``--profile N`` prints torch's profiler table
(top N operators by own time) to stderr.
"""

from __future__ import annotations

import time

T0 = time.perf_counter()

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

# sets one compute thread per process (``--threads``) before numpy and torch load
import w2_simfl  # noqa: E402, I001

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
from dataclasses import dataclass, replace  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402

import simfl  # noqa: E402
from simfl import Fleet, Scenario, dists, policies  # noqa: E402
from simfl.neural import SGD, ImageClassification, Model, NeuralFedAvg, NeuralState  # noqa: E402
from simfl.neural.base import GMAC  # noqa: E402
from simfl.neural.data import Dataset  # noqa: E402
from simfl.neural.module import ModuleNet  # noqa: E402
from simfl.neural.objective import Objective  # noqa: E402
from simfl.neural.task import ClientImages  # noqa: E402
from simfl.rng import Streams  # noqa: E402

import w3_model  # noqa: E402


@dataclass(frozen=True)
class PeerFashionMNIST(w2_simfl.PeerFashionMNIST):
    """The peers' Fashion-MNIST arrays; ``test_limit``: only the first so many test images."""

    test_limit: int | None = None

    def _load(self) -> Dataset:
        got = super()._load()
        if self.test_limit is None:
            return got
        n = self.test_limit
        return replace(got, x_test=got.x_test[:n], y_test=got.y_test[:n])


@dataclass(frozen=True)
class W3InitFedAvg(NeuralFedAvg):
    """``NeuralFedAvg`` starting from W3's shared initial ResNet (``w3_model.make_model``)."""

    init_seed: int = 0

    def initial_state(self, data: ClientImages, streams: Streams) -> NeuralState:
        state = super().initial_state(data, streams)
        return replace(state, shared=initial_weights(self.init_seed))


def initial_weights(seed: int) -> dict[str, torch.Tensor]:
    """``w3_model.make_model(seed)``'s parameters and buffers, by their module names."""
    model = w3_model.make_model(seed)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def train_macs_per_sample() -> float:
    """Multiply-accumulates of one training step of one sample, as simfl counts them."""
    sample = (torch.zeros(2, 1, 28, 28), torch.zeros(2, dtype=torch.int64))
    net = ModuleNet(Model(w3_model.ResNet), Objective(), sample, torch.device("cpu"))
    return net.train_macs(net.layer_names)


def scenario(a: argparse.Namespace) -> Scenario:
    """The W3 scenario for parsed flags."""
    samples = 60000 // (a.clients * a.shards_per_client) * a.shards_per_client
    gmac = a.epochs * samples * train_macs_per_sample() / GMAC
    task = ImageClassification(
        PeerFashionMNIST(a.data_dir, test_limit=a.test_limit),
        w2_simfl.PeerShards(a.shards_per_client, a.seed),
        Model(w3_model.ResNet, trainer=a.trainer),
        eval_clients=1,
        device=a.device,
        threads=a.threads,
    )
    sgd = SGD(lr=a.lr, momentum=0.0, weight_decay=0.0, batch_size=a.batch)
    return Scenario(
        task=task,
        algorithm=W3InitFedAvg(optimizer=sgd, epochs=a.epochs, init_seed=a.seed),
        fleet=Fleet.homogeneous(
            a.clients, compute=dists.Exponential(mean=a.mean_latency / gmac), redraw="round"
        ),
        policy=policies.WaitAll(count=a.per_round),
        rounds=a.rounds,
        eval_every=a.eval_every,
        seed=a.seed if a.sim_seed is None else a.sim_seed,
        name="w3",
    )


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The peers' W2 flags plus simfl's own (``--trainer``, ``--sim-seed``, ...)."""
    p = w2_simfl.peers_data().add_cli(argparse.ArgumentParser(description=__doc__.splitlines()[0]))
    p.add_argument("--sim-seed", type=int, default=None, help="seed of simfl's own streams")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--profile", type=int, default=0, help="torch profiler's top N to stderr")
    p.add_argument(
        "--test-limit",
        type=int,
        default=None,
        help="evaluate on the first N test images only (default: all 10,000; for quick checks)",
    )
    p.add_argument(
        "--trainer",
        default="loop",
        choices=("auto", "loop", "cohort"),
        help="the generic trainer's path (Model.trainer; default loop)",
    )
    return p.parse_args(argv)


def run(a: argparse.Namespace) -> dict[str, Any]:
    """Run W3 once; the peers' JSON row."""
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
    training = res.meta.get("training", {})
    print(
        f"simfl W3: {len(res.rounds)} rounds in {wall:.3f} s, final accuracy {acc:.4f}, "
        f"simulated {res.meta['sim_time']:.1f} s, trainer {training.get('trainer')}, "
        f"device {a.device}",
        file=sys.stderr,
    )
    # rounds are numbered from 0 in ``res.rounds``; the peers count round r + 1 and call the
    # initial model's evaluation round 0
    by_round = {"0": round(float(res.meta["initial_metrics"]["accuracy"]), 4)}
    for r, v in res.rounds[["round", "accuracy"]].dropna().itertuples(index=False):
        by_round[str(int(r) + 1)] = round(float(v), 4)
    return {
        "framework": f"simfl {res.meta['simfl_version']} (neural FedAvg, module path)",
        "trainer": training.get("trainer"),
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
        "acc_by_round": by_round,
    }


def main(argv: list[str] | None = None) -> None:
    print(json.dumps(run(parse(argv))))


if __name__ == "__main__":
    main()
