"""Results folders on disk: published whole, checked when read, and a CLI that says what failed.

Each test holds one promise of "nothing lost, nothing silent": a results folder is
never a mix of two saves, not even when its writer is SIGKILLed mid-save; ``simfl run`` checks
its output path before the run; the CLI reports a user's mistake or a full disk in one line
(exit status 2) and keeps tracebacks for bugs.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from simfl import Results, policies, run
from simfl.cli import main
from simfl.results import folder
from simfl.sweeps.store import Store
from tests.helpers import linear_scenario

ROOT = Path(__file__).resolve().parents[1]
FILES = ["clients.parquet", "meta.json", "rounds.parquet"]
AS_ROOT = "root ignores file permissions, so a chmod 0o555 folder is writable for it"

SCENARIO_FILE = textwrap.dedent(
    """
    from simfl import Fleet, Scenario, algorithms, dists, policies, tasks

    SCENARIO = Scenario(
        name={name!r},
        task=tasks.LinearRepresentation(d=8, k=2, samples_per_client=6),
        algorithm=algorithms.FedRep(),
        fleet=Fleet.homogeneous(12, compute=dists.Exponential(mean=1.0), dropout_rate=0.1),
        policy=policies.Deadline(2.0, fraction=0.25),
        rounds=4,
    )
    """
)


def _results(seed: int) -> Results:
    sc = linear_scenario(policy=policies.Deadline(1.0, fraction=0.2), n=40, rounds=6, seed=seed)
    return run(sc, progress=False)


def _same(a: Results, b: Results) -> None:
    pd.testing.assert_frame_equal(a.rounds, b.rounds, check_exact=True)
    pd.testing.assert_frame_equal(a.clients, b.clients, check_exact=True)
    assert a.rounds.dtypes.equals(b.rounds.dtypes) and a.clients.dtypes.equals(b.clients.dtypes)
    assert a.meta == b.meta


def _scenario_file(tmp_path: Path, name: str = "tiny") -> Path:
    path = tmp_path / "scenario.py"
    path.write_text(SCENARIO_FILE.format(name=name))
    return path


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err: str = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def no_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the CLI fail the test if it starts a run (its checks must come first)."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the run started before the output path was checked")

    monkeypatch.setattr("simfl.cli.commands.run.run", refuse)


# ------------------------------------------------------------------ item 2: a whole folder
def test_save_publishes_one_folder_with_a_manifest_and_nothing_else(tmp_path):
    res = _results(0)
    out = res.save(tmp_path / "run")
    assert sorted(os.listdir(out)) == FILES
    assert os.listdir(tmp_path) == ["run"]  # no staging or set-aside sibling is left behind
    manifest = json.loads((out / "meta.json").read_text())[folder.MANIFEST]
    assert set(manifest) == {"rounds.parquet", "clients.parquet"}
    for name, entry in manifest.items():
        assert entry["bytes"] == (out / name).stat().st_size > 0
        assert len(entry["sha256"]) == 64
    _same(Results.load(out), res)


def test_save_replaces_an_earlier_run_whole(tmp_path):
    old, new = _results(0), _results(1)
    out = old.save(tmp_path / "run")
    (out / ".rounds.parquet.x1y2.tmp").write_bytes(b"left by an interrupted save of simfl 0.x")
    new.save(out)
    assert sorted(os.listdir(out)) == FILES and os.listdir(tmp_path) == ["run"]
    _same(Results.load(out), new)


def test_load_refuses_a_folder_mixing_two_saves(tmp_path, capsys):
    out = _results(0).save(tmp_path / "run")
    newer = _results(1).save(tmp_path / "newer")
    shutil.copy(newer / "rounds.parquet", out / "rounds.parquet")  # the mix
    with pytest.raises(ValueError, match="mixed or incomplete") as info:
        Results.load(out)
    assert str(out) in str(info.value) and "rounds.parquet" in str(info.value)
    assert main(["show", str(out)]) == 2
    line = _one_line_error(capsys)
    assert str(out) in line and "rounds.parquet" in line


def test_an_empty_folder_is_filled_in_place(tmp_path, monkeypatch):
    res = _results(0)
    out = tmp_path / "run"
    out.mkdir()
    inode = out.stat().st_ino
    res.save(out)
    assert out.stat().st_ino == inode and os.listdir(tmp_path) == ["run"]
    _same(Results.load(out), res)
    empty = tmp_path / "empty"
    empty.mkdir()

    def disk_full(self: pd.DataFrame, *args: object, **kwargs: object) -> bytes:
        if calls:
            raise OSError(errno.ENOSPC, "No space left on device")
        calls.append(1)
        return to_parquet(self, *args, **kwargs)

    calls: list[int] = []
    to_parquet = pd.DataFrame.to_parquet
    monkeypatch.setattr(pd.DataFrame, "to_parquet", disk_full)
    with pytest.raises(OSError, match="No space left"):
        res.save(empty)
    assert calls and os.listdir(empty) == []  # the first table, written, is removed again


@pytest.mark.parametrize("damage", ["truncated", "same-size"])
def test_load_refuses_a_damaged_file(tmp_path, damage):
    out = _results(0).save(tmp_path / "run")
    data = (out / "clients.parquet").read_bytes()
    if damage == "truncated":
        (out / "clients.parquet").write_bytes(data[: len(data) // 2])
        problem = f"has {len(data) // 2} bytes"
    else:  # one byte changed: only the hash tells
        middle = len(data) // 2
        flipped = data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :]
        (out / "clients.parquet").write_bytes(flipped)
        problem = "SHA-256 differs"
    with pytest.raises(ValueError, match=f"clients.parquet .*{problem}"):
        Results.load(out)


@pytest.mark.parametrize("name", ["meta.json", "rounds.parquet"])
def test_load_reads_no_link_and_no_file_beyond_its_cap(tmp_path, monkeypatch, name):
    out = _results(0).save(tmp_path / "run")
    elsewhere = tmp_path / "elsewhere"
    (out / name).rename(elsewhere)
    (out / name).symlink_to(elsewhere)  # the same bytes, through a link: not read
    with pytest.raises(ValueError, match=f"{name} is a symbolic link; simfl never follows"):
        Results.load(out)
    (out / name).unlink()
    elsewhere.rename(out / name)
    cap = (out / name).stat().st_size - 1  # one byte over the cap: refused, not read
    monkeypatch.setattr(folder, "JSON_CAP" if name.endswith(".json") else "PARQUET_CAP", cap)
    with pytest.raises(ValueError, match=f"{name} has {cap + 1} bytes, more than the {cap}"):
        Results.load(out)


def test_load_of_a_file_or_nothing_says_what_it_found(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is a file, not a simfl results folder"):
        Results.load(tmp_path / "file")
    with pytest.raises(FileNotFoundError, match=r"does not exist$"):
        Results.load(tmp_path / "nothing")


def test_a_folder_saved_before_the_manifest_loads_unless_a_save_was_interrupted(tmp_path):
    res = _results(0)
    out = res.save(tmp_path / "run")
    meta = json.loads((out / "meta.json").read_text())
    del meta[folder.MANIFEST]
    (out / "meta.json").write_text(json.dumps(meta))
    _same(Results.load(out), res)
    (out / ".clients.parquet.k3j2.tmp").write_bytes(b"")  # how the old save left a kill
    with pytest.raises(ValueError, match="interrupted save"):
        Results.load(out)


# A child process saves NEW over OLD and pauses at one point of the save (the test patches the
# standard functions the save calls, inside the child only); the parent SIGKILLs it there.
CHILD = textwrap.dedent(
    """
    import os, sys, time
    import pandas as pd
    from simfl import Results

    source, out, stage = sys.argv[1:4]
    results = Results.load(source)

    def pause():
        print("PAUSED", flush=True)
        time.sleep(600)

    calls = []
    if stage == "first-table-written":
        to_parquet = pd.DataFrame.to_parquet

        def second_table_pauses(self, *args, **kwargs):
            calls.append(1)
            if len(calls) == 2:
                pause()
            return to_parquet(self, *args, **kwargs)

        pd.DataFrame.to_parquet = second_table_pauses
    else:
        rename = os.rename
        pause_at = {"all-written": 1, "old-set-aside": 2}[stage]

        def rename_pauses(src, dst):
            calls.append(1)
            if len(calls) == pause_at:
                pause()
            return rename(src, dst)

        os.rename = rename_pauses
    results.save(out)
    print("FINISHED", flush=True)
    """
)


def _kill_mid_save(tmp_path: Path, source: Path, out: Path, stage: str) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    proc = subprocess.Popen(
        [sys.executable, str(script), str(source), str(out), stage],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        ready, _, _ = select.select([proc.stdout], [], [], 120)  # a guard against a hang only
        line = proc.stdout.readline() if ready else ""
        if line != "PAUSED\n":
            proc.kill()
            pytest.fail(f"the child did not pause mid-save: {line!r} {proc.stderr.read()}")
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait() == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


@pytest.mark.parametrize("stage", ["first-table-written", "all-written", "old-set-aside"])
def test_a_save_killed_midway_leaves_the_old_run_or_a_clear_error_never_a_mix(tmp_path, stage):
    old, new = _results(0), _results(1)
    source = new.save(tmp_path / "source")
    runs = tmp_path / "runs"
    out = old.save(runs / "run")
    _kill_mid_save(tmp_path, source, out, stage)
    hidden = sorted(p.name for p in runs.iterdir() if p.name.startswith("."))
    if stage == "old-set-aside":  # killed between renaming the old folder aside and the new in
        assert not out.exists()
        with pytest.raises(FileNotFoundError, match="interrupted save left") as info:
            Results.load(out)
        assert [h.split("-")[0] for h in hidden] == [".run.old", ".run.saving"]
        for h in hidden:
            assert str(runs / h) in str(info.value)
        _same(Results.load(runs / hidden[0]), old)  # both halves are whole and recoverable
        _same(Results.load(runs / hidden[1]), new)
    else:  # the old run is untouched; the new one never became visible
        assert sorted(os.listdir(out)) == FILES
        _same(Results.load(out), old)
        assert [h.split("-")[0] for h in hidden] == [".run.saving"]
    new.save(out)  # saving again works and publishes the new run whole
    assert sorted(os.listdir(out)) == FILES
    _same(Results.load(out), new)


# --------------------------------------------------- item 10: modes, empty categoricals
@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_files_are_written_with_the_umask_mode(tmp_path, umask, mode):
    res = _results(0)
    previous = os.umask(umask)
    try:
        out = res.save(tmp_path / "run")
    finally:
        os.umask(previous)
    assert {stat.S_IMODE((out / f).stat().st_mode) for f in FILES} == {mode}
    assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~umask


def test_a_run_with_no_rounds_keeps_its_status_categories(tmp_path):
    sc = dataclasses.replace(linear_scenario(n=20), rounds=None, max_time=1e-9)
    res = run(sc, progress=False)
    assert res.rounds.empty and not res.clients.empty
    back = Results.load(res.save(tmp_path / "run"))
    assert list(back.rounds["status"].cat.categories) == ["ok", "empty", "diverged", "error"]
    _same(back, res)
    empty_jobs = dataclasses.replace(res, clients=res.clients.iloc[:0])
    back = Results.load(empty_jobs.save(tmp_path / "no-jobs"))
    assert list(back.clients["status"].cat.categories) == list(res.clients["status"].cat.categories)
    pd.testing.assert_frame_equal(back.clients, empty_jobs.clients, check_exact=True)


# ---------------------------------------------------- item 1: --out checked before the run
@pytest.mark.parametrize("kind", ["file", "other-folder", "under-a-file", "too-long"])
def test_run_refuses_an_unusable_out_before_running(tmp_path, capsys, no_run, kind):
    notes = tmp_path / "notes"
    notes.write_text("mine")
    other = tmp_path / "other"
    other.mkdir()
    (other / "thesis.tex").write_text("mine too")
    out = {
        "file": notes,
        "other-folder": other,
        "under-a-file": notes / "run",
        "too-long": tmp_path / ("r" * 300),
    }[kind]
    assert main(["run", str(_scenario_file(tmp_path)), "--out", str(out), "--quiet"]) == 2
    line = _one_line_error(capsys)
    assert {"file": str(notes), "other-folder": str(other), "under-a-file": str(notes)}.get(
        kind, "300 bytes"
    ) in line
    assert notes.read_text() == "mine" and (other / "thesis.tex").read_text() == "mine too"
    assert sorted(os.listdir(other)) == ["thesis.tex"]


def test_run_refuses_a_read_only_parent_before_running(tmp_path, capsys, no_run, monkeypatch):
    def read_only(self: Path, *args: object, **kwargs: object) -> None:
        raise OSError(errno.EROFS, "Read-only file system", str(self))

    monkeypatch.setattr(Path, "mkdir", read_only)  # a read-only filesystem, even for root
    out = tmp_path / "runs" / "x"
    assert main(["run", str(_scenario_file(tmp_path)), "--out", str(out), "--quiet"]) == 2
    line = _one_line_error(capsys)
    assert str(out) in line and "Read-only file system" in line


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason=AS_ROOT)
def test_run_refuses_an_unwritable_parent_before_running(tmp_path, capsys, no_run):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        out = locked / "runs" / "x"
        assert main(["run", str(_scenario_file(tmp_path)), "--out", str(out), "--quiet"]) == 2
        line = _one_line_error(capsys)
        assert str(out) in line and "Permission denied" in line
        assert os.listdir(locked) == []
    finally:
        locked.chmod(0o755)


def test_run_replaces_an_earlier_results_folder(tmp_path, capsys):
    out = _results(5).save(tmp_path / "run")
    assert main(["run", str(_scenario_file(tmp_path)), "--out", str(out), "--quiet"]) == 0
    assert Results.load(out).meta["scenario"] == "tiny"


@pytest.mark.parametrize("name", ["../x", "ABSOLUTE", "a/../../b", "..", "n" * 300, "tiny"])
def test_scenario_names_become_one_safe_folder_under_runs(tmp_path, monkeypatch, capsys, name):
    work = tmp_path / "work"
    work.mkdir()
    name = name.replace("ABSOLUTE", str(tmp_path / "abs" / "p"))  # an escape stays in tmp_path
    file = _scenario_file(tmp_path, name)
    monkeypatch.chdir(work)
    assert main(["run", str(file), "--seed", "3", "--quiet"]) == 0
    assert os.listdir(work) == ["runs"]
    (folder_name,) = os.listdir(work / "runs")
    assert sorted(os.listdir(work / "runs" / folder_name)) == FILES
    assert len(folder_name) <= 100 and not folder_name.startswith(".")
    if name == "tiny":  # a safe name is kept as it is
        assert folder_name == "tiny-seed3"
    else:  # others are cleaned and get a hash of the name
        assert folder_name != f"{name}-seed3" and len(folder_name.rpartition("-")[2]) == 8
    assert sorted(os.listdir(tmp_path)) == ["scenario.py", "work"]
    assert Results.load(work / "runs" / folder_name).meta["scenario"] == name
    assert f"runs/{folder_name}/" in capsys.readouterr().out


def test_long_names_that_share_a_beginning_get_different_folders(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for tail in ("a", "b"):
        assert main(["run", str(_scenario_file(tmp_path, "n" * 300 + tail)), "--quiet"]) == 0
    assert len(os.listdir(tmp_path / "runs")) == 2


# ------------------------------------------------------- item 7: one-line errors, exit 2
def test_a_scenario_file_with_a_syntax_error_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.py"
    bad.write_text("x = 1\ndef f(:\n    pass\n")
    assert main(["run", str(bad)]) == 2
    line = _one_line_error(capsys)
    assert str(bad) in line and "line 2" in line and "SyntaxError" in line


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_an_exception_while_importing_a_scenario_file_is_one_line(tmp_path, capsys, command):
    bad = tmp_path / "bad.py"
    bad.write_text("import math\n\nraise RuntimeError('no data on this machine')\n")
    store = ["--store", str(tmp_path / "store")]
    assert main([command, str(bad), *(store if command == "sweep" else ["--quiet"])]) == 2
    line = _one_line_error(capsys)
    assert f"{bad}, line 3: RuntimeError: no data on this machine" in line


def test_an_invalid_scenario_names_its_line(tmp_path, capsys):
    file = tmp_path / "neg.py"
    file.write_text(SCENARIO_FILE.format(name="x").replace("rounds=4", "rounds=-4"))
    assert main(["run", str(file)]) == 2
    line = _one_line_error(capsys)
    assert f"{file}, line 4: ValueError: Scenario.rounds must be an integer in [1, inf]" in line


def test_run_on_a_directory_says_so(tmp_path, capsys):
    assert main(["run", str(tmp_path)]) == 2
    assert "is a directory" in _one_line_error(capsys)


def test_report_out_onto_a_file_is_one_line(tmp_path, capsys):
    Store(tmp_path / "store", create=True)
    target = tmp_path / "report.html"
    target.write_text("keep")
    assert main(["report", str(tmp_path / "store"), "--out", str(target)]) == 2
    assert str(target) in _one_line_error(capsys) and target.read_text() == "keep"


def test_a_full_disk_while_saving_is_one_line_and_keeps_the_earlier_run(
    tmp_path, capsys, monkeypatch
):
    earlier = _results(0)
    out = earlier.save(tmp_path / "run")

    def disk_full(self: pd.DataFrame, *args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_parquet", disk_full)
    assert main(["run", str(_scenario_file(tmp_path)), "--out", str(out), "--quiet"]) == 2
    captured = capsys.readouterr()
    assert "scenario   tiny" in captured.out  # the finished run's summary is still shown
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err
    assert str(out) in lines[0] and "No space left on device" in lines[0]
    assert sorted(os.listdir(tmp_path)) == ["run", "scenario.py"]  # no staging folder left
    _same(Results.load(out), earlier)


def test_a_read_only_store_is_one_line(tmp_path, capsys, monkeypatch):
    def read_only(self: Path, *args: object, **kwargs: object) -> None:
        raise OSError(errno.EROFS, "Read-only file system", str(self))

    monkeypatch.setattr(Path, "mkdir", read_only)
    store = tmp_path / "store"
    args = ["sweep", str(_scenario_file(tmp_path)), "--seeds", "0", "--store", str(store)]
    assert main([*args, "--executor", "inline", "--quiet"]) == 2
    line = _one_line_error(capsys)
    assert str(store) in line and "Read-only file system" in line


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason=AS_ROOT)
def test_an_unwritable_store_folder_is_one_line(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        args = ["sweep", str(_scenario_file(tmp_path)), "--seeds", "0", "--store"]
        assert main([*args, str(locked / "store"), "--executor", "inline", "--quiet"]) == 2
        assert "Permission denied" in _one_line_error(capsys)
    finally:
        locked.chmod(0o755)


def test_a_scheduler_that_is_not_listening_fails_fast_in_one_line(tmp_path, capsys):
    with socket.socket() as sock:  # a local port nobody listens on once it is closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    store = tmp_path / "store"
    args = ["sweep", str(_scenario_file(tmp_path)), "--scheduler", address, "--store", str(store)]
    assert main(args) == 2
    line = _one_line_error(capsys)
    assert address in line and "no Dask scheduler answers" in line
    assert not store.exists()  # refused before the store was made


def test_unexpected_errors_keep_their_traceback(tmp_path, monkeypatch):
    def bug(*args: object, **kwargs: object) -> None:
        raise KeyError("an internal bug")

    monkeypatch.setattr("simfl.cli.commands.run.run", bug)
    with pytest.raises(KeyError, match="an internal bug"):
        main(["run", str(_scenario_file(tmp_path)), "--out", str(tmp_path / "o"), "--quiet"])

    def reset(*args: object, **kwargs: object) -> None:
        raise ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")

    # not an error of the user's disk or input
    monkeypatch.setattr("simfl.cli.commands.run.run", reset)
    with pytest.raises(ConnectionResetError):
        main(["run", str(_scenario_file(tmp_path)), "--out", str(tmp_path / "o"), "--quiet"])
