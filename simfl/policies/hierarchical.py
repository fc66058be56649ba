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

Needs a :class:`~simfl.network.Network` with edge servers (``Network.hierarchical`` or a graph).
The math is the algorithm's own ``aggregate`` over every device update that reached the cloud
through its edge: for algorithms that aggregate by a (weighted) mean, which all of simfl's do,
summing at the edges first gives exactly the same model; only the time and the bytes on the
edge-to-cloud links change (one transfer per edge instead of one per device). The ``rounds``
row's bytes include the edge transfers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from simfl._checks import check_real
from simfl.network import Network
from simfl.policies.base import (
    EdgePolicy,
    RoundPlan,
    View,
    check_sampling,
    cohort_size,
    sample_uniform,
)

__all__ = ["EdgeAggregation"]


@dataclass(frozen=True)
class EdgeAggregation(EdgePolicy[None]):
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
        if network.kind == "star":  # no edge servers: the edge rounds would time nothing
            raise ValueError(
                f"Scenario.network must have edge servers for EdgeAggregation, got {network!r} "
                f"(a star has none): use Network.hierarchical(...) or Network.from_graph(...)"
            )

    def plan(self, state: None, view: View) -> tuple[None, RoundPlan]:  # noqa: D102
        size = cohort_size("EdgeAggregation", self.fraction, self.count, view.n_devices)
        cohort = sample_uniform(view.round, view.online(), size, view.streams)
        return None, RoundPlan(cohort, deadline=self.deadline, edge_deadline=self.edge_deadline)
