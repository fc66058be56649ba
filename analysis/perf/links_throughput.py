"""Shared links (the suite's link targets): timing-only rounds over a shared network.

Synchronous rounds of timing-only jobs (100 kB each way, Exp(1) compute) from a fleet whose
access links are unequal (uniform 0.1 to 1 MB/s up, four times that down), device-jobs
simulated per second of host time by

* ``bare SimPy``: the baseline, as in ``engine_throughput.py``: one process per job, one
  timeout per stage (download, compute, upload at the device's own link speed: no sharing),
  the server waiting for all of them; it records nothing;
* ``simfl``: ``simfl.run`` of the same cohorts on a star whose server link all transfers share
  (``Network.star``: 20 kB/s up and 200 kB/s down per device of the cohort, so the server
  link is the bottleneck for most devices and the access link for the slowest), exact max-min
  fair sharing; and on a hierarchy (10 edge servers whose links to the cloud are shared, under
  a cloud link that is shared too: two nested levels);
* the reference algorithm (``run(..., reference_links=True)``), for scale, in the notes;
* the same simfl rounds on the Python sources of the modules mypyc compiles (a subprocess with
  ``SIMFL_PURE_PYTHON=1``, interleaved with the others), in the notes, where the compiled ones
  run (``simfl.engine.flows._native``).

Host time is taken between the first and the last aggregation (``run(progress=callable)``),
so building the topology (once per run) is left out; the bare loop has no set-up.

Goals: simfl / bare >= 0.5 at 100 devices per round, >= 0.25 at 1,000 per round (star and
hierarchy alike), and a round of 10,000 devices in under 1 s of host time.

    python analysis/perf/links_throughput.py [--quick] [--repeats 3]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import simpy

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _perf import parser, report, shown

SIZE = 100_000  # bytes each way
EDGES = 10


def fleet_links(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Unequal access links: (down, up) bytes/s of ``n`` devices."""
    up = np.random.default_rng(seed).uniform(1e5, 1e6, n)
    return 4.0 * up, up


def bare_simpy(cohort: int, rounds: int, seed: int = 0) -> float:
    """The baseline: one process per job, one timeout per stage, no sharing. Returns sim time."""
    fleet = max(10 * cohort, 10_000)
    down, up = fleet_links(fleet)
    rng = np.random.default_rng(seed)
    env = simpy.Environment()

    def job(d: float, c: float, u: float):  # type: ignore[no-untyped-def]
        yield env.timeout(d)
        yield env.timeout(c)
        yield env.timeout(u)

    def server():  # type: ignore[no-untyped-def]
        for _ in range(rounds):
            ids = rng.choice(fleet, cohort, replace=False)
            comp = rng.exponential(1.0, cohort)
            jobs = [
                env.process(job(SIZE / down[i], c, SIZE / up[i]))
                for i, c in zip(ids, comp, strict=True)
            ]
            yield env.all_of(jobs)

    env.process(server())
    env.run()
    return float(env.now)


def scenario(
    cohort: int, rounds: int, kind: str = "star", seed: int = 0, edges: int = EDGES
) -> Any:
    """The simfl scenario on a network of ``kind``.

    ``star`` (the server link shared), ``hier`` (edge links shared, the cloud unlimited),
    ``nested`` (edge and cloud links both shared; the cloud, twice the edges' sum, does not
    bind here), ``tight`` (the edges three times the star's server link in all, the cloud
    half of it: the cloud binds, and its tree is solved over both levels) or ``private`` (a
    star with an unlimited server link: every device at its own link's speed, the bare
    loop's workload). A hierarchy has ``edges`` edge servers (device ``i`` under edge
    ``i % edges``), whose links share the edges' total equally.
    """
    from simfl import Fleet, Scenario, algorithms, dists, policies
    from simfl.network import Network

    n = max(10 * cohort, 10_000)
    down, up = fleet_links(n)
    fleet = Fleet(
        [dists.Exponential(mean=1.0)],
        np.zeros(n, dtype=np.int64),
        bandwidth_down=down,
        bandwidth_up=up,
    )
    server_up, server_down = 2e4 * cohort, 2e5 * cohort
    if kind == "private":
        network = Network.star()
    elif kind == "star":
        network = Network.star(server_up=server_up, server_down=server_down)
    else:
        total = 3.0 if kind == "tight" else 1.0  # the edges' links together, in server links
        edge_up, edge_down = total * server_up / edges, total * server_down / edges
        cloud = {
            "nested": (2 * server_up, 2 * server_down),
            "tight": (server_up / 2, server_down / 2),
        }
        cloud_up, cloud_down = cloud.get(kind, (np.inf, np.inf))
        network = Network.hierarchical(
            np.arange(n) % edges,
            edge_up=edge_up,
            edge_down=edge_down,
            server_up=cloud_up,
            server_down=cloud_down,
        )
    return Scenario(
        task=None,
        algorithm=algorithms.TimingOnly(bytes_down=SIZE, bytes_up=SIZE),
        fleet=fleet,
        policy=policies.WaitAll(count=cohort),
        rounds=rounds,
        network=network,
        seed=seed,
    )


def simfl_rounds(
    cohort: int,
    rounds: int,
    kind: str = "star",
    seed: int = 0,
    reference: bool = False,
    edges: int = EDGES,
) -> float:
    """Host seconds per round of the simfl scenario (first to last aggregation)."""
    from simfl import run

    stamps: list[float] = []
    res = run(
        scenario(cohort, rounds, kind, seed, edges),
        progress=lambda _: stamps.append(time.perf_counter()),
        reference_links=reference,
    )
    assert len(res.clients) == rounds * cohort and res.ok
    return (stamps[-1] - stamps[0]) / (len(stamps) - 1)


def pure_rounds(cohort: int, rounds: int, kind: str, seed: int, edges: int = EDGES) -> float | None:
    """:func:`simfl_rounds` on the Python sources (``None`` where they are what runs anyway)."""
    from simfl.engine.flows import _native

    if not _native.ACTIVE:
        return None
    done = subprocess.run(
        [sys.executable, __file__, "--pure-rounds", *map(str, (cohort, rounds, kind, seed, edges))],
        env={**os.environ, "SIMFL_PURE_PYTHON": "1"},
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout.split()[-1])


def bare_rounds(cohort: int, rounds: int, seed: int = 0) -> float:
    """Host seconds per round of the bare loop."""
    t = time.perf_counter()
    bare_simpy(cohort, rounds, seed)
    return (time.perf_counter() - t) / rounds


def _row(
    setting: str, simfl_s: list[float], bare_s: list[float], cohort: int, goal: float, note: str
) -> dict[str, Any]:
    ratio = statistics.median(b / s for s, b in zip(simfl_s, bare_s, strict=True))
    return {
        "target": "2 shared links",
        "setting": setting,
        "simfl": round(cohort / statistics.median(simfl_s)),
        "baseline": round(cohort / statistics.median(bare_s)),
        "unit": "device-jobs/s",
        "ratio": shown(ratio, 3, at_least=True),
        "goal": f"simfl/bare >= {goal}",
        "passed": ratio >= goal,
        "note": note,
    }


def measure(
    quick: bool = False,
    repeats: int = 3,
    sizes: list[tuple[int, int, float]] | None = None,
    big: int | None = None,
) -> list[dict[str, Any]]:
    """The rows: star and hierarchy at 100 and 1,000 per round, 10,000 in one round.

    Each size on a star and on hierarchies of 10 edges whose cloud link binds or not; at
    the largest also hierarchies of as many edges as devices per round (about one flow per
    edge link: a flow event must not cost a pass over the edges), under a cloud that binds
    (its tree solved at every event) or not, and of a tenth as many edges under a binding
    cloud. ``sizes`` (cohort, rounds, goal) and ``big`` (the one-round cohort) override the
    sizes.
    """
    if sizes is None:
        sizes = [(20, 4, 0.5), (100, 3, 0.25)] if quick else [(100, 30, 0.5), (1000, 6, 0.25)]
    rows = []
    for cohort, rounds, goal in sizes:
        # the goals hold for hierarchies likewise: a cloud that binds or not, few or many edges
        networks = [("star", EDGES), ("nested", EDGES), ("tight", EDGES)]
        if cohort == sizes[-1][0]:
            networks += [("nested", cohort), ("tight", cohort // 10), ("tight", cohort)]
        for kind, edges in networks:
            simfl_s, bare_s, pure_s = [], [], []
            for rep in range(repeats):
                bare_s.append(bare_rounds(cohort, max(rounds, 10), rep))
                simfl_s.append(simfl_rounds(cohort, rounds + 1, kind, rep, edges=edges))
                pure_s.append(pure_rounds(cohort, rounds + 1, kind, rep, edges))
            ref = simfl_rounds(cohort, 2, kind, 0, reference=True, edges=edges)
            speedup = ref / statistics.median(simfl_s)
            note = f"reference algorithm {ref * 1e3:.0f} ms/round: fast path {speedup:.1f}x"
            if None not in pure_s:
                pure = [p for p in pure_s if p is not None]
                compiled = statistics.median(p / s for p, s in zip(pure, simfl_s, strict=True))
                to_bare = statistics.median(b / p for p, b in zip(pure, bare_s, strict=True))
                note += (
                    f"; Python sources (not compiled) {round(cohort / statistics.median(pure))} "
                    f"device-jobs/s, ratio {to_bare:.3f}: compiled {compiled:.2f}x"
                )
            else:
                from simfl.engine.flows import _native

                note += f"; not compiled here ({_native.WHY_PURE})"
            where = {
                "star": "a star (server link shared)",
                "nested": f"a hierarchy ({edges:,} shared edge links under a shared cloud link)",
                "tight": f"a hierarchy ({edges:,} shared edge links under a cloud link that binds)",
            }[kind]
            rows.append(
                _row(
                    f"{cohort:,} per round on {where}, unequal access links, {rounds} rounds",
                    simfl_s,
                    bare_s,
                    cohort,
                    goal,
                    note,
                )
            )
    if big is None:
        big = 1000 if quick else 10_000
    per_round = statistics.median(
        simfl_rounds(big, 2, "star", rep) for rep in range(max(1, repeats - 1))
    )
    nested = simfl_rounds(big, 2, "nested", 0)
    rows.append(
        {
            "target": "7 shared links, one big round",
            "setting": f"{big:,} devices in one round on a star with unequal access links",
            "simfl": shown(per_round, 4, at_least=False),
            "baseline": 1.0,
            "unit": "s per round (host)",
            "ratio": shown(per_round, 4, at_least=False),
            "goal": "< 1 s",
            "passed": per_round < 1.0,
            "note": f"on the two-level hierarchy (edge and cloud links shared): "
            f"{nested:.3f} s per round",
        }
    )
    return rows


if __name__ == "__main__":
    if sys.argv[1:2] == ["--pure-rounds"]:  # pure_rounds's subprocess
        cohort, rounds, kind, seed, edges = sys.argv[2:7]
        print(simfl_rounds(int(cohort), int(rounds), kind, int(seed), edges=int(edges)))
        sys.exit(0)
    args = parser(__doc__).parse_args()
    report(measure(args.quick, args.repeats), args.out, "links_throughput")
