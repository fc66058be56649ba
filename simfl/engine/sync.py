"""The synchronous loop: plan a round, play its jobs, close it, aggregate, tell the policy.

One loop serves every synchronous policy (:class:`~simfl.policies.SyncPolicy`): the policy
decides each round (:class:`~simfl.policies.RoundPlan`) and observes its outcome; the loop
does everything else. A round closes at the earliest of: ``quota`` arrivals; every job resolved
(arrived or dropped; the server notices a dropout when it happens, like a broken connection);
the deadline. Jobs still running then are recorded ``late`` if the deadline closed the round
and ``cancelled`` otherwise (over-selection), and their updates are never computed. The
algorithm then computes the arrived updates in one batched call and aggregates them, told the
round's :class:`~simfl.outcome.Outcome`.

How a round is played is chosen once per run: without job events where the playback is planned
(:func:`_batched_round`) or resolved (:func:`_resolved_round`: availability on private links),
in one loop of their own on shared links (:func:`_flow_round`), with one SimPy process per job
otherwise (:func:`_process_round`), or through edge servers for an
:class:`~simfl.policies.EdgePolicy` (:mod:`simfl.engine.edge`).
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy
from numpy.typing import NDArray

from simfl.engine.aggregation import close_aggregation
from simfl.engine.edge import EdgeRound
from simfl.engine.flows import FlowNetwork, play_flow_round
from simfl.engine.jobs import JobPlan, fit_work, resolution
from simfl.engine.offline import Resolution
from simfl.engine.playback import Live, Resolved, delay_below
from simfl.engine.playback import landing_delay as _delay_until
from simfl.outcome import ARRIVED, CANCELLED, DROPPED, LATE, RUNNING, Outcome
from simfl.policies.base import EdgePolicy, RoundPlan, SyncPolicy

if TYPE_CHECKING:
    from simfl.engine.context import RunContext

__all__ = ["RoundState", "SyncLoop", "abandon_round", "play_round", "start_round"]


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
        "resolution",
        "round",
        "schedule",
        "stage",
        "status",
        "t_end",
    )

    def __init__(
        self, env: simpy.Environment, plan: JobPlan, quota: int, round: int, stage: int
    ) -> None:
        self.env = env
        self.plan = plan
        self.quota = quota
        self.round = round
        self.stage = stage
        #: When each job resolves, whether it arrives, and the order they resolve in, for
        #: rounds played without job events (their jobs report nothing while they run).
        self.schedule: (
            tuple[NDArray[np.float64], NDArray[np.bool_], NDArray[np.int64] | None] | None
        )
        self.schedule = None
        #: The events of the jobs of a round played from a resolved playback, until it closes.
        self.resolution: Resolution | None = None
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


class SyncLoop:
    """The server loop of a synchronous policy (one per run)."""

    def __init__(self, ctx: RunContext, policy: SyncPolicy[Any]) -> None:
        self.ctx = ctx
        self.policy = policy
        #: The round in flight (``None`` between rounds).
        self.current: RoundState | None = None
        self.edge = isinstance(policy, EdgePolicy)
        self.edge_round: EdgeRound | None = None

    @property
    def in_flight(self) -> bool:
        """Whether a round is being played."""
        return self.current is not None or self.edge_round is not None

    def serve(self) -> Generator[Any, Any, None]:
        """The loop: wait for an online device, plan, play, aggregate, observe."""
        ctx, policy = self.ctx, self.policy
        view = ctx.view
        state = policy.start(view)
        while ctx.stop_reason is None:
            yield from ctx.wait_online()
            if ctx.stopped:
                break
            state, plan = policy.plan(state, view)
            if self.edge:
                outcome = yield from self._edge(plan)
            else:
                outcome = yield from self._flat(plan)
            state = policy.observe(state, outcome, view)

    def _flat(self, decision: RoundPlan) -> Generator[Any, Any, Outcome]:
        """Play one round whose devices talk to the server directly."""
        ctx = self.ctx
        r = ctx.round
        t0 = ctx.env.now
        rnd, repeats = start_round(ctx, decision, r, self.policy)
        self.current = rnd
        yield from play_round(ctx, rnd, decision.deadline, alone=True)
        self.current = None
        return close_aggregation(
            ctx,
            rnd.plan,
            rnd.status,
            rnd.t_end,
            round=r,
            stage=decision.stage,
            t_start=t0,
            repeats=repeats,
            partial=decision.partial,
        )

    def _edge(self, decision: RoundPlan) -> Generator[Any, Any, Outcome]:
        """Play one round through the edge servers."""
        self.edge_round = EdgeRound(self.ctx, decision)
        outcome = yield from self.edge_round.play()
        self.edge_round = None
        return outcome

    def abandon(self) -> None:
        """At the end of the run: record the round in flight, its jobs ``cancelled``."""
        if self.edge_round is not None:
            self.edge_round.abandon()
            self.edge_round = None
        rnd = self.current
        if rnd is None:
            return
        self.current = None
        abandon_round(self.ctx, rnd)


def abandon_round(ctx: RunContext, rnd: RoundState) -> None:
    """Record a round still in flight at the end of the run, its jobs ``cancelled``."""
    if rnd.schedule is not None:  # bring the event-free round's record up to now
        t_res, arrives, order = rnd.schedule
        if order is None:
            order = np.argsort(t_res, kind="stable")
        _settle(rnd, t_res, arrives, order, ctx.env.now)
    if rnd.resolution is not None:  # events at this very instant are not processed
        _apply(rnd, rnd.resolution, ctx.env.now, inclusive=False)
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


def play_round(
    ctx: RunContext, rnd: RoundState, deadline: float | None, *, alone: bool = False
) -> Generator[Any, Any, None]:
    """Play a round's jobs until it closes (event-free where the playback is planned).

    ``alone``: nothing else is in flight while the round plays (a flat synchronous round), so
    a resolved playback may play it without job events too.
    """
    if rnd.plan.size == 0:  # an empty cohort: the round closes at once, empty
        rnd.closed = True
    elif ctx.batched:
        yield from _batched_round(ctx, rnd, deadline)
    elif alone and ctx.resolved:
        yield from _resolved_round(ctx, rnd, deadline)
    elif alone and ctx.flow_rounds:
        yield from _flow_round(ctx, rnd, deadline)
    else:
        yield from _process_round(ctx, rnd, deadline)


def _process_round(
    ctx: RunContext, rnd: RoundState, deadline: float | None
) -> Generator[Any, Any, None]:
    """Play the round's jobs as SimPy processes until the round closes."""
    env, plan = ctx.env, rnd.plan
    rnd.procs = ctx.playback.start(plan, rnd.arrive, rnd.drop)
    if deadline is None:
        yield rnd.done
    else:
        yield rnd.done | env.timeout(deadline)
    rnd.close(LATE if not rnd.closed else CANCELLED)


def _flow_round(
    ctx: RunContext, rnd: RoundState, deadline: float | None
) -> Generator[Any, Any, None]:
    """The round on shared links, its jobs played in one loop of their own.

    :func:`~simfl.engine.flows.flowround.play_flow_round` plays the events of
    :func:`_process_round` (the same calls on the links, the same records) up to the instant
    the server would close the round; the server sleeps until then and closes it. A run
    ending first finds the round as the job processes would leave it.
    """
    playback, network = ctx.playback, ctx.network
    assert isinstance(playback, Live) and isinstance(network, FlowNetwork)
    t, closes = play_flow_round(rnd, network, playback.devices, deadline, ctx.scenario.max_time)
    yield from _sleep_until(ctx.env, t)
    if not closes:
        yield ctx.env.event()  # never triggered: the run ends (at max_time) before
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


def _batched_round(
    ctx: RunContext, rnd: RoundState, deadline: float | None
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
    env, plan = ctx.env, rnd.plan
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

    # if the run ends while the round is in flight, the loop settles it from this schedule
    rnd.schedule = (t_res, arrives, order)
    yield env.timeout(_delay_until(t0, t_close))
    if ctx.scenario.max_time is not None:
        # wake on an event created now, like the processes' "done" event, so that a run
        # ending at this very instant abandons the round as it would with job processes
        yield env.timeout(0.0)
    rnd.schedule = None
    rnd.status[:] = np.where(due, np.where(arrives, ARRIVED, DROPPED), LATE if late else CANCELLED)
    rnd.t_end[:] = np.where(due, t_res, t_close)
    rnd.closed = True


def _resolved_close(
    res: Resolution, quota: int, t0: float, deadline: float | None
) -> tuple[float, bool] | None:
    """When a resolved round closes and whether its deadline closes it (late jobs).

    ``None`` when events of several jobs coincide at the closing instant (besides the job
    closing it): the order SimPy processes them in then decides what is recorded, so the
    round is played with live job processes instead.
    """
    t_res, arrives = res.t_end, res.arrives
    closer = -1  # the job whose arrival closes the round (-1: every job resolved, or deadline)
    if quota >= t_res.size or quota > int(arrives.sum()):
        t_close = float(t_res.max())
    else:  # the quota-th arrival, jobs resolving at one instant in job order
        order = np.argsort(t_res, kind="stable")
        closer = int(order[int(np.flatnonzero(np.cumsum(arrives[order]) >= quota)[0])])
        t_close = float(t_res[closer])
    late = False
    if deadline is not None and t0 + deadline <= t_close:  # any event at it is a tie
        t_close, late, closer = t0 + deadline, True, -1
    elif closer < 0:
        return t_close, False  # every job resolved: the order they did so in changes nothing
    at = res.times == t_close
    if closer >= 0:
        at[closer] = False
    return None if at.any() else (t_close, late)


def _apply(rnd: RoundState, res: Resolution, t: float, inclusive: bool) -> None:
    """Bring ``rnd`` and its plan's record to what the live processes left at ``t``.

    ``inclusive``: the events at ``t`` itself were processed.
    """
    plan = rnd.plan
    spent, progress, active = res.state_at(t, inclusive)
    plan.spent[:] = spent
    plan.progress[:] = progress
    plan.active_since[:] = active
    due = np.flatnonzero(res.t_end <= t if inclusive else res.t_end < t)
    rnd.status[due] = np.where(res.arrives[due], ARRIVED, DROPPED)
    rnd.t_end[due] = res.t_end[due]


def _resolved_round(
    ctx: RunContext, rnd: RoundState, deadline: float | None
) -> Generator[Any, Any, None]:
    """The round without job events, its devices going on and off: resolved from the plan.

    Each job's events follow from its plan and its device's intervals
    (:func:`~simfl.engine.offline.resolve`); the server sleeps until the round closes and
    records exactly what :func:`_process_round` records with live job processes: where each
    stopped job stood, its pending event kept in the schedule. A round whose closing instant
    other jobs' events share is played with those processes.
    """
    env, plan = ctx.env, rnd.plan
    playback = ctx.playback
    assert isinstance(playback, Resolved)
    t0 = env.now
    res = playback.resolve(plan)
    close = _resolved_close(res, rnd.quota, t0, deadline)
    if close is None:
        yield from _process_round(ctx, rnd, deadline)
        return
    t_close, late = close
    rnd.resolution = res  # if the run ends while the round is in flight, it settles from it
    if math.isinf(t_close):  # jobs paused for ever: the last event happens, then nothing
        last = float(res.times[np.isfinite(res.times)].max())
        yield from _sleep_until(env, last)
        rnd.resolution = None
        _apply(rnd, res, last, inclusive=True)
        yield env.event()  # never triggered: the run ends (offline, or at max_time)
    yield from _sleep_until(env, t_close)
    if ctx.scenario.max_time is not None:
        yield env.timeout(0.0)  # as the processes' "round done" event (see _batched_round)
    rnd.resolution = None
    _apply(rnd, res, t_close, inclusive=True)
    stopped = np.flatnonzero(rnd.status == RUNNING)
    rnd.status[stopped] = LATE if late else CANCELLED
    rnd.t_end[stopped] = t_close
    rnd.closed = True
    if stopped.size:  # their pending timeouts stay in the schedule, as the processes' do
        pending = res.next_after(t_close)[stopped]
        pending = pending[np.isfinite(pending)]
        if pending.size:
            playback.leave(float(pending.max()))


def _sleep_until(env: simpy.Environment, t: float) -> Generator[Any, Any, None]:
    """Sleep until the clock is exactly ``t`` (in two steps where one cannot land on it)."""
    yield env.timeout(delay_below(env.now, t))
    if env.now < t:
        yield env.timeout(t - env.now)  # exact: now is within a few ulps of t
