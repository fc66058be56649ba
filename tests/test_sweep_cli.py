"""``simfl sweep`` killed and resumed, and sweep files with a labelled grid."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd

from simfl import Store
from simfl.cli import main, parser
from simfl.sweeps.store import VOLATILE

GATED = textwrap.dedent(
    """
    import dataclasses, os, time
    from simfl import Fleet, Scenario, algorithms, dists, policies, tasks

    FLAG = {flag!r}


    @dataclasses.dataclass(frozen=True)
    class Gated(algorithms.FedRep):  # defined here: workers get it by value (cloudpickle)
        def initial_state(self, data, streams):
            deadline = time.monotonic() + 120
            while not os.path.exists(FLAG):
                if time.monotonic() > deadline:
                    raise RuntimeError("the gate never opened")
                time.sleep(0.02)
            return super().initial_state(data, streams)


    BASE = Scenario(
        name="open",
        task=tasks.LinearRepresentation(d=6, k=2, samples_per_client=5, test_samples=20),
        algorithm=algorithms.FedRep(),
        fleet=Fleet.homogeneous(12, compute=dists.Exponential(mean=1.0), dropout_rate=0.1),
        policy=policies.Deadline(1.5, count=4),
        rounds=6,
    )
    GATED = dataclasses.replace(BASE, name="gated", algorithm=Gated())
    SCENARIOS = {{"open": BASE, "gated": GATED}}
    """
)


def _runs(store, *, hidden=False):
    """Names in the store's runs/ folder (partial runs being written start with a dot)."""
    if not (store / "runs").is_dir():
        return []
    return sorted(p.name for p in (store / "runs").iterdir() if hidden or p.name[0] != ".")


def test_a_killed_sweep_resumes_without_losing_or_duplicating_runs(tmp_path, capsys):
    flag = tmp_path / "gate-open"
    file = tmp_path / "gated.py"
    file.write_text(GATED.format(flag=str(flag)))
    store = tmp_path / "store"
    args = ["sweep", str(file), "--seeds", "0-2", "--store", str(store), "--quiet"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "simfl.cli", *args, "--workers", "2"],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 90
        # the three "open" runs finish; the "gated" runs then hold both workers at the gate
        while len(_runs(store)) < 3:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the sweep and its worker processes
        proc.wait()
    assert len(_runs(store)) == 3 and all(n.startswith("open-") for n in _runs(store))

    flag.write_text("open")
    assert main([*args, "--workers", "2"]) == 0
    printed = capsys.readouterr().out
    assert "6 runs: 3 ran (3 done, 0 failed), 3 already in the store" in printed
    assert main([*args, "--executor", "inline"]) == 0
    assert "0 ran (0 done, 0 failed), 6 already in the store" in capsys.readouterr().out

    reference = tmp_path / "reference"
    assert main([*args[:-3], "--store", str(reference), "--executor", "inline", "--quiet"]) == 0
    assert _runs(store, hidden=True) == _runs(reference) and len(_runs(store)) == 6
    a, b = Store(store), Store(reference)
    pd.testing.assert_frame_equal(a.rounds(), b.rounds(), check_exact=True)
    pd.testing.assert_frame_equal(a.clients(), b.clients(), check_exact=True)
    volatile = list(VOLATILE)
    pd.testing.assert_frame_equal(a.runs().drop(columns=volatile), b.runs().drop(columns=volatile))


GRID = textwrap.dedent(
    """
    from simfl import Fleet, Scenario, algorithms, dists, policies, sweeps, tasks

    BASE = Scenario(
        name="grid",
        task=tasks.LinearRepresentation(d=6, k=2, samples_per_client=5, test_samples=20),
        algorithm=algorithms.FedRep(),
        fleet=Fleet.homogeneous(12, compute=dists.Exponential(mean=1.0)),
        policy=policies.WaitAll(count=4),
        rounds=5,
    )
    FLEETS = {n: Fleet.homogeneous(n, compute=dists.Exponential(mean=1.0)) for n in (8, 12)}
    CASES = sweeps.grid(BASE, policy={"w": policies.WaitAll(count=4), "f": policies.FastestK(k=2)},
                        fleet=FLEETS)
    """
)


def test_sweep_file_with_cases_and_show(tmp_path, capsys):
    file = tmp_path / "grid.py"
    file.write_text(GRID)
    store = tmp_path / "s"
    code = main(
        [
            "sweep",
            str(file),
            "--seeds",
            "1,3",
            "--store",
            str(store),
            "--quiet",
            "--executor",
            "inline",
            "--target",
            "distance<0.5",
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "8 runs (4 scenarios x 2 seeds)" in printed and "mean_time" in printed
    frame = Store(store).rounds()
    assert set(frame["policy"]) == {"w", "f"} and set(frame["fleet"]) == {8, 12}
    assert set(frame["seed"]) == {1, 3} and frame["run_id"].nunique() == 8
    assert main(["show", str(store)]) == 0
    shown = capsys.readouterr().out
    assert "8 runs, 8 done, 0 failed" in shown and "policy=f,fleet=12" in shown
    bad = [
        "sweep",
        str(file),
        "--store",
        str(tmp_path / "x"),
        "--scheduler",
        "tcp://h:1",
        "--executor",
        "processes",
    ]
    assert main(bad) == 2
    assert "needs executor='dask'" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "nothing")]) == 2
    assert "not a simfl results store" in capsys.readouterr().err


def test_docs_sweep_and_report_commands_parse():
    root = Path(__file__).resolve().parents[1]
    page = (root / "docs" / "sweeps.md").read_text()
    lines = [ln for ln in page.splitlines() if ln.startswith(("simfl sweep", "simfl report"))]
    assert len(lines) >= 3
    assert any("--executor dask --scheduler tcp://host:8786 --store" in ln for ln in lines)
    for line in lines:
        args = parser().parse_args(line.split("#")[0].split()[1:])
        assert args.command == "report" or (root / args.scenario).is_file()
    assert "dask worker tcp://host:8786" in page and "shares" in page
