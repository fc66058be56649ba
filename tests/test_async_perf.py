"""The asynchronous benchmark (target 6) runs and its baseline simulates what it claims.

No time is asserted: the rows' ratios are checked to be numbers, not to pass.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

PERF = Path(__file__).resolve().parents[1] / "analysis" / "perf"
sys.path.insert(0, str(PERF))

import async_throughput  # noqa: E402


def test_bare_simpy_baseline_keeps_its_concurrency_busy():
    # 100 slots each running Exp(1) jobs back to back: 20,000 jobs take about 200 s
    jobs = 20_000
    t = async_throughput.bare_simpy(jobs, seed=3)
    assert t == pytest.approx(jobs / async_throughput.CONCURRENCY, rel=0.05)


@pytest.mark.parametrize("name", ["fedbuff", "fedasync"])
def test_simfl_workload_is_the_baselines(name):
    from simfl import Fleet, Scenario, algorithms, dists, run

    sc = Scenario(
        task=None,
        algorithm=algorithms.TimingOnly(),
        fleet=Fleet.homogeneous(async_throughput.FLEET, compute=dists.Exponential(mean=1.0)),
        policy=async_throughput.policy(name),
        rounds=500 if name == "fedbuff" else 5_000,
        seed=3,
    )
    res = run(sc, progress=False)
    # 5,000 jobs of Exp(1) through 100 slots: about 50 s (sd of the mean 1.4%)
    assert res.meta["sim_time"] == pytest.approx(5_000 / async_throughput.CONCURRENCY, rel=0.07)
    assert async_throughput.simfl_timing(name, 200) >= 200  # every job recorded


def test_script_writes_every_row_with_a_numeric_ratio(tmp_path):
    script = str(PERF / "async_throughput.py")
    subprocess.run(
        [sys.executable, script, "--quick", "--repeats", "1", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    rows = json.loads((tmp_path / "async_throughput.json").read_text())["rows"]
    assert [r["target"] for r in rows] == [
        "6 async FedBuff",
        "6 async FedAsync",
        "6 async training",
        "6 async million",
    ]
    for row in rows:
        assert isinstance(row["ratio"], float) and row["ratio"] > 0
        assert row["simfl"] > 0 and row["baseline"] > 0
    assert "5,000 jobs" in rows[3]["setting"]  # every job of the scale run completed
    assert (tmp_path / "async_throughput.csv").exists()
