"""The shared-links benchmark runs at a tiny size, and its baseline is the same workload.

No time is asserted (the machines are shared and noisy); the script prints the ratios.
"""

import json
import math
import sys
from pathlib import Path

import numpy as np

PERF = Path(__file__).resolve().parents[1] / "analysis" / "perf"
sys.path.insert(0, str(PERF))

import links_throughput  # noqa: E402
from _perf import report  # noqa: E402

from simfl import run  # noqa: E402


def _expected_round(cohort: int, n: int = 400_000) -> tuple[float, float]:
    """Mean and sd of one unshared round: the slowest of ``cohort`` distinct random devices,
    each its own download + Exp(1) compute + upload (numpy Monte Carlo, rounds with a repeated
    device dropped, as the bare loop draws without replacement)."""
    down, up = links_throughput.fleet_links(10_000)
    stages = links_throughput.SIZE / down + links_throughput.SIZE / up
    rng = np.random.default_rng(123)
    ids = rng.integers(0, 10_000, (n, cohort))
    distinct = (np.diff(np.sort(ids, 1), axis=1) != 0).all(axis=1)
    longest = (stages[ids] + rng.exponential(1.0, (n, cohort))).max(axis=1)[distinct]
    return float(longest.mean()), float(longest.std())


def test_bare_loop_simulates_the_unshared_workload_of_the_scenario():
    # with an unlimited server link every device moves at its own link's speed, as in the
    # bare loop: each one's mean round (the slowest of 10 jobs) is the expected one, computed
    # independently. Per-round sd 1.25 (mean 3.28), so 1600 rounds give an SE of 0.95% (the
    # Monte Carlo's own 0.06% added); tolerance 3.29 SE: a 5% error (>= 5.2 SE) fails with
    # probability >= 97%, a correct loop passes with 99.9%.
    rounds = 1600
    mean, sd = _expected_round(10)
    se = math.hypot(sd / math.sqrt(rounds), sd / math.sqrt(390_000))
    assert se < 0.0096 * mean
    bare = links_throughput.bare_simpy(10, rounds, seed=1) / rounds
    res = run(links_throughput.scenario(10, rounds, "private", seed=1), progress=False)
    for got in (bare, float(res.rounds["duration"].mean())):
        assert abs(got - mean) < 3.29 * se, (got, mean, se)


def test_sharing_the_server_link_makes_rounds_longer():
    private = run(links_throughput.scenario(20, 3, "private"), progress=False)
    shared = run(links_throughput.scenario(20, 3, "star"), progress=False)
    assert (shared.clients["upload"] >= private.clients["upload"] * (1 - 1e-12)).all()
    assert shared.rounds["duration"].sum() > private.rounds["duration"].sum()


def test_measure_writes_rows_with_numeric_ratios(tmp_path):
    rows = links_throughput.measure(repeats=1, sizes=[(5, 2, 0.5), (20, 2, 0.25)], big=30)
    # at each size a star and hierarchies of 10 edges (the cloud binding or not); at the
    # largest also as many edges as devices per round (under a cloud that binds or not), and
    # a tenth as many under a binding cloud
    assert [r["target"] for r in rows] == ["2 shared links"] * 9 + ["7 shared links, one big round"]
    settings = [r["setting"] for r in rows]
    for i, size in ((0, 5), (3, 20)):
        assert settings[i].startswith(f"{size} per round on a star")
        assert settings[i + 1].startswith(
            f"{size} per round on a hierarchy (10 shared edge links under a shared"
        )
        assert settings[i + 2].startswith(
            f"{size} per round on a hierarchy (10 shared edge links under a cloud link that binds"
        )
    assert settings[6].startswith(
        "20 per round on a hierarchy (20 shared edge links under a shared"
    )
    assert settings[7].startswith(
        "20 per round on a hierarchy (2 shared edge links under a cloud link that binds"
    )
    assert settings[8].startswith(
        "20 per round on a hierarchy (20 shared edge links under a cloud link that binds"
    )
    for r in rows:
        assert r["simfl"] > 0 and r["baseline"] > 0
        assert math.isfinite(r["ratio"]) and r["ratio"] > 0
        assert isinstance(r["passed"], bool)
    assert "reference algorithm" in rows[0]["note"]
    report(rows, str(tmp_path), "links_throughput")
    doc = json.loads((tmp_path / "links_throughput.json").read_text())
    assert np.isclose(doc["rows"][0]["ratio"], rows[0]["ratio"])
    assert (tmp_path / "links_throughput.csv").read_text().count("\n") == len(rows) + 1
