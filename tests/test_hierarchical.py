import dataclasses
import math

import numpy as np
import pandas as pd
import pytest

from simfl import Fleet, Scenario, algorithms, dists, policies, run
from simfl.network import Network
from simfl.policies import EdgeAggregation
from tests.helpers import linear_scenario


def two_edges(policy, rounds=2, compute=1.0):
    fleet = Fleet.homogeneous(
        4, compute=dists.Constant(compute), bandwidth_down=50.0, bandwidth_up=50.0
    )
    net = Network.hierarchical(np.array([0, 0, 1, 1]), edge_up=100.0, edge_down=100.0)
    return Scenario(
        task=None,
        algorithm=algorithms.TimingOnly(bytes_down=100, bytes_up=100),
        fleet=fleet,
        policy=policy,
        rounds=rounds,
        network=net,
    )


def test_round_time_by_hand():
    res = run(two_edges(EdgeAggregation()), progress=False)
    # edge fetches the model (100 B at 100 B/s), serves its two devices over their own 50 B/s
    # links (2 s down, 1 s compute, 2 s up), forwards one aggregate (108 B at 100 B/s)
    np.testing.assert_allclose(res.rounds["duration"], 1.0 + 5.0 + 1.08, rtol=1e-12)
    jobs = res.clients
    np.testing.assert_allclose(
        jobs["t_start"] - jobs.groupby("round")["t_start"].transform("min"), 0.0
    )  # all four devices start when their edge has the model
    np.testing.assert_allclose(jobs["download"], 2.0)
    # bytes: 4 device downloads + 2 edge fetches; 4 device uploads + 2 edge aggregates
    assert (res.rounds["bytes_down"] == 4 * 100 + 2 * 100).all()
    assert (res.rounds["bytes_up"] == 4 * 100 + 2 * 108).all()
    # flat aggregation on the same network: each edge link carries two flows at 50 B/s each
    flat = run(dataclasses.replace(two_edges(policies.WaitAll())), progress=False)
    np.testing.assert_allclose(flat.rounds["duration"], 2.0 + 1.0 + 2.0, rtol=1e-12)


def test_same_model_as_flat_aggregation():
    groups = np.arange(100) % 7
    net = Network.hierarchical(groups, edge_up=3e3, edge_down=3e4, server_up=1e4)
    sc = dataclasses.replace(
        linear_scenario(
            rounds=25, policy=policies.WaitAll(fraction=0.2), latency=0.01, bandwidth_up=2e3
        ),
        network=net,
    )
    flat = run(sc, progress=False)
    edge = run(dataclasses.replace(sc, policy=EdgeAggregation(fraction=0.2)), progress=False)
    for col in ("distance", "test_mse", "train_loss", "n_arrived"):
        pd.testing.assert_series_equal(flat.rounds[col], edge.rounds[col])
    assert not flat.rounds["time"].equals(edge.rounds["time"])  # the timing differs


def test_edge_and_cloud_deadlines():
    # devices compute 3 s; an edge deadline at 5 s catches nobody (1 + 2 + 3 > 5)
    res = run(two_edges(EdgeAggregation(edge_deadline=5.0), compute=3.0), progress=False)
    assert (res.clients["status"] == "late").all()
    assert (res.rounds["status"] == "empty").all()
    np.testing.assert_allclose(res.rounds["duration"], 5.0)  # no edge had anything to send
    # a cloud deadline before the aggregates arrive: the devices' updates are late
    res = run(two_edges(EdgeAggregation(deadline=6.5)), progress=False)
    assert (res.clients["status"] == "late").all()
    np.testing.assert_allclose(res.rounds["duration"], 6.5)
    ok = run(two_edges(EdgeAggregation(deadline=7.5)), progress=False)
    assert (ok.clients["status"] == "arrived").all()


def test_lazy_equals_eager_and_dropouts():
    groups = np.arange(60) % 4
    net = Network.hierarchical(groups, edge_up=5e3)
    sc = dataclasses.replace(
        linear_scenario(
            n=60,
            rounds=15,
            policy=policies.WaitAll(fraction=0.3),
            dropout_rate=0.3,
            bandwidth_up=2e3,
        ),
        network=net,
        policy=EdgeAggregation(fraction=0.3, edge_deadline=2.0),
    )
    a, b = run(sc, progress=False), run(sc, progress=False, lazy=False)
    pd.testing.assert_frame_equal(a.rounds, b.rounds, check_exact=True)
    pd.testing.assert_frame_equal(a.clients, b.clients, check_exact=True)
    assert {"dropped", "late"} <= set(a.clients["status"])


def test_needs_a_network():
    with pytest.raises(ValueError, match=r"Scenario\.network must be given for EdgeAggregation"):
        linear_scenario(policy=EdgeAggregation())
    with pytest.raises(ValueError, match=r"EdgeAggregation\.edge_deadline"):
        EdgeAggregation(edge_deadline=0.0)
    assert math.isinf(Network.star().server_up)
