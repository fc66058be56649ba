"""The synchronous loop: plan a round, play its jobs, close it, aggregate, tell the policy.

One loop serves every synchronous policy (:class:`~simfl.policies.SyncPolicy`): the policy
decides each round (:class:`~simfl.policies.RoundPlan`) and observes its outcome; the loop
does everything else. A round closes at the earliest of: ``quota`` arrivals; every job resolved
(arrived or dropped; the server notices a dropout when it happens, like a broken connection);
the deadline. Jobs still running then are recorded ``late`` if the deadline closed the round
and ``cancelled`` otherwise (over-selection), and their updates are never computed. The
algorithm then computes the arrived updates in one batched call and aggregates them, told the
round's :class:`~simfl.outcome.Outcome`. With server costs (:mod:`simfl.engine.server`) the
server's aggregation takes its time between the close and the record: the round's ``time`` is
the instant the new model is ready, and the next round starts then.

The run's playback plays each round's jobs (:meth:`Playback.round
<simfl.engine.playbacks.Playback.round>`, chosen once per run: :mod:`simfl.engine.playbacks`);
an :class:`~simfl.policies.EdgePolicy`'s rounds go through edge servers
(:mod:`simfl.engine.edge`).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from simfl.engine.aggregation import close_aggregation
from simfl.engine.edge import EdgeRound
from simfl.engine.rounds import RoundState, abandon_round, start_round
from simfl.outcome import Outcome
from simfl.policies.base import EdgePolicy, RoundPlan, SyncPolicy

if TYPE_CHECKING:
    from simfl.engine.context import RunContext
    from simfl.engine.playbacks import Playback

__all__ = ["SyncLoop"]


class SyncLoop:
    """The server loop of a synchronous policy (one per run)."""

    def __init__(self, ctx: RunContext, policy: SyncPolicy[Any], playback: Playback) -> None:
        self.ctx = ctx
        self.policy = policy
        self.playback = playback
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
        yield from self.playback.round(ctx, rnd, decision.deadline, alone=True)
        if ctx.server is not None:  # its aggregation: the round is in flight until it is done
            yield from ctx.server.aggregate(rnd.n_accepted)
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
