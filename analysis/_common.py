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
