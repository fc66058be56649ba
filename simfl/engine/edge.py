"""Edge rounds: edge servers aggregate their devices before the cloud (the engine's part).

The policy (:class:`~simfl.policies.EdgeAggregation`) decides the cohort and the deadlines; this
module plays the round through the network: the cloud sends the model once to every edge server
that has a selected device, each edge serves its devices over their access links, closes when
they have all arrived or dropped or at the edge deadline, and forwards ONE aggregate to the
cloud, which aggregates when every edge has reported or at its deadline. See
:mod:`simfl.policies.hierarchical` for the model and its citation.

With server costs (:mod:`simfl.engine.server`) they are the cloud's: it handles the model it
sends to each edge server before that transfer and each edge's aggregate once received (the
edge's report counts then), and aggregates one update per edge server that reported; the edge
servers' own work takes no time.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy
from numpy.typing import NDArray

from simfl.engine.aggregation import close_aggregation
from simfl.engine.jobs import JobPlan, concat_plans
from simfl.outcome import ARRIVED, CANCELLED, DROPPED, LATE, RUNNING, Outcome
from simfl.policies.base import RoundPlan

if TYPE_CHECKING:
    from simfl.engine.context import RunContext

__all__ = ["EdgeRound"]


class EdgeRound:
    """One hierarchical round (state shared by its edge sub-processes)."""

    def __init__(self, ctx: RunContext, decision: RoundPlan) -> None:
        self.run, self.env = ctx, ctx.env
        self.decision = decision
        cohort = decision.cohort
        net = ctx.jobs.network
        if net is None:  # Scenario refuses this; a hand-built context could still get here
            raise ValueError("edge rounds need a Scenario.network with edge servers")
        self.net = net
        self.round = ctx.round
        self.t0 = ctx.env.now
        self.procs: list[simpy.Process] = []
        edge_of = net.topology.edge_of
        groups: dict[Any, list[int]] = {}
        for d in cohort:
            groups.setdefault(edge_of[int(d)], []).append(int(d))
        self.edges = {e: np.asarray(v, dtype=np.int64) for e, v in groups.items()}
        self.payload = ctx.algorithm.payload(ctx.state)
        self.states: list[tuple[JobPlan, NDArray[np.int8], NDArray[np.float64]]] = []
        self.reported: set[Any] = set()
        self.edge_bytes = [0.0, 0.0]

    def _edge_flow(self, device: int, direction: str, size: float) -> Generator[Any, Any, None]:
        """One transfer between an edge server and the cloud (latency, then the flow)."""
        res = self.net.upper_resources(device, direction)
        links = res // 2
        latency = float(self.net.topology.latency[links].sum())
        if latency > 0:
            yield self.env.timeout(latency)
        flow = self.net.start_on(res, size)
        try:
            yield flow.done
        finally:
            # bytes moved count even if the cloud closed first
            self.edge_bytes[0 if direction == "down" else 1] += self.net.stop(flow)

    def edge(self, name: Any, devices: NDArray[np.int64]) -> Generator[Any, Any, None]:
        """An edge server: fetch the model, serve its devices, forward their aggregate."""
        env, run, pol = self.env, self.run, self.decision
        procs: list[simpy.Process] = []
        status = np.full(devices.size, RUNNING, dtype=np.int8)
        server = run.server  # the cloud's own costs (none: None)
        try:
            if server is not None:
                yield from server.send(float(self.payload.down))
            yield from self._edge_flow(int(devices[0]), "down", float(self.payload.down))
            plan = run.plan(devices, key=self.round, stage=0)
            t_end = np.full(devices.size, math.nan)
            done = env.event()
            left = [devices.size]

            def resolve(j: int, st: int) -> None:
                if status[j] != RUNNING:
                    return
                status[j], t_end[j] = st, env.now
                left[0] -= 1
                if left[0] == 0 and not done.triggered:
                    done.succeed()

            procs = run.jobs.start(
                plan, lambda j: resolve(j, ARRIVED), lambda j: resolve(j, DROPPED), local=True
            )
            self.states.append((plan, status, t_end))
            waits = [done]
            if pol.edge_deadline is not None:
                waits.append(env.timeout(max(self.t0 + pol.edge_deadline - env.now, 0.0)))
            yield simpy.AnyOf(env, waits)
            running = np.flatnonzero(status == RUNNING)
            status[running], t_end[running] = LATE, env.now
            self._stop(procs)
            if (status == ARRIVED).any():
                size = float(self.payload.up) + 8.0
                yield from self._edge_flow(int(devices[0]), "up", size)
                if server is not None:
                    yield from server.receive(size)
                self.reported.add(name)
        except simpy.Interrupt:  # the cloud closed (deadline) or the run ended
            self._stop(procs)

    @staticmethod
    def _stop(procs: list[simpy.Process]) -> None:
        for p in procs:
            if p.is_alive:
                p.interrupt("edge closed")

    def abandon(self) -> None:
        """The run ends while this round is in flight: its jobs are recorded ``cancelled``."""
        for p in self.procs:
            if p.is_alive:
                p.interrupt("end of run")
        self._record(final=False)

    def play(self) -> Generator[Any, Any, Outcome]:
        """Run the round's edges until the cloud aggregates; return the outcome."""
        env, pol = self.env, self.decision
        procs = [env.process(self.edge(e, d)) for e, d in self.edges.items()]
        self.procs = procs
        waits: list[simpy.Event] = [simpy.AllOf(env, procs)]
        if pol.deadline is not None:
            waits.append(env.timeout(pol.deadline))
        yield simpy.AnyOf(env, waits)
        for e, p in zip(self.edges, procs, strict=True):
            if p.is_alive:
                p.interrupt("cloud closed")  # its edge missed the cloud's deadline
                self.reported.discard(e)
        self.procs = []
        if self.run.server is not None:  # one update per edge server that reported
            yield from self.run.server.aggregate(len(self.reported))
        outcome = self._record(final=True)
        assert outcome is not None
        return outcome

    def _record(self, final: bool) -> Outcome | None:
        run, env = self.run, self.env
        if not self.states:
            if not final:
                return None
            empty = np.zeros(0, dtype=np.int64)
            return close_aggregation(
                run,
                concat_plans([run.plan(empty, key=self.round, stage=0)]),
                np.zeros(0, dtype=np.int8),
                np.zeros(0),
                round=self.round,
                stage=0,
                t_start=self.t0,
                extra_bytes=(self.edge_bytes[0], self.edge_bytes[1]),
            )
        plan = concat_plans([p for p, _, _ in self.states])
        status = np.concatenate([s for _, s, _ in self.states])
        t_end = np.concatenate([t for _, _, t in self.states])
        edge_of = self.net.topology.edge_of
        reached = np.array([edge_of[int(d)] in self.reported for d in plan.devices])
        status = status.copy()
        t_end = t_end.copy()
        running = status == RUNNING
        status[running] = CANCELLED if not final else LATE
        t_end[running] = env.now
        late_edge = (status == ARRIVED) & ~reached
        status[late_edge] = LATE if final else CANCELLED
        if not final:
            run.record_jobs(plan, status, t_end, round=self.round, stage=0)
            return None
        return close_aggregation(
            run,
            plan,
            status,
            t_end,
            round=self.round,
            stage=0,
            t_start=self.t0,
            extra_bytes=(self.edge_bytes[0], self.edge_bytes[1]),
        )
