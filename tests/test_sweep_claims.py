"""Sweeps sharing a store claim each run before computing it, so every run is computed once."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import simfl
from simfl import Store
from simfl.sweeps import claims
from simfl.sweeps.worker import execute, make_spec
from tests.helpers import tiny_linear

ROOT = Path(__file__).resolve().parents[1]

GATED = textwrap.dedent(
    """
    import dataclasses, os, time
    from pathlib import Path
    from simfl import Fleet, Scenario, algorithms, dists, policies, tasks

    GATE = Path({gate!r})


    @dataclasses.dataclass(frozen=True)
    class Gated(algorithms.FedRep):  # each computation of a run leaves a file, then waits
        def initial_state(self, data, streams):
            (GATE / f"computed-{{os.getpid()}}-{{time.monotonic_ns()}}").touch()
            deadline = time.monotonic() + 120
            while not (GATE / "open").exists():
                if time.monotonic() > deadline:
                    raise RuntimeError("the gate never opened")
                time.sleep(0.02)
            return super().initial_state(data, streams)


    SCENARIO = Scenario(
        name="gated",
        task=tasks.LinearRepresentation(d=6, k=2, samples_per_client=5, test_samples=20),
        algorithm=Gated(),
        fleet=Fleet.homogeneous(12, compute=dists.Exponential(mean=1.0), dropout_rate=0.1),
        policy=policies.Deadline(1.5, count=4),
        rounds=6,
    )
    """
)


def _computed(gate: Path) -> int:
    return sum(p.name.startswith("computed-") for p in gate.iterdir())


def test_two_sweeps_on_one_store_compute_each_run_once(tmp_path):
    gate = tmp_path / "gate"
    gate.mkdir()
    file = tmp_path / "gated.py"
    file.write_text(GATED.format(gate=str(gate)))
    store = tmp_path / "store"
    command = [sys.executable, "-m", "simfl.cli", "sweep", str(file), "--seeds", "0-7"]
    command += ["--store", str(store), "--workers", "2", "--quiet"]
    sweeps = [
        subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    try:
        # both sweeps' two workers are at the gate, each with a run of its own (four runs):
        # without claims, both sweeps would compute the same first runs
        deadline = time.monotonic() + 90
        while _computed(gate) < 4:
            assert all(p.poll() is None for p in sweeps), [p.communicate() for p in sweeps]
            assert time.monotonic() < deadline, "the sweeps never reached the gate"
            time.sleep(0.05)
        (gate / "open").touch()
        outputs = [p.communicate(timeout=120) for p in sweeps]
    finally:
        for p in sweeps:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [p.returncode for p in sweeps] == [0, 0], outputs
    printed = [out.decode() for out, _ in outputs]
    ran = [int(text.split(" runs: ")[1].split(" ran")[0]) for text in printed]
    assert sum(ran) == 8, printed  # each run ran once, in one sweep or the other
    assert _computed(gate) == 8
    assert any("claimed by another sweep" in text for text in printed), printed
    assert set(Store(store).status().values()) == {"done"} and len(Store(store).status()) == 8
    assert sorted(p.name for p in (store / "runs").iterdir()) == sorted(Store(store).status())


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _write_claim(path: Path, host: str, pid: int, sweep: str = "other") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    holder = {"host": host, "pid": pid, "sweep": sweep, "token": "t", "time": time.time()}
    path.write_text(json.dumps(holder))


def test_a_claim_of_a_dead_process_is_taken_over(tmp_path):
    cases = [tiny_linear(seed=s) for s in range(2)]
    spec = make_spec(cases[1], {}, store=str(tmp_path / "s"))
    Store(tmp_path / "s", create=True)
    claim = tmp_path / "s" / "runs" / f"{claims.PREFIX}{spec.run_id}"
    _write_claim(claim, socket.gethostname(), _dead_pid())
    out = simfl.sweep(cases, store=tmp_path / "s", executor="inline", progress=False)
    assert len(out.ran) == 2 and not out.claimed and not claim.exists()


def test_claims_expire_by_process_lease_and_sweep(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    runs.mkdir()
    first = claims.take(runs, "r", "sweep-a")
    assert isinstance(first, claims.Claim)
    with first:
        held = claims.take(runs, "r", "sweep-b")
        assert isinstance(held, claims.Holder) and held.pid == os.getpid()
        assert str(held) == f"process {os.getpid()} on {socket.gethostname()}"
        # the same sweep takes its own claim over (its executor lost the worker)
        again = claims.take(runs, "r", "sweep-a")
        assert isinstance(again, claims.Claim)
        again.release()
    assert not (runs / f"{claims.PREFIX}r").exists()  # released (the first found it gone)
    # another host's claim lives while it is touched, and expires LEASE seconds after
    path = runs / f"{claims.PREFIX}r"
    _write_claim(path, "elsewhere.example", 1)
    assert isinstance(claims.take(runs, "r", "sweep-b"), claims.Holder)
    old = time.time() - claims.LEASE - 1
    os.utime(path, (old, old))
    taken = claims.take(runs, "r", "sweep-b")
    assert isinstance(taken, claims.Claim)
    taken.release()
    assert not path.exists()


def test_a_claim_touches_its_file_while_it_is_held(tmp_path, monkeypatch):
    monkeypatch.setattr(claims, "HEARTBEAT", 0.01)
    runs = tmp_path / "runs"
    runs.mkdir()
    claim = claims.take(runs, "r", "a")
    assert isinstance(claim, claims.Claim)
    path = runs / f"{claims.PREFIX}r"
    os.utime(path, (0, 0))
    with claim:
        deadline = time.monotonic() + 10
        while path.stat().st_mtime == 0:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    assert not path.exists()


def test_a_sweep_waits_for_a_run_another_sweep_claimed_and_skips_it(tmp_path):
    cases = [tiny_linear(seed=s) for s in range(3)]
    store = Store(tmp_path / "s", create=True)
    spec = make_spec(cases[1], {}, store=str(store.path.resolve()))
    claim = claims.take(store.runs_dir, spec.run_id, "other")  # another sweep's, alive
    assert isinstance(claim, claims.Claim)
    done: dict[str, simfl.sweeps.SweepOutcome] = {}
    thread = threading.Thread(
        target=lambda: done.update(
            out=simfl.sweep(cases, store=store.path, executor="inline", progress=False)
        )
    )
    thread.start()
    deadline = time.monotonic() + 60
    while len(store.status()) < 2:  # the two other runs are stored; the sweep waits
        assert time.monotonic() < deadline and thread.is_alive()
        time.sleep(0.02)
    assert thread.is_alive()
    # the claimant computes its run (execute takes its own sweep's claim over) and publishes
    assert execute(dataclasses.replace(spec, sweep="other")).fresh
    claim.release()
    thread.join(timeout=60)
    out = done["out"]
    assert len(out.ran) == 2 and out.skipped == (spec.run_id,) and out.claimed == out.skipped
    assert "1 already in the store (1 claimed by another sweep)" in out.summary()


@pytest.mark.parametrize("content", ["", "not json", '{"host": 1}'])
def test_an_unreadable_claim_is_held_until_its_lease_ends(tmp_path, content):
    runs = tmp_path / "runs"
    runs.mkdir()
    path = runs / f"{claims.PREFIX}r"
    path.write_text(content)
    assert claims.take(runs, "r", "a") == claims.Holder()
    old = time.time() - claims.LEASE - 1
    os.utime(path, (old, old))
    taken = claims.take(runs, "r", "a")
    assert isinstance(taken, claims.Claim)
    taken.release()
