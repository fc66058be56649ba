"""A run's identity covers the code that computes it; stores written before still work.

Each case writes a scenario file, sweeps it into a store, edits the file (one piece of code,
same names and values) and sweeps again: the run is stale, runs again, and the frame holds only
the new numbers; ``reuse_stale`` keeps the old run. Files are loaded the way ``simfl sweep``
loads them (:func:`simfl.cli.load_cases`), each version from its own folder (Python's bytecode
cache keys on a file's time and size, which an edit within a second may keep).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

import simfl
from simfl import Store
from simfl.cli import load_cases, main
from simfl.sweeps import identity
from simfl.sweeps.store import SUPERSEDED

ROOT = Path(__file__).resolve().parents[1]
LEGACY = ROOT / "tests" / "data" / "store_b3b5a48"
LEGACY_FILE = ROOT / "tests" / "data" / "make_store_b3b5a48.py"

SCENARIO = textwrap.dedent(
    """
    import dataclasses
    from typing import Any, ClassVar

    from simfl import Fleet, Scenario, algorithms, dists, tasks
    from simfl.policies import RoundPlan, SyncPolicy
    {imports}

    K = {k}


    def helper(n):
        return {helper}


    {model}


    @dataclasses.dataclass(frozen=True)
    class PickK(SyncPolicy[None]):
        size: Any = None

        name: ClassVar[str] = "pick-k"

        def plan(self, state, view):
            online = view.online()
            n = 3 if self.size is None else self.size(len(online))
            return None, RoundPlan({cohort})


    @dataclasses.dataclass(frozen=True)
    class Mixed(algorithms.FedAvg):
        def aggregate(self, state, updates, outcome):
            new = super().aggregate(state, updates, outcome)
            w = {weight}
            return type(new)(
                (1 - w) * state.representation + w * new.representation,
                (1 - w) * state.head + w * new.head,
            )


    SCENARIO = Scenario(
        name="edited",
        task=tasks.LinearRepresentation(d=4, k=2, samples_per_client=4, test_samples=10),
        algorithm=Mixed(),
        fleet=Fleet.homogeneous(8, compute=dists.Exponential(mean=1.0)),
        policy=PickK(size={size}),
        rounds=3,
    )
    """
)
BASE = {
    "imports": "",
    "k": "4",
    "helper": "n // 2",
    "model": "",
    "cohort": "online[:n]",
    "weight": "0.1",
    "size": "None",
}
WIDE = """
class Wide(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, {width}, device="meta")

    def forward(self, x):
        return self.layer(x)
"""
TORCH = {
    "imports": "import torch",
    "model": WIDE.format(width=3),
    "size": "lambda n: sum(p.numel() for p in Wide().parameters()) % 4 + 2",
}
#: (name, the file before, the edit): each edit changes one piece of code, and the numbers.
EDITS = {
    "policy method": ({}, {"cohort": "online[-n:]"}, "PickK.plan"),
    "algorithm method": ({}, {"weight": "0.5"}, "Mixed.aggregate"),
    "torch module": (TORCH, {"model": WIDE.format(width=5)}, "Wide.__init__"),
    "nested generator": (
        {"size": "lambda n: sum(1 for v in range(n) if v * 2 < n)"},
        {"size": "lambda n: sum(1 for v in range(n) if v * 3 < n)"},
        "<lambda> in scenario.py",
    ),
    "global": ({"size": "lambda n: min(n, K)"}, {"k": "3"}, "<lambda> in scenario.py"),
    "helper": ({"size": "lambda n: helper(n)"}, {"helper": "n // 3"}, "helper"),
}


def _file(folder: Path, **edits: str) -> Path:
    """A scenario file in its own folder (``folder/scenario.py``)."""
    folder.mkdir(parents=True)
    path = folder / "scenario.py"
    path.write_text(SCENARIO.format(**{**BASE, **edits}))
    return path


def _sweep(path: Path, store: Path, **options: bool) -> simfl.sweeps.SweepOutcome:
    return simfl.sweep(
        load_cases(path), seeds=[0], store=store, executor="inline", progress=False, **options
    )


def _numbers(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.drop(columns="run_id").reset_index(drop=True)


@pytest.mark.parametrize("case", list(EDITS))
def test_a_run_whose_code_changed_runs_again(case, tmp_path):
    if case == "torch module":
        pytest.importorskip("torch", reason="the torch case needs torch")
    before, edit, part = EDITS[case]
    old, new = _file(tmp_path / "v1", **before), _file(tmp_path / "v2", **{**before, **edit})
    parts = tuple(identity.code_parts(load_cases(p)[0].scenario) for p in (old, new))
    assert identity.changed_parts(*parts) == [part]
    assert identity.code_digest(parts[0]) != identity.code_digest(parts[1])

    store = tmp_path / "store"
    first = _sweep(old, store)
    fresh = _sweep(new, tmp_path / "fresh")  # the edited code's numbers, in another store
    assert first.run_ids == fresh.run_ids  # the same values: the same run id
    assert not _numbers(first.frame).equals(_numbers(fresh.frame))

    kept = _sweep(new, store, reuse_stale=True)
    assert kept.ran == () and kept.stale == first.run_ids and kept.changed == (part,)
    assert "reused as asked" in kept.summary()
    pd.testing.assert_frame_equal(kept.frame, first.frame)

    again = _sweep(new, store)
    assert again.ran == first.run_ids and again.skipped == ()
    assert again.stale == first.run_ids and again.changed == (part,)
    line = f"1 runs stale: code of `{part}` changed; rerunning them"
    assert line in again.summary() and f"{SUPERSEDED}/" in again.summary()
    pd.testing.assert_frame_equal(again.frame, fresh.frame)
    pd.testing.assert_frame_equal(Store(store).rounds(), fresh.frame)
    aside = list((store / SUPERSEDED).iterdir())
    assert [p.name.rsplit("-", 1)[0] for p in aside] == list(first.run_ids)
    old_code, new_code = (
        json.loads((folder / "run.json").read_text())["code"]
        for folder in (aside[0], store / "runs" / first.run_ids[0])
    )
    assert old_code != new_code and Store(store).runs()["code"].tolist() == [new_code[:12]]

    settled = _sweep(new, store)
    assert settled.ran == () and settled.stale == () and "stale" not in settled.summary()


def test_a_change_of_simfl_itself_makes_runs_stale(tmp_path, monkeypatch):
    path = _file(tmp_path / "v1")
    store = tmp_path / "store"
    first = _sweep(path, store)
    copy = tmp_path / "simfl-copy"
    shutil.copytree(Path(simfl.__file__).parent, copy, ignore=shutil.ignore_patterns("*.pyc"))
    step = copy / "algorithms" / "linear_fedavg.py"
    step.write_bytes(step.read_bytes().replace(b"step", b"Step", 1))  # one byte changed
    patched = identity.source_digest(copy)
    assert patched != identity.simfl_digest()
    monkeypatch.setattr(identity, "simfl_digest", lambda: patched)
    again = _sweep(path, store)
    assert again.ran == first.run_ids and again.stale == first.run_ids
    assert again.changed == ("simfl",) and "code of `simfl` changed" in again.summary()
    pd.testing.assert_frame_equal(again.frame, first.frame)  # the copy computes the same
    assert len(list((store / SUPERSEDED).iterdir())) == 1


def test_identity_ignores_where_code_sits_and_sees_the_default_of_a_field(tmp_path):
    path = _file(tmp_path / "v1", size="lambda n: helper(n)")
    moved = tmp_path / "v2" / "scenario.py"
    moved.parent.mkdir()
    moved.write_text("\n\n# a comment and blank lines move every line down\n" + path.read_text())
    digests = [
        identity.code_digest(identity.code_parts(load_cases(p)[0].scenario)) for p in (path, moved)
    ]
    assert digests[0] == digests[1]


def test_identity_is_the_same_in_another_process(tmp_path):
    path = _file(tmp_path / "v1", size="lambda n: sum(1 for v in range(n) if v * K < helper(n))")
    code = (
        "import json, sys\n"
        "from simfl.cli import load_cases\n"
        "from simfl.sweeps.identity import code_parts\n"
        "print(json.dumps(code_parts(load_cases(sys.argv[1])[0].scenario), sort_keys=True))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
        cwd=ROOT,
    ).stdout
    here = identity.code_parts(load_cases(path)[0].scenario)
    assert json.loads(out) == here
    assert {"simfl", "PickK", "PickK.plan", "Mixed.aggregate", "helper"} <= set(here)
    assert "<lambda> in scenario.py" in here


def _legacy(tmp_path: Path) -> Path:
    store = tmp_path / "legacy"
    shutil.copytree(LEGACY, store)
    return store


def test_a_store_written_before_code_identity_reads_and_reports(tmp_path, capsys):
    store = Store(_legacy(tmp_path))
    assert store.check() == []
    runs = store.runs()
    assert len(runs) == 4 and runs["code"].isna().all() and (runs["status"] == "done").all()
    rounds = store.rounds()
    assert len(rounds) == 4 * 4 and set(rounds["policy"]) == {"all", "fast"}
    assert len(store.clients()) > 0
    assert main(["report", str(store.path), "--out", str(tmp_path / "report"), "--quiet"]) == 0
    assert (tmp_path / "report" / "index.html").is_file()
    assert main(["show", str(store.path)]) == 0
    assert "4 runs, 4 done" in capsys.readouterr().out


def test_a_store_written_before_code_identity_resumes(tmp_path, capsys):
    path = _legacy(tmp_path)
    before = Store(path).rounds()
    cases = load_cases(LEGACY_FILE)
    out = simfl.sweep(cases, store=path, executor="inline", progress=False)
    assert out.ran == () and len(out.skipped) == 4 and out.unknown == out.run_ids
    said = [line for line in out.summary().splitlines() if "code is unknown" in line]
    assert out.stale == () and len(said) == 1  # said once
    assert said[0].startswith("unknown    4 runs were stored before simfl recorded")
    pd.testing.assert_frame_equal(out.frame, before)

    argv = ["sweep", str(LEGACY_FILE), "--store", str(path), "--executor", "inline", "--quiet"]
    assert main(argv) == 0
    assert "--rerun-unknown runs them again" in capsys.readouterr().out

    assert main([*argv, "--rerun-unknown"]) == 0
    printed = capsys.readouterr().out
    assert "4 ran" in printed and "run again (--rerun-unknown)" in printed
    assert len(list((path / SUPERSEDED).iterdir())) == 4
    again = simfl.sweep(cases, store=path, executor="inline", progress=False)
    assert again.ran == again.unknown == again.stale == ()
    assert again.runs["code"].notna().all()
    pd.testing.assert_frame_equal(again.frame, before)  # b3b5a48's numbers, recomputed


def test_sweep_command_reruns_stale_runs_unless_told_to_reuse_them(tmp_path, capsys):
    old, new = _file(tmp_path / "v1"), _file(tmp_path / "v2", cohort="online[-n:]")
    store = tmp_path / "store"
    options = ["--seeds", "0", "--store", str(store), "--executor", "inline", "--quiet"]
    assert main(["sweep", str(old), *options]) == 0
    capsys.readouterr()
    assert main(["sweep", str(new), *options, "--reuse-stale"]) == 0
    printed = capsys.readouterr().out
    assert "1 runs stale: code of `PickK.plan` changed; reused as asked (--reuse-stale" in printed
    assert "0 ran" in printed and not (store / SUPERSEDED).exists()
    assert main(["sweep", str(new), *options]) == 0
    printed = capsys.readouterr().out
    assert "1 ran" in printed and "code of `PickK.plan` changed; rerunning them" in printed
    assert len(list((store / SUPERSEDED).iterdir())) == 1


PIECES = textwrap.dedent(
    """
    import functools

    import knobs


    def scale(v, by):
        return v * by


    class Table(dict):
        def pick(self, k):
            return self[k] + 1


    class Shape:
        @property
        def width(self):
            return knobs.WIDTH

        @staticmethod
        def make():
            return 1


    def outer(n):
        def inner(v):
            return v + n * knobs.WIDTH

        return inner


    VALUE = [
        functools.partial(scale, by=2),
        Table(a=1),
        Shape(),
        outer(3),
        frozenset({lambda v: v + 1, lambda v: v + 2}),
    ]
    """
)
LOAD = (
    "import importlib.util, json, sys\n"
    "from simfl.sweeps.identity import code_parts\n"
    "sys.path.insert(0, sys.argv[1])\n"
    "spec = importlib.util.spec_from_file_location('_pieces', sys.argv[1] + '/pieces.py')\n"
    "module = importlib.util.module_from_spec(spec)\n"
    "spec.loader.exec_module(module)\n"
    "print(json.dumps(code_parts(module.VALUE), sort_keys=True))\n"
)


def test_identity_reaches_partials_closures_properties_and_modules_beside_the_file(tmp_path):
    found = []
    for version, width in (("v1", 4), ("v2", 5)):
        folder = tmp_path / version
        folder.mkdir()
        (folder / "pieces.py").write_text(PIECES)
        (folder / "knobs.py").write_text(f"WIDTH = {width}\n")
        runs = [
            subprocess.run(
                [sys.executable, "-c", LOAD, str(folder)],
                capture_output=True,
                text=True,
                check=True,
                env={**os.environ, "PYTHONHASHSEED": seed},
                cwd=ROOT,
            ).stdout
            for seed in ("1", "2")
        ]
        assert runs[0] == runs[1]  # two lambdas in a set: named alike in every process
        found.append(json.loads(runs[0]))
    assert set(found[0]) == {
        "simfl",
        "scale",
        "Table",
        "Table.pick",
        "Shape",
        "Shape.width",
        "Shape.make",
        "outer.<locals>.inner in pieces.py",
        "<lambda> in pieces.py",
        "<lambda> in pieces.py (2)",
    }
    changed = identity.changed_parts(*found)
    assert changed == ["Shape.width", "outer.<locals>.inner in pieces.py"]
