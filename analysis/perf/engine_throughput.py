"""Target 1: engine throughput (timing only) against a bare SimPy loop.

Synchronous rounds of 100 device jobs drawn from a 10,000-device fleet with Exp(1) compute
times, no training math: device-jobs simulated per second of host time by

* ``bare SimPy``: the baseline, a dozen lines below: one process per job, one timeout per
  stage (download, compute, upload), the server waiting for all of them; it records nothing;
* ``simfl``: ``simfl.run`` of the same workload (default: batched rounds, no job events);
  every job and round is recorded and the result is a pair of DataFrames;
* ``simfl, one process per job``: ``simfl.run(..., batched=False)``, for reference.

The ratio simfl / bare (median over interleaved repeats) should be at least 2.

    python analysis/perf/engine_throughput.py [--quick] [--repeats 5]
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import simpy

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _perf import parser, report, shown

FLEET, COHORT = 10_000, 100


def bare_simpy(rounds: int, seed: int = 0) -> float:
    """The baseline: one SimPy process per job, one timeout per stage. Returns sim time."""
    rng = np.random.default_rng(seed)
    env = simpy.Environment()

    def job(down: float, compute: float, up: float):  # type: ignore[no-untyped-def]
        yield env.timeout(down)
        yield env.timeout(compute)
        yield env.timeout(up)

    def server():  # type: ignore[no-untyped-def]
        for _ in range(rounds):
            rng.choice(FLEET, COHORT, replace=False)  # the cohort
            jobs = [env.process(job(0.0, c, 0.0)) for c in rng.exponential(1.0, COHORT)]
            yield env.all_of(jobs)

    env.process(server())
    env.run()
    return float(env.now)


def simfl_timing(rounds: int, seed: int = 0, batched: bool = True) -> float:
    """The same workload in simfl; returns the simulated time."""
    from simfl import Fleet, Scenario, algorithms, dists, policies, run

    sc = Scenario(
        task=None,
        algorithm=algorithms.TimingOnly(),
        fleet=Fleet.homogeneous(FLEET, compute=dists.Exponential(mean=1.0)),
        policy=policies.WaitAll(count=COHORT),
        rounds=rounds,
        seed=seed,
    )
    res = run(sc, progress=False, batched=batched)
    assert len(res.clients) == rounds * COHORT
    return float(res.meta["sim_time"])


def measure(quick: bool = False, repeats: int = 5) -> list[dict[str, Any]]:
    """Jobs per second of the three, interleaved; medians and the median ratio."""
    rounds = 200 if quick else 2000
    runs = {
        "bare": lambda s: bare_simpy(rounds, s),
        "simfl": lambda s: simfl_timing(rounds, s),
        "processes": lambda s: simfl_timing(rounds, s, batched=False),
    }
    rate: dict[str, list[float]] = {k: [] for k in runs}
    simfl_timing(5)
    for rep in range(repeats):
        for name, fn in runs.items():
            t = time.perf_counter()
            fn(rep)
            rate[name].append(rounds * COHORT / (time.perf_counter() - t))
    ratio = statistics.median(s / b for s, b in zip(rate["simfl"], rate["bare"], strict=True))
    ratio_p = statistics.median(s / b for s, b in zip(rate["processes"], rate["bare"], strict=True))
    med = {k: round(statistics.median(v)) for k, v in rate.items()}
    setting = f"{COHORT}-job rounds, {FLEET:,}-device Exp(1) fleet, {rounds} rounds"
    return [
        {
            "target": "1 engine throughput",
            "setting": setting,
            "simfl": med["simfl"],
            "baseline": med["bare"],
            "unit": "device-jobs/s",
            "ratio": shown(ratio, 2, at_least=True),
            "goal": "simfl/bare >= 2",
            "passed": ratio >= 2,
            "note": f"simfl with one process per job: {med['processes']} jobs/s "
            f"({ratio_p:.2f}x bare)",
        }
    ]


if __name__ == "__main__":
    args = parser(__doc__).parse_args()
    report(measure(args.quick, args.repeats), args.out, "engine_throughput")
