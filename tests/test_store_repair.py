"""The results store checks and repairs itself: unreadable runs are named, moved aside, run again.

Every corruption here is written by the test into a real store: a deleted or cut-short
``run.json``, a ``{}`` record, a cut-short or deleted Parquet or ``meta.json`` file, a damaged
store marker. Also: files are written with the umask's permissions, and many processes can
create the same new store at once.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import stat
import warnings
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import simfl
from simfl import Store, policies, sweeps
from simfl.cli import main
from simfl.sweeps import BadRun, StoreError, StoreWarning
from simfl.sweeps.worker import execute, make_spec
from tests.helpers import timing_scenario, tiny_linear

MARKER_TEXT = '{"format": 1, "kind": "simfl results store"}\n'


def _cases() -> list[simfl.Scenario]:
    return [timing_scenario(n=6, rounds=4, seed=s) for s in (0, 1, 2)]


def _sweep(path: Path) -> sweeps.SweepOutcome:
    return simfl.sweep(_cases(), store=path, executor="inline", progress=False)


def _cut(path: Path, keep: float = 0.5) -> None:
    """Cut a file short, keeping the first ``keep`` of its bytes."""
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def _drop_sizes(run: Path) -> None:
    """Forget the file sizes ``run.json`` recorded (as in stores of earlier simfl versions)."""
    record = json.loads((run / "run.json").read_text())
    del record["files"]
    (run / "run.json").write_text(json.dumps(record))


@pytest.fixture
def swept(tmp_path: Path) -> tuple[Path, sweeps.SweepOutcome]:
    """A store of three finished timing-only runs, and the sweep that wrote it."""
    path = tmp_path / "s"
    return path, _sweep(path)


def test_deleted_run_json_is_run_again_once_and_stored(swept):
    path, first = swept
    victim = first.run_ids[1]
    (path / "runs" / victim / "run.json").unlink()
    store = Store(path)
    assert store.check() == [BadRun(victim, path / "runs" / victim, "run.json is missing")]
    with pytest.warns(StoreWarning, match=f"{victim}: run.json is missing"):
        assert set(store.status()) == {first.run_ids[0], first.run_ids[2]}

    again = _sweep(path)
    assert again.ran == (victim,) and again.failed == ()
    assert [b.run_id for b in again.repaired] == [victim]
    moved = again.repaired[0].moved_to
    assert moved is not None and moved.parent == path / ".quarantine"
    assert moved.name.startswith(f"{victim}-")
    assert sorted(p.name for p in moved.iterdir()) == [  # moved aside, never deleted
        "clients.parquet",
        "meta.json",
        "rounds.parquet",
    ]
    assert f"moved      {victim}: run.json is missing" in again.summary()
    pd.testing.assert_frame_equal(again.frame, first.frame, check_exact=True)
    assert store.check() == [] and store.record(victim)["status"] == "done"

    third = _sweep(path)  # stored now: not run a third time
    assert third.ran == () and len(third.skipped) == 3 and third.repaired == ()


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "is not valid JSON"),  # cut short
        ("", "is empty"),
        ("{}", "lacks the field(s) run_id, status, name, seed"),
        ("[1, 2]", "must hold a JSON object, not list"),
    ],
)
def test_unreadable_run_json_is_named_moved_aside_and_run_again(swept, content, problem):
    path, first = swept
    victim = first.run_ids[0]
    record = path / "runs" / victim / "run.json"
    if content is None:
        _cut(record)
    else:
        record.write_text(content)
    store = Store(path)
    with pytest.raises(StoreError) as raised:
        store.record(victim)
    assert str(raised.value).startswith(f"{record} {problem}")
    assert raised.value.path == record
    (bad,) = store.check()
    assert bad.run_id == victim and bad.reason.startswith(f"run.json {problem}")
    with pytest.warns(StoreWarning, match=victim):  # the others are still read
        assert set(store.rounds()["run_id"]) == set(first.run_ids[1:])
    with pytest.warns(StoreWarning, match=victim):
        assert list(store.runs()["run_id"]) == list(first.run_ids[1:])

    again = _sweep(path)
    assert again.ran == (victim,) and again.repaired[0].reason == bad.reason
    assert store.check() == []
    pd.testing.assert_frame_equal(again.frame, first.frame, check_exact=True)


@pytest.mark.parametrize(
    ("file", "damage", "problem"),
    [
        ("rounds.parquet", "cut", "rounds.parquet has "),
        ("clients.parquet", "cut", "clients.parquet has "),
        ("rounds.parquet", "cut, no sizes", "rounds.parquet is not a readable Parquet file"),
        ("clients.parquet", "cut, no sizes", "clients.parquet is not a readable Parquet file"),
        ("meta.json", "cut, no sizes", "meta.json is not valid JSON"),
        ("meta.json", "delete", "meta.json is missing"),
    ],
)
def test_damaged_result_files_are_found_and_run_again(swept, file, damage, problem):
    path, first = swept
    victim = first.run_ids[2]
    run = path / "runs" / victim
    if damage == "delete":
        (run / file).unlink()
    else:
        _cut(run / file)
    if damage == "cut, no sizes":
        _drop_sizes(run)  # the footer (or JSON) check alone finds it
    (bad,) = Store(path).check()
    assert bad.run_id == victim and bad.reason.startswith(problem) and bad.moved_to is None
    assert run.is_dir()  # check without repair only lists

    again = _sweep(path)
    assert again.ran == (victim,) and again.repaired[0].moved_to is not None
    pd.testing.assert_frame_equal(again.frame, first.frame, check_exact=True)


def test_publish_moves_an_unreadable_copy_aside(tmp_path):
    sc = timing_scenario(n=6, rounds=4)
    path = tmp_path / "s"
    spec = make_spec(sc, {}, store=str(path))
    Store(path, create=True)
    execute(spec)
    run = path / "runs" / spec.run_id
    (run / "run.json").unlink()  # e.g. a Dask worker re-running it, with no check before
    result = simfl.run(sc, progress=False)
    store = Store(path)
    with pytest.warns(StoreWarning, match="run.json is missing"):
        assert store.publish({**spec.info, "run_id": spec.run_id, "status": "done"}, result)
    assert store.record(spec.run_id)["status"] == "done" and store.check() == []
    assert len(list((path / ".quarantine").iterdir())) == 1


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (MARKER_TEXT[:20], "is not valid JSON"),
        ("", "is empty"),
        ("{}", "has no format"),
        ('{"format": 2}', "has format 2; this simfl reads format 1"),
    ],
)
def test_an_unreadable_marker_is_one_clear_line_and_never_rewritten(
    swept, capsys, content, problem
):
    path, _ = swept
    marker = path / "simfl-store.json"
    marker.write_text(content)
    for make in (lambda: Store(path), lambda: Store(path, create=True), lambda: _sweep(path)):
        with pytest.raises(StoreError) as raised:
            make()
        message = str(raised.value)
        assert message.startswith(f"{marker} {problem}") and "\n" not in message
    for argv in (["show", str(path)], ["report", str(path)], ["store", "check", str(path)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {marker} {problem}") and err.count("\n") == 1
    assert marker.read_text() == content  # not repaired behind the user's back


def test_report_and_show_work_on_the_readable_runs_and_list_the_others(tmp_path, capsys):
    path = tmp_path / "s"
    cases = sweeps.grid(
        tiny_linear(rounds=8),
        policy={"deadline": policies.Deadline(1.5, count=4), "fastest-k": policies.FastestK(3)},
        seed=[0, 1],
    )
    out = simfl.sweep(cases, store=path, executor="inline", progress=False)
    victim = out.run_ids[3]
    _cut(path / "runs" / victim / "rounds.parquet")

    report = tmp_path / "report"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the command lists them itself, without warnings
        assert main(["report", str(path), "--out", str(report)]) == 0
    printed = capsys.readouterr().out
    assert f"skipped    {victim}: rounds.parquet has " in printed
    assert f"simfl store check {path} --repair" in printed
    page = (report / "index.html").read_text()
    assert "3 finished runs, 0 failed, 1 unreadable" in page
    assert "<h2>Runs left out</h2>" in page and victim in page.split("<h2>Runs left out</h2>")[1]
    table = pd.read_csv(report / "time_to_target.csv")
    assert sorted(zip(table["policy"], table["runs"], strict=True)) == [
        ("deadline", 2),
        ("fastest-k", 1),
    ]

    assert main(["show", str(path)]) == 0
    printed = capsys.readouterr().out
    assert f"{path}: 3 runs, 3 done, 0 failed, 1 unreadable" in printed
    assert f"unreadable {victim}: rounds.parquet has " in printed

    again = simfl.sweep(cases, store=path, executor="inline", progress=False)
    assert again.ran == (victim,)
    pd.testing.assert_frame_equal(again.frame, out.frame, check_exact=True)


def test_store_check_command_lists_then_repairs(swept, capsys):
    path, first = swept
    (path / "runs" / first.run_ids[0] / "run.json").write_text("{}")
    (path / "runs" / "notes.txt").write_text("not a run")
    assert main(["store", "check", str(path)]) == 1
    printed = capsys.readouterr().out
    assert "unreadable notes.txt: is not a run folder (not a directory)" in printed
    assert f"unreadable {first.run_ids[0]}: run.json lacks the field(s) run_id" in printed
    assert f"store      {path}: 2 readable runs, 2 unreadable, 0 moved aside" in printed

    assert main(["store", "check", str(path), "--repair"]) == 0
    printed = capsys.readouterr().out
    assert f"moved      {first.run_ids[0]}: run.json lacks" in printed
    assert f"{path}: 2 readable runs, 0 unreadable, 2 moved aside" in printed
    assert sorted(p.name.rsplit("-", 1)[0] for p in (path / ".quarantine").iterdir()) == [
        "notes.txt",
        first.run_ids[0],
    ]
    assert main(["store", "check", str(path)]) == 0
    assert "2 readable runs, 0 unreadable, 0 moved aside" in capsys.readouterr().out


def _modes(root: Path) -> set[tuple[str, int]]:
    """``("file" | "dir", permission bits)`` of everything under ``root``."""
    return {
        ("dir" if p.is_dir() else "file", stat.S_IMODE(p.stat().st_mode)) for p in root.rglob("*")
    }


@pytest.mark.parametrize(
    ("umask", "file", "folder"), [(0o022, 0o644, 0o755), (0o002, 0o664, 0o775)]
)
def test_files_get_the_umask_permissions(tmp_path, umask, file, folder):
    before = os.umask(umask)
    try:
        out = _sweep(tmp_path / "s")
        (tmp_path / "s" / "runs" / out.run_ids[0] / "run.json").unlink()
        _sweep(tmp_path / "s")  # the run moved aside, and its replacement
    finally:
        os.umask(before)
    assert (tmp_path / "s" / ".quarantine").is_dir()
    assert _modes(tmp_path / "s") == {("file", file), ("dir", folder)}


def _create_many(base: str, stores: int, barrier: Any, errors: Any) -> None:
    """Create ``base/s0`` .. ``base/s{stores-1}``, each at the moment every process does."""
    for i in range(stores):
        barrier.wait(timeout=60)
        try:
            Store(Path(base) / f"s{i}", create=True)
        except Exception as exc:
            errors.put(f"s{i}: {exc!r}")


def test_many_processes_create_the_same_store_at_once(tmp_path):
    ctx = multiprocessing.get_context(
        "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    )
    n, stores = 12, 25
    barrier, errors = ctx.Barrier(n), ctx.Queue()
    procs = [
        ctx.Process(target=_create_many, args=(str(tmp_path), stores, barrier, errors))
        for _ in range(n)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0] * n
    failures = []
    while not errors.empty():
        failures.append(errors.get())
    assert failures == []
    for i in range(stores):
        path = tmp_path / f"s{i}"
        assert sorted(p.name for p in path.iterdir()) == ["runs", "simfl-store.json"]
        assert (path / "simfl-store.json").read_text() == MARKER_TEXT
        assert Store(path).check() == [] and Store(path).status() == {}
