import json
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd
import pytest

from simfl import Fleet, Results, Scenario, dists, policies, run
from simfl.algorithms import TimingOnly
from tests.helpers import linear_scenario


def test_save_load_round_trips_exactly(tmp_path):
    sc = linear_scenario(
        policy=policies.Deadline(1.0, fraction=0.2), rounds=12, dropout_rate=0.3, bandwidth_up=1e3
    )
    res = run(sc, progress=False)
    out = res.save(tmp_path / "run")
    assert sorted(p.name for p in out.iterdir()) == [
        "clients.parquet",
        "meta.json",
        "rounds.parquet",
    ]
    back = Results.load(out)
    pd.testing.assert_frame_equal(back.rounds, res.rounds, check_exact=True)
    pd.testing.assert_frame_equal(back.clients, res.clients, check_exact=True)
    assert back.rounds.dtypes.equals(res.rounds.dtypes)
    assert back.clients.dtypes.equals(res.clients.dtypes)
    assert back.meta == res.meta
    assert json.loads((out / "meta.json").read_text())["seed"] == 0


def test_load_rejects_other_directories(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a simfl results directory"):
        Results.load(tmp_path)


def test_summary_and_final():
    res = run(linear_scenario(rounds=5), progress=False)
    text = res.summary()
    for word in ("rounds", "sim time", "arrived", "late", "dropped", "final", "distance"):
        assert word in text
    assert res.final()["distance"] == res.rounds["distance"].iloc[-1]


@dataclass(frozen=True)
class SixthRounds(policies.SyncPolicy[None]):
    """Selects every device in rounds 0, 6, 12, ... and nobody in the others."""

    name: ClassVar[str] = "sixth-rounds"

    def plan(self, state: None, view: policies.View) -> tuple[None, policies.RoundPlan]:
        chosen = view.online() if view.round % 6 == 0 else np.zeros(0, dtype=np.int64)
        return state, policies.RoundPlan(chosen)


def timing_run(policy: policies.Policy, rounds: int) -> Results:
    fleet = Fleet.homogeneous(4, dists.Exponential(1.0))
    sc = Scenario(task=None, algorithm=TimingOnly(), fleet=fleet, policy=policy, rounds=rounds)
    return run(sc, progress=False)


def test_a_run_of_mostly_empty_rounds_is_flagged(tmp_path):
    # 166 of 200 rounds select nobody: before, res.ok and nothing said so
    res = timing_run(SixthRounds(), 200)
    assert res.ok  # empty rounds are legitimate ...
    assert res.meta["n_rounds"] == 200 and res.meta["empty_rounds"] == 166  # ... but counted
    assert int((res.rounds["status"] == "empty").sum()) == 166
    (warning,) = res.meta["warnings"]
    assert warning.startswith("166 of 200 rounds were empty")
    assert f"warning    {warning}" in res.summary()
    back = Results.load(res.save(tmp_path / "run"))
    assert back.meta["empty_rounds"] == 166 and back.meta["warnings"] == [warning]
    assert f"warning    {warning}" in back.summary()


def test_empty_rounds_count_rounds_where_nothing_arrived():
    # a 0.1 s deadline on Exp(1) jobs: a round is empty when none of its 4 jobs made it
    res = timing_run(policies.Deadline(0.1), 50)
    empty = int((res.rounds["n_arrived"] == 0).sum())
    assert 25 < empty < 50 and res.meta["empty_rounds"] == empty
    assert len(res.meta["warnings"]) == 1


def test_a_run_with_few_empty_rounds_has_no_warning():
    res = timing_run(SixthRounds(), 1)  # round 0 selects everyone
    assert res.meta["empty_rounds"] == 0 and res.meta["warnings"] == []
    assert "warning" not in res.summary()
    res = timing_run(policies.Deadline(1e3), 10)
    assert res.meta["empty_rounds"] == 0 and res.meta["warnings"] == []
