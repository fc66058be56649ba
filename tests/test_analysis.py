"""The analysis scripts run end to end at reduced size and write their figures."""

import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("script", "expect"),
    [
        ("queueing_check.py", "max |relative error|"),
        ("fedrep_linear.py", "reference floor"),
    ],
)
def test_script_runs_quick(script, expect, tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "analysis" / script), "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert expect in done.stdout
    figures = list(tmp_path.glob("*.png"))
    assert len(figures) == 1 and figures[0].stat().st_size > 10_000


@pytest.mark.parametrize("script", ["policy_shootout.py", "srpfl_schedule.py"])
def test_policy_scripts_run_quick(script, tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "analysis" / script),
            "--quick",
            "--seeds",
            "2",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "figure:" in done.stdout
    assert all(f.stat().st_size > 10_000 for f in tmp_path.glob("*.png"))


def test_server_link_reduced():
    sys.path.insert(0, str(ROOT / "analysis"))
    import server_link

    frame = server_link.experiment((5e3, math.inf), seeds=1, rounds=80)
    t = server_link.summarize(frame).set_index(["policy", "capacity"])["mean_time"]
    # a slow shared cloud link makes flat rounds slower; edge aggregation relieves it
    assert t[("flat (wait-all)", 5e3)] > 2 * t[("flat (wait-all)", math.inf)]
    assert t[("edge aggregation", 5e3)] < t[("flat (wait-all)", 5e3)] / 2
    assert t[("edge aggregation", math.inf)] == pytest.approx(
        t[("flat (wait-all)", math.inf)], rel=0.05
    )
