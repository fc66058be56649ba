"""Target: throughput under on/off availability (timing only) against a bare SimPy loop.

Synchronous rounds of 100 device jobs drawn from a 10,000-device fleet with Exp(1) compute
times, devices going on and off (``Availability.exponential``: Exp on and off periods), no
training math: device-jobs simulated per second of host time by

* ``bare SimPy``: the baseline of ``engine_throughput.py`` (one process per job, one timeout
  per stage, the server waiting for all of them; it records nothing and ignores availability);
* ``simfl abort`` and ``simfl pause``: ``simfl.run`` with a job whose device goes offline
  aborted, or paused until the device is back (default: rounds resolved from the jobs' plans
  and the devices' intervals, no job events); every job and round is recorded;
* ``simfl live``: ``simfl.run(..., batched=False)``, every job a live SimPy process stage by
  stage (the reference the resolved path must equal), for reference.

The ratio simfl / bare (median over interleaved repeats) should be at least 1 in both modes.
The availability is generated once, outside the timed runs.

    python analysis/perf/availability_throughput.py [--quick] [--repeats 5]
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _perf import parser, report, shown
from engine_throughput import COHORT, FLEET, bare_simpy

#: Mean on and off periods (seconds) of the devices: online 10/11 of the time; a job of 1 s
#: meets an off period with probability about 1/200.
MEAN_ON, MEAN_OFF = 200.0, 20.0
#: Simulated seconds per round the generated intervals cover (rounds last about 5 to 25 s).
SECONDS_PER_ROUND = 60.0


def availability(rounds: int, fleet: int = FLEET) -> Any:
    """The fleet's on/off intervals, long enough for ``rounds`` rounds in either mode."""
    from simfl.fleet import Availability

    horizon = rounds * SECONDS_PER_ROUND
    return Availability.exponential(
        fleet, mean_on=MEAN_ON, mean_off=MEAN_OFF, horizon=horizon, seed=1
    )


def simfl_availability(
    av: Any, mode: str, rounds: int, seed: int = 0, batched: bool = True, fleet: int = FLEET
) -> float:
    """The workload in simfl with ``av`` and offline ``mode``; returns the simulated time."""
    from simfl import Fleet, Scenario, algorithms, dists, policies, run

    devices = Fleet.homogeneous(fleet, compute=dists.Exponential(mean=1.0))
    sc = Scenario(
        task=None,
        algorithm=algorithms.TimingOnly(),
        fleet=devices.with_availability(av, mode),
        policy=policies.WaitAll(count=COHORT),
        rounds=rounds,
        seed=seed,
    )
    res = run(sc, progress=False, batched=batched)
    assert len(res.clients) == rounds * COHORT, res.meta["stop_reason"]
    return float(res.meta["sim_time"])


def measure(
    quick: bool = False, repeats: int = 5, rounds: int | None = None, fleet: int = FLEET
) -> list[dict[str, Any]]:
    """Jobs per second of bare SimPy and simfl in both modes (and live), interleaved."""
    rounds = rounds or (100 if quick else 1000)
    av = availability(rounds, fleet)
    runs = {
        "bare": lambda s: bare_simpy(rounds, s),
        "abort": lambda s: simfl_availability(av, "abort", rounds, s, fleet=fleet),
        "pause": lambda s: simfl_availability(av, "pause", rounds, s, fleet=fleet),
        "live abort": lambda s: simfl_availability(av, "abort", rounds, s, False, fleet),
        "live pause": lambda s: simfl_availability(av, "pause", rounds, s, False, fleet),
    }
    rate: dict[str, list[float]] = {k: [] for k in runs}
    simfl_availability(av, "abort", 5, fleet=fleet)  # imports and first-call costs
    for rep in range(repeats):
        for name, fn in runs.items():
            t = time.perf_counter()
            fn(rep)
            rate[name].append(rounds * COHORT / (time.perf_counter() - t))
    med = {k: round(statistics.median(v)) for k, v in rate.items()}
    rows = []
    for mode in ("abort", "pause"):
        ratio = statistics.median(s / b for s, b in zip(rate[mode], rate["bare"], strict=True))
        live = statistics.median(
            s / b for s, b in zip(rate[f"live {mode}"], rate["bare"], strict=True)
        )
        rows.append(
            {
                "target": f"availability throughput ({mode})",
                "setting": f"{COHORT}-job rounds, {fleet:,}-device Exp(1) fleet, on/off "
                f"Exp({MEAN_ON:g})/Exp({MEAN_OFF:g}) s, {mode}, {rounds} rounds",
                "simfl": med[mode],
                "baseline": med["bare"],
                "unit": "device-jobs/s",
                "ratio": shown(ratio, 2, at_least=True),
                "goal": "simfl/bare >= 1",
                "passed": ratio >= 1,
                "note": f"live reference (one process per job): {med[f'live {mode}']} "
                f"jobs/s ({live:.2f}x bare)",
            }
        )
    return rows


if __name__ == "__main__":
    args = parser(__doc__).parse_args()
    report(measure(args.quick, args.repeats), args.out, "availability_throughput")
