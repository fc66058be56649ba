"""Helpers shared by the analysis scripts: argument parsing and figure output."""

from __future__ import annotations

import argparse
from pathlib import Path

HERE = Path(__file__).resolve().parent


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="reduced size (used by the tests)")
    p.add_argument("--out", default=str(HERE / "figures"), help="directory for the figure")
    return p


def save(fig, out: str, name: str) -> Path:  # type: ignore[no-untyped-def]
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    file = path / f"{name}.png"
    fig.savefig(file, dpi=120, bbox_inches="tight")
    return file


def tune(
    make,
    grid,
    metric: str,
    *,
    seeds=(1000,),
    rounds_tail: int = 20,  # type: ignore[no-untyped-def]
    score: str = "tail",
):
    """The value of ``grid`` whose scenario ``make(value)`` scores lowest on ``metric``.

    ``score="tail"``: the median of ``metric`` over the last ``rounds_tail`` evaluated rounds
    (where a run ends). ``score="auc"``: the mean of log10(metric) over all evaluated rounds, the
    area under the convergence curve on a log scale (rate and floor together). Averaged over
    ``seeds``, tuning seeds kept apart from the seeds results are reported on. Diverged or failed
    runs score infinity.
    """
    import dataclasses
    import math

    import numpy as np

    from simfl import run

    best, best_score = None, math.inf
    for value in grid:
        scores = []
        for seed in seeds:
            res = run(dataclasses.replace(make(value), seed=seed), progress=False)
            values = res.rounds[metric].dropna()
            ok = res.ok and res.meta["stop_reason"] in ("rounds", "target") and len(values)
            if not ok:
                scores.append(math.inf)
            elif score == "auc":
                scores.append(float(np.mean(np.log10(np.maximum(values, 1e-300)))))
            else:
                scores.append(float(values.iloc[-rounds_tail:].median()))
        mean_score = float(np.mean(scores))
        if mean_score < best_score:
            best, best_score = value, mean_score
    return best


#: Where the full-size runs write their numbers (the docs' tables are rendered from them).
RESULTS = HERE / "results"

#: The papers a claim can belong to ("theory": a closed form the simulator must match).
PAPERS = ("FedRep", "LG-FedAvg", "SRPFL", "FedDAR", "FedMAvg", "theory")
#: The values a claim's ``status`` takes in the reproduction table of docs/validation.md.
STATUSES = ("reproduced", "qualitative", "not reproduced", "not attempted")


def claim(
    paper: str, claim: str, paper_value: str, ours: str, status: str, why: str = ""
) -> dict[str, str]:
    """One row of the reproduction table of docs/validation.md (see :func:`write_results`)."""
    if paper not in PAPERS:
        raise ValueError(f"claim paper must be one of {PAPERS}, got {paper!r}")
    if status not in STATUSES:
        raise ValueError(f"claim status must be one of {STATUSES}, got {status!r}")
    if status != "reproduced" and not why:
        raise ValueError(f"a {status!r} claim must say why ({claim!r})")
    return {
        "paper": paper,
        "claim": claim,
        "paper_value": paper_value,
        "ours": ours,
        "status": status,
        "why": why,
    }


def write_results(
    args: argparse.Namespace,
    stem: str,
    numbers: dict[str, object],
    claims: list[dict[str, str]],
    *,
    checks: str,
    measured: str,
) -> Path:
    """Write the numbers a script printed, and its claims, as ``<stem>.json``.

    ``checks`` (what the script checks) and ``measured`` (its figures, formatted from
    ``numbers``) make its row of the table of checks; each of ``claims`` (made by
    :func:`claim`) a row of the reproduction table.

    A full-size run writes ``analysis/results/<stem>.json`` (the docs' tables are rendered
    from these files by ``analysis/docs_tables.py``); a ``--quick`` run writes beside its
    figure in ``--out`` so it never replaces the full-size numbers.
    """
    import json

    quick = bool(getattr(args, "quick", False))
    chosen = getattr(args, "results", None)  # an explicit --results DIR
    folder = Path(chosen) if chosen else Path(args.out) if quick else RESULTS
    folder.mkdir(parents=True, exist_ok=True)
    data = {
        "script": f"analysis/{stem}.py",
        "size": "quick" if quick else "full",
        "checks": checks,
        "measured": measured,
        "numbers": _plain(numbers),
        "claims": claims,
    }
    path = folder / f"{stem}.json"
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"results: {path}")
    return path


def _plain(value: object) -> object:
    """JSON-ready: numpy scalars and arrays to Python values, NaN and inf to ``None``."""
    import math

    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return _plain(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
