"""A scenario file imports modules beside it under ``simfl run`` and ``simfl sweep``.

As under ``python FILE``, the file's folder comes first on ``sys.path``; the modules found there
travel to the workers by value (as the file's own classes do), so that workers which cannot
import them (a Dask cluster's) unpickle them too.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from simfl import Store

ROOT = Path(__file__).resolve().parents[1]

BESIDE = textwrap.dedent(
    """
    import dataclasses
    from simfl import algorithms


    @dataclasses.dataclass(frozen=True)
    class Halved(algorithms.FedRep):  # a user's algorithm, in a module beside the scenario
        def aggregate(self, state, updates, outcome):
            return super().aggregate(state, updates, outcome)
    """
)

SCENARIO = textwrap.dedent(
    """
    from simfl import Fleet, Scenario, dists, policies, tasks

    from my_algorithms import Halved

    SCENARIO = Scenario(
        name="beside",
        task=tasks.LinearRepresentation(d=6, k=2, samples_per_client=5, test_samples=20),
        algorithm=Halved(),
        fleet=Fleet.homogeneous(12, compute=dists.Exponential(mean=1.0)),
        policy=policies.WaitAll(count=4),
        rounds=4,
    )
    """
)


def _files(tmp_path: Path) -> Path:
    folder = tmp_path / "study"
    folder.mkdir()
    (folder / "my_algorithms.py").write_text(BESIDE)
    (folder / "scenario.py").write_text(SCENARIO)
    return folder / "scenario.py"


def _simfl(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "simfl.cli", *args],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's simfl, from any folder


def test_run_and_sweep_import_a_module_beside_the_scenario_file(tmp_path):
    file = _files(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    ran = _simfl("run", str(file), "--out", str(tmp_path / "out"), "--quiet", cwd=elsewhere)
    assert ran.returncode == 0, ran.stderr
    store = tmp_path / "store"
    swept = _simfl(
        "sweep", str(file), "--seeds", "0-2", "--store", str(store), "--workers", "2", "--quiet",
        cwd=elsewhere,
    )  # fmt: skip
    assert swept.returncode == 0, swept.stderr
    assert "3 runs: 3 ran (3 done, 0 failed)" in swept.stdout
    assert set(Store(store).status().values()) == {"done"}


def test_a_worker_without_the_folder_unpickles_the_module_beside_the_file(tmp_path):
    file = _files(tmp_path)
    payload = tmp_path / "payload.bin"
    make = (
        "import sys; from simfl.cli import load_cases; from simfl.sweeps.worker import make_spec; "
        f"case = load_cases({str(file)!r})[0]; "
        f"open({str(payload)!r}, 'wb').write(make_spec(case.scenario, {{}}).payload)"
    )
    made = subprocess.run(
        [sys.executable, "-c", make], cwd=tmp_path, env=_env(), capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr
    # a fresh interpreter that cannot import my_algorithms (as on a Dask worker elsewhere)
    use = (
        "import pickle, simfl; "
        "import importlib.util; assert importlib.util.find_spec('my_algorithms') is None; "
        f"sc = pickle.loads(open({str(payload)!r}, 'rb').read()); "
        "print(type(sc.algorithm).__name__, simfl.run(sc, progress=False).meta['status'])"
    )
    used = subprocess.run(
        [sys.executable, "-c", use], cwd=tmp_path, env=_env(), capture_output=True, text=True
    )
    assert used.returncode == 0, used.stderr
    assert used.stdout.split() == ["Halved", "ok"]
