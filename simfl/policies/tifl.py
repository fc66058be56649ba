"""TiFL: tier-based selection, one tier of similarly fast devices per round.

Chai, Ali, Zawad, Truex, Anwar, Baracaldo, Zhou, Ludwig, Yan, Cheng, "TiFL: A Tier-based
Federated Learning System", HPDC 2020. The server first *profiles* the devices (each runs a
training job; those that do not answer within ``T_max`` form a dropout tier, never selected),
splits the others into ``m`` tiers by their observed job duration, and then picks one tier per
round and ``|C|`` devices uniformly within it, so a round waits only for devices of similar
speed. Tier choice is *static* (fixed probabilities; here equal) or *adaptive* (Algorithm 2):
every ``I`` rounds, if the accuracy of the tier last trained has not improved since ``I``
rounds before, the probabilities are recomputed so that less accurate tiers are chosen more
often (the ``i``-th least accurate of the ``n`` tiers with credits left, from 0, gets ``(n -
i) / (n (n + 1) / 2)``), and each tier may be chosen at most ``credits`` times.

TiFL learns only what a real server sees: the durations of the jobs that arrived (a running
mean per device) and the losses clients report with their updates. It never reads the planned
durations.

Departures from the paper:

* **Profiling rounds are training rounds**: the first rounds send a job to every online
  device not yet profiled ``profile_rounds`` times (the paper's ``sync_rounds``; or
  ``profile_count`` of them, drawn uniformly) under the ``profile_deadline`` (the paper's
  ``T_max``; ``None``: wait for all), and their updates are aggregated like any round's; the
  paper profiles before training, separately. A device with a profiling job that did not
  arrive (late or dropped) goes to the dropout tier (the paper compares the mean profiled
  latency with ``T_max``; a late job's latency is not known). Profiling ends at the first
  round in which no such device is online; devices never profiled then are in no tier and
  are never selected.
* **Tiers** are equal groups (sizes differ by at most one) of the profiled devices sorted by
  mean observed duration (the paper groups a histogram of the profiled latencies). They are
  assigned once after profiling, or again every ``retier_every`` rounds from the durations
  observed since (the paper allows re-tiering). The dropout tier is never revisited.
* **Per-tier accuracy**: Algorithm 2 evaluates the model on each tier's clients. simfl uses
  the mean training loss the arrived clients of the tier's most recent round reported (higher
  loss, lower accuracy). A tier not measured yet ranks least accurate, and tied tiers share
  their probabilities equally, so an algorithm that reports no loss
  (:class:`~simfl.algorithms.TimingOnly`) keeps the equal probabilities.
* **Credits** (``None``: unlimited). Once no tier with an online member has credits left,
  credits are ignored (Algorithm 2 would loop forever). Only tiers with an online member can
  be chosen; their probabilities are renormalised. With no tiered device online the round is
  empty (it takes no simulated time; the engine's stall rule ends a run that cannot advance).
* The round's recorded ``stage`` is the chosen tier plus one (tier 0 is the fastest; 0 marks
  a profiling round). Speeds are keyed by stage 0 throughout (``speed_epoch=0``), so a fleet
  with ``redraw="stage"`` keeps one speed draw for the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from simfl._checks import check_choice, check_int, check_real
from simfl.outcome import ARRIVED, Outcome
from simfl.policies.base import RoundPlan, SyncPolicy, View, sample_uniform
from simfl.policies.observed import Observations

__all__ = ["TiFL", "TiFLState", "change_probs"]


@dataclass(frozen=True)
class TiFL(SyncPolicy["TiFLState"]):
    """Tier-based selection (see the module docstring for the rule and departures).

    Parameters
    ----------
    count
        Devices selected from the chosen tier per round ``|C|`` (>= 1; all of its online
        members if fewer).
    tiers
        Number of tiers ``m`` (>= 1; fewer if fewer devices are profiled).
    selection
        ``"uniform"``: every tier equally likely (static); ``"adaptive"``: Algorithm 2.
    interval
        Rounds between adaptive probability updates ``I`` (>= 1).
    credits
        Times each tier may be chosen (>= 1; ``None``: unlimited).
    deadline
        Seconds after which a tiered round closes (> 0; ``None``: wait for all).
    profile_rounds
        Profiling jobs per device before tiering (>= 1; the paper's ``sync_rounds``).
    profile_count
        Devices profiled per profiling round (>= 1; ``None``: every online one that needs it).
    profile_deadline
        ``T_max``: profiled devices not arrived by then join the dropout tier (> 0; ``None``:
        wait for all, only dropouts join it).
    retier_every
        Re-tier from the observed durations every this many rounds (>= 1; ``None``: never).
    """

    count: int = 10
    tiers: int = 5
    selection: str = "uniform"
    interval: int = 10
    credits: int | None = None
    deadline: float | None = None
    profile_rounds: int = 1
    profile_count: int | None = None
    profile_deadline: float | None = None
    retier_every: int | None = None

    name: ClassVar[str] = "tifl"

    def __post_init__(self) -> None:
        check_int("TiFL.count", self.count, low=1)
        check_int("TiFL.tiers", self.tiers, low=1)
        check_choice("TiFL.selection", self.selection, ("uniform", "adaptive"))
        check_int("TiFL.interval", self.interval, low=1)
        check_int("TiFL.profile_rounds", self.profile_rounds, low=1)
        for f in ("credits", "profile_count", "retier_every"):
            if getattr(self, f) is not None:
                check_int(f"TiFL.{f}", getattr(self, f), low=1)
        for f in ("deadline", "profile_deadline"):
            if getattr(self, f) is not None:
                check_real(f"TiFL.{f}", getattr(self, f), low=0.0, low_open=True)

    def check(self, n_devices: int) -> None:  # noqa: D102
        if self.count > n_devices:
            raise ValueError(f"TiFL.count must be <= the fleet size {n_devices}, got {self.count}")

    def start(self, view: View) -> TiFLState:  # noqa: D102
        n = view.n_devices
        return TiFLState(
            seen=Observations.empty(n),
            profiled=np.zeros(n, dtype=np.int64),
            dropout=np.zeros(n, dtype=np.bool_),
        )

    def plan(self, state: TiFLState, view: View) -> tuple[TiFLState, RoundPlan]:  # noqa: D102
        online = view.online()
        tier_of = state.tier_of
        if tier_of is None:
            todo = online[(state.profiled[online] < self.profile_rounds) & ~state.dropout[online]]
            if todo.size:
                return replace(state, current=-1), self.profile(todo, view)
            tier_of = self.assign(state)
            state = self.tiered(state, tier_of, view.round)
        elif self.retier_every is not None and view.round - state.tiered_at >= self.retier_every:
            tier_of = self.assign(state)
            state = replace(state, tier_of=tier_of, tiered_at=view.round)
        state = self.adapted(state, view.round)
        members = tier_of[online]
        available = np.zeros(state.probs.size, dtype=np.bool_)
        available[members[members >= 0]] = True
        if not available.any():
            return replace(state, current=-1), RoundPlan(online[:0], speed_epoch=0)
        tier = self.choose(state, available, view)
        credits = state.credits
        if credits is not None:
            credits = credits.copy()
            credits[tier] = max(credits[tier] - 1, 0)
        cohort = sample_uniform(view.round, online[members == tier], self.count, view.streams)
        plan = RoundPlan(cohort, deadline=self.deadline, stage=tier + 1, speed_epoch=0)
        return replace(state, current=tier, credits=credits), plan

    def observe(self, state: TiFLState, outcome: Outcome, view: View) -> TiFLState:
        """Record the durations, and what the round tells about its devices or its tier.

        After a profiling round: the devices' profiling jobs, and who dropped out. After a
        tiered round: the tier's mean reported loss.
        """
        state = replace(state, seen=state.seen.seen(outcome))
        arrived = outcome.status == ARRIVED
        if state.current < 0:
            if state.tier_of is not None:  # an empty round: nobody tiered was online
                return state
            profiled, dropout = state.profiled.copy(), state.dropout.copy()
            profiled[outcome.devices] += 1
            dropout[outcome.devices[~arrived]] = True
            return replace(state, profiled=profiled, dropout=dropout)
        if outcome.loss is None:
            return state
        losses = outcome.loss[arrived]
        losses = losses[np.isfinite(losses)]
        if not losses.size:
            return state
        tier_loss = state.tier_loss.copy()
        tier_loss[state.current] = float(losses.mean())
        return replace(state, tier_loss=tier_loss)

    # ------------------------------------------------------------------ its parts

    def profile(self, todo: NDArray[np.int64], view: View) -> RoundPlan:
        """A profiling round over the online devices ``todo`` that still need profiling."""
        size = todo.size if self.profile_count is None else self.profile_count
        cohort = sample_uniform(view.round, todo, size, view.streams)
        return RoundPlan(cohort, deadline=self.profile_deadline, stage=0, speed_epoch=0)

    def assign(self, state: TiFLState) -> NDArray[np.int64]:
        """Each device's tier (-1: none) from its observed durations (equal groups)."""
        times = state.seen.mean()
        ok = np.flatnonzero((state.profiled > 0) & ~state.dropout & (state.seen.count > 0))
        order = ok[np.lexsort((ok, times[ok]))]
        tier_of = np.full(state.profiled.size, -1, dtype=np.int64)
        for t, group in enumerate(np.array_split(order, min(self.tiers, max(order.size, 1)))):
            tier_of[group] = t
        return tier_of

    def tiered(self, state: TiFLState, tier_of: NDArray[np.int64], round: int) -> TiFLState:
        """The state once profiling is over: tiers, equal probabilities, full credits."""
        m = max(int(tier_of.max()) + 1, 1)
        return replace(
            state,
            tier_of=tier_of,
            tiered_at=round,
            since=round,
            probs=np.full(m, 1.0 / m),
            credits=None if self.credits is None else np.full(m, self.credits, dtype=np.int64),
            tier_loss=np.full(m, np.nan),
            checkpoint=np.full(m, np.nan),
        )

    def adapted(self, state: TiFLState, round: int) -> TiFLState:
        """Algorithm 2's update at every ``interval``-th tiered round (adaptive only)."""
        k = round - state.since
        if self.selection != "adaptive" or k == 0 or k % self.interval or state.current < 0:
            return state
        t = state.current
        improved = bool(state.tier_loss[t] < state.checkpoint[t])  # NaN: not improved
        probs = state.probs
        if not improved:
            has_credits = np.ones(probs.size, dtype=np.bool_)
            if state.credits is not None:
                has_credits = state.credits > 0
            probs = change_probs(state.tier_loss, has_credits)
        return replace(state, probs=probs, checkpoint=state.tier_loss.copy())

    def choose(self, state: TiFLState, available: NDArray[np.bool_], view: View) -> int:
        """The round's tier, among the ``available`` ones (with an online member)."""
        eligible = available.copy()
        if state.credits is not None and (available & (state.credits > 0)).any():
            eligible &= state.credits > 0
        p = np.where(eligible, state.probs, 0.0)
        if p.sum() <= 0.0:  # only tiers ChangeProbs gave nothing: uniform among them
            p = eligible.astype(np.float64)
        u = float(view.streams.uniform("tifl/tier", view.round))
        cdf = np.cumsum(p / p.sum())
        return int(min(np.searchsorted(cdf, u, side="right"), np.flatnonzero(eligible)[-1]))


def change_probs(loss: NDArray[np.float64], eligible: NDArray[np.bool_]) -> NDArray[np.float64]:
    """Algorithm 2's ChangeProbs: less accurate (higher ``loss``) tiers get more probability.

    Among the ``n`` ``eligible`` tiers, sorted from the least accurate, the ``i``-th (from 0)
    gets ``(n - i) / (n (n + 1) / 2)``; tied tiers (a NaN loss ranks least accurate) share
    their probabilities equally; the other tiers get 0.
    """
    idx = np.flatnonzero(eligible)
    n = idx.size
    probs = np.zeros(loss.size)
    if n == 0:
        return probs
    key = np.where(np.isnan(loss[idx]), np.inf, loss[idx])
    order = np.argsort(-key, kind="stable")
    share = (n - np.arange(n, dtype=np.float64)) / (n * (n + 1) / 2)
    ranked = np.empty(n)
    ranked[order] = share
    for value in np.unique(key):  # ties share equally
        tied = key == value
        ranked[tied] = ranked[tied].mean()
    probs[idx] = ranked
    return probs


@dataclass(frozen=True, eq=False)
class TiFLState:
    """Where TiFL stands.

    Attributes
    ----------
    seen
        Observed job durations (:class:`~simfl.policies.observed.Observations`).
    profiled, dropout
        Profiling jobs each device ran, and which devices are in the dropout tier.
    tier_of
        Each device's tier (-1: none); ``None`` while profiling.
    tiered_at, since
        Round of the last (re-)tiering, and of the first tiered round.
    probs
        Probability of each tier.
    credits
        Choices left to each tier (``None``: unlimited).
    tier_loss
        Mean reported loss of each tier's most recent round (NaN: not measured).
    checkpoint
        ``tier_loss`` at the last adaptive update.
    current
        Tier of the round in flight (-1: a profiling or empty round).
    """

    seen: Observations
    profiled: NDArray[np.int64]
    dropout: NDArray[np.bool_]
    tier_of: NDArray[np.int64] | None = None
    tiered_at: int = 0
    since: int = 0
    probs: NDArray[np.float64] = field(default_factory=lambda: np.ones(1))
    credits: NDArray[np.int64] | None = None
    tier_loss: NDArray[np.float64] = field(default_factory=lambda: np.full(1, np.nan))
    checkpoint: NDArray[np.float64] = field(default_factory=lambda: np.full(1, np.nan))
    current: int = -1
