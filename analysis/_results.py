"""The results file every analysis script writes (issue 16's convention, see the brief).

``analysis/results/<script_stem>.json``: the numbers the script prints, ``"size"`` (``"full"``
or ``"quick"``) and a ``"claims"`` list, one entry per paper claim with ``paper``, ``claim``,
``paper_value``, ``ours``, ``status`` (``"reproduced"``, ``"qualitative"`` or ``"not
attempted"``) and ``why``. Quick runs write into the directory given by ``--results`` (the
tests pass a temporary one), never over the full-size file.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
PAPERS = ("FedRep", "SRPFL", "LG-FedAvg", "FedDAR", "FedMAvg")
STATUSES = ("reproduced", "qualitative", "not attempted")


def claim(
    paper: str, claim: str, paper_value: str, ours: str, status: str, why: str = ""
) -> dict[str, str]:
    """One entry of the ``claims`` list, checked against the convention."""
    if paper not in PAPERS:
        raise ValueError(f"claim paper must be one of {PAPERS}, got {paper!r}")
    if status not in STATUSES:
        raise ValueError(f"claim status must be one of {STATUSES}, got {status!r}")
    if status != "reproduced" and not why:
        raise ValueError(f"claim {claim!r} is {status!r}: say why (what differs)")
    return {
        "paper": paper,
        "claim": claim,
        "paper_value": paper_value,
        "ours": ours,
        "status": status,
        "why": why,
    }


def _plain(value: Any) -> Any:
    """JSON-ready: numpy scalars to Python numbers, NaN/inf to None, tuples to lists."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write(
    stem: str,
    numbers: dict[str, Any],
    claims: list[dict[str, str]],
    *,
    quick: bool,
    out: str | None = None,
) -> Path:
    """Write ``<out or analysis/results>/<stem>.json``; quick runs need an explicit ``out``."""
    if quick and out is None:
        raise ValueError("a quick run writes its results into --results DIR, not analysis/results")
    folder = Path(out) if out is not None else RESULTS
    folder.mkdir(parents=True, exist_ok=True)
    body = {**_plain(numbers), "size": "quick" if quick else "full", "claims": claims}
    path = folder / f"{stem}.json"
    path.write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")
    return path
