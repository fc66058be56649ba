"""Closing a synchronous round: aggregate what arrived, record the round, build its outcome."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from simfl.algorithms.base import Updates
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
    base: tuple[Any, int] | None = None,
    combine: Callable[[Any, Outcome, Updates], Any] | None = None,
) -> Outcome:
    """Record the jobs of a synchronous round, aggregate the arrived ones, record the round.

    ``status`` and ``t_end`` hold the final status and end of every job of ``plan``;
    ``extra_bytes`` the bytes moved down and up besides the jobs' (edge servers' transfers);
    ``repeats`` how many times each device was drawn (sampling with replacement), its update
    repeated that often; ``partial`` whether the jobs did partial work (the algorithm computes
    each update from the local steps its job did, ``plan.steps``). Returns the round's outcome,
    as the algorithm was told it, with the loss each arrived client reported.

    ``base`` is the state and model version the jobs started from (default: the current state
    and ``round``, a synchronous round); jobs are then recorded with that version as their
    ``round`` and its distance to ``round`` as their staleness, and their data keyed by it.
    ``combine(aggregated, outcome, updates)`` turns the algorithm's aggregate of the updates on
    the base state into the new server state (default: it is the new state; semi-asynchronous
    groups mix it with the other groups' models and keep the updates' local parameters).
    """
    accepted = status == ARRIVED
    base_state, version = (ctx.state, round) if base is None else base
    lag = float(round - version)
    staleness = np.where(accepted, lag, math.nan)
    b_down, b_up = ctx.record_jobs(
        plan, status, t_end, round=version, stage=stage, staleness=staleness
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
        steps=plan.steps if partial else None,
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
        "staleness_mean": lag if counts[ARRIVED] else math.nan,
    }
    if counts[ARRIVED]:
        state = base_state
        told: list[Outcome] = []

        def compute() -> tuple[Any, Any]:
            alg = ctx.algorithm
            steps = plan.steps if partial else None
            updates = ctx.updates(state, plan.devices, version, accepted, steps)
            seen = outcome
            if updates.loss is not None:
                loss = np.full(n, math.nan)
                loss[accepted] = updates.loss
                seen = replace(outcome, loss=loss)
            told.append(seen)
            if repeats is not None and (repeats > 1).any():
                updates = updates.repeat(repeats[accepted])
            new = alg.aggregate(state, updates, seen)
            if combine is not None:
                new = combine(new, seen, updates)
            return alg.background(new, ctx.data, seen), updates

        ctx.apply(row, compute)
        if told:
            outcome = told[0]
    ctx.end_aggregation(row)
    return outcome
