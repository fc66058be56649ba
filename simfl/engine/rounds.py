"""A synchronous round while its jobs run: its record, how it starts and how a run's end finds it.

The flat synchronous loop (:mod:`simfl.engine.sync`) and the semi-asynchronous one
(:mod:`simfl.engine.tiered`) start a round with :func:`start_round`, hand it to the run's
playback (:meth:`Playback.round <simfl.engine.playbacks.Playback.round>`) and, if the run
ends while it is in flight, record it with :func:`abandon_round`.

The closing rule, the same for every playback: a round closes at the earliest of ``quota``
arrivals; every job resolved (arrived or dropped); the deadline. Jobs resolving at the
closing instant after the job that closed it are not accepted.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import simpy
from numpy.typing import NDArray

from simfl.engine.jobs import JobPlan, fit_work
from simfl.outcome import ARRIVED, CANCELLED, DROPPED, RUNNING
from simfl.policies.base import RoundPlan

if TYPE_CHECKING:
    from simfl.engine.context import RunContext

__all__ = ["RoundState", "abandon_round", "quota_close", "start_round"]


class RoundState:
    """Book-keeping of one synchronous round while its jobs run."""

    __slots__ = (
        "closed",
        "done",
        "env",
        "n_arrived",
        "n_resolved",
        "plan",
        "procs",
        "quota",
        "round",
        "stage",
        "status",
        "t_end",
        "unsettled",
    )

    def __init__(
        self, env: simpy.Environment, plan: JobPlan, quota: int, round: int, stage: int
    ) -> None:
        self.env = env
        self.plan = plan
        self.quota = quota
        self.round = round
        self.stage = stage
        #: Set by a playback that plays the round without job events while it is in flight:
        #: brings the record up to what job processes would have left at the given instant
        #: (a run ending then finds the round as they would).
        self.unsettled: Callable[[float], None] | None = None
        self.status = np.full(plan.size, RUNNING, dtype=np.int8)
        self.t_end = np.full(plan.size, math.nan)
        self.n_arrived = 0
        self.n_resolved = 0
        self.closed = False
        self.done = env.event()
        self.procs: list[simpy.Process] = []

    @property
    def n_accepted(self) -> int:
        """The number of updates the round accepted (to aggregate) so far."""
        return int(np.count_nonzero(self.status == ARRIVED))

    def arrive(self, j: int) -> None:
        """Job ``j``'s update reached the server."""
        if self.closed:
            return  # arrived at the very instant the round closed, after it: not accepted
        self.status[j] = ARRIVED
        self.t_end[j] = self.env.now
        self.n_arrived += 1
        self._resolved()

    def drop(self, j: int) -> None:
        """Job ``j``'s device failed."""
        if self.closed:
            return
        self.status[j] = DROPPED
        self.t_end[j] = self.env.now
        self._resolved()

    def _resolved(self) -> None:
        self.n_resolved += 1
        if self.n_arrived >= self.quota or self.n_resolved == self.plan.size:
            self.closed = True
            self.done.succeed()

    def close(self, status: int) -> None:
        """Stop every job still running now, recording it with ``status``."""
        self.closed = True
        running = np.flatnonzero(self.status == RUNNING)
        self.status[running] = status
        self.t_end[running] = self.env.now
        for j in running if self.procs else ():
            proc = self.procs[j]
            if proc.is_alive:
                proc.interrupt(status)


def abandon_round(ctx: RunContext, rnd: RoundState) -> None:
    """Record a round still in flight at the end of the run, its jobs ``cancelled``."""
    if rnd.unsettled is not None:  # a round played without job events: its record up to now
        rnd.unsettled(float(ctx.env.now))
        rnd.unsettled = None
    received = rnd.status == ARRIVED
    rnd.close(CANCELLED)
    rnd.status[received] = CANCELLED  # received but never aggregated
    ctx.record_jobs(rnd.plan, rnd.status, rnd.t_end, round=rnd.round, stage=rnd.stage)


def start_round(
    ctx: RunContext, decision: RoundPlan, key: int, policy: object
) -> tuple[RoundState, NDArray[np.int64] | None]:
    """Plan the jobs of ``decision`` starting now, keyed by ``key``; its round state and repeats.

    A device listed several times runs one job whose update counts that many times (the
    repeats); partial work fits each job's work units to the deadline.
    """
    cohort = decision.cohort
    repeats = None
    if not (cohort[1:] > cohort[:-1]).all():  # drawn twice: one job, two votes
        cohort, repeats = np.unique(cohort, return_counts=True)
    stage = decision.stage
    epoch = stage if decision.speed_epoch is None else decision.speed_epoch
    plan = ctx.plan(cohort, key=key, stage=epoch)
    if decision.partial:
        if decision.deadline is None:
            raise ValueError(
                f"{type(policy).__name__} planned partial work without a deadline: "
                f"RoundPlan.partial needs RoundPlan.deadline"
            )
        steps = ctx.algorithm.job_steps(ctx.state, plan.devices)
        plan = fit_work(plan, ctx.env.now, decision.deadline, steps)
    quota = plan.size if decision.quota is None else min(decision.quota, plan.size)
    return RoundState(ctx.env, plan, quota, key, stage), repeats


def quota_close(
    t_res: NDArray[np.float64], arrives: NDArray[np.bool_], quota: int
) -> tuple[NDArray[np.int64], int] | None:
    """Where the ``quota``-th arrival closes a round whose jobs resolve at ``t_res``.

    Returns the order the jobs resolve in (by time, ties in job order: the order their
    events fire in) and how many of them, in that order, resolve up to and including the
    closing arrival; ``None`` when the quota cannot close the round before every job has
    resolved.
    """
    if quota >= t_res.size or quota > int(arrives.sum()):
        return None
    order = np.argsort(t_res, kind="stable")
    return order, int(np.flatnonzero(np.cumsum(arrives[order]) >= quota)[0]) + 1
