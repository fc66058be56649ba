"""Helpers of the policy-search studies (``tune_capacity.py``, ``tune_deadline.py``)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pandas as pd
from _common import RESULTS, _plain


def write(args: Any, stem: str, numbers: dict[str, Any]) -> Path:
    """``analysis/results/<stem>.json`` (a ``--quick`` run: ``--out``/<stem>.json).

    The file has no ``checks`` field, so the README's table of checks does not list it; its
    numbers are rendered into ``docs/policy-search.md`` by ``analysis/tune_docs.py``.
    """
    quick = bool(getattr(args, "quick", False))
    folder = Path(args.out) if quick else RESULTS
    folder.mkdir(parents=True, exist_ok=True)
    data = {
        "script": f"analysis/{stem}.py",
        "size": "quick" if quick else "full",
        "numbers": _plain(numbers),
    }
    path = folder / f"{stem}.json"
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"results: {path}")
    return path


def digest_by_value(results: Any) -> str:
    """A fingerprint of a run's recorded rounds and jobs, from their values."""
    h = hashlib.sha256()
    for frame in (results.rounds, results.clients):
        h.update(",".join(map(str, frame.columns)).encode())
        for col in frame.columns:
            h.update("\x1f".join(map(str, frame[col].tolist())).encode())
    return h.hexdigest()[:16]


def digests_compare_values() -> bool:
    """Whether ``simfl.tune`` fingerprints runs by their values (equal runs, equal digests)."""
    from types import SimpleNamespace

    from simfl.tuning import search

    def run() -> SimpleNamespace:
        frame = pd.DataFrame({"time": [1.25, 2.5], "status": ["ok", "late"]})
        return SimpleNamespace(rounds=frame, clients=frame.copy())

    return bool(search._digest(run()) == search._digest(run()))


def fingerprint_runs_by_value() -> bool:
    """Make the search's run fingerprints compare values, if they do not; True if it had to.

    The search's warnings that a knob had no effect, or that the seeds gave identical runs,
    group trials by these fingerprints; fingerprints of the objects' addresses rather than
    their values would never match, and those warnings would never be given.
    """
    if digests_compare_values():
        return False
    from simfl.tuning import search

    search._digest = digest_by_value  # type: ignore[assignment]
    return True
