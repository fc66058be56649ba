"""Workload W3 side by side: simfl (loop and cohort trainers) and pfl-research, interleaved.

Runs ``w3_simfl.py --trainer loop``, ``w3_simfl.py --trainer cohort`` and ``w3_pfl.py`` (pfl
0.6.0 in its own virtualenv) once per seed of ``--seeds``, and the loop and pfl once per seed of
``--more-seeds`` (more accuracy samples, more timing repetitions), the runs of a seed one after
another in an order that rotates from seed to seed, so that the machine's load falls on each
alike; writes every
run's JSON row to ``results/w3_runs.jsonl`` and the medians, ratios and accuracies to
``results/w3_summary.json``::

    SIMFL_PEERS=/work/shared/peers python analysis/perf/w3_compare.py --rounds 20 \\
        --pfl-python /work/venv-pfl/bin/python --seeds 0 1 2 8 9 10 --more-seeds 3 4 5 6 7
    python analysis/perf/w3_compare.py --summarize     # the summary again from the rows

Every seed is both a timing repetition and an accuracy sample: a round's work does not depend
on the seed (10 clients of 600 images, 12 minibatches each; evaluations at the same rounds), and
``--seed`` sets what both frameworks share (the shards, the initial ResNet) and each one's own
client sampling and batch order. Speed: medians over the seeds of ``host_wall_s_per_round``
(wall time of the training loop, evaluations included, per round) and ``host_cpu_s_per_round``
(the process's CPU time over the same loop: with one thread, about what the wall time would be
on an otherwise idle machine; the machine is shared, and CPU time too grows with what else runs,
through the shared caches). Accuracy: each run's final test accuracy; pfl's
seed-to-seed spread is the range (max - min) of its final accuracies over the seeds, and simfl's
accuracy at a seed is within it where ``|simfl - pfl|`` at that seed is at most that range.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
RUNS = RESULTS / "w3_runs.jsonl"
SUMMARY = RESULTS / "w3_summary.json"
#: The runs of one seed: name -> (script, its own flags).
VARIANTS = {
    "simfl-loop": ("w3_simfl.py", "--trainer loop"),
    "simfl-cohort": ("w3_simfl.py", "--trainer cohort"),
    "pfl": ("w3_pfl.py", ""),
}


def run_once(name: str, command: list[str], env: dict[str, str]) -> dict[str, Any] | None:
    """One run's JSON row (its last stdout line) plus its process wall time, or ``None``."""
    t = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=HERE, env=env)
    lines = done.stdout.strip().splitlines()
    try:
        row: dict[str, Any] = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        sys.stderr.write(f"{name} failed (rc={done.returncode}):\n{done.stderr[-3000:]}\n")
        return None
    row.update(peer=name, process_wall_s=round(time.perf_counter() - t, 3))
    return row


def measure(a: argparse.Namespace) -> list[dict[str, Any]]:
    """Run every variant once per seed, interleaved; the rows (also appended to ``a.out``)."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    pythons = {"simfl-loop": a.simfl_python, "simfl-cohort": a.simfl_python, "pfl": a.pfl_python}
    plan = [(seed, [n for n in VARIANTS if n in a.only]) for seed in a.seeds]
    plan += [(seed, [n for n in VARIANTS if n in a.more_only]) for seed in a.more_seeds]
    rows = []
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if not a.append:
        out.write_text("")
    for rep, (seed, names) in enumerate(plan):
        order = names[rep % len(names) :] + names[: rep % len(names)]
        for name in order:
            script, own = VARIANTS[name]
            flags = (
                f"--rounds {a.rounds} --clients {a.clients} --per-round {a.per_round} "
                f"--seed {seed} --eval-every {a.eval_every} {own} {a.extra}"
            )
            command = [*shlex.split(pythons[name]), str(HERE / script), *shlex.split(flags)]
            started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
            load = os.getloadavg()[0]
            row = run_once(name, command, env)
            if row is None:
                continue
            row.update(
                workload="w3",
                seed=seed,
                repeat=rep,
                started_utc=started,
                load1_before=round(load, 2),
                load1_after=round(os.getloadavg()[0], 2),
            )
            rows.append(row)
            with out.open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(
                f"# w3 seed {seed} {name}: {row['host_wall_s_per_round']} s/round wall, "
                f"{row['host_cpu_s_per_round']} s/round CPU, accuracy {row['final_test_acc']}, "
                f"load {load:.2f}",
                file=sys.stderr,
                flush=True,
            )
    return rows


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 5) if values else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 4) if a is not None and b else None


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians per variant, the speed ratios and the accuracy comparison.

    ``ratios`` divide two variants' medians over the seeds that both ran; ``paired_ratios`` are
    the medians over those seeds of the ratio of their two runs of a seed (run close together in
    time, so under similar load); the speed verdict takes the paired wall-time ratio.
    """
    peers: dict[str, Any] = {}
    for name in VARIANTS:
        mine = [r for r in rows if r["peer"] == name]
        if not mine:
            continue
        wall = [r["host_wall_s_per_round"] for r in mine]
        cpu = [r["host_cpu_s_per_round"] for r in mine]
        peers[name] = {
            "framework": mine[0]["framework"],
            "runs": len(mine),
            "rounds": sorted({r["rounds"] for r in mine}),
            "host_wall_s_per_round": _median(wall),
            "host_wall_s_per_round_range": [min(wall), max(wall)],
            "host_cpu_s_per_round": _median(cpu),
            "host_cpu_s_per_round_range": [min(cpu), max(cpu)],
            "setup_s": _median([r["setup_s"] for r in mine]),
            "peak_rss_mb": _median([r["peak_rss_mb"] for r in mine]),
            "final_test_acc_by_seed": {str(r["seed"]): r["final_test_acc"] for r in mine},
            "final_test_acc_median": _median([r["final_test_acc"] for r in mine]),
            "load1_before": [r["load1_before"] for r in mine],
        }

    by_seed = {name: {r["seed"]: r for r in rows if r["peer"] == name} for name in VARIANTS}
    ratios: dict[str, float | None] = {}
    paired: dict[str, Any] = {}
    for a, b in (("simfl-loop", "pfl"), ("simfl-cohort", "pfl"), ("simfl-cohort", "simfl-loop")):
        seeds = sorted(set(by_seed[a]) & set(by_seed[b]))
        for key in ("host_wall_s_per_round", "host_cpu_s_per_round"):
            mine = [by_seed[a][s][key] for s in seeds]
            theirs = [by_seed[b][s][key] for s in seeds]
            ratios[f"{a}/{b} {key}"] = _ratio(_median(mine), _median(theirs))
            values = [x / y for x, y in zip(mine, theirs, strict=True)]
            paired[f"{a}/{b} {key}"] = {
                "median": _median(values),
                "by_seed": {str(s): round(v, 4) for s, v in zip(seeds, values, strict=True)},
            }
    pfl_acc = peers.get("pfl", {}).get("final_test_acc_by_seed", {})
    accuracy: dict[str, Any] = {}
    if pfl_acc:
        low, high = min(pfl_acc.values()), max(pfl_acc.values())
        spread = round(high - low, 4)
        accuracy = {"pfl_min": low, "pfl_max": high, "pfl_spread": spread}
        for name in VARIANTS:
            values = list(peers.get(name, {}).get("final_test_acc_by_seed", {}).values())
            if len(values) > 1:
                accuracy[f"{name}_mean_sd"] = [
                    round(statistics.mean(values), 4),
                    round(statistics.stdev(values), 4),
                ]
        for name in ("simfl-loop", "simfl-cohort"):
            ours = peers.get(name, {}).get("final_test_acc_by_seed", {})
            diffs = {s: round(v - pfl_acc[s], 4) for s, v in ours.items() if s in pfl_acc}
            accuracy[name] = {
                "minus_pfl_by_seed": diffs,
                "within_spread_by_seed": {s: abs(d) <= spread for s, d in diffs.items()},
                "inside_pfl_range_by_seed": {s: low <= v <= high for s, v in ours.items()},
            }
    loop_wall = paired["simfl-loop/pfl host_wall_s_per_round"]["median"]
    acc_ok = accuracy.get("simfl-loop", {}).get("within_spread_by_seed", {})
    return {
        "workload": "W3: docs ResNet (GroupNorm, 35,242 parameters) on Fashion-MNIST shards, "
        "100 clients, 10 a round, 1 epoch, batch 50, SGD lr 0.05 (no momentum, no weight "
        "decay), size-weighted FedAvg, eval on the 10,000 test images",
        "seeds": sorted({r["seed"] for r in rows}),
        "peers": peers,
        "ratios": ratios,
        "paired_ratios": paired,
        "accuracy": accuracy,
        "acceptance": {
            "simfl (loop, the CPU default) at least as fast per round (host wall, paired)": (
                None if loop_wall is None else loop_wall <= 1.0
            ),
            "simfl (loop) accuracy within pfl's seed-to-seed spread at every seed": (
                bool(acc_ok) and all(acc_ok.values())
            ),
        },
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
    }


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The comparison's flags."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--clients", type=int, default=100)
    p.add_argument("--per-round", type=int, default=10)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2], help="seeds of --only")
    p.add_argument("--only", default=",".join(VARIANTS), help="comma list of variants")
    p.add_argument(
        "--more-seeds", type=int, nargs="*", default=[], help="further seeds, of --more-only"
    )
    p.add_argument("--more-only", default="simfl-loop,pfl", help="comma list of variants")
    p.add_argument("--extra", default="", help="flags appended to every command")
    p.add_argument("--simfl-python", default=sys.executable)
    p.add_argument(
        "--pfl-python",
        default=os.environ.get("PFL_PYTHON", "/work/venv-pfl/bin/python"),
        help="pfl-research's virtualenv interpreter",
    )
    p.add_argument("--out", default=str(RUNS), help="JSON-lines file of the rows")
    p.add_argument("--summary", default=str(SUMMARY), help="the summary JSON file")
    p.add_argument("--append", action="store_true", help="append to --out instead of replacing")
    p.add_argument("--summarize", action="store_true", help="only summarise the rows in --out")
    a = p.parse_args(argv)
    for flag in ("only", "more_only"):
        chosen = [s for s in getattr(a, flag).split(",") if s]
        unknown = set(chosen) - set(VARIANTS)
        if unknown:
            p.error(f"--{flag.replace('_', '-')}: unknown variants {sorted(unknown)}")
        setattr(a, flag, chosen)
    return a


def main(argv: list[str] | None = None) -> None:
    a = parse(argv)
    if not a.summarize:
        measure(a)
    rows = [json.loads(line) for line in Path(a.out).read_text().splitlines() if line.strip()]
    summary = summarize(rows)
    Path(a.summary).write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary["ratios"]))
    print(json.dumps(summary["acceptance"]))


if __name__ == "__main__":
    main()
