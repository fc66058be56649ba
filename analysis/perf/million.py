"""Target 4: a million-device fleet, 10,000 devices per round, 100 rounds of FedAvg.

FedAvg (one local step) on the linear representation task (d=20, k=2, 10 fresh samples per
client per round, all generated from each client's key when it is selected: nothing is held
per device but the fleet's columns), on a 1,000,000-device Exp(1) fleet, 10,000 devices per
round, 100 rounds: a million device jobs, every one recorded. Goal: under 60 s and 2 GB peak
RSS. Prints one JSON object as its last line (the suite and the scaling curves run this file in
a fresh process, so the peak RSS is this run's own).

    python analysis/perf/million.py [--devices 1000000] [--cohort 10000] [--rounds 100]
"""

from __future__ import annotations

import time

T0 = time.perf_counter()

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402

from simfl import Fleet, Scenario, algorithms, dists, policies, run, tasks  # noqa: E402


def peak_rss_mb() -> float:
    """Peak RSS of this process, MiB: ``VmHWM`` (reset by exec, unlike ``ru_maxrss``, which a
    child started from a big parent inherits), else ``ru_maxrss``."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--devices", type=int, default=1_000_000)
    p.add_argument("--cohort", type=int, default=10_000)
    p.add_argument("--rounds", type=int, default=100)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--eval-clients", type=int, default=1000, help="clients evaluated")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--marginal",
        action="store_true",
        help="also run a quarter of the rounds first (after a warm-up run) and report the "
        "marginal seconds per round (one-time costs cancel out)",
    )
    a = p.parse_args()
    imported = time.perf_counter() - T0
    t = time.perf_counter()
    sc = Scenario(
        name="million",
        task=tasks.LinearRepresentation(
            d=20, k=2, samples_per_client=10, noise_std=1e-3, eval_clients=a.eval_clients
        ),
        algorithm=algorithms.FedAvg(),
        fleet=Fleet.homogeneous(a.devices, compute=dists.Exponential(mean=1.0)),
        policy=policies.WaitAll(count=a.cohort),
        rounds=a.rounds,
        eval_every=a.eval_every,
        seed=a.seed,
    )
    built = time.perf_counter() - t
    marginal = None
    if a.marginal:
        short = max(1, a.rounds // 4)
        run(dataclasses.replace(sc, rounds=short), progress=False)  # warm-up (lazy imports)
        t = time.perf_counter()
        run(dataclasses.replace(sc, rounds=short), progress=False)
        t_short = time.perf_counter() - t
    t = time.perf_counter()
    res = run(sc, progress=False)
    wall = time.perf_counter() - t
    if a.marginal and a.rounds > short:
        marginal = (wall - t_short) / (a.rounds - short)
    jobs = len(res.clients)
    assert jobs == a.rounds * a.cohort, jobs
    last = res.rounds.iloc[-1]
    print(
        json.dumps(
            {
                "devices": a.devices,
                "cohort": a.cohort,
                "rounds": a.rounds,
                "jobs": jobs,
                "import_s": round(imported, 3),
                "build_s": round(built, 3),
                "run_s": round(wall, 3),
                "s_per_round": wall / a.rounds,
                "marginal_s_per_round": marginal,
                "total_s": round(time.perf_counter() - T0, 3),
                "peak_rss_mb": round(peak_rss_mb(), 1),
                "sim_time": float(res.meta["sim_time"]),
                "final_distance": float(last["distance"]),
                "final_test_mse": float(last["test_mse"]),
            }
        )
    )


if __name__ == "__main__":
    main()
