"""Runs of older versions of a scenario are set aside by ``simfl store prune``, never deleted.

A scenario edited between two sweeps (same name, seed and labels, other values) leaves two
versions of each run in the store; the report cannot tell them apart. Pruning keeps, for each
(name, seed, labels), the run that finished last and moves the others into ``.superseded/``.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path

import pandas as pd
import pytest

import simfl
from simfl import Store, policies, sweeps
from simfl.cli import main
from simfl.sweeps import StoreError
from simfl.sweeps.versions import SetAside, older_versions
from tests.helpers import tiny_linear


def _cases(rounds: int) -> list[sweeps.Case]:
    return sweeps.grid(
        tiny_linear(rounds=rounds),
        policy={"deadline": policies.Deadline(1.5, count=4), "fastest-k": policies.FastestK(3)},
        seed=[0, 1],
    )


@pytest.fixture
def versions(tmp_path: Path) -> tuple[Path, sweeps.SweepOutcome, sweeps.SweepOutcome]:
    """A store swept with a scenario, then with its edited version (more rounds)."""
    path = tmp_path / "s"
    old = simfl.sweep(_cases(6), store=path, executor="inline", progress=False)
    new = simfl.sweep(_cases(8), store=path, executor="inline", progress=False)
    assert len(new.ran) == 4 and not set(old.run_ids) & set(new.run_ids)
    return path, old, new


def test_prune_sets_aside_the_older_versions_and_the_report_works(versions, tmp_path, capsys):
    path, old, new = versions
    assert main(["store", "prune", str(path), "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("would move ") == 4 and "(--dry-run)" in printed
    for run_id in old.run_ids:
        assert f"would move {run_id}: an older version of 'policy=" in printed
    assert len(Store(path).records()) == 8 and not (path / ".superseded").exists()

    assert main(["store", "prune", str(path)]) == 0
    printed = capsys.readouterr().out
    assert printed.count("set aside ") == 4
    assert f"4 run(s) of older versions moved into {path / '.superseded'}/" in printed
    moved = sorted(p.name.rsplit("-", 1)[0] for p in (path / ".superseded").iterdir())
    assert moved == sorted(old.run_ids)  # moved whole, never deleted
    for folder in (path / ".superseded").iterdir():
        assert sorted(p.name for p in folder.iterdir()) == [
            "clients.parquet",
            "meta.json",
            "rounds.parquet",
            "run.json",
        ]
    store = Store(path)
    assert sorted(r["run_id"] for r in store.records()) == sorted(new.run_ids)
    pd.testing.assert_frame_equal(store.rounds(), new.frame, check_exact=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(["report", str(path), "--out", str(tmp_path / "report"), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["store", "prune", str(path)]) == 0  # nothing left to set aside
    assert "0 run(s) of older versions" in capsys.readouterr().out
    again = simfl.sweep(_cases(8), store=path, executor="inline", progress=False)
    assert again.ran == () and len(again.skipped) == 4  # readers never read .superseded/


def test_the_run_that_finished_last_is_kept(versions):
    path, old, new = versions
    victim = old.run_ids[2]  # the old version of one run, made to have finished last
    file = path / "runs" / victim / "run.json"
    record = json.loads(file.read_text())
    record["finished"] = "2999-01-01T00:00:00.000+00:00"
    file.write_text(json.dumps(record))
    store = Store(path)
    older = store.prune(dry_run=True)
    assert sorted(one.run_id for one in older) == sorted(
        [*old.run_ids[:2], old.run_ids[3], new.run_ids[2]]
    )
    (kept,) = [one.kept for one in older if one.run_id == new.run_ids[2]]
    assert kept == victim
    done = store.prune()
    assert [one.run_id for one in done] == [one.run_id for one in older]
    assert all(one.moved_to is not None and one.moved_to.is_dir() for one in done)
    assert victim in {r["run_id"] for r in store.records()}


def test_the_versions_rule():
    def rec(run_id: str, finished: object, seed: int = 0, labels: object = None) -> dict:
        labels = {"policy": "d"} if labels is None else labels
        return {"run_id": run_id, "name": "n", "seed": seed, "labels": labels, "finished": finished}

    runs = [
        rec("a", "2026-01-01T00:00:00+00:00"),
        rec("b", "2026-01-02T00:00:00+00:00"),
        rec("c", None),  # no time: older than every run with one
        rec("d", "2026-01-01T00:00:00Z", seed=1),
        rec("e", "2026-01-01T00:00:00+00:00", seed=1),  # a tie with d: both kept
        rec("f", "2025-01-01T00:00:00", labels={"policy": "f"}),  # alone: kept
    ]
    key = '\'n\' seed 0 labels {"policy": "d"}'
    assert older_versions(runs) == [SetAside("a", "b", key), SetAside("c", "b", key)]


def test_supersede_moves_one_run_and_checks_its_paths(versions, tmp_path):
    path, old, _ = versions
    store = Store(path)
    where = store.supersede(old.run_ids[0])
    assert where.parent == path / ".superseded" and where.name.startswith(old.run_ids[0])
    assert (where / "run.json").is_file() and store.record(old.run_ids[0]) is None
    with pytest.raises(ValueError, match="is not in"):
        store.supersede(old.run_ids[0])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (path / ".superseded").rename(tmp_path / "moved")
    (path / ".superseded").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(StoreError, match="is a symbolic link"):
        store.supersede(old.run_ids[1])
    assert list(elsewhere.iterdir()) == [] and store.record(old.run_ids[1]) is not None


def test_prune_of_a_store_with_one_version_moves_nothing(tmp_path):
    path = tmp_path / "s"
    sc = tiny_linear()
    simfl.sweep([sc, dataclasses.replace(sc, seed=1)], store=path, executor="inline")
    assert Store(path).prune() == [] and not (path / ".superseded").exists()
