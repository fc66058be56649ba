"""Workload W1 on simfl: FedAvg, multinomial logistic regression, Exp client latencies.

The simfl side of the peer benchmark (``shared/peers``: FLGo and Flower on the same workload).
Same flags and the same JSON last stdout line as the peers' ``flgo_w1.py``, so that the peers'
``bench.py --peer "simfl=PYTHON analysis/perf/w1_simfl.py"`` runs it beside them::

    python analysis/perf/w1_simfl.py --rounds 100 --clients 100 --per-round 10 --seed 0

- Data: ``simfl.tasks.w1_data.make_w1`` (the peers' generator, identical float32 arrays),
  given to the run as ``tasks.ClientArrays`` so that generating them is set-up, as for the peers.
- Algorithm: ``SoftmaxFedAvg(lr, batch, epochs)``: local minibatch SGD from the server model,
  sample-size-weighted average; initial model as torch's ``nn.Linear`` (from simfl's streams).
- Fleet: ``--clients`` devices whose compute time per SGD step is Exp(mean ``--mean-latency`` /
  steps) re-drawn every round, so a client's whole local update (``steps`` SGD steps) takes
  Exp(mean ``--mean-latency``) simulated seconds: with one distribution per device and
  ``work = steps``, ``steps * Exp(m / steps) = Exp(m)``. Free links (zero bytes cost zero time),
  so a round lasts as long as its slowest client, as on FLGo's clock (expected 100 x H_10 =
  292.9 s for the base setting).
- Policy: ``WaitAll(count=per_round)``, a uniform draw without replacement each round.
- ``host_wall_s`` times the ``simfl.run`` call only: every round plus the evaluations at round
  0, every ``--eval-every`` rounds and after the last round (what the peers time).
  ``setup_s`` runs from process start until that call (imports, data, scenario, and the
  first-use set-up of pandas and tqdm that ``simfl.run`` would otherwise pay inside the loop:
  see ``warm_lazy_imports``).

Logs go to stderr; ``--profile N`` also prints cProfile's top N functions of the run to stderr (by
cumulative, then by own time).
``--sim-seed S`` reseeds simfl's own randomness (initial model, client sampling, latencies,
shuffles) while the data stay those of ``--seed``: the spread of accuracy over ``S`` is the
noise against which simfl's and the peers' accuracies are compared.
"""

from __future__ import annotations

import os
import time

T0 = time.perf_counter()

# One BLAS thread, as the peers train: FLGo sets torch_num_threads=1 and Flower's actors one CPU
# each. W1's products are tiny, and waking a second BLAS thread for each costs more than it
# saves on 2 cores (set OPENBLAS_NUM_THREADS etc. to override).
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

# import simfl from this checkout whatever the working directory (bench.py runs from peers/)
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import simfl  # noqa: E402
from simfl import Fleet, Scenario, dists, policies  # noqa: E402
from simfl.algorithms.softmax_fedavg import SoftmaxFedAvg  # noqa: E402
from simfl.tasks.classification import ClientArrays  # noqa: E402
from simfl.tasks.w1_data import K, make_w1  # noqa: E402


def add_cli(p: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The peers' W1 flags (``w1_data.add_cli``), same names and defaults."""
    p = p or argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=100)
    p.add_argument("--clients", type=int, default=100)
    p.add_argument("--per-round", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--samples", type=int, default=200, help="training samples per client")
    p.add_argument("--test-samples", type=int, default=2000)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=20)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument(
        "--mean-latency",
        type=float,
        default=1.0,
        help="mean of Exp per-round client latency (sim. s)",
    )
    return p


def scenario(a: argparse.Namespace) -> Scenario:
    """The W1 scenario for parsed flags (generates the data)."""
    clients, test = make_w1(a.clients, a.samples, a.test_samples, a.seed)
    steps = a.epochs * math.ceil(a.samples / a.batch)
    return Scenario(
        task=ClientArrays(clients, test, n_classes=K),
        algorithm=SoftmaxFedAvg(lr=a.lr, batch_size=a.batch, epochs=a.epochs),
        fleet=Fleet.homogeneous(
            a.clients, compute=dists.Exponential(mean=a.mean_latency / steps), redraw="round"
        ),
        policy=policies.WaitAll(count=a.per_round),
        rounds=a.rounds,
        eval_every=a.eval_every,
        seed=a.seed if getattr(a, "sim_seed", None) is None else a.sim_seed,
        name="w1",
    )


def warm_lazy_imports() -> None:
    """First-use set-up of libraries simfl uses after the last round, done before the loop.

    ``simfl.run`` returns pandas DataFrames with categorical columns; pandas sets up its
    categorical and pyarrow-string machinery (and imports ``pyarrow.pandas_compat``) on first
    use, and tqdm imports ``multiprocessing`` for its lock on the first (even disabled) bar:
    about 10-25 ms that would otherwise land in the timed loop of a fresh process, as torch's
    lazy import of ``torch._dynamo`` would in the peers' FLGo script, which builds one optimizer
    before its loop for the same reason.
    """
    import multiprocessing.synchronize  # noqa: F401

    import numpy as np
    import pandas as pd
    import pyarrow.pandas_compat  # noqa: F401

    codes = np.zeros(1, dtype=np.int64)
    pd.DataFrame({"s": pd.Categorical.from_codes(codes, categories=["a", "b"]), "x": [0.0]})


def main() -> None:
    p = add_cli()
    p.add_argument("--profile", type=int, default=0, help="print cProfile's top N to stderr")
    p.add_argument(
        "--sim-seed",
        type=int,
        default=None,
        help="seed of simfl's streams (init, sampling, latencies, shuffles); default --seed. "
        "The data always come from --seed, as for the peers",
    )
    a = p.parse_args()
    sc = scenario(a)
    warm_lazy_imports()
    setup_s = time.perf_counter() - T0
    if a.profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        t = time.perf_counter()
        res = prof.runcall(simfl.run, sc, progress=False, on_error="raise")
        wall = time.perf_counter() - t
        stats = pstats.Stats(prof, stream=sys.stderr)
        stats.sort_stats("cumulative").print_stats(a.profile)
        stats.sort_stats("tottime").print_stats(a.profile)
    else:
        t = time.perf_counter()
        res = simfl.run(sc, progress=False, on_error="raise")
        wall = time.perf_counter() - t
    rounds = res.rounds
    acc = float(rounds["accuracy"].iloc[-1])
    print(
        f"simfl W1: {len(rounds)} rounds in {wall:.3f} s, final accuracy {acc:.4f}, "
        f"simulated {res.meta['sim_time']:.1f} s, stop {res.meta['stop_reason']}",
        file=sys.stderr,
    )
    row = {
        "framework": f"simfl {res.meta['simfl_version']}",
        "rounds": a.rounds,
        "clients": a.clients,
        "per_round": a.per_round,
        "setup_s": round(setup_s, 3),
        "host_wall_s": round(wall, 3),
        "host_wall_s_per_round": round(wall / a.rounds, 5),
        "final_test_acc": round(acc, 4),
        "virtual_clock_end": round(float(res.meta["sim_time"]), 3),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
    }
    print(json.dumps(row))


if __name__ == "__main__":
    main()
