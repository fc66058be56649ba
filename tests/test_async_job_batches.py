"""Batched asynchronous updates: one call per aggregation, bit for bit the one-at-a-time rows.

The event-free asynchronous loop hands an aggregation's jobs (each with its own model version
and data key) to :meth:`~simfl.algorithms.Algorithm.job_updates` in one call. The linear
algorithms batch them with per-job products only; these tests hold every row, and whole runs,
to the reference that computes one job at a time (the base class's ``job_updates``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pandas as pd
import pytest

from simfl import Fleet, Results, Scenario, algorithms, dists, policies, run, tasks
from simfl.algorithms.base import Algorithm, Updates
from simfl.algorithms.mixing import BufferedMix
from simfl.policies import FedAsync, FedBuff
from simfl.rng import Streams
from simfl.tasks import linear
from simfl.tasks.linear import JobSamples, LinearRepresentationData

TASKS = {
    "fresh": tasks.LinearRepresentation(d=20, k=2, samples_per_client=10),
    "fixed": tasks.LinearRepresentation(d=7, k=3, samples_per_client=2, fresh_samples=False),
    "noiseless": tasks.LinearRepresentation(d=5, k=1, samples_per_client=4, noise_std=0.0),
    "domains": tasks.DomainMixture(d=6, k=2, samples_per_client=5),
    "domains-fixed": tasks.DomainMixture(d=6, k=2, samples_per_client=3, fresh_samples=False),
}
ALGORITHMS = {
    "fedrep": algorithms.FedRep(local_steps=3, step_size=0.1),
    "fedrep-1": algorithms.FedRep(),
    "fedavg": algorithms.FedAvg(local_steps=2),
}


def one_at_a_time(alg: Algorithm[Any], *args: Any) -> Updates:
    """The reference: the base class computes one ``local_updates`` call per job."""
    return Algorithm.job_updates(alg, *args)


def assert_rows_equal(got: Updates, ref: Updates) -> None:
    np.testing.assert_array_equal(got.clients, ref.clients)
    assert got.params.keys() == ref.params.keys()
    for name in ref.params:
        assert got.params[name].tobytes() == ref.params[name].tobytes(), name
    assert ref.loss is not None and got.loss is not None
    assert got.loss.tobytes() == ref.loss.tobytes()


def versions(alg: Algorithm[Any], data: Any, streams: Streams, n: int) -> list[Any]:
    """``n`` different model states (the initial one moved by seeded noise)."""
    rng = np.random.default_rng(7)
    s0 = alg.initial_state(data, streams)
    out = [s0]
    for _ in range(n - 1):
        shared = {k: v + 0.3 * rng.normal(size=v.shape) for k, v in alg.shared(s0).items()}
        out.append(alg.with_shared(s0, shared))
    return out


@pytest.mark.parametrize("task", list(TASKS.values()), ids=list(TASKS))
@pytest.mark.parametrize("alg", list(ALGORITHMS.values()), ids=list(ALGORITHMS))
@pytest.mark.parametrize("size", [1, 2, 7, 33])
def test_job_updates_equal_one_job_at_a_time(task: Any, alg: Algorithm[Any], size: int) -> None:
    """Every row of a batch equals its own one-job call, whatever batch it sits in."""
    streams = Streams(11)
    data = task.build(60, streams)
    states = versions(alg, data, streams, 5)
    rng = np.random.default_rng(size)
    pick = rng.integers(0, len(states), size)
    clients = rng.integers(0, 60, size).astype(np.int64)
    clients[-1] = clients[0]  # a device twice (two jobs), with different keys below
    keys = rng.integers(0, 40, size).tolist()
    batch_states = [states[i] for i in pick]
    got = alg.job_updates(batch_states, data, clients, keys, streams)
    assert_rows_equal(got, one_at_a_time(alg, batch_states, data, clients, keys, streams))
    # and a row does not change with its neighbours: the first half alone
    half = max(1, size // 2)
    alone = alg.job_updates(batch_states[:half], data, clients[:half], keys[:half], streams)
    assert_rows_equal(alone, got.take(slice(0, half)))


@pytest.mark.parametrize("alg", list(ALGORITHMS.values()), ids=list(ALGORITHMS))
@pytest.mark.parametrize("start", [True, False], ids=["start-state", "later-state"])
def test_one_state_batches_equal_one_job_at_a_time(alg: Algorithm[Any], start: bool) -> None:
    """Jobs all from one state: the start (a non-contiguous view for FedRep) or a later one."""
    streams = Streams(4)
    data = TASKS["fresh"].build(30, streams)
    state = versions(alg, data, streams, 2)[0 if start else 1]
    if start and isinstance(alg, algorithms.FedRep):
        assert not state.representation.flags.c_contiguous  # the case this test is about
    clients = np.arange(12, dtype=np.int64)
    keys = list(range(12))
    got = alg.job_updates([state] * 12, data, clients, keys, streams)
    assert_rows_equal(got, one_at_a_time(alg, [state] * 12, data, clients, keys, streams))


@pytest.mark.parametrize("task", list(TASKS.values()), ids=list(TASKS))
def test_job_batch_rows_are_the_one_client_train_batches(task: Any) -> None:
    """``job_batch`` row ``i`` is ``train_batch`` of that one client at its own key."""
    streams = Streams(3)
    data = task.build(40, streams)
    clients = np.array([0, 39, 5, 5, 17, 0], dtype=np.int64)
    keys = np.array([0, 3, 3, 8, 1000, 2], dtype=np.int64)
    x, y = data.job_batch(clients, keys)
    for i in range(clients.size):
        xi, yi = data.train_batch(clients[i : i + 1], int(keys[i]))
        assert x[i].tobytes() == xi[0].tobytes()
        assert y[i].tobytes() == yi[0].tobytes()
    if task.fresh_samples:  # the key matters: different rounds draw different samples
        assert not np.array_equal(x[2], x[3])
    else:
        assert x[2].tobytes() == x[3].tobytes()


class _NoJobBatch:
    """Task data without ``job_batch``: the linear algorithms fall back to one job at a time."""

    def __init__(self, data: Any) -> None:
        self._data = data

    def __getattr__(self, name: str) -> Any:
        if name == "job_batch":
            raise AttributeError(name)
        return getattr(self._data, name)


@pytest.mark.parametrize("alg", list(ALGORITHMS.values()), ids=list(ALGORITHMS))
def test_data_without_job_batch_fall_back_to_one_job_at_a_time(alg: Algorithm[Any]) -> None:
    streams = Streams(0)
    data = TASKS["fresh"].build(20, streams)
    states = versions(alg, data, streams, 3)
    clients = np.array([1, 2, 3], dtype=np.int64)
    plain = _NoJobBatch(data)
    got = alg.job_updates(states, plain, clients, [4, 5, 6], streams)
    assert_rows_equal(got, alg.job_updates(states, data, clients, [4, 5, 6], streams))


def _frames_equal(a: Results, b: Results) -> None:
    pd.testing.assert_frame_equal(a.rounds, b.rounds, check_exact=True)
    pd.testing.assert_frame_equal(a.clients, b.clients, check_exact=True)
    assert a.meta["stop_reason"] == b.meta["stop_reason"]


def _scenario(
    task: Any, alg: Algorithm[Any], policy: policies.AsyncPolicy, drop: float
) -> Scenario:
    fleet = Fleet.homogeneous(40, compute=dists.Exponential(mean=1.0), dropout_rate=drop)
    return Scenario(
        task=task, algorithm=alg, fleet=fleet, policy=policy, rounds=40, eval_every=4, seed=5
    )


RUN_POLICIES = [
    FedBuff(buffer_size=1, concurrency=4),
    FedBuff(buffer_size=5, concurrency=20),
    FedBuff(buffer_size=8, concurrency=30, max_staleness=2),
    FedAsync(concurrency=10),
    FedAsync(concurrency=12, max_staleness=1),
]


@pytest.mark.parametrize("policy", RUN_POLICIES, ids=repr)
@pytest.mark.parametrize("alg", [ALGORITHMS["fedrep"], ALGORITHMS["fedavg"]], ids=["rep", "avg"])
@pytest.mark.parametrize("drop", [0.0, 0.3])
def test_runs_equal_the_one_job_at_a_time_runs(
    policy: policies.AsyncPolicy,
    alg: Algorithm[Any],
    drop: float,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whole runs (rows, job rows, losses, metrics) are those of one job at a time."""
    sc = _scenario(TASKS["fresh"], alg, policy, drop)
    calls: list[int] = []
    batched = type(alg).job_updates

    def spy(self: Algorithm[Any], states: Any, *rest: Any) -> Updates:
        calls.append(len(states))
        return batched(self, states, *rest)

    rows: list[int] = []
    job_batch = LinearRepresentationData.job_batch

    def batch_spy(self: LinearRepresentationData, clients: Any, keys: Any) -> Any:
        rows.append(len(clients))
        return job_batch(self, clients, keys)

    caches: list[JobSamples] = []
    prefetch = JobSamples.prefetch

    def prefetch_spy(self: JobSamples, *args: Any) -> None:
        caches.append(self)
        prefetch(self, *args)

    monkeypatch.setattr(type(alg), "job_updates", spy)
    monkeypatch.setattr(LinearRepresentationData, "job_batch", batch_spy)
    monkeypatch.setattr(JobSamples, "prefetch", prefetch_spy)
    fast = run(sc, progress=False)
    assert caches and caches[0].hits > caches[0].misses  # samples were drawn ahead
    assert max(calls) == policy.buffer()  # a whole buffer in one call
    if policy.buffer() > 1:  # ... computed batched, not one job at a time
        assert max(rows) > 1 and sum(rows) > sum(calls) // 2
    monkeypatch.setattr(type(alg), "job_updates", Algorithm.job_updates)
    _frames_equal(fast, run(sc, progress=False))
    assert fast.rounds["n_arrived"].sum() > 0
    assert np.isfinite(fast.rounds["train_loss"].dropna()).all()


@pytest.mark.parametrize("name", ["domains", "fixed"])
def test_other_linear_tasks_run_identically(name: str) -> None:
    """The domain-mixture task and fixed samples, against the SimPy reference loop."""
    sc = _scenario(TASKS[name], ALGORITHMS["fedrep"], FedBuff(buffer_size=4, concurrency=12), 0.1)
    sc = dataclasses.replace(sc, rounds=25)
    _frames_equal(run(sc, progress=False), run(sc, progress=False, batched=False))


@pytest.mark.parametrize("shape", [(20, 2), (7,), (), (1,), (5, 1), (2, 1, 3)], ids=repr)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_buffered_mix_adds_row_after_row_as_sum_does(shape: tuple[int, ...], dtype: Any) -> None:
    """FedBuff's mix in one pass equals the Python ``sum`` of the weighted deltas, bit for bit.

    Magnitudes spread over 16 decades make the order of the additions show; scalar
    parameters with 8+ rows are where a numpy reduction would add pairwise; all-``-0.0``
    deltas check the ``0 + t_0`` start.
    """
    rng = np.random.default_rng(len(shape))
    for size in (1, 2, 9, 33):
        spread = 10.0 ** rng.integers(-8, 8, size=(size, *shape))
        rows = (rng.normal(size=(size, *shape)) * spread).astype(dtype)
        bases = [rng.normal(size=shape).astype(dtype) for _ in range(size)]
        w = rng.random(size)
        cases = [(rows, bases), (np.full_like(rows, -0.0), [np.zeros(shape, dtype)] * size)]
        for r, b in cases:
            current = {"p": np.ones(shape, dtype)}
            got = BufferedMix(w, 0.5).apply(
                current, Updates(np.arange(size), {"p": r}), [{"p": v} for v in b]
            )["p"]
            delta = sum(w[i] * (r[i] - b[i]) for i in range(size))
            want = np.asarray(current["p"] + 0.5 * delta)
            assert got.dtype == want.dtype and got.shape == want.shape
            assert got.tobytes() == want.tobytes(), size


def test_job_samples_hand_out_the_prefetched_rows_and_draw_the_rest() -> None:
    """Rows drawn ahead (the last two prefetches) are the rows a direct draw gives."""
    data = TASKS["fresh"].build(50, Streams(2))
    drawn: list[int] = []

    def draw(clients: Any, keys: Any) -> Any:
        drawn.append(len(clients))
        return data.job_batch(clients, keys)

    cache = JobSamples(draw)
    blocks = [
        (np.arange(0, 20, dtype=np.int64), np.full(20, 1, dtype=np.int64)),
        (np.arange(20, 40, dtype=np.int64), np.full(20, 1, dtype=np.int64)),
        (np.arange(0, 10, dtype=np.int64), np.full(10, 2, dtype=np.int64)),
    ]
    for clients, keys in blocks:
        cache.prefetch(clients, keys, row_floats=200)
    assert drawn == [20, 20, 10]
    # block 1 and 2 are kept, block 0 is not: (5, 1) is drawn again, with a job never fetched
    clients = np.array([25, 3, 5, 39, 44], dtype=np.int64)
    keys = np.array([1, 2, 1, 1, 7], dtype=np.int64)
    x, y = cache.take(clients, keys)
    assert drawn[3:] == [2] and (cache.hits, cache.misses) == (3, 2)
    want_x, want_y = data.job_batch(clients, keys)
    assert x.tobytes() == want_x.tobytes() and y.tobytes() == want_y.tobytes()
    x_hit, _ = cache.take(clients[:2], keys[:2])  # all drawn ahead: nothing drawn
    assert len(drawn) == 4 and x_hit.tobytes() == want_x[:2].tobytes()


def test_job_samples_prefetch_at_most_ahead_floats(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(linear, "AHEAD_FLOATS", 1000)
    sizes: list[int] = []
    cache = JobSamples(lambda c, k: (sizes.append(len(c)), (np.zeros((len(c), 2)),) * 2)[1])
    cache.prefetch(np.arange(50, dtype=np.int64), np.zeros(50, dtype=np.int64), row_floats=300)
    cache.prefetch(np.arange(0, dtype=np.int64), np.zeros(0, dtype=np.int64), row_floats=300)
    assert sizes == [3]


@dataclasses.dataclass(frozen=True)
class _FailingHint(algorithms.FedRep):
    """FedRep whose ``prepare_jobs`` hint raises (the run must not notice)."""

    def prepare_jobs(self, data: Any, clients: Any, keys: Any) -> None:
        raise RuntimeError("no samples ahead today")


def test_a_failing_prepare_jobs_changes_nothing() -> None:
    policy = FedBuff(buffer_size=3, concurrency=9)
    sc = _scenario(TASKS["fresh"], ALGORITHMS["fedrep"], policy, 0.1)
    failing = dataclasses.replace(sc, algorithm=_FailingHint(local_steps=3, step_size=0.1))
    res = run(failing, progress=False)
    assert res.meta["status"] == "ok"
    _frames_equal(res, run(sc, progress=False))
