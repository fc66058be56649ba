"""A neural run computes with its task's torch threads, whatever the process was given.

``ImageClassification.threads`` (default 1) is part of the scenario: :func:`simfl.run` sets
torch's intra-op threads to it for the whole run (binding, training, every evaluation, the
final per-client metrics) and restores the process's count afterwards, even when the run
raises. So the same scenario gives the same frames in a process of 1 thread, of 2, and in a
sweep worker limited to its share of the cores. Without the pin the frames depend on the
process: on this project's 2-core machine the LeNet-5 scenario below records a different
``train_loss`` in round 1 with 1 thread and with 2 (oneDNN's convolutions split their sums by
thread), and both frame tests here fail (checked by replacing the pin with a null context).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from simfl import Fleet, Scenario, dists, policies, run, sweep  # noqa: E402
from simfl.neural import (  # noqa: E402
    CNN,
    MLP,
    MNIST,
    Digits,
    ImageClassification,
    NeuralFedAvg,
    Shards,
)
from simfl.sweeps.executors import Inline, Processes  # noqa: E402

LENET = ImageClassification(MNIST(limit=600), Shards(2), CNN.lenet5(), eval_clients=4)


def lenet_scenario(task: ImageClassification = LENET, seed: int = 0) -> Scenario:
    return Scenario(
        task=task,
        algorithm=NeuralFedAvg(epochs=1),
        fleet=Fleet.homogeneous(10, compute=dists.Exponential(1.0)),
        policy=policies.FastestK(5),
        rounds=2,
        seed=seed,
    )


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield before
    torch.set_num_threads(before)


@dataclass(frozen=True)
class ThreadSpy(NeuralFedAvg):
    """NeuralFedAvg that records torch's thread count in every call the engine makes."""

    seen: ClassVar[list[tuple[str, int]]] = []

    def initial_state(self, data, streams):  # type: ignore[no-untyped-def]
        self.seen.append(("initial_state", torch.get_num_threads()))
        return super().initial_state(data, streams)

    def local_updates(self, state, data, clients, key, streams):  # type: ignore[no-untyped-def]
        self.seen.append(("local_updates", torch.get_num_threads()))
        return super().local_updates(state, data, clients, key, streams)

    def aggregate(self, state, updates, outcome):  # type: ignore[no-untyped-def]
        self.seen.append(("aggregate", torch.get_num_threads()))
        return super().aggregate(state, updates, outcome)

    def evaluate(self, state, data):  # type: ignore[no-untyped-def]
        self.seen.append(("evaluate", torch.get_num_threads()))
        return super().evaluate(state, data)

    def evaluate_clients(self, state, data):  # type: ignore[no-untyped-def]
        self.seen.append(("evaluate_clients", torch.get_num_threads()))
        return super().evaluate_clients(state, data)


@pytest.mark.parametrize(("process", "task"), [(2, 1), (1, 2), (3, 3)])
def test_every_call_of_a_run_uses_the_tasks_threads_and_the_process_count_comes_back(
    restore_threads, process, task
):
    torch.set_num_threads(process)
    ThreadSpy.seen.clear()
    sc = Scenario(
        task=ImageClassification(Digits(), Shards(2), MLP((16, 8)), threads=task),
        algorithm=ThreadSpy(epochs=1),
        fleet=Fleet.homogeneous(6, compute=dists.Exponential(1.0)),
        policy=policies.FastestK(3),
        rounds=2,
        seed=0,
    )
    res = run(sc, progress=False, on_error="raise")
    assert res.ok and "client_metrics" in res.meta
    calls = {name for name, _ in ThreadSpy.seen}
    assert calls == {"initial_state", "local_updates", "aggregate", "evaluate", "evaluate_clients"}
    assert {count for _, count in ThreadSpy.seen} == {task}
    assert torch.get_num_threads() == process


@dataclass(frozen=True)
class Failing(NeuralFedAvg):
    def aggregate(self, state, updates, outcome):  # type: ignore[no-untyped-def]
        raise RuntimeError("boom")


@pytest.mark.parametrize("on_error", ["record", "raise"])
def test_the_process_count_comes_back_when_the_run_fails(restore_threads, on_error):
    torch.set_num_threads(2)
    sc = replace(lenet_scenario(), algorithm=Failing(epochs=1))
    if on_error == "raise":
        with pytest.raises(RuntimeError, match="boom"):
            run(sc, progress=False, on_error="raise")
    else:
        res = run(sc, progress=False)
        assert res.meta["status"] == "error" and "boom" in res.meta["error"]
    assert torch.get_num_threads() == 2


def test_the_same_scenario_gives_the_same_frames_in_processes_of_1_and_2_threads(
    restore_threads,
):
    out = []
    for process in (1, 2):
        torch.set_num_threads(process)
        res = run(lenet_scenario(), progress=False, on_error="raise")
        assert res.ok and res.rounds["accuracy"].notna().all()
        out.append(res)
    pd.testing.assert_frame_equal(out[0].rounds, out[1].rounds, check_exact=True)
    pd.testing.assert_frame_equal(out[0].clients, out[1].clients, check_exact=True)


def test_a_sweep_gives_the_inline_frames_whatever_its_workers_threads(restore_threads, tmp_path):
    torch.set_num_threads(2)  # the inline runs' process has 2 threads, each worker 1
    scenarios = [lenet_scenario(seed=s) for s in (0, 1)]
    inline = sweep(scenarios, store=tmp_path / "i", executor=Inline(), progress=False)
    with Processes(2, threads=1) as pool:
        pooled = sweep(scenarios, store=tmp_path / "p", executor=pool, progress=False)
    assert inline.run_ids == pooled.run_ids and not pooled.failed and len(pooled.ran) == 2
    for run_id in inline.run_ids:
        a, b = inline.store.results(run_id), pooled.store.results(run_id)
        pd.testing.assert_frame_equal(a.rounds, b.rounds, check_exact=True)
        pd.testing.assert_frame_equal(a.clients, b.clients, check_exact=True)


@pytest.mark.parametrize("threads", [0, -1, 1.5, True])
def test_bad_thread_counts_are_refused_naming_the_field(threads):
    with pytest.raises(ValueError, match=r"ImageClassification\.threads"):
        ImageClassification(threads=threads)


class Recording(Inline):
    """Inline, recording whether the sweep asked for fresh workers."""

    asked: ClassVar[list[bool]] = []

    def fresh(self) -> Inline:  # type: ignore[override]
        self.asked.append(True)
        return self


@pytest.mark.parametrize(("threads", "fresh"), [(1, False), (2, True)])
def test_a_sweep_asks_for_fresh_workers_only_for_tasks_that_cannot_fork(threads, fresh):
    Recording.asked.clear()
    task = replace(LENET, threads=threads)
    assert task.fork_safe is (threads == 1)
    sweep([lenet_scenario(task)], executor=Recording(), progress=False)
    assert Recording.asked == ([True] if fresh else [])  # torch is loaded in this process


def test_fresh_processes_start_by_forkserver_and_the_others_are_fresh_already():
    pool = Processes(2, threads=1, restarts=1)
    fresh = pool.fresh()
    assert (fresh.start_method, fresh.workers, fresh.threads, fresh.restarts) == (
        "forkserver",
        2,
        1,
        1,
    )
    assert pool.start_method == "fork" and "fresh" in fresh.describe()
    inline = Inline()
    assert inline.fresh() is inline
    with pytest.raises(ValueError, match=r"Processes\.start_method"):
        Processes(2, start_method="spawn")


SCRIPT = """
import sys
import torch
sys.path.insert(0, {tests!r})
from dataclasses import replace
import pandas as pd
from simfl import run, sweep
from simfl.sweeps.executors import Processes
from test_neural_threads import LENET, lenet_scenario

if __name__ == "__main__":
    torch.set_num_threads(2)  # this process runs torch on 2 OpenMP threads before the fork
    x, w = torch.randn(64, 3, 32, 32), torch.randn(16, 3, 5, 5)
    for _ in range(3):
        torch.nn.functional.conv2d(x, w).sum()
    scenarios = [lenet_scenario(replace(LENET, threads=2), seed=s) for s in (0, 1)]
    with Processes(2, threads=1) as pool:
        out = sweep(scenarios, executor=pool, progress=False)
    assert not out.failed and len(out.ran) == 2, out
    for run_id, sc in zip(out.run_ids, scenarios):
        here = run(sc, progress=False)
        there = out.store.results(run_id)
        pd.testing.assert_frame_equal(here.rounds, there.rounds, check_exact=True)
        pd.testing.assert_frame_equal(here.clients, there.clients, check_exact=True)
    print("same frames")
"""


def test_a_sweep_of_two_thread_runs_after_this_process_ran_torch_does_not_hang(tmp_path):
    """Forked workers would hang here (GNU OpenMP after fork); fresh ones run and give the
    frames of runs in this process. In a subprocess, so that a hang fails the test."""
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "sweep_two_threads.py"
    script.write_text(SCRIPT.format(tests=str(Path(__file__).resolve().parent)))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=150
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "same frames" in done.stdout
