"""The semi-asynchronous loop: synchronous rounds within groups, asynchronous across them.

One SimPy process per group of a :class:`~simfl.policies.TieredPolicy` plays that group's
rounds one after another, each from the server's model of the moment (its version is the
round's key: the jobs' speed draws, dropouts and data are keyed by it, as in a synchronous
round). A round plays exactly as a synchronous one (:meth:`Playback.round
<simfl.engine.playbacks.Playback.round>`). When it closes, the algorithm aggregates the group's
arrived updates on the state the round started from; that is the group's model. The server's
state becomes the policy's mix of the latest model of every group
(:class:`~simfl.algorithms.mixing.GroupMix`, through ``shared`` / ``with_shared``). Each group
round is one aggregation: a ``rounds`` row whose ``stage`` is the group; its jobs are recorded
with the version they started from as their ``round`` and the versions created meanwhile as
their ``staleness``.

With server costs (:mod:`simfl.engine.server`) the server aggregates one group's round at a
time, each after its round closes; the group's next round, and every group's view of the new
model, start when it is done (the round's ``time``).

A group with nobody online waits until a device comes online, and retires if none ever will
(or, without an availability, at once). The run stops when a stop rule fires in any group's
aggregation; the other groups' rounds in flight are then recorded ``cancelled``.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import simpy

from simfl.algorithms.base import Updates
from simfl.engine.aggregation import close_aggregation
from simfl.engine.rounds import RoundState, abandon_round, start_round
from simfl.outcome import Outcome
from simfl.policies.base import TieredPolicy

if TYPE_CHECKING:
    from simfl.algorithms.mixing import Shared
    from simfl.engine.context import RunContext
    from simfl.engine.playbacks import Playback

__all__ = ["TieredLoop"]


class TieredLoop:
    """The server loop of a semi-asynchronous policy (one per run)."""

    def __init__(self, ctx: RunContext, policy: TieredPolicy[Any], playback: Playback) -> None:
        self.ctx = ctx
        self.policy = policy
        self.playback = playback
        self.state: Any = None
        #: Each group's latest model (the algorithm's shared parameters).
        self.models: list[Shared] = []
        #: Each group's round in flight.
        self.current: dict[int, RoundState] = {}
        self.stopped = ctx.env.event()

    @property
    def in_flight(self) -> bool:
        """Whether some group's round is being played."""
        return bool(self.current)

    def serve(self) -> Generator[Any, Any, None]:
        """Start every group's process; end when the run stops or every group has retired."""
        ctx, policy = self.ctx, self.policy
        self.state = policy.start(ctx.view)
        n = policy.groups(self.state)
        self.models = [ctx.algorithm.shared(ctx.state)] * n
        groups = [ctx.env.process(self._group(g)) for g in range(n)]
        yield simpy.AnyOf(ctx.env, [self.stopped, simpy.AllOf(ctx.env, groups)])
        if not ctx.stopped:  # every group retired: nobody will ever be online again
            ctx.stop("offline")

    def _group(self, g: int) -> Generator[Any, Any, None]:
        """The rounds of group ``g``, one after another."""
        ctx, policy = self.ctx, self.policy
        env = ctx.env
        while not self._stopping():
            self.state, decision = policy.plan(self.state, ctx.view, g)
            if decision.cohort.size == 0:  # nobody of the group online
                cursor = ctx.cursor
                at = math.inf if cursor is None else cursor.next_arrival(env.now)
                if math.isinf(at):
                    return  # nobody of the group will ever be online: the group retires
                yield env.timeout(at - env.now)
                continue
            version, base = ctx.round, ctx.state
            t0 = env.now
            rnd, repeats = start_round(ctx, decision, version, policy)
            self.current[g] = rnd
            yield from self.playback.round(ctx, rnd, decision.deadline)
            if ctx.server is not None and not self._stopping():  # its aggregation, in flight
                yield from ctx.server.aggregate(rnd.n_accepted)
            del self.current[g]
            if self._stopping():  # another group stopped the run meanwhile
                return
            models: list[Shared] = []

            def combine(
                aggregated: Any,
                outcome: Outcome,
                updates: Updates,
                g: int = g,
                models: list[Shared] = models,
            ) -> Any:
                alg = ctx.algorithm
                models[:] = self.models
                models[g] = alg.shared(aggregated)
                mixed = policy.mixer(self.state, g).apply(models)
                return alg.with_shared(alg.keep_local(ctx.state, updates), mixed)

            outcome = close_aggregation(
                ctx,
                rnd.plan,
                rnd.status,
                rnd.t_end,
                round=ctx.round,
                stage=g,
                t_start=t0,
                repeats=repeats,
                partial=decision.partial,
                base=(base, version),
                combine=combine,
            )
            if models and ctx.recorder.last_round("status") == "ok":
                self.models = models
            self.state = policy.observe(self.state, outcome, ctx.view, g)
            if self._stopping() and not self.stopped.triggered:
                self.stopped.succeed()

    def _stopping(self) -> bool:
        """Whether a stop rule has fired."""
        return self.ctx.stop_reason is not None

    def abandon(self) -> None:
        """At the end of the run: record every group's round in flight, its jobs cancelled."""
        for g in sorted(self.current):
            abandon_round(self.ctx, self.current[g])
        self.current.clear()
