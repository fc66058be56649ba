"""The twin: a scenario played for real on Flower's Deployment Engine (``simfl.twin``).

One reduced twin (three SuperNodes, two rounds, a few tens of seconds of wall time, most of
them Flower starting its processes) checks that the real run records the rows of
:func:`simfl.run` and passes the same checks, that every job is planned from the same keyed
draws, and that failures are recorded without stopping the run: a ClientApp that raises and a
SuperNode killed mid-job are ``dropped`` jobs, and no process is left behind. The timing
*fidelity* is the study's (``analysis/twin_fidelity.py``), not a test's: wall-clock times are
never asserted.
"""

from __future__ import annotations

import dataclasses
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import simfl
from simfl import Fleet, Scenario
from simfl.algorithms import TimingOnly
from simfl.dists import Exponential
from simfl.fleet import Availability
from simfl.policies import FedBuff, WaitAll
from tests.test_termination import check_rows

pytest.importorskip("flwr", reason="the twin needs Flower: pip install 'simfl[flower]'")

from simfl.cli import main
from simfl.twin import twin
from simfl.twin.deployment import MARK

APPS = Path(__file__).with_name("twin_apps")
LINREG = Path(__file__).resolve().parents[1] / "docs" / "examples" / "flower_linreg"


def _scenario(**kw: object) -> Scenario:
    fleet = Fleet.homogeneous(3, compute=Exponential(mean=1.0), latency=0.1)
    base: dict[str, object] = dict(
        task=None, algorithm=TimingOnly(), fleet=fleet, policy=WaitAll(), rounds=2, seed=4
    )
    base.update(kw)
    return Scenario(**base)  # type: ignore[arg-type]


def _twin_processes(folder: Path) -> list[int]:
    """Live processes of the twin deployments whose work folder is ``folder`` (Flower's home
    lies in it, and every process of a deployment carries it in its environment)."""
    home = f"FLWR_HOME={folder / 'flwr-home'}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                env = (entry / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if home in env and any(item.startswith(MARK.encode() + b"=") for item in env):
                pids.append(int(entry.name))
    return pids


def _linreg(**kw: object) -> Scenario:
    """Three devices training the example Flower app (numpy only) with FedAvg."""
    from flwr.app import ArrayRecord
    from flwr.serverapp.strategy import FedAvg

    from simfl.flower import FlowerApp, FlowerTask

    sys.path.insert(0, str(LINREG))
    import linreg_app

    app = FlowerApp(
        client=linreg_app.app,
        strategy=FedAvg(),
        initial=ArrayRecord([np.zeros(linreg_app.DIM)]),
    )
    return _scenario(task=FlowerTask(metrics=("eval_mse",)), algorithm=app, **kw)


def test_a_reduced_twin_trains_a_flower_app_for_real_and_records_simfl_runs_rows(
    tmp_path: Path,
) -> None:
    sc = _linreg()
    res = twin(
        sc,
        scale=0.5,
        workdir=tmp_path / "twin",
        faults={1: 1},  # device 1's SuperNode dies once round 1's jobs are sent
        timeout=400,
    )
    ref = simfl.run(sc, progress=False)
    # the same validation as simfl.run's rows (statuses add up per round, times well formed)
    check_rows(res, sc)
    assert list(res.rounds.columns) == list(ref.rounds.columns)
    assert set(ref.clients.columns) <= set(res.clients.columns)
    assert res.meta["playback"] == "twin" and res.meta["stop_reason"] == "rounds"
    assert len(res.rounds) == 2 and (res.rounds["n_selected"] == 3).all()
    # every job is planned from the keyed draws simfl.run used for the same round and device
    key = ["round", "device"]
    planned = res.clients.set_index(key)["planned_compute"].sort_index()
    drawn = ref.clients.set_index(key)["compute"].sort_index()
    np.testing.assert_array_equal(planned.to_numpy(), drawn.to_numpy())
    # round 0: every job arrived in both, so the SuperNodes' training (the app's own code,
    # seeded as simfl.run seeds it) gave the model simfl.run computed, to the last bit
    assert res.rounds["n_arrived"].iloc[0] == 3
    assert res.rounds["eval_mse"].iloc[0] == ref.rounds["eval_mse"].iloc[0]
    assert res.meta["initial_metrics"] == ref.meta["initial_metrics"]
    # device 1's SuperNode was killed in round 1: that job dropped, the run went on
    status = res.clients.set_index(key)["status"].astype(str)
    assert status[(1, 1)] == "dropped" and "died" in res.clients.set_index(key).at[(1, 1), "error"]
    assert (status.drop((1, 1)) == "arrived").all()
    assert res.rounds["n_arrived"].iloc[1] == 2 and np.isfinite(res.rounds["eval_mse"]).all()
    # the arrived jobs waited out at least their emulated compute (in simulated seconds)
    arrived = res.clients[res.clients["status"].astype(str) == "arrived"]
    assert (arrived["compute"] >= arrived["planned_compute"] - 1e-3).all()
    assert (arrived["dispatch"] > 0).all() and (arrived["t_end"] > arrived["t_start"]).all()
    assert _twin_processes(tmp_path / "twin") == []
    assert (tmp_path / "twin" / "superlink.log").exists()  # the logs stay in the user's folder


def test_the_twin_command_records_an_app_that_raises_as_dropped_jobs(tmp_path: Path) -> None:
    file = tmp_path / "scenario.py"
    file.write_text(
        "from simfl import Fleet, Scenario\n"
        "from simfl.algorithms import TimingOnly\n"
        "from simfl.dists import Constant\n"
        "from simfl.policies import WaitAll\n"
        "SCENARIO = Scenario(task=None, algorithm=TimingOnly(), policy=WaitAll(), rounds=1,\n"
        "                    fleet=Fleet.homogeneous(3, compute=Constant(1.0)), name='fails')\n"
    )
    out = tmp_path / "out"
    code = main(
        ["twin", str(file), "--app", "sometimes_fails:app", "--path", str(APPS),
         "--scale", "0.5", "--out", str(out)]
    )  # fmt: skip
    assert code == 0
    res = simfl.Results.load(out)
    status = res.clients.set_index("device")["status"].astype(str)
    assert status.to_dict() == {0: "arrived", 1: "arrived", 2: "dropped"}
    assert "partition 2 ran out of memory" in res.clients.set_index("device").at[2, "error"]
    assert res.rounds["n_arrived"].tolist() == [2] and res.rounds["n_dropped"].tolist() == [1]


def test_a_killed_twin_leaves_no_process_behind(tmp_path: Path) -> None:
    # the process that runs a twin is killed outright (SIGKILL, no cleanup of its own): the
    # deployment's processes die with it (parent-death signal), and Flower's children follow
    work = tmp_path / "twin"
    script = (
        "import sys\n"
        "from simfl import Fleet, Scenario\n"
        "from simfl.algorithms import TimingOnly\n"
        "from simfl.dists import Constant\n"
        "from simfl.policies import WaitAll\n"
        "from simfl.twin import twin\n"
        "sc = Scenario(task=None, algorithm=TimingOnly(), policy=WaitAll(), rounds=50,\n"
        "              fleet=Fleet.homogeneous(2, compute=Constant(5.0)))\n"
        f"twin(sc, workdir={str(work)!r})\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 120
        while len(_twin_processes(work)) < 3:  # the SuperLink and both SuperNodes are up
            assert proc.poll() is None, "the twin ended before it was killed"
            assert time.monotonic() < deadline, "the deployment did not start in 120 s"
            time.sleep(0.2)
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 30
    while _twin_processes(work) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _twin_processes(work) == []


def test_the_twin_refuses_bad_input_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(ValueError, match=f"port {port} is already in use"):
            twin(_scenario(), port=port, workdir=tmp_path)
    with pytest.raises(ValueError, match=r"twin.scale must be in \(0, inf\)"):
        twin(_scenario(), scale=0.0)
    with pytest.raises(ValueError, match="synchronous policy"):
        twin(_scenario(policy=FedBuff(buffer_size=2, concurrency=2)))
    avail = Availability([np.array([[0.0, 100.0]])] * 3)
    with pytest.raises(ValueError, match="availability"):
        twin(_scenario(fleet=_scenario().fleet.with_availability(avail), rounds=1))
    with pytest.raises(ValueError, match=r"twin\.app 'no_such_module:app' could not be loaded"):
        twin(_scenario(), app="no_such_module:app")
    with pytest.raises(ValueError, match=r"twin.faults: devices must be in \[0, 2\]"):
        twin(_scenario(), faults={7: 0})
    assert _twin_processes(tmp_path) == [] and not (tmp_path / "flwr-home").exists()


def test_a_missing_flower_says_which_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "flwr", None)
    with pytest.raises(ImportError, match=r"pip install 'simfl\[flower\]'"):
        twin(_scenario())


def test_fidelity_compares_runs_round_by_round_and_job_by_job() -> None:
    from simfl import Server
    from simfl.dists import Constant
    from simfl.twin.fidelity import compare

    # wait-all on constant 1 s jobs and free links: every round lasts 1 s; a server that
    # spends 0.25 s on each message it sends and receives (unbounded concurrency) makes every
    # job, and so every round, last 1.5 s: relative error |1 - 1.5| / 1.5 = 1/3, exactly
    fleet = Fleet.homogeneous(3, compute=Constant(1.0))
    sc = _scenario(fleet=fleet, rounds=4)
    free = simfl.run(sc, progress=False)
    slow = simfl.run(
        dataclasses.replace(sc, server=Server(overhead_per_message=0.25)), progress=False
    )
    same = compare(free, free).summary()
    assert same["round_error_median"] == 0.0 and same["job_error_max"] == 0.0
    assert same["same_arrivals"] == 1.0 and same["rounds"] == 4
    fid = compare(free, slow)
    np.testing.assert_allclose(fid.rounds["error"], 1 / 3, rtol=1e-12)
    np.testing.assert_allclose(fid.jobs["error"], 1 / 3, rtol=1e-12)
    assert len(fid.jobs) == 12 and fid.rounds["same_arrivals"].all()
    assert fid.time_to_target is None
