"""Helpers of the policy-search studies (``tune_capacity.py``, ``tune_deadline.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from _common import RESULTS, _plain


def write(args: Any, stem: str, numbers: dict[str, Any]) -> Path:
    """``analysis/results/<stem>.json`` (a ``--quick`` run: ``--out``/<stem>.json).

    The file has no ``checks`` field, so the table of checks does not list it; its
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
