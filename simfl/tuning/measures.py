"""What a search optimises and what it must respect: measures of runs, and constraints on them.

A measure turns the runs of one setting (one run per seed) into a number. Its value per seed
gives the confidence interval; its :meth:`~Measure.combine` over the seeds is what the search
compares (the mean, or a pooled quantile). Every measure has the direction in which it is
better. A :class:`Constraint` bounds a measure (``at_most`` or ``at_least``).

=====================  ===========================================================  =========
measure                per run                                                      better
=====================  ===========================================================  =========
:class:`TimeToTarget`  simulated seconds until the metric first meets the target     lower
:class:`EnergyToTarget` joules the fleet spent until then                            lower
:class:`UpdatesPerHour` aggregated (arrived) updates per simulated hour             higher
:class:`Final`         the metric's last evaluated value                            the task's
:class:`RoundTime`     a quantile of round durations, pooled over the seeds         lower
:class:`Jain`          Jain's index of aggregated updates, per device or per group   higher
:class:`UpdateShare`   a group's share of the aggregated updates                    higher
:class:`SimTime`       simulated seconds the run lasted                             lower
=====================  ===========================================================  =========

A target never reached is ``inf`` for that seed, and a mean over seeds that include one is
``inf``: the search ranks such a setting last and its table says "not reached in k of n
seeds", never a number standing in for the missing time.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from simfl import compare
from simfl._checks import check_real
from simfl.results import Results
from simfl.results.groups import decode_groups, jain_index, participation
from simfl.scenario import Scenario

__all__ = [
    "Constraint",
    "EnergyToTarget",
    "Final",
    "Jain",
    "Measure",
    "RoundTime",
    "SimTime",
    "TimeToTarget",
    "UpdateShare",
    "UpdatesPerHour",
]


class Measure(ABC):
    """A number computed from the runs of one setting, better in one direction."""

    #: ``"minimize"`` or ``"maximize"`` (see :meth:`direction_for`).
    direction: ClassVar[str] = "minimize"
    #: The values a run can give (a constraint outside it can never be met).
    low: ClassVar[float] = -math.inf
    high: ClassVar[float] = math.inf

    @property
    @abstractmethod
    def name(self) -> str:
        """A short column name, e.g. ``"time_to_distance<=0.001"``."""

    @abstractmethod
    def per_run(self, results: Results) -> float:
        """The measure of one run."""

    def direction_for(self, scenario: Scenario) -> str:
        """``"minimize"`` or ``"maximize"`` for runs of ``scenario``."""
        return self.direction

    def combine(self, values: Sequence[float], runs: Sequence[Results]) -> float:
        """The setting's value over its seeds: the mean of :meth:`per_run` (``inf`` stays)."""
        x = np.asarray(values, dtype=np.float64)
        if x.size == 0:
            return math.nan
        if np.isinf(x).any():  # a target missed by some seed: the mean is that infinity
            return float(x[np.isinf(x)][0])
        return float(x.mean())

    def bound(self, values: Sequence[float], n: int) -> float | None:
        """An optimistic bound of the combined value once all ``n`` seeds ran, from the first.

        ``None`` when none can be given: a setting is pruned only when this bound shows it
        cannot beat the best setting found, so pruning never discards a possible winner.
        """
        return None

    def censored(self, results: Results) -> float:
        """A finite stand-in for a run whose :meth:`per_run` is ``inf`` (a target missed).

        What the run shows at least (the simulated time it lasted, the energy it spent): what
        Optuna is told for a trial marked infeasible (TPE ranks those by their constraint
        violation, not by this value); never shown in the tables.
        """
        return math.inf

    def check(self, scenario: Scenario) -> None:  # noqa: B027 - optional hook
        """Raise ``ValueError`` if runs of ``scenario`` cannot give this measure."""


def _check_metric(owner: str, metric: str, scenario: Scenario) -> None:
    task = scenario.task
    if task is None:
        raise ValueError(f"{owner} needs a task metric, but the scenario has no task")
    if metric not in task.metrics:
        raise ValueError(
            f"{owner}: the task {type(task).__name__} does not report {metric!r}; its metrics "
            f"are {list(task.metrics)}"
        )


def _target_text(metric: str, below: float | None, above: float | None) -> str:
    return f"{metric}<={below:g}" if below is not None else f"{metric}>={above:g}"


@dataclass(frozen=True)
class _ToTarget(Measure):
    """What a run spent until ``metric`` first met the target (``inf`` if it never did)."""

    metric: str
    below: float | None = None
    above: float | None = None

    direction: ClassVar[str] = "minimize"
    low: ClassVar[float] = 0.0
    #: The start of :attr:`name` (``"time"``, ``"energy"``).
    what: ClassVar[str] = ""

    def __post_init__(self) -> None:
        owner = type(self).__name__
        if (self.below is None) == (self.above is None):
            raise ValueError(
                f"{owner} needs exactly one of below= or above=, got {self.below}, {self.above}"
            )
        side = "below" if self.below is not None else "above"
        object.__setattr__(self, side, check_real(f"{owner}.{side}", getattr(self, side)))

    @property
    def name(self) -> str:
        target = (
            f"{self.metric}<={self.below:g}"
            if self.below is not None
            else f"{self.metric}>={self.above:g}"
        )
        return f"{self.what}_to_{target}"

    def bound(self, values: Sequence[float], n: int) -> float | None:
        """The mean if every seed still to run spent nothing (what it spends is >= 0)."""
        return float(np.sum(values)) / n

    def check(self, scenario: Scenario) -> None:
        _check_metric(type(self).__name__, self.metric, scenario)


@dataclass(frozen=True)
class TimeToTarget(_ToTarget):
    """Simulated seconds until ``metric`` first meets the target (``inf`` if it never does).

    Give the scenario the same :class:`~simfl.Target` so runs stop there, and a ``rounds`` or
    ``max_time`` limit that a good setting meets with room to spare: a seed that hits the
    limit first counts as never reaching the target.
    """

    what: ClassVar[str] = "time"

    def per_run(self, results: Results) -> float:  # noqa: D102
        return compare.time_to_target(results, self.metric, below=self.below, above=self.above)

    def censored(self, results: Results) -> float:
        """The simulated seconds the run lasted without reaching the target."""
        return float(results.meta.get("sim_time", math.inf))


@dataclass(frozen=True)
class EnergyToTarget(_ToTarget):
    """Joules the fleet spent until ``metric`` first meets the target (``inf`` if never)."""

    what: ClassVar[str] = "energy"

    def per_run(self, results: Results) -> float:  # noqa: D102
        return compare.energy_to_target(results, self.metric, below=self.below, above=self.above)

    def censored(self, results: Results) -> float:
        """The joules the run spent without reaching the target."""
        return float(results.clients["energy"].sum())

    def check(self, scenario: Scenario) -> None:  # noqa: D102
        super().check(scenario)
        if scenario.fleet.energy is None:
            raise ValueError(
                "EnergyToTarget needs a fleet with an energy model (Fleet.with_energy or "
                "Profile(energy=...)); this scenario's fleet has none"
            )


@dataclass(frozen=True)
class UpdatesPerHour(Measure):
    """Aggregated updates per simulated hour: arrived updates over the run's simulated time."""

    direction: ClassVar[str] = "maximize"
    low: ClassVar[float] = 0.0

    @property
    def name(self) -> str:  # noqa: D102
        return "updates_per_hour"

    def per_run(self, results: Results) -> float:  # noqa: D102
        seconds = float(results.meta.get("sim_time", math.nan))
        arrived = float(results.rounds["n_arrived"].sum())
        return arrived / (seconds / 3600.0) if seconds > 0 else math.nan


@dataclass(frozen=True)
class Final(Measure):
    """The last evaluated value of ``metric``, better in the direction the task declares."""

    metric: str

    @property
    def name(self) -> str:  # noqa: D102
        return f"final_{self.metric}"

    def per_run(self, results: Results) -> float:  # noqa: D102
        values = results.rounds[self.metric].dropna() if self.metric in results.rounds else None
        if values is None or values.empty:
            initial = (results.meta.get("initial_metrics") or {}).get(self.metric)
            return math.nan if initial is None else float(initial)
        return float(values.iloc[-1])

    def direction_for(self, scenario: Scenario) -> str:  # noqa: D102
        goal = scenario.task.goals.get(self.metric, "min") if scenario.task else "min"
        return "maximize" if goal == "max" else "minimize"

    def check(self, scenario: Scenario) -> None:  # noqa: D102
        _check_metric("Final", self.metric, scenario)


@dataclass(frozen=True)
class RoundTime(Measure):
    """The ``q`` quantile of round durations (``time - t_start``), pooled over the seeds."""

    q: float = 0.95

    direction: ClassVar[str] = "minimize"
    low: ClassVar[float] = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "q", check_real("RoundTime.q", self.q, low=0.0, high=1.0))

    @property
    def name(self) -> str:  # noqa: D102
        return f"round_time_q{self.q:g}"

    @staticmethod
    def _durations(results: Results) -> np.ndarray:
        r = results.rounds
        return (r["time"] - r["t_start"]).to_numpy(dtype=np.float64)

    def per_run(self, results: Results) -> float:  # noqa: D102
        d = self._durations(results)
        return float(np.quantile(d, self.q)) if d.size else math.nan

    def combine(self, values: Sequence[float], runs: Sequence[Results]) -> float:
        """The quantile of every round of every seed together."""
        d = np.concatenate([self._durations(r) for r in runs]) if runs else np.empty(0)
        return float(np.quantile(d, self.q)) if d.size else math.nan


@dataclass(frozen=True)
class Jain(Measure):
    """Jain's fairness index of aggregated updates, over ``"devices"`` or ``"groups"``.

    Over groups it is the index of each group's updates per device, so a group is not
    favoured for being large.
    """

    over: str = "groups"

    direction: ClassVar[str] = "maximize"
    low: ClassVar[float] = 0.0
    high: ClassVar[float] = 1.0

    def __post_init__(self) -> None:
        if self.over not in ("devices", "groups"):
            raise ValueError(f'Jain.over must be "devices" or "groups", got {self.over!r}')

    @property
    def name(self) -> str:  # noqa: D102
        return f"jain_{self.over}"

    def per_run(self, results: Results) -> float:  # noqa: D102
        groups = decode_groups(results.meta.get("groups"), int(results.meta["n_devices"]))
        if self.over == "devices":
            table = participation(results.clients, groups, by="device")
            return jain_index(table["arrived"].to_numpy(dtype=np.float64))
        table = participation(results.clients, groups, by="group")
        return jain_index(table["updates_per_device"].to_numpy(dtype=np.float64))


@dataclass(frozen=True)
class UpdateShare(Measure):
    """The share of aggregated updates that came from the devices of ``group``."""

    group: str

    direction: ClassVar[str] = "maximize"
    low: ClassVar[float] = 0.0
    high: ClassVar[float] = 1.0

    @property
    def name(self) -> str:  # noqa: D102
        return f"share_{self.group}"

    def per_run(self, results: Results) -> float:  # noqa: D102
        groups = decode_groups(results.meta.get("groups"), int(results.meta["n_devices"]))
        table = participation(results.clients, groups, by="group")
        row = table[table["group"] == self.group]
        return float(row["update_share"].iloc[0]) if len(row) else math.nan

    def check(self, scenario: Scenario) -> None:  # noqa: D102
        names = scenario.fleet.device_groups()[0]
        if self.group not in names:
            raise ValueError(
                f"UpdateShare.group {self.group!r} is not a group of the fleet; its groups are "
                f"{list(names)}"
            )


@dataclass(frozen=True)
class SimTime(Measure):
    """Simulated seconds the run lasted (to its ``rounds``, target or ``max_time``)."""

    direction: ClassVar[str] = "minimize"
    low: ClassVar[float] = 0.0

    @property
    def name(self) -> str:  # noqa: D102
        return "sim_time"

    def per_run(self, results: Results) -> float:  # noqa: D102
        return float(results.meta.get("sim_time", math.nan))

    def bound(self, values: Sequence[float], n: int) -> float | None:
        """The mean if every seed still to run took no time."""
        return float(np.sum(values)) / n


@dataclass(frozen=True)
class Constraint:
    """A bound on a measure that every setting the search returns must meet.

    ``Constraint(RoundTime(0.95), at_most=60.0)``: 95% of rounds last at most a minute.
    ``Constraint(Jain("groups"), at_least=0.8)``; ``Constraint(UpdateShare("slow"),
    at_least=0.1)``; ``Constraint(SimTime(), at_most=3600)`` (a budget of simulated time).
    A measure that cannot be computed (NaN, e.g. no update arrived) does not meet it.
    """

    measure: Measure
    at_most: float | None = None
    at_least: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.measure, Measure):
            raise ValueError(f"Constraint.measure must be a tuning measure, got {self.measure!r}")
        if (self.at_most is None) == (self.at_least is None):
            raise ValueError(
                f"Constraint needs exactly one of at_most= or at_least=, got at_most="
                f"{self.at_most}, at_least={self.at_least}"
            )
        m = self.measure
        if self.at_most is not None:
            bound = check_real("Constraint.at_most", self.at_most)
            if bound < m.low:
                raise ValueError(
                    f"Constraint {m.name} <= {bound:g} can never be met: {m.name} is at least "
                    f"{m.low:g} in every run"
                )
        else:
            bound = check_real("Constraint.at_least", self.at_least)
            if bound > m.high:
                raise ValueError(
                    f"Constraint {m.name} >= {bound:g} can never be met: {m.name} is at most "
                    f"{m.high:g} in every run"
                )

    @property
    def name(self) -> str:
        """``"round_time_q0.95<=60"``."""
        if self.at_most is not None:
            return f"{self.measure.name}<={self.at_most:g}"
        return f"{self.measure.name}>={self.at_least:g}"

    @property
    def bound(self) -> float:
        """The bound, ``at_most`` or ``at_least``."""
        return float(self.at_most if self.at_most is not None else self.at_least)  # type: ignore[arg-type]

    def violation(self, value: float) -> float:
        """How far ``value`` is from meeting the bound (<= 0: met; ``inf`` for NaN)."""
        if math.isnan(value):
            return math.inf
        if self.at_most is not None:
            return value - self.at_most
        assert self.at_least is not None
        return self.at_least - value
