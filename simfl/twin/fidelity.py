"""How far a prediction is from a measurement: :func:`simfl.run` against its twin.

Both runs are the same scenario and seed, so they share every keyed draw: the same jobs take
the same planned durations in both. The comparison is therefore paired, round by round and job
by job: relative error ``|predicted - measured| / measured`` of each round's duration (from its
start to its close), of each job's duration (from its start to its arrival) where the job
arrived in both, and of the time to a target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pandas as pd

from simfl.compare import time_to_target
from simfl.results import Results

__all__ = ["Fidelity", "compare"]


@dataclass(frozen=True)
class Fidelity:
    """Paired errors of a prediction against a measurement.

    Attributes
    ----------
    rounds
        One row per round recorded by both: ``predicted`` and ``measured`` duration (seconds),
        ``error`` (relative), and whether the rounds aggregated the same devices
        (``same_arrivals``).
    jobs
        One row per job that arrived in both: ``predicted`` and ``measured`` duration and
        ``error``.
    time_to_target
        ``(predicted, measured, relative error)``; ``None`` without a target.
    """

    rounds: pd.DataFrame
    jobs: pd.DataFrame
    time_to_target: tuple[float, float, float] | None

    def summary(self) -> dict[str, Any]:
        """Median and worst relative errors, as plain floats."""

        def stats(e: pd.Series) -> tuple[float, float]:
            e = e.dropna()
            return (float(e.median()), float(e.max())) if len(e) else (math.nan, math.nan)

        r_med, r_max = stats(self.rounds["error"])
        j_med, j_max = stats(self.jobs["error"])
        out: dict[str, Any] = {
            "rounds": len(self.rounds),
            "round_error_median": r_med,
            "round_error_max": r_max,
            "job_error_median": j_med,
            "job_error_max": j_max,
            "same_arrivals": float(self.rounds["same_arrivals"].mean())
            if len(self.rounds)
            else math.nan,
        }
        if self.time_to_target is not None:
            p, m, e = self.time_to_target
            out.update(ttt_predicted=p, ttt_measured=m, ttt_error=e)
        return out


def _rel(predicted: np.ndarray[Any, Any], measured: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(np.abs(predicted - measured) / np.abs(measured), dtype=np.float64)


def compare(
    predicted: Results,
    measured: Results,
    *,
    metric: str | None = None,
    below: float | None = None,
    above: float | None = None,
) -> Fidelity:
    """Paired errors of ``predicted`` (e.g. :func:`simfl.run`) against ``measured`` (a twin).

    ``metric`` with ``below`` or ``above`` also compares the time to that target (``inf`` when
    a run never reaches it; the error is then 0 if neither does and ``inf`` otherwise).
    """
    pr, mr = predicted.rounds, measured.rounds
    n = min(len(pr), len(mr))
    p_dur = (pr["time"] - pr["t_start"]).to_numpy()[:n]
    m_dur = (mr["time"] - mr["t_start"]).to_numpy()[:n]

    def arrivals(res: Results) -> dict[int, frozenset[int]]:
        c = res.clients
        got = c[c["status"].astype(str) == "arrived"]
        return {
            int(cast(Any, r)): frozenset(int(d) for d in g["device"])
            for r, g in got.groupby("round")
        }

    pa, ma = arrivals(predicted), arrivals(measured)
    rounds = pd.DataFrame(
        {
            "round": np.arange(n),
            "predicted": p_dur,
            "measured": m_dur,
            "error": _rel(p_dur, m_dur),
            "same_arrivals": [pa.get(r, frozenset()) == ma.get(r, frozenset()) for r in range(n)],
        }
    )
    key = ["round", "device"]

    def durations(res: Results) -> pd.Series:
        c = res.clients
        got = c[c["status"].astype(str) == "arrived"]
        return (got["t_end"] - got["t_start"]).set_axis(pd.MultiIndex.from_frame(got[key]))

    both = pd.concat(
        {"predicted": durations(predicted), "measured": durations(measured)}, axis=1
    ).dropna()
    jobs = both.reset_index()
    jobs["error"] = _rel(jobs["predicted"].to_numpy(), jobs["measured"].to_numpy())
    ttt = None
    if metric is not None:
        p = time_to_target(predicted, metric, below=below, above=above)
        m = time_to_target(measured, metric, below=below, above=above)
        if math.isinf(p) and math.isinf(m):
            err = 0.0
        elif math.isinf(p) or math.isinf(m):
            err = math.inf
        else:
            err = abs(p - m) / m
        ttt = (p, m, err)
    return Fidelity(rounds, jobs, ttt)
