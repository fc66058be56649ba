"""SRPFL: progressive participation of the fastest clients.

Tziotis, Shen, Pedarsani, Hassani, Mokhtari, "Straggler-Resilient Personalized Federated
Learning", TMLR 2023 (Algorithm 1), and its published code (``shenzebang/SRPFL``,
``FEDREP-ray.py --flanp``). At stage ``r`` the server samples a pool of ``N`` of the ``M``
clients, observes their speeds and lets only the ``n0 * 2^r`` fastest take part (all ``N`` once
that exceeds ``N``). The server waits only for the slowest participant, so early stages are
cheap; the model trained so far warm-starts the next stage.

SRPFL is a *policy*: it decides who takes part and never looks at the model, so it wraps any
algorithm (FedRep now, FedPer and LG-FedAvg as they arrive) without knowing which. The warm
start is simply the algorithm's state carrying on; heads persist wherever the algorithm keeps
them (linear FedRep recomputes its heads exactly every round, so it needs none).

Choices, each a parameter:

* ``rounds_per_stage`` (tau_r, default 10): the stage length of the published code. Passing
  ``stage_rule=Plateau(...)`` instead moves on when progress stalls at the current participation
  level (the paper's idea: each stage runs until the error is within a constant factor of what
  that many clients can reach).
* ``resample="stage"`` (the paper, default): a new pool is sampled at the start of each stage
  and its fastest members take part for the whole stage. ``resample="round"`` (the code): a new
  pool every round, sorted by that round's speeds.
* ``speeds="oracle"`` (default): speeds are the planned job durations (download + compute +
  upload) of the round in which the participants are chosen, as in the code's
  ``simulated_running_time``. With zero network cost this is the compute time ``T_i`` of the
  paper. ``speeds="observed"`` is what a real server can do: each device's mean duration over
  its jobs that arrived so far, devices never observed counting as fastest (so every device
  is tried once before it can be ranked slow). Whether speeds are fixed, redrawn
  per stage or per round is the fleet's ``redraw`` (the stage index it sees increases every time
  a pool is sampled).

The recorded ``stage`` column is the participation level ``r``; it stops increasing at the
level where all ``N`` take part, so with ``n0 >= N`` SRPFL is exactly its wrapped algorithm under
``WaitAll(count=N)`` (with ``resample="round"``, or ``N = M``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, ClassVar

import numpy as np
from numpy.typing import NDArray

from simfl._checks import check_choice, check_int, check_real, check_str
from simfl.outcome import Outcome
from simfl.policies.base import (
    RoundPlan,
    SyncPolicy,
    View,
    check_sampling,
    cohort_size,
    sample_uniform,
)

if TYPE_CHECKING:
    from simfl.tasks.base import Task

__all__ = ["SRPFL", "Plateau", "SRPFLState", "flanp"]


@dataclass(frozen=True)
class Plateau:
    """Stage-stopping rule: move on when a metric stops improving at this participation level.

    After at least ``min_rounds`` rounds in a stage, compare the mean of the last ``window``
    values of ``metric`` with the mean of the ``window`` before; move on when the relative
    improvement is below ``tolerance``, or after ``max_rounds`` rounds in any case.

    Parameters
    ----------
    metric
        ``"train_loss"`` (what a real server sees: the mean local loss of the updates) or a task
        metric (evaluated rounds only; a simulation-only oracle).
    window
        Rounds per averaging window (>= 1).
    tolerance
        Smallest relative improvement that counts as progress (>= 0).
    min_rounds, max_rounds
        Bounds on the rounds per stage (``max_rounds=None``: no upper bound).
    """

    metric: str = "train_loss"
    window: int = 3
    tolerance: float = 0.1
    min_rounds: int = 2
    max_rounds: int | None = 50

    def __post_init__(self) -> None:
        check_str("Plateau.metric", self.metric, empty=False)
        check_int("Plateau.window", self.window, low=1)
        check_real("Plateau.tolerance", self.tolerance, low=0.0)
        check_int("Plateau.min_rounds", self.min_rounds, low=1)
        if self.max_rounds is not None:
            check_int(
                f"Plateau.max_rounds (>= min_rounds = {self.min_rounds})",
                self.max_rounds,
                low=self.min_rounds,
            )

    def stalled(self, values: list[float], goal: str) -> bool:
        """Whether the stage whose metric history is ``values`` should end."""
        n = len(values)
        if self.max_rounds is not None and n >= self.max_rounds:
            return True
        seen = [v for v in values if not math.isnan(v)]
        if n < self.min_rounds or len(seen) < 2 * self.window:
            return False
        last = float(np.mean(seen[-self.window :]))
        before = float(np.mean(seen[-2 * self.window : -self.window]))
        gain = (before - last) if goal == "min" else (last - before)
        return gain < self.tolerance * abs(before)


@dataclass(frozen=True)
class SRPFL(SyncPolicy["SRPFLState"]):
    """Straggler-resilient progressive participation (see the module docstring).

    Parameters
    ----------
    n0
        Participants in the first stage (>= 1).
    fraction, count
        Pool size ``N`` per stage, as a fraction of the fleet or a count (default: the whole
        fleet, ``N = M``, the code's ``frac=1``).
    rounds_per_stage
        Rounds per stage ``tau_r`` (>= 1), unless ``stage_rule`` is given.
    growth
        Factor by which participation grows each stage (> 1; the paper doubles).
    resample
        ``"stage"``: a new pool each stage (paper); ``"round"``: each round (code).
    stage_rule
        An adaptive stage-stopping rule (:class:`Plateau`) instead of the fixed length.
    speeds
        ``"oracle"`` (planned durations, the code's choice) or ``"observed"`` (mean durations
        of the device's arrived jobs; a server's view).
    """

    n0: int = 10
    fraction: float | None = None
    count: int | None = None
    rounds_per_stage: int = 10
    growth: float = 2.0
    resample: str = "stage"
    stage_rule: Plateau | None = None
    speeds: str = "oracle"

    name: ClassVar[str] = "srpfl"

    def __post_init__(self) -> None:
        check_int("SRPFL.n0", self.n0, low=1)
        check_sampling("SRPFL", self.fraction, self.count)
        check_int("SRPFL.rounds_per_stage", self.rounds_per_stage, low=1)
        check_real("SRPFL.growth", self.growth, low=1.0, low_open=True)
        check_choice("SRPFL.resample", self.resample, ("stage", "round"))
        check_choice("SRPFL.speeds", self.speeds, ("oracle", "observed"))
        if self.stage_rule is not None and not isinstance(self.stage_rule, Plateau):
            raise ValueError(f"SRPFL.stage_rule must be a Plateau or None, got {self.stage_rule!r}")

    def check(self, n_devices: int) -> None:  # noqa: D102
        cohort_size("SRPFL", self.fraction, self.count, n_devices)

    def check_task(self, task: Task | None) -> None:  # noqa: D102
        if self.stage_rule is None:
            return
        metric = self.stage_rule.metric
        goals = {} if task is None else dict(task.goals)
        metrics = [m for m in (() if task is None else task.metrics) if m in goals]
        if metric != "train_loss" and metric not in metrics:
            raise ValueError(
                f"SRPFL.stage_rule.metric (Plateau.metric) must be 'train_loss' or one of the "
                f"task's metrics with a goal {metrics}, got {metric!r}"
            )

    def participants(self, level: int, pool: int) -> int:
        """Clients taking part at participation level ``level`` with a pool of ``pool``."""
        try:
            wanted = self.n0 * self.growth**level - 1e-9
        except OverflowError:  # growth**level beyond the float range: everyone
            return pool
        return pool if not wanted < pool else min(math.ceil(wanted), pool)

    def fastest(
        self,
        view: View,
        pool: NDArray[np.int64],
        m: int,
        epoch: int,
        seen: tuple[NDArray[np.float64], NDArray[np.float64]] | None = None,
    ) -> NDArray[np.int64]:
        """The ``m`` fastest devices of ``pool`` by their speeds (oracle or ``seen``).

        ``seen`` holds every device's summed observed duration and count of arrived jobs
        (``speeds="observed"``); unobserved devices rank first.
        """
        if m >= pool.size:
            return pool
        if seen is None:
            speed = view.durations(pool, stage=epoch)
        else:
            total, count = seen
            speed = np.where(count[pool] > 0, total[pool] / np.maximum(count[pool], 1), 0.0)
        order = np.argsort(speed, kind="stable")[:m]
        return np.sort(pool[order])

    def start(self, view: View) -> SRPFLState:  # noqa: D102
        metric = "train_loss" if self.stage_rule is None else self.stage_rule.metric
        goal = "min" if metric == "train_loss" else view.goals[metric]
        n_pool = cohort_size("SRPFL", self.fraction, self.count, view.n_devices)
        seen = None
        if self.speeds == "observed":
            seen = (np.zeros(view.n_devices), np.zeros(view.n_devices))
        return SRPFLState(n_pool=n_pool, metric=metric, goal=goal, seen=seen)

    def plan(self, state: SRPFLState, view: View) -> tuple[SRPFLState, RoundPlan]:  # noqa: D102
        cohort = state.cohort
        if self.resample == "round" or cohort is None:
            key = view.round if self.resample == "round" else state.epoch
            pool = sample_uniform(key, view.online(), state.n_pool, view.streams)
            m = self.participants(state.level, state.n_pool)
            cohort = self.fastest(view, pool, m, state.epoch, state.seen)
        elif view.online_mask() is not None:  # participants that went offline sit it out
            online = cohort[np.isin(cohort, view.online())]
            if online.size:
                cohort = online
        plan = RoundPlan(cohort, stage=state.level, speed_epoch=state.epoch)
        return replace(state, cohort=cohort), plan

    def observe(self, state: SRPFLState, outcome: Outcome, view: View) -> SRPFLState:
        """Count the round in its stage; move to the next stage when the stage is over."""
        if state.seen is not None:  # learn the speeds of the devices whose jobs arrived
            ok = outcome.arrived
            total, count = state.seen[0].copy(), state.seen[1].copy()
            np.add.at(total, outcome.devices[ok], outcome.durations[ok])
            np.add.at(count, outcome.devices[ok], 1.0)
            state = replace(state, seen=(total, count))
        history = (*state.history, float(view.last(state.metric)))
        in_stage = state.in_stage + 1
        if self.stage_rule is None:
            done = in_stage >= self.rounds_per_stage
        else:
            done = self.stage_rule.stalled(list(history), state.goal)
        if not done:
            return replace(state, in_stage=in_stage, history=history)
        more = self.participants(state.level, state.n_pool) < state.n_pool
        return replace(
            state,
            level=state.level + 1 if more else state.level,
            epoch=state.epoch + 1,
            in_stage=0,
            history=(),
            cohort=None,
        )


@dataclass(frozen=True)
class SRPFLState:
    """Where SRPFL stands: participation level, stage (speed epoch), the stage's cohort.

    Attributes
    ----------
    n_pool
        Pool size ``N`` per stage.
    metric, goal
        What the stage rule watches, and whether it should go down (``"min"``) or up.
    level
        Participation level ``r`` (recorded as the round's ``stage``).
    epoch
        Number of pools sampled so far (keys the fleet's per-stage speeds).
    in_stage
        Rounds played in the current stage.
    history
        The watched metric in each round of the stage.
    cohort
        The stage's participants (``None``: choose them in the next round).
    seen
        Summed durations and counts of each device's arrived jobs (``speeds="observed"``).
    """

    n_pool: int
    metric: str
    goal: str
    level: int = 0
    epoch: int = 0
    in_stage: int = 0
    history: tuple[float, ...] = ()
    cohort: NDArray[np.int64] | None = None
    seen: tuple[NDArray[np.float64], NDArray[np.float64]] | None = None


def flanp(
    n0: int = 10,
    rounds_per_stage: int = 10,
    fraction: float | None = None,
    count: int | None = None,
) -> SRPFL:
    """FLANP as SRPFL's code runs it (``FEDREP-ray.py --flanp`` with FedAvg): a named SRPFL.

    Reisizadeh, Tziotis, Hassani, Mokhtari, Pedarsani, "Straggler-Resilient Federated
    Learning: Leveraging the Interplay Between Statistical Accuracy and System Heterogeneity"
    (2022): FedAvg that starts with the ``n0`` fastest clients and doubles the participating
    set stage by stage. SRPFL's code, which uses it as its baseline, samples a new pool every
    round (``resample="round"``) sorted by that round's running times, doubles every
    ``rounds_per_stage`` rounds and reads the speeds as an oracle; that is this policy. Pair it
    with FedAvg (``simfl.neural.NeuralFedAvg`` or ``FedAvgFT``; ``simfl.algorithms.FedAvg``
    for the linear task). FLANP's own stage rule (move on once the stage's statistical accuracy
    is reached) is ``SRPFL(stage_rule=Plateau(...))`` instead of the fixed stage length.

    Parameters
    ----------
    n0, rounds_per_stage, fraction, count
        As for :class:`SRPFL` (defaults: the code's ``init_clients=10``, ``double_freq=10``,
        the whole fleet as the pool).
    """
    return SRPFL(
        n0=n0,
        fraction=fraction,
        count=count,
        rounds_per_stage=rounds_per_stage,
        resample="round",
        speeds="oracle",
    )
