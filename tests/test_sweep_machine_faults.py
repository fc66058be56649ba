"""A store that cannot be written (full disk, file size limit) stops the sweep; no run is lost.

Such a fault is the machine's, not the run's: the run is left unstored (never recorded
``failed``), the sweep stops with one line, and the next sweep, once there is room, runs it.
The processes executor is faulted with a file size limit (``RLIMIT_FSIZE``, as ``ulimit -f``)
on the sweep's process, which its workers inherit: Python ignores ``SIGXFSZ``, so a write past
the limit raises ``OSError(EFBIG)``.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import simfl
from simfl import Store
from simfl.results import Results
from simfl.sweeps import Dask, StoreWriteError
from tests.helpers import tiny_linear

ROOT = Path(__file__).resolve().parents[1]


def _cases() -> list[simfl.Scenario]:
    return [tiny_linear(seed=s) for s in range(4)]


def test_a_full_disk_stops_the_sweep_and_stores_no_run_as_failed(tmp_path, monkeypatch):
    save = Results.save
    calls: list[Path] = []

    def full_after_two(self: Results, directory: Path) -> Path:
        calls.append(Path(directory))
        if len(calls) > 2:
            raise OSError(errno.ENOSPC, "No space left on device", str(directory))
        return save(self, directory)

    monkeypatch.setattr(Results, "save", full_after_two)
    store = tmp_path / "s"
    with pytest.raises(StoreWriteError) as caught:
        simfl.sweep(_cases(), store=store, executor="inline", progress=False)
    exc = caught.value
    assert isinstance(exc, OSError) and exc.errno == errno.ENOSPC
    assert "\n" not in str(exc) and "No space left on device" in str(exc)
    assert str(store) in str(exc)
    # the sweep stopped at the first fault: two runs stored, the third not recorded at all
    assert len(calls) == 3
    status = Store(store).status()
    assert sorted(status.values()) == ["done", "done"]
    out = exc.outcome
    assert len(out.ran) == 2 and not out.failed and out.left == 2
    assert not [p for p in (store / "runs").iterdir() if p.name.startswith(".")]

    monkeypatch.setattr(Results, "save", save)  # room again: the next sweep runs the rest
    again = simfl.sweep(_cases(), store=store, executor="inline", progress=False)
    assert len(again.ran) == 2 and len(again.skipped) == 2 and not again.failed
    assert set(Store(store).status().values()) == {"done"}


@pytest.mark.parametrize("code", [errno.EDQUOT, errno.EROFS, errno.EFBIG])
def test_every_write_fault_of_the_store_leaves_the_run_to_do(tmp_path, monkeypatch, code):
    def fail(self: Results, directory: Path) -> Path:
        raise OSError(code, "cannot write", str(directory))

    monkeypatch.setattr(Results, "save", fail)
    with pytest.raises(StoreWriteError) as caught:
        simfl.sweep(_cases()[:1], store=tmp_path / "s", executor="inline", progress=False)
    assert caught.value.errno == code and caught.value.outcome.left == 1
    assert Store(tmp_path / "s").status() == {}


SWEEP_FILE = textwrap.dedent(
    """
    from simfl import Fleet, Scenario, algorithms, dists, policies, tasks

    SCENARIO = Scenario(
        name="tiny",
        task=tasks.LinearRepresentation(d=6, k=2, samples_per_client=5, test_samples=20),
        algorithm=algorithms.FedRep(),
        fleet=Fleet.homogeneous(12, compute=dists.Exponential(mean=1.0), dropout_rate=0.1),
        policy=policies.Deadline(1.5, count=4),
        rounds=6,
    )
    """
)

#: Bytes a file may have under the limit: the store's marker and a run's record fit, its
#: Parquet files do not.
_LIMIT = 3000


def _limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (_LIMIT, _LIMIT))


def _sweep(file: Path, store: Path, limited: bool) -> subprocess.CompletedProcess[str]:
    """``simfl sweep`` of ``file`` (``--quiet``: no progress board in shared memory).

    Under the limit no bytecode is written: a ``.pyc`` cut short at the limit would be taken
    for a good one by every later import.
    """
    command = [sys.executable, "-m", "simfl.cli", "sweep", str(file), "--seeds", "0-5"]
    return subprocess.run(
        [*command, "--store", str(store), "--workers", "2", "--quiet"],
        cwd=ROOT,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_limit_file_size if limited else None,
    )


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_FSIZE as on Linux")
def test_a_file_size_limit_in_the_workers_loses_no_run(tmp_path):
    file = tmp_path / "tiny.py"
    file.write_text(SWEEP_FILE)
    store = tmp_path / "s"
    limited = _sweep(file, store, limited=True)
    assert limited.returncode == 2, limited.stderr
    lines = limited.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot write into the store")
    assert "File too large" in lines[0] and "Traceback" not in limited.stderr
    assert "run `simfl sweep" in lines[0]
    assert Store(store).status() == {}  # nothing stored, in particular nothing as failed
    left = [p.name for p in (store / "runs").iterdir()]  # of runs in flight when it stopped
    assert all(name.startswith((".claim-", ".partial-")) for name in left), left

    room = _sweep(file, store, limited=False)
    assert room.returncode == 0, room.stderr
    assert "6 runs: 6 ran (6 done, 0 failed), 0 already in the store" in room.stdout
    assert set(Store(store).status().values()) == {"done"}
    assert len(list((store / "runs").iterdir())) == 6  # nothing left of the stopped workers


def test_a_dask_worker_that_cannot_write_the_store_stops_the_sweep(tmp_path, monkeypatch):
    distributed = pytest.importorskip("distributed")

    def full(self: Results, directory: Path) -> Path:
        raise OSError(errno.ENOSPC, "No space left on device", str(directory))

    monkeypatch.setattr(Results, "save", full)  # the workers are threads of this process
    with (
        distributed.LocalCluster(
            n_workers=1, processes=False, dashboard_address=None, silence_logs=logging.ERROR
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        dask = Dask(client=client)
        with pytest.raises(StoreWriteError, match="No space left on device"):
            simfl.sweep(_cases(), store=tmp_path / "s", executor=dask, progress=False)
    assert Store(tmp_path / "s").status() == {}
