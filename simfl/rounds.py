"""Synchronous rounds: start a cohort's jobs, wait, close the round, aggregate.

A round closes at the earliest of: ``quota`` arrivals; every job resolved (arrived or dropped;
the server notices a dropout when it happens, like a broken connection); the deadline. Jobs still
running then are recorded ``late`` if the deadline closed the round and ``cancelled`` otherwise
(over-selection), and their updates are never computed. The algorithm then computes the arrived
updates in one batched call and aggregates them.

:func:`sync_round` is the building block: stateless policies run it in :func:`sync_server`;
stateful ones (SRPFL, adaptive deadlines) call it from their own server process.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy
from numpy.typing import NDArray

from simfl.jobs import ARRIVED, CANCELLED, DROPPED, LATE, RUNNING, JobPlan, resolution
from simfl.outcome import Outcome

if TYPE_CHECKING:
    from simfl.engine import RunContext
    from simfl.policies.base import SyncPolicy

__all__ = ["RoundState", "close_aggregation", "sync_round", "sync_server"]


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
        "status",
        "t_end",
    )

    def __init__(self, env: simpy.Environment, plan: JobPlan, quota: int) -> None:
        self.env = env
        self.plan = plan
        self.quota = quota
        self.status = np.full(plan.size, RUNNING, dtype=np.int8)
        self.t_end = np.full(plan.size, math.nan)
        self.n_arrived = 0
        self.n_resolved = 0
        self.closed = False
        self.done = env.event()
        self.procs: list[simpy.Process] = []

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


def sync_round(
    run: RunContext,
    cohort: NDArray[np.int64],
    *,
    quota: int | None = None,
    deadline: float | None = None,
    stage: int = 0,
    speed_epoch: int | None = None,
    plan: JobPlan | None = None,
) -> Generator[Any, Any, RoundState]:
    """Run one synchronous round with ``cohort`` and aggregate what arrives.

    Parameters
    ----------
    run
        The run context.
    cohort
        Devices taking part (their jobs start now). A device listed several times (sampling
        with replacement) runs one job whose update is repeated that many times for the
        aggregate.
    quota
        Close after this many arrivals (default: the whole cohort).
    deadline
        Close this many seconds after the start at the latest (default: no deadline).
    stage
        Stage index recorded with the round.
    speed_epoch
        The stage index fleets with ``redraw="stage"`` key their speed draws by (default:
        ``stage``).
    plan
        The cohort's job plan if the policy already made it with :meth:`RunContext.plan`.
    """
    env = run.env
    r = run.round
    t0 = env.now
    repeats = None
    if not (cohort[1:] > cohort[:-1]).all():  # drawn twice: one job, two votes
        cohort, repeats = np.unique(cohort, return_counts=True)
    if plan is None:
        plan = run.plan(cohort, key=r, stage=stage if speed_epoch is None else speed_epoch)
    rnd = RoundState(env, plan, plan.size if quota is None else min(quota, plan.size))
    if run.batched and run.devices is None and plan.size:
        yield from _batched_round(run, rnd, deadline, r, stage)
    else:
        yield from _process_round(run, rnd, deadline, r, stage)
    status = rnd.status
    b_down, b_up = run.record_jobs(plan, status, rnd.t_end, round=r, stage=stage)
    close_aggregation(
        run,
        plan,
        status,
        t_end=rnd.t_end,
        round=r,
        stage=stage,
        t_start=t0,
        bytes_moved=(b_down, b_up),
        repeats=repeats,
    )
    return rnd


def _process_round(
    run: RunContext, rnd: RoundState, deadline: float | None, r: int, stage: int
) -> Generator[Any, Any, None]:
    """Play the round's jobs as SimPy processes until the round closes."""
    env, plan = run.env, rnd.plan
    rnd.procs = run.start_jobs(plan, rnd.arrive, rnd.drop)

    def abandon() -> None:  # the run ends while this round is in flight
        received = rnd.status == ARRIVED
        rnd.close(CANCELLED)
        rnd.status[received] = CANCELLED  # received but never aggregated
        run.record_jobs(plan, rnd.status, rnd.t_end, round=r, stage=stage)

    run.abandon = abandon
    if deadline is None:
        yield rnd.done
    else:
        yield rnd.done | env.timeout(deadline)
    run.abandon = None
    rnd.close(LATE if not rnd.closed else CANCELLED)


def _settle(
    rnd: RoundState,
    t_res: NDArray[np.float64],
    arrives: NDArray[np.bool_],
    order: NDArray[np.int64],
    t: float,
) -> None:
    """Set ``rnd`` to what the job processes would have made of it by time ``t``.

    Jobs resolve in ``order`` (by time, ties by job index: the order their timeouts fire in);
    each arrives or drops as ``rnd.arrive``/``rnd.drop`` would record it, until the round
    closes (quota reached or every job resolved); later resolutions are ignored, as the
    processes' would be.
    """
    plan = rnd.plan
    due = order[: int(np.searchsorted(t_res[order], t, side="right"))]
    got = arrives[due]
    closing = np.flatnonzero(np.cumsum(got) >= rnd.quota)
    last = int(closing[0]) + 1 if closing.size else due.size
    due, got = due[:last], got[:last]
    rnd.status[due] = np.where(got, ARRIVED, DROPPED)
    rnd.t_end[due] = t_res[due]
    rnd.n_arrived = int(got.sum())
    rnd.n_resolved = int(due.size)
    rnd.closed = rnd.n_arrived >= rnd.quota or rnd.n_resolved == plan.size


def _delay_until(now: float, t: float) -> float:
    """A delay ``d >= 0`` with ``now + d == t`` in floating point (so the clock lands on ``t``)."""
    d = t - now
    for _ in range(8):
        reached = now + d
        if reached == t:
            return d
        d = float(np.nextafter(d, math.inf if reached < t else -math.inf))
    raise AssertionError(f"cannot land the clock on {t!r} from {now!r}")  # pragma: no cover


def _batched_round(
    run: RunContext, rnd: RoundState, deadline: float | None, r: int, stage: int
) -> Generator[Any, Any, None]:
    """The round without job events: its outcome follows from the plan in one vectorised step.

    On private links with devices always online nothing interacts with a job once it starts,
    so when each job arrives or drops is known up front. The server sleeps until the round
    closes and then records exactly what :func:`_process_round` records, ties included: jobs
    resolving at one instant count in job order, one resolving exactly at the deadline is in
    time, and (with a ``max_time``) the server wakes on an event created at the closing instant,
    as the processes' "round done" event is, so a run ending at that very instant abandons the
    round alike.
    """
    env, plan = run.env, rnd.plan
    t0 = env.now
    after, arrives = resolution(plan)
    t_res = t0 + after  # when each job's timeout would fire
    order: NDArray[np.int64] | None = None
    if rnd.quota >= plan.size or rnd.quota > int(arrives.sum()):
        # the quota cannot close the round early: it closes when every job has resolved
        due = np.ones(plan.size, dtype=bool)
        t_close = float(t_res.max())
    else:  # over-selection: the quota-th arrival, in the order the timeouts would fire
        order = np.argsort(t_res, kind="stable")
        n_due = int(np.flatnonzero(np.cumsum(arrives[order]) >= rnd.quota)[0]) + 1
        due = np.zeros(plan.size, dtype=bool)
        due[order[:n_due]] = True
        t_close = float(t_res[order[n_due - 1]])
    late = False
    if deadline is not None:
        t_deadline = t0 + deadline
        if t_deadline < t_close:  # a job resolving exactly at the deadline is in time
            t_close, late = t_deadline, True
            due = t_res <= t_deadline

    def abandon() -> None:  # the run ends while this round is in flight
        _settle(
            rnd,
            t_res,
            arrives,
            np.argsort(t_res, kind="stable") if order is None else order,
            env.now,
        )
        received = rnd.status == ARRIVED
        rnd.close(CANCELLED)
        rnd.status[received] = CANCELLED  # received but never aggregated
        run.record_jobs(plan, rnd.status, rnd.t_end, round=r, stage=stage)

    run.abandon = abandon
    yield env.timeout(_delay_until(t0, t_close))
    if run.scenario.max_time is not None:
        # wake on an event created now, like the processes' "done" event, so that a run
        # ending at this very instant abandons the round as it would with job processes
        yield env.timeout(0.0)
    run.abandon = None
    rnd.status[:] = np.where(due, np.where(arrives, ARRIVED, DROPPED), LATE if late else CANCELLED)
    rnd.t_end[:] = np.where(due, t_res, t_close)
    rnd.closed = True


def close_aggregation(
    run: RunContext,
    plan: JobPlan,
    status: NDArray[np.int8],
    *,
    t_end: NDArray[np.float64],
    round: int,
    stage: int,
    t_start: float,
    bytes_moved: tuple[float, float],
    repeats: NDArray[np.int64] | None = None,
) -> None:
    """Aggregate the arrived jobs of a synchronous round and record the round's row.

    ``status`` and ``t_end`` hold the final status of every job of ``plan`` and when it ended;
    ``repeats`` how many times each device was drawn (sampling with replacement), its update
    repeated that often. The algorithm sees all of it as an :class:`~simfl.outcome.Outcome`.
    """
    accepted = status == ARRIVED
    counts = np.bincount(status, minlength=4)  # statuses are 0..3 once a round is closed
    row: dict[str, Any] = {
        "round": round,
        "stage": stage,
        "t_start": t_start,
        "time": run.env.now,
        "status": "ok" if counts[ARRIVED] else "empty",
        "n_selected": plan.size,
        "n_arrived": int(counts[ARRIVED]),
        "n_dropped": int(counts[DROPPED]),
        "n_late": int(counts[LATE]),
        "n_cancelled": int(counts[CANCELLED]),
        "bytes_down": bytes_moved[0],
        "bytes_up": bytes_moved[1],
        "staleness_mean": 0.0 if counts[ARRIVED] else math.nan,
    }
    if counts[ARRIVED]:
        state = run.state
        outcome = Outcome(
            round=round,
            stage=stage,
            t_start=t_start,
            time=run.env.now,
            devices=plan.devices,
            status=status,
            job_start=np.broadcast_to(np.asarray(plan.t_start, dtype=np.float64), status.shape),
            job_end=t_end,
            staleness=np.where(accepted, 0.0, np.nan),
            repeats=repeats,
        )

        def compute() -> tuple[Any, Any]:
            alg = run.algorithm
            updates = run.updates(state, plan.devices, round, accepted)
            if repeats is not None and (repeats > 1).any():
                updates = updates.repeat(repeats[accepted])
            new = alg.background(alg.aggregate(state, updates, outcome), run.data, outcome)
            return new, updates

        run.apply(row, compute)
    run.end_aggregation(row)


def sync_server(run: RunContext, policy: SyncPolicy) -> Generator[Any, Any, None]:
    """The server process of stateless synchronous policies, one round per loop."""
    while run.stop_reason is None:
        yield from run.wait_online()
        if run.stopped:
            break
        r = run.round
        cohort = policy.select(run)
        yield from sync_round(
            run,
            cohort,
            quota=policy.quota(cohort.size),
            deadline=policy.deadline(r),
            stage=policy.stage(r),
        )
