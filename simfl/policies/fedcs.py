"""FedCS: as many clients as can finish before the deadline, chosen greedily.

Nishio and Yonetani, "Client Selection for Federated Learning with Heterogeneous Resources in
Mobile Edge", ICC 2019 (Protocol 2 and Algorithm 2). Each round the server asks a random
fraction ``C`` of the clients for their resource information (*Resource Request*), estimates
each one's download, update (compute) and upload times ``t_D``, ``t_UD``, ``t_UL``, and
selects greedily (*Client Selection*): with the uploads scheduled one after another, starting
from ``S`` empty and ``Theta = 0``, it repeatedly takes the candidate ``k`` that adds the
least time,

    (T_D(S + k) - T_D(S)) + t_UL(k) + max(0, t_UD(k) - Theta),

where ``T_D(S)`` is the distribution time of ``S`` (the slowest download among it) and
``Theta`` the time the scheduled updates and uploads have taken since the distribution ended;
it keeps ``k`` (``Theta += t_UL(k) + max(0, t_UD(k) - Theta)``) if the estimated round time
``T_D(S + k) + Theta`` stays within the deadline ``T_round``. The round then runs with that
deadline; late updates are discarded.

Options, each a parameter:

* ``uploads="sequential"``: the paper's scheduled uplink, as above. ``"parallel"``: simfl's
  private links, on which uploads do not queue: a candidate fits when its own ``t_D + t_UD +
  t_UL`` is within the deadline, and the greedy order is by that time.
* ``estimate="reported"`` (the paper): the times each candidate reports about its own
  resources (:meth:`~simfl.policies.View.expected_times`, expected values from its profile).
  ``"observed"``: what the server saw of the candidate's past jobs. Under a deadline only
  its fast draws arrive, so the mean of its arrived durations would flatter a slow device;
  the estimate is instead the time its arrived, late and cancelled jobs ran, plus its reported
  time counted as one arrived job, per arrival
  (:meth:`~simfl.policies.observed.Observations.time_on_test`: the maximum-likelihood mean
  of censored exponential durations, shrunk to the report). A duration cannot be split into
  its steps, so it counts as download and update together, from the round's start, with the
  reported upload time taken from it (``t_D = 0``, ``t_UD = duration - t_UL``). A candidate
  none of whose jobs arrived or was stopped is asked, as with ``"reported"``. Dropped jobs
  say nothing about speed and are left out. A device estimated too slow is not selected
  again, so its estimate stays as it is.
  ``"oracle"``: the exact planned duration of the job the candidate would run in this round
  (:meth:`~simfl.policies.View.durations`, a simulation-only oracle), split the same way.
* ``max_count``: select at most this many clients.

Departures from the paper: the times of the protocol's own steps (``T_cs`` for the selection,
``T_agg`` for the aggregation) are zero, as simfl does not model them, and a client fits when
its estimate is at most the deadline (simfl counts an update arriving exactly at the deadline
as in time; the paper requires less than ``T_round``). The greedy stops at the first candidate
that does not fit: the one adding the least time not fitting, none of the others can. If no
candidate fits, the one with the least estimated time runs alone under the deadline (its
update counts if it arrives in time): an empty round would take no simulated time, and a run
whose clock cannot advance is stopped as stalled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from simfl._checks import check_choice, check_int, check_real
from simfl.outcome import Outcome
from simfl.policies.base import RoundPlan, SyncPolicy, View, sample_uniform
from simfl.policies.observed import Observations

__all__ = ["FedCS", "greedy_parallel", "greedy_sequential"]

Times = tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]


@dataclass(frozen=True)
class FedCS(SyncPolicy[Observations]):
    """Greedy client selection under a deadline (see the module docstring).

    Parameters
    ----------
    seconds
        The round deadline ``T_round`` in simulated seconds (> 0).
    fraction
        Share ``C`` of the online devices asked for their resources each round, in (0, 1]:
        ``max(floor(C * online), 1)`` of them, drawn uniformly.
    uploads
        ``"sequential"`` (the paper's scheduled uploads) or ``"parallel"`` (private links).
    estimate
        ``"reported"``, ``"observed"`` or ``"oracle"``: where the times come from.
    max_count
        Most clients selected per round (>= 1; ``None``: no limit).
    """

    seconds: float
    fraction: float = 0.1
    uploads: str = "sequential"
    estimate: str = "reported"
    max_count: int | None = None

    name: ClassVar[str] = "fedcs"

    def __post_init__(self) -> None:
        check_real("FedCS.seconds", self.seconds, low=0.0, low_open=True)
        check_real("FedCS.fraction", self.fraction, low=0.0, high=1.0, low_open=True)
        check_choice("FedCS.uploads", self.uploads, ("sequential", "parallel"))
        check_choice("FedCS.estimate", self.estimate, ("reported", "observed", "oracle"))
        if self.max_count is not None:
            check_int("FedCS.max_count", self.max_count, low=1)

    def start(self, view: View) -> Observations:
        """Nothing observed yet."""
        return Observations.empty(view.n_devices)

    def plan(self, state: Observations, view: View) -> tuple[Observations, RoundPlan]:  # noqa: D102
        online = view.online()
        asked = max(math.floor(self.fraction * online.size + 1e-9), 1)
        candidates = sample_uniform(view.round, online, asked, view.streams)
        times = self.times(candidates, state, view)
        limit = candidates.size if self.max_count is None else self.max_count
        if self.uploads == "sequential":
            chosen = greedy_sequential(*times, self.seconds, limit)
        else:
            chosen = greedy_parallel(*times, self.seconds, limit)
        if not chosen.size:  # nobody fits: the fastest alone, so that the round takes time
            chosen = np.argsort(sum(times), kind="stable")[:1]
        return state, RoundPlan(np.sort(candidates[chosen]), deadline=self.seconds)

    def observe(self, state: Observations, outcome: Outcome, view: View) -> Observations:
        """Record the round's job durations (arrivals) and lower bounds (the others)."""
        return state.seen(outcome)

    def times(self, devices: NDArray[np.int64], state: Observations, view: View) -> Times:
        """Estimated ``(t_D, t_UD, t_UL)`` of each of ``devices`` (see ``estimate``)."""
        down, compute, up = view.expected_times(devices)
        if self.estimate == "reported":
            return down, compute, up
        if self.estimate == "oracle":
            total = view.durations(devices, stage=0)
            return np.zeros(devices.size), np.maximum(total - up, 0.0), up
        seen = (state.count[devices] > 0) | (state.censored[devices] > 0)
        total = state.time_on_test(devices, down + compute + up)
        return (
            np.where(seen, 0.0, down),
            np.where(seen, np.maximum(total - up, 0.0), compute),
            up,
        )


def greedy_sequential(
    down: NDArray[np.float64],
    compute: NDArray[np.float64],
    up: NDArray[np.float64],
    deadline: float,
    limit: int,
) -> NDArray[np.int64]:
    """The paper's greedy selection with scheduled (one-at-a-time) uploads.

    Returns the indices of the selected candidates, in the order they were taken.
    """
    remaining = np.arange(down.size)
    chosen: list[int] = []
    theta = 0.0
    distribution = 0.0
    while remaining.size and len(chosen) < limit:
        t_dist = np.maximum(distribution, down[remaining])
        added = up[remaining] + np.maximum(compute[remaining] - theta, 0.0)
        finish = t_dist + theta + added
        best = int(np.argmin(finish))  # the least added time (ties: the lowest index)
        if not finish[best] <= deadline:
            break
        chosen.append(int(remaining[best]))
        theta += float(added[best])
        distribution = float(t_dist[best])
        remaining = np.delete(remaining, best)
    return np.array(chosen, dtype=np.int64)


def greedy_parallel(
    down: NDArray[np.float64],
    compute: NDArray[np.float64],
    up: NDArray[np.float64],
    deadline: float,
    limit: int,
) -> NDArray[np.int64]:
    """Greedy selection on private links: fastest first, each within the deadline alone.

    Returns the indices of the selected candidates, fastest first.
    """
    total = down + compute + up
    order = np.argsort(total, kind="stable")
    return order[total[order] <= deadline][:limit].astype(np.int64)
