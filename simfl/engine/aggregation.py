"""Closing a synchronous round: aggregate what arrived, record the round, build its outcome."""

from __future__ import annotations

import math
from dataclasses import replace
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
    extra_bytes: tuple[float, float] | None = None,
    repeats: NDArray[np.int64] | None = None,
    partial: bool = False,
) -> Outcome:
    """Record the jobs of a synchronous round, aggregate the arrived ones, record the round.

    ``status`` and ``t_end`` hold the final status and end of every job of ``plan``;
    ``extra_bytes`` the bytes moved down and up besides the jobs' (edge servers' transfers);
    ``repeats`` how many times each device was drawn (sampling with replacement), its update
    repeated that often; ``partial`` whether the jobs did partial work (the algorithm computes
    each update from its job's work units). Returns the round's outcome, as the algorithm was
    told it, with the loss each arrived client reported.
    """
    accepted = status == ARRIVED
    staleness = np.where(accepted, 0.0, math.nan)
    b_down, b_up = ctx.record_jobs(
        plan, status, t_end, round=round, stage=stage, staleness=staleness
    )
    if extra_bytes is not None:
        b_down, b_up = b_down + extra_bytes[0], b_up + extra_bytes[1]
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
        staleness=staleness,
        repeats=repeats,
        work=plan.work,
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
        "bytes_down": b_down,
        "bytes_up": b_up,
        "staleness_mean": 0.0 if counts[ARRIVED] else math.nan,
    }
    if counts[ARRIVED]:
        state = ctx.state
        told: list[Outcome] = []

        def compute() -> tuple[Any, Any]:
            alg = ctx.algorithm
            work = plan.work if partial else None
            updates = ctx.updates(state, plan.devices, round, accepted, work)
            seen = outcome
            if updates.loss is not None:
                loss = np.full(n, math.nan)
                loss[accepted] = updates.loss
                seen = replace(outcome, loss=loss)
            told.append(seen)
            if repeats is not None and (repeats > 1).any():
                updates = updates.repeat(repeats[accepted])
            new = alg.background(alg.aggregate(state, updates, seen), ctx.data, seen)
            return new, updates

        ctx.apply(row, compute)
        if told:
            outcome = told[0]
    ctx.end_aggregation(row)
    return outcome
