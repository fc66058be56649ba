import math
import pickle

import numpy as np
import pytest

from simfl import Scenario, algorithms, policies, run
from simfl.fleet import fleet_from_fedscale, load_pickle, sample_trace, trace_intervals

CAPACITY = {
    7: {"computation": 50.0, "communication": 800.0},
    3: {"computation": 200.0, "communication": 100.0},
}
BEHAVE = {
    7: {
        "active": [0, 100],
        "inactive": [40, 150],
        "finish_time": 200,
        "duration": 200,
        "model": "x",
    },
    3: {"active": [10], "inactive": [190], "finish_time": 200, "duration": 200, "model": "y"},
}


def test_capacity_and_behaviour_become_fleet_columns_and_intervals(tmp_path):
    for name, data in (("cap", CAPACITY), ("beh", BEHAVE)):
        with (tmp_path / name).open("wb") as fh:
            pickle.dump(data, fh)
    fleet = fleet_from_fedscale(
        tmp_path / "cap", tmp_path / "beh", samples_per_unit=20, horizon=450.0
    )
    # devices in sorted client-id order: 3, then 7
    np.testing.assert_allclose(fleet.mean_compute, [3 * 0.200 * 20, 3 * 0.050 * 20])
    np.testing.assert_allclose(fleet.bandwidth_up, [100 * 1024 / 8, 800 * 1024 / 8])
    s, e = fleet.availability.intervals(1)
    assert s.tolist() == [0, 100, 200, 300, 400] and e.tolist() == [40, 150, 240, 350, 440]
    assert trace_intervals(BEHAVE[3], 400.0) == [(10.0, 190.0), (210.0, 390.0)]
    no_trace = fleet_from_fedscale(CAPACITY, samples_per_unit=1)
    assert no_trace.availability is None and no_trace.size == 2


def test_replaying_the_sample_trace_respects_its_intervals_exactly():
    cap, beh = sample_trace()
    fleet = fleet_from_fedscale(cap, beh, samples_per_unit=50, horizon=3 * 86_400.0)
    sc = Scenario(
        task=None,
        algorithm=algorithms.TimingOnly(bytes_up=200_000),
        fleet=fleet,
        policy=policies.WaitAll(count=10),
        rounds=60,
    )
    jobs = run(sc, progress=False).clients
    av = fleet.availability
    assert (jobs["status"] == "dropped").any()
    for _, job in jobs.iterrows():
        d = int(job["device"])
        assert av.is_on(d, job["t_start"])
        starts, ends = av.intervals(d)
        i = np.searchsorted(starts, job["t_start"], side="right") - 1
        if job["status"] == "dropped":  # no failure hazard: offline is the only cause
            assert job["t_end"] == ends[i]
        else:
            assert job["t_end"] <= ends[i]


def test_bad_traces(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_pickle(tmp_path / "nope")
    (tmp_path / "list").write_bytes(pickle.dumps([1, 2]))
    with pytest.raises(ValueError, match="pickled dict"):
        load_pickle(tmp_path / "list")
    with pytest.raises(ValueError, match="samples_per_unit"):
        fleet_from_fedscale(CAPACITY, samples_per_unit=0)
    with pytest.raises(ValueError, match="missing"):
        fleet_from_fedscale(CAPACITY, BEHAVE, samples_per_unit=1, clients=[3, 99])
    with pytest.raises(ValueError, match="positive"):
        fleet_from_fedscale({1: {"computation": -1.0, "communication": 5.0}}, samples_per_unit=1)
    assert math.isfinite(fleet_from_fedscale(CAPACITY, samples_per_unit=1).mean_compute.sum())
