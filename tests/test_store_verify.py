"""A results store verifies what it stores: changed bytes are found, bad records are listed.

Bytes of a stored run's files are flipped (at seeded positions) and fields of its ``run.json``
are given values of the wrong type or range: every reader either leaves the run out with a
warning naming it (or raises naming the file), or returns exactly the numbers that were
stored; ``simfl store check`` lists it; nothing ends in a traceback.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import pytest

import simfl
from simfl import Store, policies, sweeps
from simfl.cli import main
from simfl.results import folder
from simfl.sweeps import StoreError, StoreWarning, integrity
from tests.helpers import tiny_linear


def _cases() -> list[sweeps.Case]:
    return sweeps.grid(
        tiny_linear(rounds=8),
        policy={"deadline": policies.Deadline(1.5, count=4), "fastest-k": policies.FastestK(3)},
        seed=[0],
    )


def _sweep(path: Path) -> sweeps.SweepOutcome:
    return simfl.sweep(_cases(), store=path, executor="inline", progress=False)


@pytest.fixture
def swept(tmp_path: Path) -> tuple[Path, sweeps.SweepOutcome]:
    """A store of two small learning runs (with ``test_mse``), and the sweep that wrote it."""
    path = tmp_path / "s"
    return path, _sweep(path)


def _read(read: Any) -> tuple[pd.DataFrame | None, list[str]]:
    """What a reader returns (``None`` if it raised a StoreError) and the warnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            got = read()
        except StoreError:
            got = None
    return got, [str(w.message) for w in caught if issubclass(w.category, StoreWarning)]


@pytest.mark.parametrize("name", ["rounds.parquet", "clients.parquet"])
def test_every_flipped_byte_is_found(swept, name):
    path, out = swept
    store = Store(path)
    victim, other = out.run_ids
    want = {"rounds": store.rounds(), "clients": store.clients()}
    file = path / "runs" / victim / name
    original = file.read_bytes()
    rng = np.random.default_rng(38)
    for pos in rng.choice(len(original), size=40, replace=False):
        damaged = bytearray(original)
        damaged[pos] ^= 1 << int(rng.integers(8))
        file.write_bytes(bytes(damaged))
        for kind in ("rounds", "clients"):
            got, said = _read(getattr(store, kind))
            assert got is not None
            if said or kind == name.split(".")[0]:  # left out, named; the other run read whole
                assert said and victim in said[0] and name in said[0], (pos, said)
                others = want[kind][want[kind]["run_id"] == other].reset_index(drop=True)
                pd.testing.assert_frame_equal(got, others, check_exact=True)
            else:  # a footer that still parses: the other table is as stored
                pd.testing.assert_frame_equal(got, want[kind], check_exact=True)
        with pytest.raises(StoreError, match=f"^{file} "):
            store.results(victim)
        (bad,) = store.check()
        assert bad.run_id == victim and bad.reason.startswith(name), pos
    file.write_bytes(original)
    assert store.check() == []
    pd.testing.assert_frame_equal(store.rounds(), want["rounds"])


def test_a_changed_meta_json_is_found(swept):
    path, out = swept
    victim = out.run_ids[0]
    meta = path / "runs" / victim / "meta.json"
    text = meta.read_text()
    assert '"seed": 0' in text
    meta.write_text(text.replace('"seed": 0', '"seed": 7'))  # same size, valid JSON
    store = Store(path)
    got, said = _read(store.rounds)
    assert got is not None and set(got["seed"]) == {0}
    assert said and f"{victim}: meta.json has another SHA-256" in said[0]
    (bad,) = store.check()
    assert bad.run_id == victim and bad.reason.startswith("meta.json has another SHA-256")


def test_fast_check_compares_sizes_and_readers_still_verify(swept, capsys):
    path, out = swept
    victim = out.run_ids[1]
    file = path / "runs" / victim / "rounds.parquet"
    original = file.read_bytes()
    store = Store(path)
    rng = np.random.default_rng(6)
    for pos in rng.permutation(len(original)):  # a flip the footer does not show
        damaged = bytearray(original)
        damaged[pos] ^= 0x10
        file.write_bytes(bytes(damaged))
        if store.check(verify=False) == []:
            break
    assert main(["store", "check", str(path), "--fast"]) == 0
    assert "2 readable runs, 0 unreadable" in capsys.readouterr().out
    assert main(["store", "check", str(path)]) == 1
    printed = capsys.readouterr().out
    assert f"unreadable {victim}: rounds.parquet is not the file written with the run" in printed
    assert "its SHA-256 differs from the one meta.json lists" in printed
    got, said = _read(store.rounds)
    assert got is not None and set(got["run_id"]) == {out.run_ids[0]} and victim in said[0]


def test_each_file_is_hashed_once_per_process(swept, monkeypatch):
    path, out = swept
    hashed: list[int] = []

    def counting(data: bytes = b"") -> Any:
        hashed.append(len(data))
        return hashlib.sha256(data)

    def counting_hex(data: bytes) -> str:
        hashed.append(len(data))
        return folder.sha256(data)

    monkeypatch.setattr(integrity, "hashlib", SimpleNamespace(sha256=counting))
    monkeypatch.setattr(integrity, "sha256", counting_hex)
    monkeypatch.setattr(integrity, "_VERIFIED", set())
    monkeypatch.setattr(integrity, "_RACY_NS", -1)  # files as old as a store's usually are
    store = Store(path)
    assert store.check() == []
    assert len(hashed) == 3 * len(out.run_ids)  # two Parquet files and meta.json a run
    hashed.clear()
    assert store.check() == [] and not store.rounds().empty and not store.clients().empty
    assert hashed == []
    file = path / "runs" / out.run_ids[0] / "clients.parquet"
    data = bytearray(file.read_bytes())
    data[len(data) // 2] ^= 1
    file.write_bytes(bytes(data))  # a changed file is hashed again, and found
    (bad,) = store.check()
    assert bad.reason.startswith("clients.parquet is not the file written with the run")


def test_a_recently_changed_file_is_hashed_every_time(swept):
    path, out = swept
    store = Store(path)
    file = path / "runs" / out.run_ids[0] / "rounds.parquet"
    original = file.read_bytes()
    for _ in range(3):  # changes within one clock tick keep size and times: never trusted
        assert store.check() == []
        damaged = bytearray(original)
        damaged[len(original) // 3] ^= 4
        file.write_bytes(bytes(damaged))
        assert [b.run_id for b in store.check()] == [out.run_ids[0]]
        file.write_bytes(original)


_WRONG = [
    ("position", "x", "an integer >= 0"),
    ("position", -1, "an integer >= 0"),
    ("labels", {"policy": [1, 2]}, "an object of JSON scalars"),
    ("labels", ["policy"], "an object of JSON scalars"),
    ("seed", "abc", "an integer in [0, 2**63)"),
    ("seed", True, "an integer in [0, 2**63)"),
    ("seed", 1.5, "an integer in [0, 2**63)"),
    ("status", "ok", "'done' or 'failed'"),
    ("name", None, "a string"),
    ("run_id", 5, "a string"),
    ("has_results", "yes", "true or false"),
    ("files", {"rounds.parquet": "12"}, "an object of byte sizes"),
    ("meta_sha256", "abc", "a SHA-256"),
    ("error", 3, "a string or null"),
    ("metrics", "test_mse", "a list of strings"),
    ("goals", {"test_mse": 1}, "an object of strings"),
    ("n_devices", -3, "an integer >= 0"),
    ("sim_time", "1.0", "a number >= 0"),
    ("finished", 12, "a string"),
]


def _spoil(store: Path, run_id: str, field: str, value: object) -> str:
    """Set ``field`` of a stored run's ``run.json`` to ``value``; return the run id."""
    file = store / "runs" / run_id / "run.json"
    record = json.loads(file.read_text())
    record[field] = value
    file.write_text(json.dumps(record))
    return run_id


@pytest.mark.parametrize(("field", "value", "expected"), _WRONG)
def test_a_bad_field_of_run_json_is_listed_never_a_traceback(swept, capsys, field, value, expected):
    path, out = swept
    victim = _spoil(path, out.run_ids[0], field, value)
    reason = f'run.json has "{field}": {value!r}; it must be {expected}'
    store = Store(path)
    (bad,) = store.check()
    assert bad.run_id == victim and bad.reason.startswith(reason)
    for read in (store.rounds, store.clients, store.runs):
        got, said = _read(read)
        assert got is not None and set(got["run_id"]) == {out.run_ids[1]}
        assert said and reason in said[0]
    assert main(["show", str(path)]) == 0
    assert f"unreadable {victim}: {reason}" in capsys.readouterr().out
    assert main(["store", "check", str(path)]) == 1
    assert f"unreadable {victim}: {reason}" in capsys.readouterr().out
    again = _sweep(path)
    assert again.ran == (victim,) and again.repaired[0].reason == bad.reason
    pd.testing.assert_frame_equal(again.frame, out.frame, check_exact=True)


@pytest.mark.parametrize(("field", "value"), [("position", "x"), ("seed", "abc")])
def test_report_lists_a_bad_run_json_and_reports_the_others(swept, tmp_path, capsys, field, value):
    path, out = swept
    victim = _spoil(path, out.run_ids[0], field, value)
    assert main(["report", str(path), "--out", str(tmp_path / "report"), "--quiet"]) == 0
    assert f'skipped    {victim}: run.json has "{field}"' in capsys.readouterr().out


def test_stores_written_before_meta_sha256_are_still_verified_by_their_manifest(swept):
    path, out = swept
    victim = out.run_ids[0]
    file = path / "runs" / victim / "run.json"
    record = json.loads(file.read_text())
    del record["meta_sha256"]
    file.write_text(json.dumps(record))
    store = Store(path)
    assert store.check() == []
    rounds = path / "runs" / victim / "rounds.parquet"
    data = bytearray(rounds.read_bytes())
    data[len(data) // 2] ^= 1
    rounds.write_bytes(bytes(data))
    assert [b.run_id for b in store.check()] == [victim]
