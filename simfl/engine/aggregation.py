"""Closing a synchronous round: aggregate what arrived, record the round, build its outcome."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from simfl.engine.jobs import JobPlan
from simfl.outcome import ARRIVED, CANCELLED, DROPPED, LATE, Outcome

if TYPE_CHECKING:
    from simfl.engine.context import RunContext

__all__ = ["close_aggregation"]


def close_aggregation(
    ctx: RunContext,
    plan: JobPlan,
    status: NDArray[np.int8],
    t_end: NDArray[np.float64],
    *,
    round: int,
    stage: int,
    t_start: float,
    bytes_moved: tuple[float, float],
    repeats: NDArray[np.int64] | None = None,
) -> Outcome:
    """Aggregate the arrived jobs of a synchronous round, record the round's row.

    ``status`` and ``t_end`` hold the final status and end of every job of ``plan``;
    ``repeats`` how many times each device was drawn (sampling with replacement), its update
    repeated that often. Returns the round's outcome, as the algorithm was told it.
    """
    accepted = status == ARRIVED
    counts = np.bincount(status, minlength=4)  # statuses are 0..3 once a round is closed
    n = plan.size
    starts = np.asarray(plan.t_start, dtype=np.float64)
    outcome = Outcome(
        round=round,
        stage=stage,
        t_start=t_start,
        time=ctx.env.now,
        devices=plan.devices,
        status=status,
        job_start=np.full(n, starts) if starts.ndim == 0 else starts,
        job_end=t_end,
        staleness=np.where(accepted, 0.0, math.nan),
        repeats=repeats,
    )
    row: dict[str, Any] = {
        "round": round,
        "stage": stage,
        "t_start": t_start,
        "time": ctx.env.now,
        "status": "ok" if counts[ARRIVED] else "empty",
        "n_selected": n,
        "n_arrived": int(counts[ARRIVED]),
        "n_dropped": int(counts[DROPPED]),
        "n_late": int(counts[LATE]),
        "n_cancelled": int(counts[CANCELLED]),
        "bytes_down": bytes_moved[0],
        "bytes_up": bytes_moved[1],
        "staleness_mean": 0.0 if counts[ARRIVED] else math.nan,
    }
    if counts[ARRIVED]:
        state = ctx.state

        def compute() -> tuple[Any, Any]:
            alg = ctx.algorithm
            updates = ctx.updates(state, plan.devices, round, accepted)
            if repeats is not None and (repeats > 1).any():
                updates = updates.repeat(repeats[accepted])
            new = alg.background(alg.aggregate(state, updates, outcome), ctx.data, outcome)
            return new, updates

        ctx.apply(row, compute)
    ctx.end_aggregation(row)
    return outcome
