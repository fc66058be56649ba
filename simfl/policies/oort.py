"""Oort: guided participant selection by statistical and system utility.

Lai, Zhu, Madhyastha, Chowdhury, "Oort: Efficient Federated Learning via Guided Participant
Selection", OSDI 2021 (Algorithm 1), and the authors' selector (``SymbioticLab/Oort``,
``oort/oort.py``). Each round the server over-commits a cohort of ``n = ceil(K * (1 +
overcommit))`` devices and aggregates the first ``K`` updates. A fraction ``1 - eps`` of the
cohort *exploits* the devices already seen, ranked by

    util_i = (U_i + sqrt(0.1 * log(R) / L_i)) * (T / t_i) ** (alpha * [t_i > T])

where ``U_i`` is the client's statistical utility (how large its loss was, the last time it
reported one), the square root is the temporal-uncertainty bonus of a client last heard from in
round ``L_i`` (``R``: the current round, both counted from 1), ``t_i`` its round duration and
``T`` the developer's preferred round duration; clients within ``cutoff`` of the
``(1 - eps) n``-th best are admitted and drawn in proportion to their utility. The remaining
``eps n`` slots *explore* devices never heard from. ``eps`` decays every round. The *pacer*
relaxes ``T`` when the statistical utility collected in the last ``W`` rounds fell below that
of the ``W`` rounds before.

Oort learns only what a real server sees: the durations of the jobs that arrived, that a job
which did not arrive ran at least as long as the server waited for it, the losses the clients
report with their updates, and each device's own report of its expected job time
(:meth:`~simfl.policies.View.expected_times`, the code's registered duration). It never reads
the planned durations (no oracle).

Departures from the paper, each forced by what simfl models or taken from the authors' code:

* **Statistical utility** ``U_i = |B_i| * loss_i``: simfl clients report their mean local
  loss, not the per-sample losses of ``|B_i| * sqrt(mean(loss_k ** 2))``; ``|B_i|`` is the
  task's ``client_sizes()`` (1 if the task gives none). An algorithm that reports no loss
  (:class:`~simfl.algorithms.TimingOnly`) gives every client utility 1, so Oort selects by
  speed and staleness alone.
* **Normalisation** (code): utilities are min-max normalised over the explored candidates,
  clipped at their 98th percentile, before the bonus is added; Algorithm 1 adds the raw ones.
* **Preferred duration** (code): ``T`` is the ``pacer.start``-th percentile of the devices'
  duration estimates and the pacer relaxes it by ``pacer.step`` percentile points (up to 100:
  no penalty); Algorithm 1 keeps ``T`` in seconds, starting at the step. The relaxation rule
  is the paper's (the code relaxes when the change is within 10%, and tightens on a 5x change).
* **Pacer utility**: the summed statistical utility of each round's arrived updates (the code:
  the mean of the exploited clients that succeeded).
* **Durations**: ``t_i`` is the duration of the device's last arrived job, raised to the
  elapsed time of any later job that did not arrive (a lower bound); before its first arrival,
  the device's reported expected time (or that lower bound, if larger).
* **Exploration** draws the unexplored online devices without replacement in proportion to
  ``|B_i|`` times the speed penalty of their reported expected time (the code first keeps the
  ``5 n`` best by that prior; the paper takes the fastest). A device counts as explored once
  an update of it has arrived. Slots neither exploited nor explored (few unexplored devices
  online, a blacklist) go to the other candidates uniformly, as in the code.
* **Exploration schedule**: ``eps`` in round ``r`` (from 0) is ``max(factor * decay ** r,
  floor)`` (paper: 0.9, 0.98, 0.2; the code's default decay is 0.95), and 0 in a round where
  no unexplored device is online.
* **Over-commitment** 30% (the paper's experiments; the code's default is 10%) and cut-off
  ``c = 0.95`` (the paper; the code's default is 0.7).
* **Blacklist** (code, off by default): a device whose updates were aggregated more than
  ``blacklist`` times is no longer selected; at most 30% of the fleet (the most used) is
  blacklisted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from simfl._checks import check_int, check_real
from simfl.outcome import ARRIVED, Outcome
from simfl.policies.base import RoundPlan, SyncPolicy, View
from simfl.policies.observed import Observations

__all__ = ["Exploration", "Oort", "OortState", "Pacer"]

#: Utilities are clipped at this quantile of the candidates' before normalising (the code's).
CLIP = 0.98
#: Largest share of the fleet a blacklist may hold (the code's ``blacklist_max_len``).
BLACKLIST_MAX = 0.3


@dataclass(frozen=True)
class Exploration:
    """Oort's exploration factor: the share of the cohort given to unexplored devices.

    In round ``r`` (counted from 0) it is ``max(factor * decay ** r, floor)``.

    Parameters
    ----------
    factor
        Initial share, in [0, 1] (paper: 0.9).
    decay
        Factor applied every round, in (0, 1] (paper: 0.98).
    floor
        Smallest share, in [0, 1] (paper: 0.2).
    """

    factor: float = 0.9
    decay: float = 0.98
    floor: float = 0.2

    def __post_init__(self) -> None:
        check_real("Exploration.factor", self.factor, low=0.0, high=1.0)
        check_real("Exploration.decay", self.decay, low=0.0, high=1.0, low_open=True)
        check_real("Exploration.floor", self.floor, low=0.0, high=1.0)

    def epsilon(self, round: int) -> float:
        """The exploration share in ``round``."""
        return max(self.factor * self.decay**round, self.floor)


@dataclass(frozen=True)
class Pacer:
    """Oort's pacer: the preferred round duration ``T``, relaxed when the utility drops.

    ``T`` is the ``start``-th percentile of the devices' duration estimates. Every ``window``
    rounds, if the statistical utility summed over the last ``window`` rounds is below that of
    the ``window`` rounds before, the percentile grows by ``step`` (at 100, nothing is
    penalised).

    Parameters
    ----------
    start
        Initial percentile, in (0, 100] (the code's ``round_threshold``: 10).
    step
        Percentile points added per relaxation (> 0; the code's ``pacer_delta``: 5).
    window
        Rounds per pacer window ``W`` (>= 1; paper and code: 20).
    """

    start: float = 10.0
    step: float = 5.0
    window: int = 20

    def __post_init__(self) -> None:
        check_real("Pacer.start", self.start, low=0.0, high=100.0, low_open=True)
        check_real("Pacer.step", self.step, low=0.0, low_open=True)
        check_int("Pacer.window", self.window, low=1)

    def relaxed(self, history: tuple[float, ...], percentile: float, rounds: int) -> float:
        """The percentile after ``rounds`` rounds, the last of whose utilities are ``history``."""
        w = self.window
        if rounds < 2 * w or rounds % w or len(history) < 2 * w:
            return percentile
        if sum(history[-w:]) < sum(history[-2 * w : -w]):
            return min(percentile + self.step, 100.0)
        return percentile


@dataclass(frozen=True)
class Oort(SyncPolicy["OortState"]):
    """Guided participant selection (see the module docstring for the rule and departures).

    Parameters
    ----------
    count
        Updates aggregated per round ``K`` (>= 1).
    overcommit
        Extra fraction of devices started (>= 0): the cohort has ``ceil(K * (1 +
        overcommit))`` devices and the round closes at the ``K``-th arrival.
    deadline
        Seconds after which the round closes anyway (> 0; ``None``: none).
    penalty
        Straggler penalty exponent ``alpha`` (>= 0; paper and code: 2).
    cutoff
        Exploitation admits the clients whose utility is at least ``cutoff`` times that of the
        ``(1 - eps) n``-th best, in (0, 1] (paper: 0.95).
    exploration
        The exploration schedule (:class:`Exploration`).
    pacer
        The preferred duration and its pacer (:class:`Pacer`).
    blacklist
        Stop selecting a device once more than this many of its updates were aggregated
        (>= 1; ``None``: never).
    """

    count: int = 10
    overcommit: float = 0.3
    deadline: float | None = None
    penalty: float = 2.0
    cutoff: float = 0.95
    exploration: Exploration = field(default_factory=Exploration)
    pacer: Pacer = field(default_factory=Pacer)
    blacklist: int | None = None

    name: ClassVar[str] = "oort"

    def __post_init__(self) -> None:
        check_int("Oort.count", self.count, low=1)
        check_real("Oort.overcommit", self.overcommit, low=0.0)
        if self.deadline is not None:
            check_real("Oort.deadline", self.deadline, low=0.0, low_open=True)
        check_real("Oort.penalty", self.penalty, low=0.0)
        check_real("Oort.cutoff", self.cutoff, low=0.0, high=1.0, low_open=True)
        if not isinstance(self.exploration, Exploration):
            raise ValueError(f"Oort.exploration must be an Exploration, got {self.exploration!r}")
        if not isinstance(self.pacer, Pacer):
            raise ValueError(f"Oort.pacer must be a Pacer, got {self.pacer!r}")
        if self.blacklist is not None:
            check_int("Oort.blacklist", self.blacklist, low=1)

    @property
    def started(self) -> int:
        """Devices in each round's cohort, ``ceil(count * (1 + overcommit))``."""
        return max(self.count, math.ceil(self.count * (1.0 + self.overcommit) - 1e-9))

    def check(self, n_devices: int) -> None:  # noqa: D102
        if self.started > n_devices:
            raise ValueError(
                f"Oort.count * (1 + Oort.overcommit) = {self.started} devices must be <= the "
                f"fleet size {n_devices} (count={self.count}, overcommit={self.overcommit})"
            )

    # ------------------------------------------------------------------ the decision

    def start(self, view: View) -> OortState:  # noqa: D102
        n = view.n_devices
        return OortState(
            seen=Observations.empty(n),
            utility=np.full(n, np.nan),
            last_round=np.zeros(n, dtype=np.int64),
            percentile=self.pacer.start,
        )

    def plan(self, state: OortState, view: View) -> tuple[OortState, RoundPlan]:  # noqa: D102
        online = view.online()
        online = online[~self.blacklisted(state.seen.count)[online]]
        n = min(self.started, online.size)
        times = self.round_times(state, view)
        preferred = self.preferred(times, state.percentile)
        speed = self.speed_penalty(times, preferred)
        explored = state.seen.count[online] > 0
        known, fresh = online[explored], online[~explored]
        eps = self.exploration.epsilon(view.round) if fresh.size else 0.0
        n_exploit = min(math.floor(n * (1.0 - eps) + 1e-9), known.size)
        picked = [np.empty(0, dtype=np.int64)]
        if n_exploit:
            scores = self.utilities(state, known, view.round + 1) * speed[known]
            picked.append(self.exploit(scores, known, n_exploit, view))
        n_explore = min(fresh.size, n - n_exploit)
        if n_explore:
            prior = self.sizes(view)[fresh] * speed[fresh]
            rng = view.streams.generator("oort/explore", view.round)
            picked.append(_weighted(rng, fresh, prior, n_explore))
        cohort = np.concatenate(picked)
        if cohort.size < n:  # too few unexplored devices online: fill uniformly
            rest = np.setdiff1d(online, cohort)
            rng = view.streams.generator("oort/fill", view.round)
            fill = rng.choice(rest, size=n - cohort.size, replace=False)
            cohort = np.concatenate([cohort, fill])
        cohort = np.sort(cohort).astype(np.int64)
        return state, RoundPlan(cohort, quota=min(self.count, cohort.size), deadline=self.deadline)

    def observe(self, state: OortState, outcome: Outcome, view: View) -> OortState:
        """Learn the arrived clients' utilities and durations; bound the others'; pace ``T``."""
        arrived = outcome.status == ARRIVED
        devices = outcome.devices[arrived]
        if outcome.loss is None:
            gained = np.ones(devices.size)
        else:
            gained = self.sizes(view)[devices] * outcome.loss[arrived]
        utility = state.utility.copy()
        known = np.isfinite(gained)
        utility[devices[known]] = gained[known]
        last_round = state.last_round.copy()
        last_round[devices] = outcome.round + 1
        history = (*state.history, float(gained[known].sum()))
        percentile = self.pacer.relaxed(history, state.percentile, outcome.round + 1)
        return OortState(
            seen=state.seen.seen(outcome),
            utility=utility,
            last_round=last_round,
            percentile=percentile,
            history=history[-2 * self.pacer.window :],
        )

    # ------------------------------------------------------------------ its parts

    @staticmethod
    def sizes(view: View) -> NDArray[np.float64]:
        """``|B_i|`` of every client: the task's sizes, or 1 each."""
        sizes = view.client_sizes()
        return np.ones(view.n_devices) if sizes is None else np.asarray(sizes, dtype=np.float64)

    @staticmethod
    def round_times(state: OortState, view: View) -> NDArray[np.float64]:
        """``t_i`` of every device (see the module docstring, *Durations*).

        The duration of its last arrived job, else its reported expected time, raised to the
        elapsed time of any later job that did not arrive.
        """
        seen = state.seen
        down, compute, up = view.expected_times(np.arange(view.n_devices, dtype=np.int64))
        reported = down + compute + up
        return np.maximum(np.where(seen.count > 0, seen.last, reported), seen.bound)

    @staticmethod
    def preferred(times: NDArray[np.float64], percentile: float) -> float:
        """The preferred round duration ``T``: the ``percentile``-th of ``times`` (code's rule)."""
        if percentile >= 100.0:
            return math.inf
        ordered = np.sort(times)
        return float(ordered[min(int(ordered.size * percentile / 100.0), ordered.size - 1)])

    def speed_penalty(self, times: NDArray[np.float64], preferred: float) -> NDArray[np.float64]:
        """``(T / t_i) ** alpha`` for the devices slower than ``T``, 1 for the others."""
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(times > preferred, preferred / times, 1.0)
        return np.asarray(ratio**self.penalty, dtype=np.float64)

    @staticmethod
    def utilities(state: OortState, devices: NDArray[np.int64], round: int) -> NDArray[np.float64]:
        """Normalised statistical utility plus temporal-uncertainty bonus of explored ``devices``.

        ``round`` is the current round ``R``, counted from 1.
        """
        u = state.utility[devices]
        finite = u[np.isfinite(u)]
        if finite.size:
            ordered = np.sort(finite)
            clip = ordered[min(int(ordered.size * CLIP), ordered.size - 1)]
            low = ordered[0] * 0.999
            spread = max(float(ordered[-1] - low), 1e-4)
            norm = np.nan_to_num((np.minimum(u, clip) - low) / spread, nan=0.0)
        else:
            norm = np.zeros(devices.size)
        bonus = np.sqrt(0.1 * math.log(round) / state.last_round[devices])
        return np.asarray(norm + bonus, dtype=np.float64)

    def exploit(
        self, scores: NDArray[np.float64], devices: NDArray[np.int64], n: int, view: View
    ) -> NDArray[np.int64]:
        """``n`` of ``devices``, drawn by score among those within ``cutoff`` of the n-th best."""
        nth = np.sort(scores)[::-1][n - 1]
        admitted = scores >= self.cutoff * nth
        rng = view.streams.generator("oort/exploit", view.round)
        return _weighted(rng, devices[admitted], scores[admitted], n)

    def blacklisted(self, count: NDArray[np.int64]) -> NDArray[np.bool_]:
        """Devices no longer selected: aggregated more than ``blacklist`` times (capped)."""
        out = np.zeros(count.size, dtype=np.bool_)
        if self.blacklist is None:
            return out
        over = np.flatnonzero(count > self.blacklist)
        cap = int(BLACKLIST_MAX * count.size)
        if over.size > cap:  # keep the most used, ties by device id
            over = over[np.lexsort((over, -count[over]))[:cap]]
        out[over] = True
        return out


def _weighted(
    rng: np.random.Generator, devices: NDArray[np.int64], weights: NDArray[np.float64], n: int
) -> NDArray[np.int64]:
    """``n`` of ``devices`` without replacement, in proportion to ``weights`` (floored > 0)."""
    w = np.maximum(np.asarray(weights, dtype=np.float64), np.finfo(np.float64).tiny)
    pick = rng.choice(devices.size, size=n, replace=False, p=w / w.sum())
    return devices[pick]


@dataclass(frozen=True, eq=False)
class OortState:
    """What Oort has learnt.

    Attributes
    ----------
    seen
        Observed job durations (:class:`~simfl.policies.observed.Observations`).
    utility
        Each client's last statistical utility ``|B_i| * loss_i`` (NaN: none reported).
    last_round
        Round (counted from 1) of each client's last arrived update (0: never).
    percentile
        The pacer's current percentile for the preferred duration ``T``.
    history
        Summed statistical utility of the arrived updates of the last ``2 W`` rounds.
    """

    seen: Observations
    utility: NDArray[np.float64]
    last_round: NDArray[np.int64]
    percentile: float
    history: tuple[float, ...] = ()
