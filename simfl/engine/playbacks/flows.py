"""The flows playback: flat rounds on a star or hierarchical network (see :mod:`.base`)."""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from simfl.engine.clock import sleep_until
from simfl.engine.flows import FlowNetwork, play_flow_round
from simfl.engine.playbacks.base import Playback
from simfl.engine.players import LiveJobs
from simfl.outcome import CANCELLED, LATE

if TYPE_CHECKING:
    from simfl.engine.context import RunContext
    from simfl.engine.rounds import RoundState

__all__ = ["FlowsPlayback"]


class FlowsPlayback(Playback):
    """Flat rounds on shared fast links, their jobs played in one loop of their own."""

    name = "flows"

    def __init__(self, jobs: LiveJobs) -> None:
        super().__init__(jobs)
        if not isinstance(jobs.network, FlowNetwork) or jobs.devices is None:
            raise ValueError("the flows playback needs the fast shared links")
        self.flow_network = jobs.network
        self.devices = jobs.devices

    def _round(
        self, ctx: RunContext, rnd: RoundState, deadline: float | None, alone: bool
    ) -> Generator[Any, Any, None]:
        """The round on shared links, its jobs played in one loop of their own.

        :func:`~simfl.engine.flows.flowround.play_flow_round` plays the events of the job
        processes (the same calls on the links, the same records) up to the instant the
        server would close the round; the server sleeps until then and closes it. A run
        ending first finds the round as the job processes would leave it. A round not played
        alone is played with those processes.
        """
        if not alone:
            yield from self.processes(ctx, rnd, deadline)
            return
        t, closes = play_flow_round(
            rnd, self.flow_network, self.devices, deadline, ctx.scenario.max_time
        )
        yield from sleep_until(ctx.env, t)
        if not closes:
            yield ctx.env.event()  # never triggered: the run ends (at max_time) before
        rnd.close(LATE if not rnd.closed else CANCELLED)
