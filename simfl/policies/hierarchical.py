"""Hierarchical aggregation: edge servers aggregate their devices before the cloud.

In the spirit of HierFAVG (Liu, Zhang, Song, Letaief, "Client-Edge-Cloud Hierarchical Federated
Learning", ICC 2020), with one edge aggregation per cloud round. Each round:

1. the cloud samples a cohort (uniformly, among online devices) and sends the model once to
   every edge server that has a selected device (over the edge's link to the cloud);
2. each edge serves its selected devices over their access links only (download, compute,
   upload to the edge);
3. an edge closes when all its devices have arrived or dropped, or at ``edge_deadline``
   (seconds after the round started; its running jobs are then ``late``), and sends ONE
   aggregate (the sum of its updates and their count: one update's bytes plus 8) to the cloud;
4. the cloud aggregates when every edge has reported, or at ``deadline`` (the devices behind an
   edge that has not reported in time are then ``late``).

Needs a :class:`~simfl.topology.Network` with edge servers (``Network.hierarchical`` or a graph).
The math is the algorithm's own ``aggregate`` over every device update that reached the cloud
through its edge: for algorithms that aggregate by a (weighted) mean, which all of simfl's do,
summing at the edges first gives exactly the same model; only the time and the bytes on the
edge-to-cloud links change (one transfer per edge instead of one per device). The ``rounds``
row's bytes include the edge transfers.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import simpy
from numpy.typing import NDArray

from simfl._checks import check_real
from simfl.jobs import ARRIVED, CANCELLED, DROPPED, LATE, RUNNING, concat_plans
from simfl.network import Network
from simfl.policies.base import Policy, check_sampling, cohort_size, sample_uniform
from simfl.rounds import close_aggregation

if TYPE_CHECKING:
    from simfl.engine import RunContext
    from simfl.jobs import JobPlan

__all__ = ["EdgeAggregation"]


@dataclass(frozen=True)
class EdgeAggregation(Policy):
    """Synchronous rounds aggregated at edge servers first (see the module docstring).

    Parameters
    ----------
    fraction, count
        Cohort size, as for :class:`~simfl.policies.WaitAll`.
    edge_deadline
        Seconds after the round starts at which an edge forwards what it has (> 0; ``None``:
        it waits for all its devices).
    deadline
        Seconds after the round starts at which the cloud aggregates what has reached it.
    """

    fraction: float | None = None
    count: int | None = None
    edge_deadline: float | None = None
    deadline: float | None = None

    name: ClassVar[str] = "edge-aggregation"

    def __post_init__(self) -> None:
        check_sampling("EdgeAggregation", self.fraction, self.count)
        for f in ("edge_deadline", "deadline"):
            value = getattr(self, f)
            if value is not None:
                check_real(f"EdgeAggregation.{f}", value, low=0.0, low_open=True)

    def check(self, n_devices: int) -> None:  # noqa: D102
        cohort_size("EdgeAggregation", self.fraction, self.count, n_devices)

    def check_network(self, network: Network | None) -> None:  # noqa: D102
        if network is None:
            raise ValueError(
                "Scenario.network must be given for EdgeAggregation (edge servers are part of "
                "the topology): use Network.hierarchical(...) or Network.from_graph(...)"
            )

    def serve(self, run: RunContext) -> Generator[Any, Any, None]:  # noqa: D102
        size = cohort_size("EdgeAggregation", self.fraction, self.count, run.fleet.size)
        while run.stop_reason is None:
            yield from run.wait_online()
            if run.stopped:
                break
            cohort = sample_uniform(run.round, run.online(), size, run.streams)
            yield from _EdgeRound(run, self, cohort).play()


class _EdgeRound:
    """One hierarchical round (state shared by its edge sub-processes)."""

    def __init__(self, run: RunContext, policy: EdgeAggregation, cohort: NDArray[np.int64]):
        self.run, self.policy, self.env = run, policy, run.env
        net = run.network
        assert net is not None
        self.net = net
        self.round = run.round
        self.t0 = run.env.now
        edge_of = net.topology.edge_of
        groups: dict[Any, list[int]] = {}
        for d in cohort:
            groups.setdefault(edge_of[int(d)], []).append(int(d))
        self.edges = {e: np.asarray(v, dtype=np.int64) for e, v in groups.items()}
        self.payload = run.algorithm.payload(run.state)
        self.plans: list[JobPlan] = []
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
        env, run, pol = self.env, self.run, self.policy
        procs: list[simpy.Process] = []
        status = np.full(devices.size, RUNNING, dtype=np.int8)
        try:
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

            procs = run.start_jobs(
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
                yield from self._edge_flow(int(devices[0]), "up", float(self.payload.up) + 8.0)
                self.reported.add(name)
        except simpy.Interrupt:  # the cloud closed (deadline) or the run ended
            self._stop(procs)

    @staticmethod
    def _stop(procs: list[simpy.Process]) -> None:
        for p in procs:
            if p.is_alive:
                p.interrupt("edge closed")

    def play(self) -> Generator[Any, Any, None]:
        env, run, pol = self.env, self.run, self.policy
        procs = [env.process(self.edge(e, d)) for e, d in self.edges.items()]

        def abandon() -> None:
            for p in procs:
                if p.is_alive:
                    p.interrupt("end of run")
            self._record(final=False)

        run.abandon = abandon
        waits: list[simpy.Event] = [simpy.AllOf(env, procs)]
        if pol.deadline is not None:
            waits.append(env.timeout(pol.deadline))
        yield simpy.AnyOf(env, waits)
        run.abandon = None
        for e, p in zip(self.edges, procs, strict=True):
            if p.is_alive:
                p.interrupt("cloud closed")  # its edge missed the cloud's deadline
                self.reported.discard(e)
        self._record(final=True)

    def _record(self, final: bool) -> None:
        run, env = self.run, self.env
        if not self.states:
            return
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
        b_down, b_up = run.record_jobs(plan, status, t_end, round=self.round, stage=0)
        if not final:
            return
        close_aggregation(
            run,
            plan,
            status,
            round=self.round,
            stage=0,
            t_start=self.t0,
            bytes_moved=(b_down + self.edge_bytes[0], b_up + self.edge_bytes[1]),
        )
