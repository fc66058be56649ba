"""The results store, scenario fingerprints, and sweeps that skip, fail and resume."""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import simfl
from simfl import Fleet, Scenario, Store, dists, policies, sweeps
from simfl.compare import collect
from simfl.sweeps.executors import Inline, Processes, make_executor
from simfl.sweeps.fingerprint import fingerprint
from simfl.sweeps.worker import execute, git_revision, make_spec, scenario_fingerprint
from tests.helpers import BrokenFedRep, Ledger, timing_scenario, tiny_linear

ROOT = Path(__file__).resolve().parents[1]


def test_fingerprint_sees_what_repr_hides():
    a = Fleet.homogeneous(2000, dists.Exponential(1.0))
    latency = np.zeros(2000)
    latency[1000] = 0.5  # numpy abbreviates the middle of long arrays; Fleet's repr omits it
    b = Fleet(a.dists, a.group, latency=latency)
    assert repr(a) == repr(b) and fingerprint(a) != fingerprint(b)
    assert fingerprint(a) == fingerprint(Fleet.homogeneous(2000, dists.Exponential(1.0)))
    sc = tiny_linear()
    assert scenario_fingerprint(sc) == scenario_fingerprint(dataclasses.replace(sc, seed=5))
    assert scenario_fingerprint(sc) != scenario_fingerprint(dataclasses.replace(sc, rounds=7))
    assert fingerprint(lambda x: x + 1) != fingerprint(lambda x: x + 2)
    with pytest.raises(ValueError, match="memory address"):
        fingerprint(object())


def test_fingerprint_is_the_same_in_another_process():
    files = sorted((ROOT / "scenarios").glob("*.py"))
    code = (
        "import sys\n"
        "from simfl.cli import load_cases\n"
        "from simfl.sweeps.worker import scenario_fingerprint\n"
        "for f in sys.argv[1:]:\n"
        "    for c in load_cases(f):\n"
        "        print(scenario_fingerprint(c.scenario))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code, *map(str, files)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=ROOT,
    ).stdout.split()
    from simfl.cli import load_cases

    here = [scenario_fingerprint(c.scenario) for f in files for c in load_cases(f)]
    assert out == here and len(set(here)) == len(here) > 10


def test_store_publishes_each_run_exactly_once(tmp_path):
    store = Store(tmp_path / "s", create=True)
    spec = make_spec(tiny_linear(), {"seed": 0})
    record = {**spec.info, "run_id": spec.run_id, "status": "failed", "error": "x"}
    assert store.publish(record, None)
    assert not store.publish({**record, "error": "second copy"}, None)
    assert store.record(spec.run_id)["error"] == "x"
    assert store.publish({**record, "status": "done", "error": None}, None, replace_failed=True)
    assert not store.publish(record, None, replace_failed=True)  # a done run is never replaced
    assert store.record(spec.run_id)["status"] == "done"
    assert [p.name for p in store.runs_dir.iterdir()] == [spec.run_id]
    with pytest.raises(ValueError, match="not a simfl results store"):
        Store(tmp_path / "missing")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="empty or new directory"):
        Store(tmp_path / "other", create=True)


def test_failed_runs_are_recorded_and_the_others_complete(tmp_path):
    ok = [tiny_linear(seed=s) for s in (0, 1)]
    broken = dataclasses.replace(ok[0], name="broken", algorithm=BrokenFedRep())
    midway = dataclasses.replace(
        timing_scenario(n=8, rounds=5), name="midway", algorithm=Ledger(fail_at=2)
    )
    cases = [ok[0], broken, midway, ok[1]]
    out = simfl.sweep(cases, store=tmp_path / "s", workers=2, progress=False)
    assert out.executor == "processes (2 workers)"
    assert len(out.ran) == 4 and not out.skipped
    assert [out.run_ids.index(r) for r in out.failed] == [1, 2]
    store = Store(tmp_path / "s")
    raised, recorded = (store.record(r) for r in out.failed)
    assert "broken on purpose" in raised["error"] and "Traceback" in raised["error"]
    assert not raised["has_results"]
    assert "boom in round 2" in recorded["error"] and recorded["has_results"]
    kept = store.rounds([out.failed[1]], failed=True)  # rounds 0-1, then the round that raised
    assert list(kept["status"]) == ["ok", "ok", "error"]
    runs = out.runs
    assert list(runs["status"]) == ["done", "failed", "failed", "done"]
    assert runs["simfl_version"].notna().all() and (runs["host"] != "").all()
    assert (runs["finished"] >= runs["started"]).all()
    direct = simfl.run(ok[1], progress=False)
    mine = store.results(out.run_ids[3])
    pd.testing.assert_frame_equal(mine.rounds, direct.rounds, check_exact=True)
    pd.testing.assert_frame_equal(mine.clients, direct.clients, check_exact=True)
    assert set(out.frame["run_id"]) == {out.run_ids[0], out.run_ids[3]}

    again = simfl.sweep(cases, store=tmp_path / "s", workers=2, progress=False)
    assert again.ran == () and len(again.skipped) == 4 and again.failed == out.failed
    retried = simfl.sweep(cases, store=tmp_path / "s", executor="inline", retry_failed=True)
    assert retried.ran == out.failed and retried.failed == out.failed
    assert "failed     " in retried.summary()


def test_memory_sweep_matches_store_and_direct_runs(tmp_path):
    cases = sweeps.grid(
        tiny_linear(),
        policy={"d": policies.Deadline(1.5, count=4), "f": policies.FastestK(k=3)},
        seed=[0, 1],
    )
    memory = simfl.sweep(cases, executor="inline", progress=False)
    stored = simfl.sweep(cases, store=tmp_path / "s", executor=Inline(), progress=False)
    pd.testing.assert_frame_equal(memory.frame, stored.frame, check_exact=True)
    direct = pd.concat(
        [
            collect({c.scenario.name: [simfl.run(c.scenario, progress=False)]}).pipe(
                lambda f, c=c: f.insert(2, "policy", c.labels["policy"]) or f
            )
            for c in cases
        ],
        ignore_index=True,
    )
    # label, seed, the grid labels and run_id come first, as in clients() (and the sweeps page)
    assert list(stored.frame.columns[:5]) == ["label", "seed", "policy", "run_id", "round"]
    pd.testing.assert_frame_equal(
        stored.frame.drop(columns="run_id"), direct, check_exact=True, check_categorical=False
    )
    jobs = Store(tmp_path / "s").clients(stored.run_ids[1])
    assert list(jobs.columns[:5]) == ["label", "seed", "policy", "run_id", "round"]
    assert (jobs["seed"] == 1).all() and (jobs["policy"] == "d").all()


def test_sweep_validates_its_inputs(tmp_path):
    sc = tiny_linear()
    with pytest.raises(ValueError, match="same run"):
        simfl.sweep([sc, dataclasses.replace(sc)], progress=False)
    with pytest.raises(ValueError, match="at least one"):
        simfl.sweep([], progress=False)
    with pytest.raises(ValueError, match="sweep executor"):
        make_executor("threads")
    with pytest.raises(ValueError, match="needs executor='dask'"):
        make_executor("processes", scheduler="tcp://localhost:8786")
    assert make_executor(scheduler="tcp://10.0.0.5:8786").name == "dask"  # connects lazily
    assert (
        make_executor(workers=1).name == "inline" and make_executor(workers=2).name == "processes"
    )
    with pytest.raises(ValueError, match=r"Processes.workers"):
        Processes(workers=0)
    with pytest.raises(ValueError, match=r"Scenario or a sweeps\.Case"):
        simfl.sweep([sc, "not a scenario"], progress=False)  # type: ignore[list-item]
    assert simfl.sweep is sweeps.sweep and simfl.sweeps.grid is sweeps.grid


def test_resume_removes_partial_runs_of_dead_processes(tmp_path):
    store = Store(tmp_path / "s", create=True)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    ).stdout.strip()
    import socket

    mine = store.runs_dir / f".partial-x+{socket.gethostname()}+{dead}+abcd1234"
    theirs = store.runs_dir / f".partial-x+another-host+{dead}+abcd1234"
    for p in (mine, theirs):
        p.mkdir()
        (p / "rounds.parquet").write_text("half written")
    out = simfl.sweep(tiny_linear(), store=store, executor="inline", progress=False)
    assert not mine.exists() and theirs.exists()  # another host's worker may still be writing
    assert store.status() == {out.run_ids[0]: "done"}


def _die_once(marker: str) -> str:
    if not os.path.exists(marker):
        Path(marker).write_text("died")
        os._exit(1)
    return marker


def _always_die(_: str) -> str:
    os._exit(1)


def test_processes_survive_dead_workers(tmp_path):
    markers = [str(tmp_path / f"m{i}") for i in range(3)]
    done = dict(Processes(workers=2).map_unordered(_die_once, markers))
    assert done == dict(enumerate(markers))
    lost = list(Processes(workers=1, restarts=1).map_unordered(_always_die, ["a"]))
    assert lost[0][0] == 0 and "died 2 times" in str(lost[0][1])


def test_git_revision(tmp_path):
    assert git_revision(tmp_path) is None
    rev = git_revision(ROOT)
    if rev is not None:  # a source checkout
        assert len(rev.split("+")[0]) == 40


def test_record_is_json_with_labels(tmp_path):
    cases = sweeps.grid(tiny_linear(), fleet={np.int64(12): tiny_linear().fleet}, seed=[3])
    out = simfl.sweep(cases, store=tmp_path / "s", executor="inline", progress=False)
    record = json.loads((tmp_path / "s" / "runs" / out.run_ids[0] / "run.json").read_text())
    assert record["labels"] == {"fleet": 12, "seed": 3} and record["seed"] == 3
    assert record["goals"] == {"distance": "min", "test_mse": "min"}
    assert isinstance(Scenario, type)


class _Losing(Inline):
    """An executor that loses its first run, the way a cluster loses a worker."""

    def map_unordered(self, fn, items, *, keys=None):
        yield 0, RuntimeError("worker lost")
        for i, value in super().map_unordered(fn, items[1:]):
            yield i + 1, value


def test_runs_lost_by_the_executor_are_recorded_failed(tmp_path):
    cases = [tiny_linear(seed=s) for s in (0, 1)]
    out = simfl.sweep(cases, store=tmp_path / "s", executor=_Losing(), progress=False)
    assert out.failed == out.run_ids[:1] and out.ran == out.run_ids
    assert Store(tmp_path / "s").record(out.run_ids[0])["error"] == (
        "executor error: RuntimeError: worker lost"
    )
    again = simfl.sweep(cases, store=tmp_path / "s", executor=_Losing(), retry_failed=True)
    assert again.ran == out.run_ids[:1] and again.failed == out.run_ids[:1]
    spec = make_spec(cases[0], {}, store=str(tmp_path / "elsewhere"))
    with pytest.raises(RuntimeError, match="filesystem they all share"):
        execute(spec)
