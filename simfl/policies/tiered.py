"""FedAT: synchronous rounds within speed tiers, asynchronous across tiers.

Chai, Chen, Anwar, Zhao, Zhou, Rangwala, Cheng, "FedAT: A High-Performance and
Communication-Efficient Federated Learning System with Asynchronous Tiers", SC 2021. Devices are
grouped into tiers of similar speed. Each tier trains synchronously (its round waits for the
tier's selected devices only) and the tiers run at their own pace; after every tier round the
server combines the latest model of every tier, weighting the tiers so that the fast ones, which
report far more often, do not dominate: the tier models are weighted by the update counts in
reverse order of speed, ``w_i = N_(M+1-i) / sum_j N_j`` with tiers ``1..M`` from fastest to
slowest and ``N_j`` the number of rounds tier ``j`` has completed (the fastest tier weighs as
much as the slowest has reported, and vice versa).

Tiers that have not completed a round yet are left out of the weighting: the formula runs over
the tiers that have reported, ``w_i = N_(r(k+1-q(i))) / sum N`` with ``r(1) < ... < r(k)`` the
reporting tiers and ``q(i)`` tier ``i``'s place among them, and a tier weighs nothing until
its first round is in. The paper (section 4, "weighted aggregation heuristic") builds the global
model from the *most recent tier models the server has received*, weighting them so that a tier
that has updated less often counts more, "to balance the training" between fast and slow
tiers. It does not say what a tier that has sent nothing weighs; its formula read literally
gives such a tier the largest count's weight and every reporting tier a weight of zero in
reverse: a tier that never reports (its devices always offline or always failing) would leave
the global model at its initial value for ever, and every run would keep it there until the
slowest tier's first round. Mixing only received models follows the heuristic's intent (it
reweights what the tiers sent) and reduces to the paper's formula once every tier has reported.
Counting a silent tier as one update instead would change every weight throughout the run and
still mix in a model nobody trained. The other weightings follow the same rule.

Departures, each documented and most a parameter:

* Tiering: from the devices' reported expected job times (:meth:`View.expected_times`, what a
  device can say about its own resources) in ``tiers`` groups of equal size, once at the start;
  the paper's tiering module profiles response latencies in training rounds first.
* Tier rounds start from the server's model of the moment and the tier's model is the
  algorithm's own aggregate of the tier's updates (FedAvg's average for FedAvg-like
  algorithms), as in the paper. The paper's local constraint term (a proximal term, as in
  FedProx) belongs to the algorithm here: pair FedAT with such an algorithm to get it.
* The paper compresses the transferred models (Encoded Polyline Algorithm); simfl moves the
  algorithm's payload as is.
* ``weighting="equal"`` (plain average of the tier models) and ``"updates"`` (weights
  proportional to each tier's own count, i.e. favouring fast tiers) are offered to show what
  the paper's heuristic buys.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from simfl._checks import check_choice, check_int, check_real
from simfl.algorithms.mixing import GroupMix
from simfl.outcome import Outcome
from simfl.policies.base import RoundPlan, TieredPolicy, View, check_sampling

__all__ = ["FedAT", "FedATState"]


@dataclass(frozen=True)
class FedATState:
    """FedAT's tiers (fastest first) and the rounds each has completed.

    Attributes
    ----------
    tiers
        Device ids of each tier, sorted, fastest tier first.
    counts
        Aggregated rounds of each tier so far (``N_j``).
    started
        Rounds each tier has started (keys its selection draws).
    """

    tiers: tuple[NDArray[np.int64], ...]
    counts: tuple[int, ...]
    started: tuple[int, ...]


@dataclass(frozen=True)
class FedAT(TieredPolicy[FedATState]):
    """Asynchronous tiers of synchronous rounds (see the module docstring).

    Parameters
    ----------
    tiers
        Number of tiers (>= 1, at most the fleet size).
    fraction, count
        Devices per tier round, as a fraction of the tier or a count (default: every online
        device of the tier); fewer when fewer are online.
    deadline
        Seconds after a tier round starts at which it closes with what has arrived (``None``:
        it waits for every selected device of the tier).
    weighting
        ``"fedat"`` (the paper's reversed update counts), ``"equal"`` or ``"updates"``.
    """

    tiers: int = 5
    fraction: float | None = None
    count: int | None = None
    deadline: float | None = None
    weighting: str = "fedat"

    name: ClassVar[str] = "fedat"

    def __post_init__(self) -> None:
        check_int("FedAT.tiers", self.tiers, low=1)
        check_sampling("FedAT", self.fraction, self.count)
        if self.deadline is not None:
            check_real("FedAT.deadline", self.deadline, low=0.0, low_open=True)
        check_choice("FedAT.weighting", self.weighting, ("fedat", "equal", "updates"))

    def check(self, n_devices: int) -> None:  # noqa: D102
        if self.tiers > n_devices:
            raise ValueError(f"FedAT.tiers must be <= the fleet size {n_devices}, got {self.tiers}")

    def start(self, view: View) -> FedATState:
        """Tiers of equal size by the devices' reported expected job times, fastest first."""
        everyone = np.arange(view.n_devices, dtype=np.int64)
        down, compute, up = view.expected_times(everyone)
        order = np.argsort(down + compute + up, kind="stable")
        tiers = tuple(np.sort(t).astype(np.int64) for t in np.array_split(order, self.tiers))
        zero = (0,) * self.tiers
        return FedATState(tiers, zero, zero)

    def groups(self, state: FedATState) -> int:  # noqa: D102
        return len(state.tiers)

    def plan(  # noqa: D102
        self, state: FedATState, view: View, group: int
    ) -> tuple[FedATState, RoundPlan]:
        members = state.tiers[group]
        mask = view.online_mask()
        online = members if mask is None else members[mask[members]]
        if self.count is not None:
            size = min(self.count, online.size)
        elif self.fraction is not None:
            size = max(int(np.floor(self.fraction * members.size + 1e-9)), 1)
        else:
            size = online.size
        k = state.started[group]
        if size < online.size:
            rng = view.streams.generator("fedat/select", group, k)
            online = np.sort(online[rng.choice(online.size, size=size, replace=False)])
        started = tuple(n + (g == group) for g, n in enumerate(state.started))
        plan = RoundPlan(online.astype(np.int64), deadline=self.deadline, stage=group)
        return replace(state, started=started), plan

    def mixer(self, state: FedATState, group: int) -> GroupMix:
        """The tiers' weights once ``group`` has completed one more round.

        Only tiers that have completed a round weigh (``group`` among them); see the module
        docstring.
        """
        counts = np.array(state.counts, dtype=np.float64)
        counts[group] += 1.0
        reported = np.flatnonzero(counts > 0)
        found = counts[reported]
        weights = np.zeros(counts.size)
        if self.weighting == "fedat":
            weights[reported] = found[::-1] / found.sum()
        elif self.weighting == "updates":
            weights[reported] = found / found.sum()
        else:
            weights[reported] = 1.0 / reported.size
        return GroupMix(weights)

    def observe(  # noqa: D102
        self, state: FedATState, outcome: Outcome, view: View, group: int
    ) -> FedATState:
        if outcome.n_arrived == 0:
            return state
        counts = tuple(n + (g == group) for g, n in enumerate(state.counts))
        return replace(state, counts=counts)
