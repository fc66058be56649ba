"""A results store touches nothing outside itself and reads only regular files of bounded size.

Every case builds a real store with a small sweep, then puts a symbolic link, a FIFO, a device
or a huge file where the store expects its own files (all inside ``tmp_path``): the store
refuses to open (its folders are links), or lists the run as unreadable and, repairing, moves
the link itself, never what it points to. Commands that could hang or exhaust memory on such a
store run in a subprocess with a time and memory limit.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import simfl
from simfl import Store, sweeps
from simfl.cli import main
from simfl.sweeps import StoreError, StoreWarning
from tests.helpers import timing_scenario

ROOT = Path(__file__).resolve().parents[1]
#: Seconds a subprocess command may take on a store (it takes well under one).
_PATIENCE = 60


def _cases() -> list[simfl.Scenario]:
    return [timing_scenario(n=6, rounds=4, seed=s) for s in (0, 1)]


def _sweep(path: Path) -> sweeps.SweepOutcome:
    return simfl.sweep(_cases(), store=path, executor="inline", progress=False)


@pytest.fixture
def swept(tmp_path: Path) -> tuple[Path, tuple[str, ...]]:
    """A store of two finished timing-only runs, and their run ids.

    (Not the sweep's outcome: its repr reads the store, and a failing test's report shows it.)
    """
    path = tmp_path / "s"
    return path, _sweep(path).run_ids


def _user_folder(tmp_path: Path) -> tuple[Path, set[str]]:
    """A folder of the user's own files, outside the store, and what it holds."""
    mine = tmp_path / "mine"
    (mine / "projects").mkdir(parents=True)
    (mine / "paper.tex").write_text("\\documentclass{article}")
    (mine / "projects" / "notes.txt").write_text("keep me")
    return mine, _tree(mine)


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _cli(*commands: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ``simfl`` commands in one subprocess with a time limit and 2 GiB of address space.

    Prints each command's exit status after its output (``exit N``).
    """
    code = (
        "import json, resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (2**31, 2**31))\n"
        "from simfl.cli import main\n"
        "for argv in json.loads(sys.argv[1]):\n"
        "    print(f'exit {main(argv)}', flush=True)\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code, json.dumps(commands)],
        capture_output=True,
        text=True,
        timeout=_PATIENCE,
        cwd=ROOT,
    )


def test_a_store_whose_runs_folder_is_a_link_is_refused_and_the_target_untouched(tmp_path, capsys):
    path = tmp_path / "s"
    Store(path, create=True)
    mine, before = _user_folder(tmp_path)
    (path / "runs").rmdir()
    (path / "runs").symlink_to(mine, target_is_directory=True)
    for make in (lambda: Store(path), lambda: _sweep(path)):
        with pytest.raises(StoreError) as raised:
            make()
        assert str(raised.value).startswith(f"{path / 'runs'} is a symbolic link (to {mine})")
    for argv in (["store", "check", str(path), "--repair"], ["show", str(path)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {path / 'runs'} is a symbolic link") and err.count("\n") == 1
    assert _tree(mine) == before  # nothing moved out of the user's folder, nothing written in
    assert not (path / ".quarantine").exists()


def test_a_store_whose_quarantine_is_a_link_is_refused_and_no_run_leaves(swept, tmp_path, capsys):
    path, ids = swept
    (path / "runs" / ids[0] / "run.json").write_text("{}")  # a run to move aside
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (path / ".quarantine").symlink_to(elsewhere, target_is_directory=True)
    assert main(["store", "check", str(path), "--repair"]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith(f"error: {path / '.quarantine'} is a symbolic link") and err.count("\n") == 1
    )
    with pytest.raises(StoreError, match="is a symbolic link"):
        _sweep(path)
    assert list(elsewhere.iterdir()) == []
    assert sorted(p.name for p in (path / "runs").iterdir()) == sorted(ids)


@pytest.mark.parametrize("name", [".superseded", "simfl-store.json"])
def test_a_store_whose_other_entries_are_links_is_refused(swept, tmp_path, name):
    path, _ids = swept
    target = tmp_path / "target"
    if name.endswith(".json"):
        target.write_text((path / name).read_text())
        (path / name).unlink()
    else:
        target.mkdir()
    (path / name).symlink_to(target)
    with pytest.raises(StoreError, match=f"^{path / name} is a symbolic link"):
        Store(path)


def test_a_run_folder_that_is_a_link_is_listed_and_moved_as_a_link(swept, tmp_path):
    path, ids = swept
    victim = ids[1]
    outside = tmp_path / "copy-of-a-run"
    (path / "runs" / victim).rename(outside)  # a whole, good run, but outside the store
    before = _tree(outside)
    (path / "runs" / victim).symlink_to(outside, target_is_directory=True)
    store = Store(path)
    (bad,) = store.check()
    assert bad.run_id == victim and "is a symbolic link, not a run folder" in bad.reason
    with pytest.warns(StoreWarning, match=victim):
        assert set(store.status()) == {ids[0]}
    (moved,) = store.check(repair=True)
    assert moved.moved_to is not None and moved.moved_to.parent == path / ".quarantine"
    assert moved.moved_to.is_symlink() and os.readlink(moved.moved_to) == str(outside)
    assert _tree(outside) == before  # the link moved, never what it points to
    again = _sweep(path)
    assert again.ran == (victim,) and (path / "runs" / victim).is_dir()
    assert not (path / "runs" / victim).is_symlink()


@pytest.mark.parametrize("name", ["run.json", "meta.json", "rounds.parquet"])
def test_a_file_of_a_run_that_is_a_link_is_not_followed(swept, tmp_path, name):
    path, ids = swept
    victim = ids[0]
    real = path / "runs" / victim / name
    copy = tmp_path / name
    real.rename(copy)  # the same bytes, reached through a link
    real.symlink_to(copy)
    (bad,) = Store(path).check()
    assert bad.run_id == victim and bad.reason.startswith(f"{name} is a symbolic link")


def test_stale_partials_are_removed_without_following_links(swept, tmp_path):
    path, _ids = swept
    mine, before = _user_folder(tmp_path)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    ).stdout.strip()
    link = path / "runs" / f".partial-x+{socket.gethostname()}+{dead}+abcd1234"
    link.symlink_to(mine, target_is_directory=True)
    assert Store(path).remove_stale_partials() == 1
    assert not os.path.lexists(link) and _tree(mine) == before


@pytest.mark.parametrize("run_id", ["../s", "..", "/etc", ".quarantine", "a/b"])
def test_run_ids_that_are_paths_are_not_runs(swept, run_id):
    path, _ids = swept
    store = Store(path)
    assert store.record(run_id) is None
    with pytest.raises(ValueError, match="is not in"):
        store.results(run_id)
    with pytest.raises(ValueError, match="is not in"):
        store.supersede(run_id)


def test_a_fifo_named_run_json_is_unreadable_not_a_hang(swept):
    path, ids = swept
    victim = ids[0]
    record = path / "runs" / victim / "run.json"
    record.unlink()
    os.mkfifo(record)
    done = _cli(["show", str(path)], ["store", "check", str(path), "--repair"])
    shown, repaired = done.stdout.split("exit 0\n")[:2]
    assert f"unreadable {victim}: run.json is a FIFO, not a regular file" in shown
    assert f"moved      {victim}: run.json is a FIFO" in repaired
    assert done.stdout.endswith("exit 0\n") and "Traceback" not in done.stderr
    (moved,) = (path / ".quarantine").iterdir()
    assert (moved / "run.json").is_fifo()


def test_a_run_json_linked_to_dev_zero_is_not_read(swept):
    path, ids = swept
    victim = ids[1]
    file = path / "runs" / victim / "run.json"
    file.unlink()
    file.symlink_to("/dev/zero")
    done = _cli(["store", "check", str(path)], ["show", str(path)])
    assert done.stdout.count(f"unreadable {victim}: run.json is a symbolic link") == 2
    assert "exit 1\n" in done.stdout and done.stdout.endswith("exit 0\n"), done.stderr


@pytest.mark.parametrize("name", ["meta.json", "clients.parquet"])
def test_a_result_file_linked_to_a_device_is_not_read(swept, name):
    path, ids = swept
    victim = ids[1]
    file = path / "runs" / victim / name
    file.unlink()
    file.symlink_to("/dev/zero")
    (bad,) = Store(path).check()
    assert bad.run_id == victim and bad.reason.startswith(f"{name} is a symbolic link")


@pytest.mark.parametrize(
    ("name", "size", "cap"),
    [
        ("run.json", 17 * 2**20, 16 * 2**20),
        ("meta.json", 2**40, 16 * 2**20),
        ("rounds.parquet", 5 * 2**30, 4 * 2**30),
    ],
)
def test_a_huge_file_is_not_read(swept, name, size, cap):
    path, ids = swept
    victim = ids[0]
    with open(path / "runs" / victim / name, "r+b") as f:  # sparse: a huge size, no disk space
        f.truncate(size)
    (bad,) = Store(path).check()
    assert bad.reason == f"{name} has {size} bytes, more than the {cap} a store reads"
