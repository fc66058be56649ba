"""Inert algorithms (``Algorithm.inert``): the event-free asynchronous loop skips their updates."""

import dataclasses
import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import pytest
from numpy.typing import NDArray

from simfl import Scenario, algorithms, dists, policies, run
from simfl.algorithms.base import Updates
from simfl.engine import async_planned
from simfl.outcome import Outcome
from simfl.rng import Streams
from tests.helpers import timing_scenario


@dataclasses.dataclass(frozen=True)
class Refusing(algorithms.TimingOnly):
    """TimingOnly whose update path fails: an inert run must never take it."""

    def job_updates(
        self,
        states: Sequence[None],
        data: Any,
        clients: NDArray[np.int64],
        keys: Sequence[int],
        streams: Streams,
    ) -> Updates:
        raise AssertionError("an inert algorithm's updates were computed")

    def background(self, state: None, data: Any, outcome: Outcome) -> None:
        raise AssertionError("an inert algorithm's aggregation was applied")


POLICIES = [
    policies.FedAsync(concurrency=5),
    policies.FedBuff(buffer_size=3, concurrency=6, max_staleness=2),
]


def scenario(policy: policies.AsyncPolicy, algorithm: algorithms.TimingOnly) -> Scenario:
    """Forty timing-only aggregations on 20 flaky devices."""
    sc = timing_scenario(
        n=20,
        compute=dists.Exponential(mean=1.0),
        policy=policy,
        rounds=40,
        seed=5,
        dropout_rate=0.2,
    )
    return dataclasses.replace(sc, algorithm=algorithm)


@pytest.mark.parametrize("policy", POLICIES, ids=["fedasync", "fedbuff"])
@pytest.mark.parametrize("lazy", [True, False], ids=["lazy", "eager"])
def test_inert_updates_are_never_computed_and_frames_match(
    policy: policies.AsyncPolicy, lazy: bool
) -> None:
    skipped = run(scenario(policy, Refusing()), progress=False, lazy=lazy, on_error="raise")
    ref = run(scenario(policy, algorithms.TimingOnly()), progress=False, lazy=lazy, batched=False)
    assert skipped.meta["stop_reason"] == "rounds"
    assert len(skipped.rounds) == 40
    assert (skipped.rounds["n_arrived"] > 0).all()
    assert (skipped.clients["status"] == "dropped").any()
    pd.testing.assert_frame_equal(skipped.rounds, ref.rounds, check_exact=True)
    pd.testing.assert_frame_equal(skipped.clients, ref.clients, check_exact=True)


def test_timing_only_keeps_the_inert_contract() -> None:
    alg = algorithms.TimingOnly(work_units=2.0, bytes_down=5, bytes_up=7)
    assert type(alg).inert and not algorithms.FedAvg.inert
    clients = np.array([3, 1], dtype=np.int64)
    updates = alg.job_updates([None, None], None, clients, [0, 4], Streams(0))
    assert updates.params == {} and updates.loss is None and updates.weight is None
    np.testing.assert_array_equal(updates.clients, clients)
    assert alg.initial_state(None, Streams(0)) is None
    assert alg.with_shared(alg.keep_local(None, updates), alg.shared(None)) is None


def test_chunk_sums_equal_numpy_sums_bit_for_bit() -> None:
    rng = np.random.default_rng(3)
    sizes = rng.integers(0, 13, size=300)
    bounds = np.r_[0, np.cumsum(sizes)]
    # magnitudes far apart: any other order of the additions rounds differently
    values = rng.uniform(0, 1, bounds[-1]) * 10.0 ** rng.integers(-8, 17, bounds[-1])
    marks = [(i, int(a), int(b)) for i, (a, b) in enumerate(itertools.pairwise(bounds))]
    got = async_planned._chunk_sums(values, marks)
    want = [float(values[a:b].sum()) for _, a, b in marks]
    assert got == want
    assert got != [float(sum(values[a:b].tolist()[::-1])) for _, a, b in marks]
