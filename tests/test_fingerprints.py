"""Refactors keep the numbers: the frames of the catalogue's scenarios hash as recorded.

``analysis/fingerprints.py --write`` recorded the SHA-256 of the ``rounds`` and ``clients``
frames of every scenario in its catalogue (every policy, network, availability mode, algorithm
family and playback option, and every file in ``scenarios/``) before the engine was
restructured. A change that alters any of them on purpose (a bug fix) re-records them and says
why in its commit. Hashes are bit-exact, so they are compared only where numpy and pandas are
the versions they were recorded with (otherwise the test is skipped, and says so).
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


def test_the_catalogue_is_the_recorded_one():
    assert sorted(CATALOGUE) == sorted(RECORDED["cases"])
    assert len(CATALOGUE) >= 30 + 4  # at least 30 built scenarios besides scenarios/*.py


@pytest.mark.skipif(
    (np.__version__, pd.__version__) != (RECORDED["numpy"], RECORDED["pandas"]),
    reason=f"fingerprints recorded with numpy {RECORDED['numpy']} and pandas "
    f"{RECORDED['pandas']}; bit-exact hashes are not comparable across versions",
)
@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_frames_hash_as_recorded(name: str):
    got = fingerprints.fingerprint_case(CATALOGUE[name])
    want = RECORDED["cases"][name]
    assert (got["rounds"], got["clients"]) == (want["rounds"], want["clients"])
    assert got["stop_reason"] == want["stop_reason"]
