"""How a run is played: one playback per run, chosen once from one ordered table.

A run's data flow is the same whatever plays it. The server loop of the policy's family
(:mod:`simfl.engine.sync`, :mod:`simfl.engine.tiered`, :mod:`simfl.engine.asynchronous`)
decides who takes part and when; :func:`~simfl.engine.jobs.plan_jobs` plans each device job
(download, compute, upload, failure clock) from keyed draws; the playback plays the planned
jobs out in simulated time until the server closes the round (synchronous rounds,
:meth:`Playback.round`) or handles each ending job (:meth:`Playback.async_loop`); the loop
then records the jobs (:meth:`Playback.split` says what each spent and moved), computes the
arrived updates in one batched call and aggregates them. Every playback records the same
frames, bit for bit (``tests/test_playback_equivalence.py``); they differ only in how fast
they get there.

:func:`~simfl.engine.playbacks.choose.choose` picks the first row of
:data:`~simfl.engine.playbacks.choose.PLAYBACKS` whose condition the run meets; the name is
kept in ``Results.meta["playback"]``. In that order:

``planned-timing``
    Private links, devices always online, an asynchronous policy that draws its picks ahead
    and learns nothing while the run goes on, and nothing computed (an inert algorithm with
    fixed jobs, no task metrics, a lazy run): the schedule is pure timing, played as columns
    of plain numbers (:mod:`simfl.engine.async_timing`).
``planned``
    Private links, devices always online (and an asynchronous policy, if any, that draws its
    picks ahead): nothing touches a job once it starts, so its fate follows from its plan.
    A synchronous round's outcome is one vectorised step; asynchronous jobs are handled from
    a heap of the instants they resolve (:mod:`simfl.engine.async_planned`).
``resolved``
    On/off availability on private links, flat synchronous rounds: each job's history
    follows from its plan and its device's on-intervals (:mod:`simfl.engine.offline`). A
    round whose closing instant other jobs' events share is handed to the reference, which
    ``meta["playback_fallbacks"]`` counts (the order SimPy processes tied events in decides
    what is recorded).
``flows``
    Flat synchronous rounds on a star or hierarchical network of fast links, devices always
    online: a round's jobs are played in one loop of their own, without SimPy processes
    (:mod:`simfl.engine.flows.flowround`).
``reference``
    Everything else, and every run with ``simfl.run(..., batched=False)``: every job a SimPy
    process (:mod:`simfl.engine.players`): one timeout on private links with
    devices always online, stage by stage where devices go on and off or share links.
    The straightforward path the others are tested against. A run whose server has costs
    (``Scenario(server=...)``, :mod:`simfl.engine.server`) is played here whatever else it
    has: the other playbacks need a server that takes no time.

Shared links may hand their flows over to the reference algorithm mid-run (a flow pattern
their fast algorithm does not fit); a network that says so adds its reason to
``meta["playback_fallbacks"]`` too.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np
import simpy
from numpy.typing import NDArray

from simfl.engine.asynchronous import AsyncLoop
from simfl.engine.jobs import JobPlan
from simfl.engine.players import Callback, Jobs, Split
from simfl.outcome import CANCELLED, LATE
from simfl.policies.base import AsyncPolicy

if TYPE_CHECKING:
    from simfl.engine.context import RunContext
    from simfl.engine.rounds import RoundState

__all__ = ["Playback", "ServerLoop"]


class ServerLoop(Protocol):
    """What the engine asks of a server loop."""

    @property
    def in_flight(self) -> bool:
        """Whether work is in flight (the run ending now records it)."""

    def serve(self) -> Generator[Any, Any, None]:
        """The server's SimPy process."""

    def abandon(self) -> None:
        """At the end of the run: record what is in flight."""


class Playback:
    """How the jobs of a run are played (one instance per run; see the module docstring).

    Parameters
    ----------
    jobs
        How one job unfolds (:class:`~simfl.engine.players.PlannedJobs` or
        :class:`~simfl.engine.players.LiveJobs`).
    """

    #: The name kept in ``Results.meta["playback"]``.
    name: ClassVar[str]

    def __init__(self, jobs: Jobs) -> None:
        self.jobs = jobs
        self.env = jobs.env
        #: (latency, down, up bandwidth) of each device's path, or ``None`` for private links
        self.links = jobs.links
        #: the shared links, or ``None``
        self.network = jobs.network
        self._fallbacks: dict[str, int] = {}

    def start(
        self, plan: JobPlan, on_arrive: Callback, on_drop: Callback, *, local: bool = False
    ) -> list[simpy.Process]:
        """Start the SimPy process of every job of ``plan`` (``local``: to its edge server)."""
        return self.jobs.start(plan, on_arrive, on_drop, local=local)

    def split(self, plan: JobPlan, status: NDArray[np.int8], t_end: NDArray[np.float64]) -> Split:
        """Seconds per stage and bytes moved by every job of ``plan`` (all of them ended)."""
        return self.jobs.split(plan, status, t_end)

    def round(
        self, ctx: RunContext, rnd: RoundState, deadline: float | None, *, alone: bool = False
    ) -> Generator[Any, Any, None]:
        """Play a synchronous round's jobs until it closes (see :mod:`simfl.engine.rounds`).

        ``alone``: nothing else is in flight while the round plays (a flat synchronous
        round). An empty cohort closes at once.
        """
        if rnd.plan.size == 0:
            rnd.closed = True
            return
        yield from self._round(ctx, rnd, deadline, alone)

    def _round(
        self, ctx: RunContext, rnd: RoundState, deadline: float | None, alone: bool
    ) -> Generator[Any, Any, None]:
        """:meth:`round` for a cohort that is not empty (the reference: job processes)."""
        yield from self.processes(ctx, rnd, deadline)

    def processes(
        self, ctx: RunContext, rnd: RoundState, deadline: float | None
    ) -> Generator[Any, Any, None]:
        """Play the round's jobs as SimPy processes until the round closes (the reference)."""
        env = ctx.env
        rnd.procs = self.start(rnd.plan, rnd.arrive, rnd.drop)
        if deadline is None:
            yield rnd.done
        else:
            yield rnd.done | env.timeout(deadline)
        rnd.close(LATE if not rnd.closed else CANCELLED)

    def async_loop(self, ctx: RunContext, policy: AsyncPolicy[Any]) -> ServerLoop:
        """The server loop of an asynchronous run (the reference: a process per job)."""
        return AsyncLoop(ctx, policy)

    def fell_back(self, reason: str) -> None:
        """Count a round handed to the reference mid-way, for ``reason``."""
        self._fallbacks[reason] = self._fallbacks.get(reason, 0) + 1

    def fallbacks(self) -> dict[str, int]:
        """``meta["playback_fallbacks"]``: reason -> rounds or runs handed to the reference.

        The shared network's own hand-over of its flows to the reference algorithm counts
        once, under the reason the network gives (:attr:`~simfl.engine.flows.Links.handover`).
        """
        out = dict(self._fallbacks)
        reason = None if self.network is None else self.network.handover
        if reason is not None:
            out[reason] = out.get(reason, 0) + 1
        return out
