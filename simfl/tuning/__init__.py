"""Policy search: the best deadline, cohort, buffer or tiering for a fleet, found with Optuna.

>>> import simfl
>>> from simfl import tuning
>>> # out = simfl.tune(
>>> #     base,
>>> #     knobs={"policy.seconds": tuning.Float(1.0, 20.0, log=True)},
>>> #     objective=tuning.TimeToTarget("distance", below=1e-3),
>>> #     constraints=[tuning.Constraint(tuning.RoundTime(0.95), at_most=15.0)],
>>> #     seeds=range(4), trials=30, store="runs/deadline")
>>> # print(out.summary())

* :mod:`simfl.tuning.space`: the knobs (:class:`Float`, :class:`Int`, :class:`Choice`) and the
  dataclass paths that name the fields they set;
* :mod:`simfl.tuning.measures`: objectives and constraints (:class:`TimeToTarget`,
  :class:`UpdatesPerHour`, :class:`RoundTime`, :class:`Jain`, ..., :class:`Constraint`);
* :mod:`simfl.tuning.search`: :func:`tune` (also ``simfl.tune`` and ``simfl tune``): the
  sampler, pruning, determinism and resuming;
* :mod:`simfl.tuning.outcome`: what a search returns (:class:`TuneOutcome`);
* :mod:`simfl.tuning.advice`: the warnings of a search that could mislead;
* :mod:`simfl.tuning.figures`: the search's history, the knobs' importance and the front.
"""

from simfl.tuning.measures import (
    Constraint,
    EnergyToTarget,
    Final,
    Jain,
    Measure,
    RoundTime,
    SimTime,
    TimeToTarget,
    UpdateShare,
    UpdatesPerHour,
)
from simfl.tuning.outcome import Evaluation, TuneInterrupted, TuneOutcome
from simfl.tuning.search import tune
from simfl.tuning.space import Choice, Float, Int, Knob

__all__ = [
    "Choice",
    "Constraint",
    "EnergyToTarget",
    "Evaluation",
    "Final",
    "Float",
    "Int",
    "Jain",
    "Knob",
    "Measure",
    "RoundTime",
    "SimTime",
    "TimeToTarget",
    "TuneInterrupted",
    "TuneOutcome",
    "UpdateShare",
    "UpdatesPerHour",
    "tune",
]
