"""Faults in sweeps: runs that cannot be shipped, bad options, and sweeps killed at any moment.

The kill tests start ``simfl sweep`` as a real process in a session of its own, signal it (or
one of its workers), and read /proc to see which processes of that session are still alive.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import simfl
from simfl import Store, algorithms
from simfl.cli import MAX_SEEDS, main, parse_seeds
from simfl.sweeps import Processes, SweepInterrupted
from simfl.sweeps.store import VOLATILE
from simfl.sweeps.worker import execute, make_spec
from tests.helpers import timing_scenario, tiny_linear

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads /proc and sends POSIX signals"
)

ROOT = Path(__file__).resolve().parents[1]


@dataclasses.dataclass(frozen=True)
class Locked(algorithms.TimingOnly):
    """An algorithm holding a lock: it cannot be pickled (it can be fingerprinted)."""

    lock: Any = dataclasses.field(default_factory=threading.Lock, repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class Opaque(algorithms.TimingOnly):
    """An algorithm whose lock takes part in ``==``: it cannot even be fingerprinted."""

    lock: Any = dataclasses.field(default_factory=threading.Lock, repr=False)


def test_a_case_that_cannot_be_pickled_is_a_failed_run_and_the_others_go_on(tmp_path):
    ok = timing_scenario(n=6, rounds=4, dropout_rate=0.2)
    locked = dataclasses.replace(ok, name="locked", algorithm=Locked())
    opaque = dataclasses.replace(ok, name="opaque", algorithm=Opaque())
    cases = [ok, locked, dataclasses.replace(ok, seed=1), opaque]
    out = simfl.sweep(cases, store=tmp_path / "s", workers=2, progress=False)
    assert len(out.ran) == 4 and out.failed == (out.run_ids[1], out.run_ids[3])
    store = Store(tmp_path / "s")
    assert [store.record(r)["status"] for r in out.run_ids] == ["done", "failed", "done", "failed"]
    shipped, identified = store.record(out.run_ids[1]), store.record(out.run_ids[3])
    assert "Scenario.algorithm cannot be pickled" in shipped["error"]
    assert "cannot pickle '_thread.lock' object" in shipped["error"]
    assert "cannot fingerprint the scenario" in identified["error"]
    assert not shipped["has_results"] and not identified["has_results"]
    for run_id, scenario in ((out.run_ids[0], cases[0]), (out.run_ids[2], cases[2])):
        direct = simfl.run(scenario, progress=False)
        mine = store.results(run_id)
        pd.testing.assert_frame_equal(mine.rounds, direct.rounds, check_exact=True)
        pd.testing.assert_frame_equal(mine.clients, direct.clients, check_exact=True)
    assert "failed     " in out.summary() and "Scenario.algorithm" in out.summary()

    again = simfl.sweep(cases, store=tmp_path / "s", executor="inline", progress=False)
    assert again.run_ids == out.run_ids and again.ran == () and again.failed == out.failed
    retried = simfl.sweep(cases, store=tmp_path / "s", executor="inline", retry_failed=True)
    assert retried.ran == out.failed and retried.failed == out.failed
    memory = simfl.sweep(cases, executor="inline", progress=False)  # no store: the same
    assert memory.failed == out.failed


LINEAR = textwrap.dedent(
    """
    from simfl import Fleet, Scenario, algorithms, dists, policies, tasks

    SCENARIO = Scenario(
        name="linear",
        task=tasks.LinearRepresentation(d=6, k=2, samples_per_client=5, test_samples=20),
        algorithm=algorithms.FedRep(),
        fleet=Fleet.homogeneous(8, compute=dists.Exponential(mean=1.0)),
        policy=policies.WaitAll(count=4),
        rounds=3,
    )
    """
)


def test_the_seeds_of_a_scenario_share_one_payload():
    prepared: dict[Any, Any] = {}
    base = timing_scenario(n=6, rounds=4)
    specs = [make_spec(dataclasses.replace(base, seed=s), {}, prepared=prepared) for s in (0, 7)]
    assert specs[0].payload is specs[1].payload and len(prepared) == 1
    alone = make_spec(dataclasses.replace(base, seed=7), {})
    assert alone.run_id == specs[1].run_id and alone.info == specs[1].info
    assert [s.info["seed"] for s in specs] == [0, 7]
    seven = execute(specs[1]).results  # the worker runs the spec's seed, not the payload's
    direct = simfl.run(dataclasses.replace(base, seed=7), progress=False)
    assert seven is not None and seven.meta["seed"] == 7
    pd.testing.assert_frame_equal(seven.clients, direct.clients, check_exact=True)
    assert not seven.clients.equals(simfl.run(base, progress=False).clients)  # seed 0's
    other = make_spec(dataclasses.replace(base, name="other"), {}, prepared=prepared)
    assert other.payload is not specs[0].payload and len(prepared) == 2


def test_options_are_refused_before_any_run(tmp_path, capsys):
    file = tmp_path / "linear.py"
    file.write_text(LINEAR)
    store = tmp_path / "s"
    sweep = ["sweep", str(file), "--store", str(store), "--executor", "inline", "--quiet"]
    assert main([*sweep, "--target", "nope<1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "error: --target metric 'nope' is not a metric of these scenarios; valid: distance, "
        "test_mse"
    )
    assert not store.exists()  # refused before the store was even made

    assert main([*sweep, "--seeds", "0-100000000"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "error: --seeds 0-100000000 lists 100,000,001 seeds; a sweep takes at most 100,000 "
        "(each seed is one run of every scenario)"
    )
    assert not store.exists()
    assert main([*sweep, "--seeds", "0-3,10", "--target", "distance<0.5"]) == 0
    assert len(Store(store).records()) == 5

    assert parse_seeds(f"0-{MAX_SEEDS - 1}") == list(range(MAX_SEEDS))
    for bad, match in (("0-99999,100000", "at most 100,000"), ("5-3", "low to high")):
        with pytest.raises(ValueError, match=match):
            parse_seeds(bad)
    timing = tmp_path / "timing.py"
    timing.write_text(CHAOS)
    assert main(["sweep", str(timing), "--store", str(store), "--target", "distance<1"]) == 2
    assert "these scenarios have no task, so no metrics" in capsys.readouterr().err


def _sleepy(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def test_an_interrupted_processes_map_kills_its_workers():
    import multiprocessing

    results = Processes(workers=2).map_unordered(_sleepy, [0.0, 60.0, 60.0])
    assert next(results)[0] == 0
    workers = multiprocessing.active_children()
    assert len(workers) == 2
    results.close()  # what a KeyboardInterrupt (Ctrl-C, SIGTERM) in the sweep does
    assert not multiprocessing.active_children()
    assert all(w.exitcode == -signal.SIGKILL for w in workers)


def test_an_interrupted_sweep_says_what_it_did(tmp_path):
    class Interrupting(simfl.sweeps.Inline):
        def map_unordered(self, fn, items, *, keys=None):
            yield from list(super().map_unordered(fn, items[:1]))
            raise KeyboardInterrupt

    cases = [tiny_linear(seed=s) for s in range(3)]
    with pytest.raises(SweepInterrupted) as caught:
        simfl.sweep(cases, store=tmp_path / "s", executor=Interrupting(), progress=False)
    outcome = caught.value.outcome
    assert outcome.ran == outcome.run_ids[:1] and outcome.left == 2
    assert "3 runs: 1 ran (1 done, 0 failed), 0 already in the store, 2 not run yet" in (
        outcome.summary()
    )
    resumed = simfl.sweep(cases, store=tmp_path / "s", executor="inline", progress=False)
    assert resumed.skipped == outcome.run_ids[:1] and resumed.ran == outcome.run_ids[1:]


# ------------------------------------------------------------------- real processes, signals

#: Timing-only runs of a tiny fleet that sleep in every round (host time only; the results do
#: not depend on it), so that a kill lands while runs are in flight.
CHAOS = textwrap.dedent(
    """
    import dataclasses, os, time
    from simfl import Fleet, Scenario, algorithms, dists, policies, sweeps


    @dataclasses.dataclass(frozen=True)
    class Sleepy(algorithms.TimingOnly):
        def local_updates(self, state, data, clients, round, streams):
            time.sleep(float(os.environ.get("SIMFL_TEST_SLEEP", "0")))
            return super().local_updates(state, data, clients, round, streams)


    BASE = Scenario(
        name="chaos",
        task=None,
        algorithm=Sleepy(),
        fleet=Fleet.homogeneous(4, compute=dists.Exponential(mean=1.0), dropout_rate=0.2),
        policy=policies.WaitAll(),
        rounds=8,
    )
    CASES = sweeps.grid(BASE, policy={"d": policies.Deadline(1.5, count=3),
                                      "w": policies.WaitAll()})
    """
)


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (state, ppid, pgrp, session, ...)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def _session(sid: int) -> list[int]:
    """The live (not zombie) processes of session ``sid``."""
    pids = []
    for entry in Path("/proc").iterdir():
        fields = _stat(int(entry.name)) if entry.name.isdigit() else None
        if fields is not None and fields[0] != "Z" and int(fields[3]) == sid:
            pids.append(int(entry.name))
    return pids


def _workers(parent: int) -> list[int]:
    """The worker processes of a ``simfl sweep`` process (forked: the same command line)."""
    try:
        command = Path(f"/proc/{parent}/cmdline").read_bytes()
    except OSError:
        return []
    found = []
    for pid in _session(parent):
        fields = _stat(pid)
        try:
            same = Path(f"/proc/{pid}/cmdline").read_bytes() == command
        except OSError:
            continue
        if fields is not None and int(fields[1]) == parent and same:
            found.append(pid)
    return found


def _wait(condition: Any, what: str, seconds: float = 60.0) -> None:
    """Poll ``condition`` until it holds; fail after ``seconds`` (a hang, not a speed check)."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _stored(store: Path) -> int:
    runs = store / "runs"
    return sum(1 for p in runs.iterdir() if p.name[0] != ".") if runs.is_dir() else 0


def _simfl(*args: str) -> list[str]:
    return [sys.executable, "-m", "simfl.cli", *args]


class Sessions:
    """Processes started in sessions of their own, killed for good at the end."""

    def __init__(self, command: list[str], sleep: float = 0.0) -> None:
        self.command = command
        self.env = {**os.environ, "SIMFL_TEST_SLEEP": str(sleep), "PYTHONPATH": str(ROOT)}
        self.sessions: list[int] = []

    def start(self) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            self.command,
            env=self.env,
            cwd=ROOT,
            start_new_session=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.sessions.append(proc.pid)
        return proc

    def left(self) -> list[int]:
        """Processes still alive in any session started here."""
        return [pid for sid in self.sessions for pid in _session(sid)]

    def kill_all(self) -> None:
        for sid in self.sessions:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(sid, signal.SIGKILL)


def _running(proc: subprocess.Popen[str], store: Path, before: int) -> None:
    """Wait until ``proc`` has workers and stored a run beyond ``before`` (it is mid-sweep)."""

    def progressed() -> bool:
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"the sweep ended by itself ({proc.returncode}): {out}{err}")
        return _stored(store) > before and bool(_workers(proc.pid))

    _wait(progressed, "the sweep to store a run")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["term", "kill"])
def test_a_killed_sweep_leaves_no_worker_behind(tmp_path, sig):
    file, store = tmp_path / "chaos.py", tmp_path / "store"
    file.write_text(CHAOS)
    args = ["sweep", str(file), "--seeds", "0-9", "--store", str(store), "--workers", "2"]
    sweeps = Sessions(_simfl(*args, "--quiet"), sleep=0.05)
    try:
        proc = sweeps.start()
        _running(proc, store, 0)
        workers = _workers(proc.pid)
        assert len(workers) == 2
        proc.send_signal(sig)
        proc.wait(timeout=60)
        _wait(lambda: not sweeps.left(), "the workers to die", seconds=15)
        out, err = proc.communicate(timeout=60)  # (workers left would hold its pipes open)
        stored = _stored(store)
        assert 0 < stored < 20
        if sig == signal.SIGTERM:
            assert proc.returncode == 128 + signal.SIGTERM
            said = re.search(
                r"20 runs: (\d+) ran \(\1 done, 0 failed\), 0 already in the "
                r"store, (\d+) not run yet",
                out,
            )
            assert said is not None, out
            ran, left = int(said[1]), int(said[2])
            assert ran + left == 20 and 0 < ran <= stored  # a run in flight may be stored
            assert "terminated (SIGTERM)" in err and "Run the same command to resume" in err
            assert f"simfl sweep {file} --seeds 0-9 --store {store} --workers 2" in err
        else:
            assert proc.returncode == -signal.SIGKILL
    finally:
        sweeps.kill_all()
    assert main([*args, "--quiet"]) == 0  # the same command resumes (and finishes) it
    assert len(Store(store).records()) == 20


@pytest.mark.slow
def test_chaos_kills_at_random_moments_lose_and_duplicate_nothing(tmp_path):
    """12 kills at seeded random moments: of the sweep, of a worker, SIGTERM of the sweep."""
    file, store = tmp_path / "chaos.py", tmp_path / "store"
    file.write_text(CHAOS)
    args = ["sweep", str(file), "--seeds", "0-23", "--store", str(store), "--quiet"]
    sweeps = Sessions(_simfl(*args, "--workers", "2"), sleep=0.03)
    rng = np.random.default_rng(14)
    kinds = ["kill sweep", "kill worker", "term sweep"] * 4
    proc = None
    try:
        for kind in kinds:
            if proc is None:
                proc = sweeps.start()
            _running(proc, store, _stored(store))
            time.sleep(rng.uniform(0.0, 0.3))
            assert proc.poll() is None, "the sweep finished before it was killed"
            if kind == "kill worker":
                os.kill(int(rng.choice(_workers(proc.pid))), signal.SIGKILL)
                continue  # the sweep restarts its pool and goes on
            proc.send_signal(signal.SIGKILL if kind == "kill sweep" else signal.SIGTERM)
            proc.wait(timeout=60)
            expected = -signal.SIGKILL if kind == "kill sweep" else 128 + signal.SIGTERM
            assert proc.returncode == expected, kind
            _wait(lambda: not sweeps.left(), "the workers to die", seconds=15)
            proc.communicate(timeout=60)
            proc = None
        assert _stored(store) < 48  # every kill landed mid-sweep
        final = sweeps.start()
        out, err = final.communicate(timeout=120)
        assert final.returncode == 0, err
        assert "0 failed" in out
        _wait(lambda: not sweeps.left(), "every process the test started to end", seconds=15)
    finally:
        sweeps.kill_all()

    reference = tmp_path / "reference"  # the same cases, uninterrupted, here (no sleeping)
    assert main([*args[:-3], "--store", str(reference), "--executor", "inline", "--quiet"]) == 0
    a, b = Store(store), Store(reference)
    runs = a.runs()
    assert len(runs) == 48 and runs["run_id"].is_unique and (runs["status"] == "done").all()
    assert sorted(runs["run_id"]) == sorted(b.runs()["run_id"])
    pd.testing.assert_frame_equal(a.rounds(), b.rounds(), check_exact=True)
    pd.testing.assert_frame_equal(a.clients(), b.clients(), check_exact=True)
    volatile = list(VOLATILE)
    pd.testing.assert_frame_equal(a.runs().drop(columns=volatile), b.runs().drop(columns=volatile))


def test_a_worker_outlives_no_parent_without_prctl(tmp_path):
    """The watchdog (the fallback where the kernel cannot signal): the worker exits too."""
    child = (
        "import sys, time; from simfl.sweeps.executors.processes import _watch_parent; "
        "_watch_parent(int(sys.argv[1]), every=0.05); print('watching', flush=True); "
        "time.sleep(120)"
    )
    parent = (
        "import os, subprocess, sys, time; "
        f"p = subprocess.Popen([sys.executable, '-c', {child!r}, str(os.getpid())]); "
        "print(p.pid, flush=True); time.sleep(120)"
    )
    sweeps = Sessions([sys.executable, "-c", parent])
    try:
        proc = sweeps.start()
        assert proc.stdout is not None
        pid = int(proc.stdout.readline())
        assert proc.stdout.readline().strip() == "watching"
        assert sorted(sweeps.left()) == sorted([proc.pid, pid])
        proc.kill()
        proc.communicate(timeout=60)
        _wait(lambda: not sweeps.left(), "the orphan to exit", seconds=15)
    finally:
        sweeps.kill_all()
