"""The one place a run's playback is chosen: the ordered table :data:`PLAYBACKS`.

:func:`choose` instantiates the first playback of :data:`PLAYBACKS` whose condition the run
meets (the last row always applies), on the run's job machinery
(:func:`~simfl.engine.players.build_jobs`). What each playback does is told in
:mod:`simfl.engine.playbacks.base`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING

from simfl.engine.flows import applies as flow_rounds_apply
from simfl.engine.playbacks.base import Playback
from simfl.engine.playbacks.flows import FlowsPlayback
from simfl.engine.playbacks.planned import PlannedPlayback, TimingPlayback
from simfl.engine.playbacks.reference import ReferencePlayback
from simfl.engine.playbacks.resolved import ResolvedPlayback
from simfl.engine.players import Jobs, LiveJobs, PlannedJobs
from simfl.policies.base import AsyncPolicy, EdgePolicy, SyncPolicy

if TYPE_CHECKING:
    from simfl.engine.context import RunContext

__all__ = ["PLAYBACKS", "Setting", "choose"]


class Setting:
    """What the choice of a playback reads of a run (each fact worked out when first asked).

    Parameters
    ----------
    ctx
        The run (its scenario, clock, availability, algorithm and policy view).
    jobs
        How its jobs unfold (:attr:`RunContext.jobs <simfl.engine.context.RunContext.jobs>`).
    batched
        ``simfl.run(..., batched=)``: ``False`` asks for the reference.
    """

    def __init__(self, ctx: RunContext, jobs: Jobs, *, batched: bool) -> None:
        self.ctx = ctx
        self.jobs = jobs
        self.batched = batched

    @cached_property
    def planned(self) -> bool:
        """Private links, devices always online: every job's fate follows from its plan."""
        return isinstance(self.jobs, PlannedJobs)

    @cached_property
    def private(self) -> bool:
        """Every device on links of its own (no ``Scenario.network``)."""
        return self.jobs.network is None

    @cached_property
    def flat(self) -> bool:
        """A synchronous policy whose devices talk to the server directly (not through edges)."""
        policy = self.ctx.scenario.policy
        return isinstance(policy, SyncPolicy) and not isinstance(policy, EdgePolicy)

    @cached_property
    def asynchronous(self) -> bool:
        """An asynchronous policy."""
        return isinstance(self.ctx.scenario.policy, AsyncPolicy)

    @cached_property
    def predrawn(self) -> bool:
        """An asynchronous policy whose picks can be drawn ahead and that learns nothing.

        Its picks come from :meth:`~simfl.policies.AsyncPolicy.first_picks`; a policy that
        overrides :meth:`~simfl.policies.AsyncPolicy.start` or
        :meth:`~simfl.policies.AsyncPolicy.observe` may pick from what it observed, which
        picks drawn a block ahead cannot follow.
        """
        policy = self.ctx.scenario.policy
        if not isinstance(policy, AsyncPolicy):
            return False
        cls = type(policy)
        return (
            cls.start is AsyncPolicy.start
            and cls.observe is AsyncPolicy.observe
            and policy.first_picks(self.ctx.view, 0, 0) is not None
        )

    @cached_property
    def computes_nothing(self) -> bool:
        """An inert algorithm with fixed jobs, no task metrics, a lazy run: pure timing."""
        ctx = self.ctx
        alg = type(ctx.algorithm)
        return alg.inert and alg.fixed_jobs and ctx.lazy and not ctx.metrics

    @cached_property
    def server_free(self) -> bool:
        """The server takes no time (no ``Scenario.server``, or one whose costs are all zero).

        Server costs (:mod:`simfl.engine.server`) come between a job's stages and delay the
        next round or model version; only job processes play them.
        """
        return self.ctx.server is None

    @cached_property
    def flows_fit(self) -> bool:
        """Fast shared links on a star or a hierarchy that flow rounds can play."""
        jobs, network = self.jobs, self.ctx.scenario.network
        return (
            isinstance(jobs, LiveJobs)
            and network is not None
            and jobs.devices is not None
            and flow_rounds_apply(network.kind, jobs.network, jobs.devices)
        )


#: The playbacks, in the order they are tried: (class, condition, description). The first
#: whose condition holds plays the run; the last holds always.
PLAYBACKS: tuple[tuple[type[Playback], Callable[[Setting], bool], str], ...] = (
    (
        TimingPlayback,
        lambda s: (
            s.batched
            and s.server_free
            and s.planned
            and s.asynchronous
            and s.predrawn
            and s.computes_nothing
        ),
        "private links, always online, a free server, an asynchronous policy drawing its "
        "picks ahead, nothing computed: plain numbers",
    ),
    (
        PlannedPlayback,
        lambda s: s.batched and s.server_free and s.planned and (not s.asynchronous or s.predrawn),
        "private links, always online, a free server: rounds in one vectorised step, "
        "asynchronous jobs from a heap",
    ),
    (
        ResolvedPlayback,
        lambda s: s.batched and s.server_free and s.private and not s.planned and s.flat,
        "availability on private links, a free server, flat synchronous rounds: resolved "
        "from the plans",
    ),
    (
        FlowsPlayback,
        lambda s: s.batched and s.server_free and s.flat and s.flows_fit,
        "flat synchronous rounds on a star or hierarchy of fast links, a free server: one "
        "loop per round",
    ),
    (
        ReferencePlayback,
        lambda s: True,
        "every job a SimPy process (simfl.run(..., batched=False), every run with server "
        "costs, and what nothing faster plays)",
    ),
)


def choose(ctx: RunContext, *, batched: bool = True) -> Playback:
    """The playback of the run ``ctx``: the first row of :data:`PLAYBACKS` that applies.

    ``batched=False`` (``simfl.run(..., batched=False)``) asks for the reference.
    """
    setting = Setting(ctx, ctx.jobs, batched=batched)
    for cls, condition, _ in PLAYBACKS:
        if condition(setting):
            return cls(setting.jobs)
    raise AssertionError("the last playback always applies")  # pragma: no cover
