import json

import pandas as pd
import pytest

from simfl import Results, policies, run
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
