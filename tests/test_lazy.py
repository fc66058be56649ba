"""Lazy exactness: updates that will not be aggregated are never computed, and skipping them
gives exactly the results of computing everything and throwing the discarded work away."""

import dataclasses

import numpy as np
import pandas as pd
import pytest

from simfl import algorithms, policies, run
from tests.helpers import Ledger, linear_scenario, rows, timing_scenario

POLICIES = [
    policies.Deadline(0.8, fraction=0.2),
    policies.FastestK(k=8, overcommit=1.5),
    policies.WaitAll(fraction=0.3),
]


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.name)
@pytest.mark.parametrize(
    "algorithm", [algorithms.FedRep(), algorithms.FedAvg(local_steps=2)], ids=lambda a: a.name
)
def test_lazy_equals_eager(policy, algorithm):
    sc = linear_scenario(
        algorithm, policy, rounds=25, dropout_rate=0.4, latency=0.02, bandwidth_up=5e3
    )
    lazy = run(sc, progress=False, lazy=True)
    eager = run(sc, progress=False, lazy=False)
    pd.testing.assert_frame_equal(lazy.rounds, eager.rounds, check_exact=True)
    pd.testing.assert_frame_equal(lazy.clients, eager.clients, check_exact=True)
    # the scenario does exercise discarded work
    assert (lazy.clients["status"] != "arrived").sum() > 20


def test_lazy_computes_only_accepted_updates():
    sc = timing_scenario(n=30, rounds=20, dropout_rate=0.5, policy=policies.Deadline(1.0, count=12))
    lazy_alg, eager_alg = Ledger(), Ledger()
    lazy = run(dataclasses.replace(sc, algorithm=lazy_alg), progress=False)
    run(dataclasses.replace(sc, algorithm=eager_alg), progress=False, lazy=False)
    arrived = lazy.clients[lazy.clients["status"] == "arrived"]
    assert len(lazy_alg.computed) == len(arrived) < len(lazy.clients)
    assert len(eager_alg.computed) == len(lazy.clients)
    assert lazy_alg.aggregated == eager_alg.aggregated


@pytest.mark.parametrize(
    "algorithm",
    [
        algorithms.FedRep(),
        algorithms.FedAvg(local_steps=3),
        algorithms.GDGD(head_steps=4),
        algorithms.LocalOnly(),
    ],
    ids=lambda a: a.name,
)
def test_a_clients_update_does_not_depend_on_its_batch(algorithm):
    from simfl import Streams

    sc = linear_scenario(algorithm, rounds=1)
    streams = Streams(0)
    data = sc.task.build(sc.fleet.size, streams)
    state = algorithm.initial_state(data, streams)
    everyone = np.arange(40, dtype=np.int64)
    some = np.array([3, 17, 31], dtype=np.int64)
    full = algorithm.local_updates(state, data, everyone, 5, streams)
    part = algorithm.local_updates(state, data, some, 5, streams)
    for name, value in rows(part).items():
        np.testing.assert_array_equal(rows(full)[name][some], value)  # bit for bit
