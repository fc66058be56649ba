"""Progress: a run's bar (rounds, or simulated seconds of ``max_time``), the share done reported
from inside the runs of a sweep (inline and across worker processes), and ``simfl report``."""

import dataclasses
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pandas as pd
import pytest

import simfl
from simfl import algorithms, policies, sweeps
from simfl.cli import main
from simfl.sweeps import Executor, Inline, Processes, executors
from tests.helpers import timing_scenario, tiny_linear


class Recorder:
    """A stand-in for tqdm that records its settings and every value of ``n``."""

    made: ClassVar[list["Recorder"]] = []

    def __init__(self, iterable=None, *, total=None, initial=0, disable=False, **kw):
        self.iterable, self.total, self.n, self.disable = iterable, total, initial, disable
        self.kw = kw
        self.values: list[float] = []
        self.closed = False
        Recorder.made.append(self)

    def __iter__(self):
        return iter(self.iterable)

    def update(self, n=1):
        if not self.disable:
            self.n += n
            self.values.append(self.n)

    def set_postfix(self, *args, **kw):
        pass

    def close(self):
        self.closed = True


@pytest.fixture
def bars(monkeypatch):
    Recorder.made = []
    monkeypatch.setattr("simfl.engine.progress.tqdm", Recorder)
    monkeypatch.setattr("simfl.sweeps.run.tqdm", Recorder)
    return Recorder.made


def _max_time_run(max_time=40.0):
    sc = timing_scenario(n=10, policy=policies.WaitAll(count=3))
    return dataclasses.replace(sc, rounds=None, max_time=max_time)


# ------------------------------------------------------------------- one run


def test_a_max_time_run_has_a_bar_over_simulated_seconds(bars):
    sc = _max_time_run()
    res = simfl.run(sc, progress=True)
    (bar,) = bars
    assert bar.total == 40.0 and "simulated s" in bar.kw["bar_format"] and bar.closed
    times = res.rounds["time"].to_numpy()
    # one update per aggregation, to the clock, then the clock where the run stopped
    np.testing.assert_array_equal(bar.values[:-1], times)
    assert bar.values[-1] == 40.0 and res.meta["stop_reason"] == "max_time"
    quiet = simfl.run(sc, progress=False)
    pd.testing.assert_frame_equal(quiet.rounds, res.rounds, check_exact=True)
    pd.testing.assert_frame_equal(quiet.clients, res.clients, check_exact=True)


def test_a_rounds_run_has_a_bar_over_rounds(bars):
    simfl.run(timing_scenario(rounds=7), progress=True)
    (bar,) = bars
    assert bar.total == 7 and bar.values == [1, 2, 3, 4, 5, 6, 7]


def test_a_progress_callable_gets_the_share_done_after_every_aggregation():
    shares: list[float] = []
    res = simfl.run(timing_scenario(rounds=8), progress=shares.append)
    assert shares == [(k + 1) / 8 for k in range(8)]

    shares.clear()
    sc = _max_time_run()
    res = simfl.run(sc, progress=shares.append)
    np.testing.assert_array_equal(shares, res.rounds["time"].to_numpy() / 40.0)
    pd.testing.assert_frame_equal(
        simfl.run(sc, progress=False).clients, res.clients, check_exact=True
    )

    shares.clear()  # both stop rules: the larger share (here rounds: 5 rounds take far less time)
    both = dataclasses.replace(_max_time_run(max_time=1e6), rounds=5)
    res = simfl.run(both, progress=shares.append)
    assert shares == [(k + 1) / 5 for k in range(5)]

    with pytest.raises(
        ValueError, match=r"progress must be True or False, got 'yes' \(or a callable"
    ):
        simfl.run(sc, progress="yes")


# ------------------------------------------------------------------- executors


def _reports(item, report):
    for share in item:
        report(share)
    return len(item)


def test_inline_passes_reports_on_throttled(monkeypatch):
    got: list[tuple[int, float]] = []
    items = [(0.25, 0.5, 1.0), (0.5, 1.0)]
    monkeypatch.setattr(executors.base, "PROGRESS_EVERY", 0.0)
    out = list(Inline().map_reporting(_reports, items, progress=lambda i, s: got.append((i, s))))
    assert out == [(0, 3), (1, 2)]
    assert got == [(0, 0.25), (0, 0.5), (0, 1.0), (1, 0.5), (1, 1.0)]
    got.clear()
    monkeypatch.setattr(executors.base, "PROGRESS_EVERY", 1e9)  # only the first report of each
    list(Inline().map_reporting(_reports, items, progress=lambda i, s: got.append((i, s))))
    assert got == [(0, 0.25), (1, 0.5)]


def _report_then_wait(item, report):
    """In a worker process: report a share, then wait until the sweep's side has seen it."""
    flag, share = item
    report(share)
    deadline = time.monotonic() + 60
    while not os.path.exists(flag):
        if time.monotonic() > deadline:
            return "the report never arrived"
        time.sleep(0.01)
    return os.getpid()


def test_processes_carry_reports_from_the_workers(tmp_path, monkeypatch):
    monkeypatch.setattr(executors.base, "PROGRESS_EVERY", 0.01)
    items = [(str(tmp_path / f"seen-{i}"), share) for i, share in enumerate((0.25, 0.5, 0.75))]
    got: dict[int, float] = {}

    def progress(i, share):
        got[i] = share
        Path(items[i][0]).write_text("seen")  # lets that worker finish

    out = dict(Processes(workers=2).map_reporting(_report_then_wait, items, progress=progress))
    assert got == {0: 0.25, 1: 0.5, 2: 0.75}
    assert all(isinstance(pid, int) and pid != os.getpid() for pid in out.values()), out


def _no_report(item, report):
    return report


class _Plain(Executor):
    name = "plain"

    def map_unordered(self, fn, items, *, keys=None):
        for i, item in enumerate(items):
            yield i, fn(item)


def test_an_executor_without_reports_gives_none():
    # Dask and executors written before reports exist: the function is told report=None
    out = list(_Plain().map_reporting(_no_report, [1, 2], progress=lambda i, s: None))
    assert out == [(0, None), (1, None)]
    assert Executor.map_reporting is executors.Dask.map_reporting


# ------------------------------------------------------------------- sweeps


def test_the_sweep_bar_counts_the_share_of_the_runs_in_flight(bars, monkeypatch):
    monkeypatch.setattr(executors.base, "PROGRESS_EVERY", 0.0)
    cases = sweeps.grid(timing_scenario(rounds=4), seed=[0, 1])
    simfl.sweep(cases, executor="inline")
    bar = next(b for b in bars if b.total == 2)
    assert "runs" in bar.kw["bar_format"]
    assert bar.values == [0.25, 0.5, 0.75, 1.0, 1.0, 1.25, 1.5, 1.75, 2.0, 2.0]


@dataclass(frozen=True)
class HalfwayGate(algorithms.FedRep):
    """FedRep that waits, before its third aggregation, until the file ``flag`` exists."""

    flag: str = ""

    def aggregate(self, state, updates, outcome):
        deadline = time.monotonic() + 60
        while outcome.round == 2 and not os.path.exists(self.flag):
            if time.monotonic() > deadline:
                raise RuntimeError("the sweep never showed the run half done")
            time.sleep(0.01)
        return super().aggregate(state, updates, outcome)


def test_a_processes_sweep_shows_a_run_half_done(bars, monkeypatch, tmp_path):
    monkeypatch.setattr(executors.base, "PROGRESS_EVERY", 0.01)
    flag = tmp_path / "half"
    sc = dataclasses.replace(tiny_linear(rounds=4), algorithm=HalfwayGate(flag=str(flag)))
    opened: list[float] = []

    class Opening(Recorder):  # opens the gate when it shows the run half done
        def update(self, n=1):
            super().update(n)
            if self.total == 1 and self.n == 0.5 and not opened:
                opened.append(self.n)
                flag.write_text("open")

    monkeypatch.setattr("simfl.sweeps.run.tqdm", Opening)
    out = simfl.sweep(sc, executor=Processes(workers=1), store=tmp_path / "s")
    assert out.failed == () and opened == [0.5]
    bar = next(b for b in bars if b.total == 1)
    assert bar.values[-1] == 1.0 and 0.5 in bar.values


# ------------------------------------------------------------------- simfl report


def test_report_says_what_it_is_doing(tmp_path, capsys):
    cases = sweeps.grid(
        tiny_linear(rounds=4),
        policy={"d": policies.Deadline(1.5, count=4), "f": policies.FastestK(k=3)},
        seed=[0, 1],
    )
    simfl.sweep(cases, store=tmp_path / "s", executor="inline", progress=False)
    assert main(["report", str(tmp_path / "s")]) == 0
    lines = capsys.readouterr().out.splitlines()
    said = [line for line in lines if line.startswith("...")]
    assert "reading the runs" in said[1] and "4 finished runs in 2 series" in said[2]
    for name in ("metric_vs_rounds", "metric_vs_time", "speedup", "gantt", "staleness"):
        assert any(f"{name}.png" in line for line in said), name
    assert "index.html" in said[-1] and lines[-1].startswith("report ")
    assert main(["report", str(tmp_path / "s"), "--quiet"]) == 0
    assert not [x for x in capsys.readouterr().out.splitlines() if x.startswith("...")]
