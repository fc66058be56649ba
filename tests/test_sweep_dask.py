"""Sweeps on a local Dask cluster: the same stores as local processes, and no run lost or
duplicated when a worker dies."""

import dataclasses
import os
import signal
import threading
import time

import pandas as pd
import pytest

import simfl
from simfl import Store, policies, sweeps
from simfl.sweeps.store import VOLATILE
from tests.helpers import GatedFedRep, tiny_linear

pytest.importorskip("distributed")

from simfl.sweeps.executors import Dask


@pytest.fixture(scope="module")
def dask():
    executor = Dask(workers=2)  # starts its own local cluster on first use
    yield executor
    executor.close()


def _grid():
    return sweeps.grid(
        tiny_linear(rounds=8),
        policy={
            "deadline": policies.Deadline(1.5, count=4),
            "fastest-k": policies.FastestK(k=3, overcommit=0.5),
            "fedbuff": policies.FedBuff(buffer_size=2, concurrency=4),
        },
        seed=[0, 1],
    )


def _same_stores(a: Store, b: Store) -> None:
    pd.testing.assert_frame_equal(a.rounds(), b.rounds(), check_exact=True)
    pd.testing.assert_frame_equal(a.clients(), b.clients(), check_exact=True)
    pd.testing.assert_frame_equal(
        a.runs().drop(columns=list(VOLATILE)), b.runs().drop(columns=list(VOLATILE))
    )
    for record in a.records():
        ra, rb = a.results(record["run_id"]), b.results(record["run_id"])
        pd.testing.assert_frame_equal(ra.rounds, rb.rounds, check_exact=True)
        pd.testing.assert_frame_equal(ra.clients, rb.clients, check_exact=True)
        assert {**ra.meta, "host_seconds": 0} == {**rb.meta, "host_seconds": 0}


def test_dask_and_processes_give_identical_stores(tmp_path, dask):
    cases = _grid()
    local = simfl.sweep(cases, store=tmp_path / "p", workers=2, progress=False)
    remote = simfl.sweep(cases, store=tmp_path / "d", executor=dask, progress=False)
    assert remote.executor == "dask (local cluster, 2 workers)"
    assert local.run_ids == remote.run_ids and len(remote.ran) == 6 and not remote.failed
    _same_stores(Store(tmp_path / "p"), Store(tmp_path / "d"))
    staleness = Store(tmp_path / "d").clients()["staleness"]
    assert staleness.max() > 0  # FedBuff's asynchronous updates are in the frames too


def test_a_killed_dask_worker_loses_no_run(tmp_path, dask):
    flag = tmp_path / "gate-open"
    gated = dataclasses.replace(tiny_linear(), name="gated", algorithm=GatedFedRep(flag=str(flag)))
    cases = [tiny_linear(seed=0), gated, tiny_linear(seed=1), tiny_linear(seed=2)]
    store = tmp_path / "s"
    done: dict[str, object] = {}

    def work() -> None:
        done["out"] = simfl.sweep(cases, store=store, executor=dask, progress=False)

    thread = threading.Thread(target=work)
    thread.start()
    client = dask.client()
    deadline = time.monotonic() + 60
    # the three open runs finish; the gated one is then the only run in flight, on one worker
    # (the store is readable once its marker is written, just after its runs/ directory)
    while not ((store / "simfl-store.json").is_file() and len(Store(store).status()) == 3):
        assert time.monotonic() < deadline and thread.is_alive()
        time.sleep(0.05)
    holders = []
    while not holders:
        assert time.monotonic() < deadline
        busy = client.processing().items()
        holders = [w for w, keys in busy if any("gated" in str(k) for k in keys)]
        time.sleep(0.02)
    pid = client.run(os.getpid, workers=holders)[holders[0]]
    killed = pd.Timestamp.now(tz="UTC")
    os.kill(pid, signal.SIGKILL)
    flag.write_text("open")  # the re-run of the gated run on a new worker can go on
    thread.join(timeout=120)
    out = done["out"]
    assert not thread.is_alive() and not out.failed and len(out.ran) == 4
    names = sorted(p.name for p in (store / "runs").iterdir())
    assert names == sorted(out.run_ids)  # every run exactly once, no partial left behind
    runs = Store(store).runs().set_index("label")
    assert runs.loc["gated", "started"] > killed  # the gated run ran again after the kill
    reference = simfl.sweep(cases, store=tmp_path / "ref", executor="inline", progress=False)
    _same_stores(Store(store), reference.store)


def test_threads_asking_for_the_client_at_once_share_one_cluster():
    executor = Dask(workers=1)
    start = threading.Barrier(2)
    got: list[object] = []

    def ask() -> None:
        start.wait()
        got.append(executor.client())

    threads = [threading.Thread(target=ask) for _ in range(2)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert len(got) == 2 and got[0] is got[1]
        assert len(executor._owned) == 2  # one client and one local cluster, nothing leaked
    finally:
        executor.close()
