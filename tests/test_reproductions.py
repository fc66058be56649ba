"""The SRPFL reproductions of issue 3 at reduced size (full size: the scripts in analysis/)."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analysis"))

import srpfl_schedule
import srpfl_speedup


def test_expected_schedule_times_match_the_reference():
    srpfl, fedrep = srpfl_schedule.expected_times(100, 10, 10, 40)
    assert srpfl == pytest.approx(24.24, abs=0.01)  # algorithms.md 3.2
    assert fedrep == pytest.approx(207.5, abs=0.05)


def test_schedule_matches_order_statistics_within_5_percent():
    table, _ = srpfl_schedule.measure(n=20, n0=5, tau=5, rounds=15, seeds=120)
    assert (table["rel. error %"].abs() < 5.0).all(), table
    assert table["ours (mean)"].iloc[0] < table["ours (mean)"].iloc[1] / 2


def test_speedup_grows_with_n_and_srpfl_ends_as_accurate():
    frame = srpfl_speedup.experiment((25, 100, 400), seeds=3, rounds=srpfl_speedup.ROUNDS)
    table = srpfl_speedup.speedups(frame, srpfl_speedup.ROUNDS)
    for _, t in table.groupby("target"):
        assert (np.diff(t["speedup"].to_numpy()) > 0).all(), t
        assert (t["speedup"].iloc[1:] > 1.5).all()
        assert (t["final srpfl"] <= 1.05 * t["final fedrep"]).all()
        assert (t["reached (fedrep/srpfl)"] == "3/3").all()
