"""Refactors keep the numbers: the frames of the catalogue's scenarios hash as recorded.

``analysis/fingerprints.py --write`` recorded the SHA-256 of the ``rounds`` and ``clients``
frames of every scenario in its catalogue (every policy, network, availability mode, algorithm
family and playback option, and every file in ``scenarios/``) before the engine was
restructured. A change that alters any of them on purpose (a bug fix) re-records them and says
why in its commit. Hashes are bit-exact, so they are compared only where numpy and pandas are
the versions they were recorded with and on a kind of CPU they were recorded for (the last bits
follow the CPU's vector instructions: ``fingerprints.cpu_kind``); otherwise the test is
skipped, and says so.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "analysis"))
import fingerprints  # noqa: E402

RECORDED = json.loads(fingerprints.OUT.read_text())
CATALOGUE = fingerprints.catalogue()
KIND = fingerprints.cpu_kind()
CASES = fingerprints.recorded_cases(RECORDED, KIND)


@pytest.mark.parametrize("kind", sorted(RECORDED["cpus"]))
def test_the_catalogue_is_the_recorded_one(kind: str):
    assert sorted(CATALOGUE) == sorted(RECORDED["cpus"][kind])
    assert len(CATALOGUE) >= 30 + 4  # at least 30 built scenarios besides scenarios/*.py


def test_the_cpu_kind_names_simd_and_blas():
    assert KIND.startswith("numpy ") and "; openblas " in KIND


@pytest.mark.skipif(
    (np.__version__, pd.__version__) != (RECORDED["numpy"], RECORDED["pandas"]),
    reason=f"fingerprints recorded with numpy {RECORDED['numpy']} and pandas "
    f"{RECORDED['pandas']}; bit-exact hashes are not comparable across versions",
)
@pytest.mark.skipif(
    CASES is None,
    reason=f"no fingerprints recorded for this kind of CPU ({KIND}; recorded: "
    f"{', '.join(RECORDED['cpus'])}): the last bits follow the CPU's vector instructions",
)
@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_frames_hash_as_recorded(name: str):
    assert CASES is not None
    want = CASES[name]
    if "stale" in want:  # changed on purpose where this kind of CPU was not at hand
        pytest.skip(
            f"fingerprint stale on this kind of CPU ({KIND}): {want['stale']} (recorded on "
            f"{want['recorded_on']}; record it here with fingerprints.py --write --only {name})"
        )
    got = fingerprints.fingerprint_case(CATALOGUE[name])
    assert (got["rounds"], got["clients"]) == (want["rounds"], want["clients"])
    assert got["stop_reason"] == want["stop_reason"]


def test_a_cpu_kind_without_its_own_set_takes_the_one_of_its_simd_levels():
    recorded = {
        "cpus": {"numpy X86_V3; openblas Haswell": {"a": 1}, "numpy X86_V4; openblas S": {}}
    }
    assert fingerprints.recorded_cases(recorded, "numpy X86_V3; openblas Haswell") == {"a": 1}
    assert fingerprints.recorded_cases(recorded, "numpy X86_V3; openblas Zen") == {"a": 1}
    assert fingerprints.recorded_cases(recorded, "numpy baseline; openblas Zen") is None
    two = {"cpus": {"numpy X86_V3; openblas A": {}, "numpy X86_V3; openblas B": {}}}
    assert fingerprints.recorded_cases(two, "numpy X86_V3; openblas C") is None  # ambiguous


def test_a_change_recorded_here_marks_the_other_kinds_stale_and_they_skip_it(tmp_path, capsys):
    # --write --only NAME --others-stale REASON records NAME for this kind and marks it stale
    # in every other kind's set; a check on a kind whose entry is stale says so, not "same"
    path = tmp_path / "fp.json"
    other = "numpy X86_V9; openblas Other"
    path.write_text(
        json.dumps(
            {
                "numpy": np.__version__,
                "pandas": pd.__version__,
                "cpus": {KIND: {}, other: {"t-waitall": {"rounds": "x", "clients": "y"}}},
            }
        )
    )
    argv = ["--write", "--only", "t-waitall", "--file", str(path)]
    assert fingerprints.main([*argv, "--others-stale", "a fast path rounds otherwise"]) == 0
    cpus = json.loads(path.read_text())["cpus"]
    assert set(cpus[KIND]["t-waitall"]) >= {"rounds", "clients"}
    assert cpus[other]["t-waitall"] == {
        "stale": "a fast path rounds otherwise",
        "recorded_on": KIND,
    }
    # the same file seen from the other kind: its entry is stale, so --check passes, saying so
    swapped = {"numpy": np.__version__, "pandas": pd.__version__, "cpus": {KIND: cpus[other]}}
    path.write_text(json.dumps(swapped))
    capsys.readouterr()
    assert fingerprints.main(["--check", "--only", "t-waitall", "--file", str(path)]) == 0
    assert "STALE (a fast path rounds otherwise)" in capsys.readouterr().out
    with pytest.raises(SystemExit):  # only with --write --only
        fingerprints.main(["--check", "--file", str(path), "--others-stale", "why"])
