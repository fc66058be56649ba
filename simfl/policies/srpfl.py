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
* Speeds are the planned job durations (download + compute + upload) of the round in which the
  participants are chosen: an oracle, as in the code's ``simulated_running_time``. With zero
  network cost this is the compute time ``T_i`` of the paper. Whether speeds are fixed, redrawn
  per stage or per round is the fleet's ``redraw`` (the stage index it sees increases every time
  a pool is sampled).

The recorded ``stage`` column is the participation level ``r``; it stops increasing at the
level where all ``N`` take part, so with ``n0 >= N`` SRPFL is exactly its wrapped algorithm under
``WaitAll(count=N)`` (with ``resample="round"``, or ``N = M``).
"""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from simfl._checks import check_choice, check_int, check_real
from simfl.policies.base import Policy, check_sampling, cohort_size, sample_uniform
from simfl.rounds import sync_round

if TYPE_CHECKING:
    from simfl.engine import RunContext

__all__ = ["SRPFL", "Plateau"]


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
class SRPFL(Policy):
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
    """

    n0: int = 10
    fraction: float | None = None
    count: int | None = None
    rounds_per_stage: int = 10
    growth: float = 2.0
    resample: str = "stage"
    stage_rule: Plateau | None = None

    name: ClassVar[str] = "srpfl"

    def __post_init__(self) -> None:
        check_int("SRPFL.n0", self.n0, low=1)
        check_sampling("SRPFL", self.fraction, self.count)
        check_int("SRPFL.rounds_per_stage", self.rounds_per_stage, low=1)
        check_real("SRPFL.growth", self.growth, low=1.0, low_open=True)
        check_choice("SRPFL.resample", self.resample, ("stage", "round"))
        if self.stage_rule is not None and not isinstance(self.stage_rule, Plateau):
            raise ValueError(f"SRPFL.stage_rule must be a Plateau or None, got {self.stage_rule!r}")

    def check(self, n_devices: int) -> None:  # noqa: D102
        cohort_size("SRPFL", self.fraction, self.count, n_devices)

    def participants(self, level: int, pool: int) -> int:
        """Clients taking part at participation level ``level`` with a pool of ``pool``."""
        return min(math.ceil(self.n0 * self.growth**level - 1e-9), pool)

    def fastest(
        self, run: RunContext, pool: NDArray[np.int64], m: int, epoch: int
    ) -> NDArray[np.int64]:
        """The ``m`` fastest devices of ``pool`` by this round's planned job durations."""
        if m >= pool.size:
            return pool
        plan = run.plan(pool, key=run.round, stage=epoch)
        order = np.argsort(plan.duration, kind="stable")[:m]
        return np.sort(pool[order])

    def serve(self, run: RunContext) -> Generator[Any, Any, None]:  # noqa: D102
        n_pool = cohort_size("SRPFL", self.fraction, self.count, run.fleet.size)
        goal = (
            "min"
            if self.stage_rule is None or self.stage_rule.metric == "train_loss"
            else (
                run.scenario.task.goals[self.stage_rule.metric]  # type: ignore[union-attr]
            )
        )
        level, epoch, in_stage = 0, 0, 0
        history: list[float] = []
        cohort: NDArray[np.int64] | None = None
        while run.stop_reason is None:
            yield from run.wait_online()
            if run.stopped:
                break
            m = self.participants(level, n_pool)
            if self.resample == "round" or cohort is None:
                key = run.round if self.resample == "round" else epoch
                pool = sample_uniform(key, run.online(), n_pool, run.streams)
                cohort = self.fastest(run, pool, m, epoch)
            elif run.cursor is not None:  # participants that went offline sit the round out
                online = cohort[np.isin(cohort, run.online())]
                if online.size:
                    cohort = online
            yield from sync_round(run, cohort, stage=level, speed_epoch=epoch)
            in_stage += 1
            metric = "train_loss" if self.stage_rule is None else self.stage_rule.metric
            history.append(float(run.recorder.last_round(metric)))
            if self.stage_rule is None:
                done = in_stage >= self.rounds_per_stage
            else:
                done = self.stage_rule.stalled(history, goal)
            if done:
                if m < n_pool:
                    level += 1
                epoch += 1
                in_stage = 0
                history = []
                cohort = None
