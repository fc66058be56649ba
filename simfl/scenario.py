"""Scenarios: everything a run needs, as one frozen, validated dataclass.

A scenario is plain Python: build one, derive variants with ``dataclasses.replace``::

    base = Scenario(task=..., algorithm=..., fleet=..., policy=..., rounds=200, seed=0)
    other_seed = dataclasses.replace(base, seed=3)

A bad scenario fails at construction with a ``ValueError`` that names the field, the value and
what would be valid, before anything runs.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import KW_ONLY, dataclass
from typing import Any

from simfl._checks import check_int, check_real
from simfl.algorithms.base import Algorithm
from simfl.fleet import Fleet
from simfl.network import Network
from simfl.policies.base import Policy
from simfl.server import Server
from simfl.tasks.base import Task

__all__ = ["Scenario", "Target"]


@dataclass(frozen=True)
class Target:
    """Stop when a metric crosses a value: ``Target("distance", below=1e-3)``.

    Exactly one of ``below`` (reached when ``metric <= below``) and ``above`` (reached when
    ``metric >= above``) must be given, by keyword (``Target("accuracy", 0.6)`` is refused: it
    would not say which side is meant). Checked on evaluated rounds only.
    """

    metric: str
    _: KW_ONLY
    below: float | None = None
    above: float | None = None

    def __new__(cls, *args: Any, **kwargs: Any) -> Target:
        """Refuse a positional value with a message that says which keyword to use."""
        if len(args) > 1:
            metric, value = args[0], args[1]
            raise TypeError(
                f"Target's below= and above= are keyword-only, got Target({metric!r}, {value!r}); "
                f"write Target({metric!r}, above={value!r}) (reached when {metric} >= {value!r}) "
                f"or Target({metric!r}, below={value!r}) (reached when {metric} <= {value!r})"
            )
        return super().__new__(cls)

    def __post_init__(self) -> None:
        if not isinstance(self.metric, str) or not self.metric:
            raise ValueError(f"Target.metric must be a metric name, got {self.metric!r}")
        if (self.below is None) == (self.above is None):
            raise ValueError(
                f"Target needs exactly one of below= or above=, got below={self.below!r}, "
                f"above={self.above!r}"
            )
        if self.below is not None:
            object.__setattr__(self, "below", check_real("Target.below", self.below))
        if self.above is not None:
            object.__setattr__(self, "above", check_real("Target.above", self.above))

    def reached(self, metrics: dict[str, float]) -> bool:
        """Whether ``metrics`` meet the target (NaN never does)."""
        value = metrics.get(self.metric, math.nan)
        if self.below is not None:
            return value <= self.below
        assert self.above is not None
        return value >= self.above


# help(Target) and inspect.signature show __init__'s keyword-only fields, not __new__'s (*args)
_init = inspect.signature(Target.__init__)
Target.__signature__ = _init.replace(  # type: ignore[attr-defined]
    parameters=list(_init.parameters.values())[1:]
)


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """A complete, validated description of one simulated federated run.

    Parameters
    ----------
    task
        The learning problem (``None`` for timing-only runs with ``algorithms.TimingOnly``).
    algorithm
        What is computed.
    fleet
        The devices; client ``i`` of the task lives on device ``i``.
    policy
        Who takes part each round and when the server aggregates.
    rounds
        Stop after this many aggregations (>= 1).
    max_time
        Stop at this simulated time in seconds (> 0); a round still running then is abandoned
        and its jobs are recorded ``cancelled``.
    target
        Stop when the target metric value is reached (needs ``rounds`` or ``max_time`` too).
    eval_every
        Evaluate the metrics every this many rounds (and on the last round).
    seed
        Seed of every random stream of the run (>= 0).
    name
        Label used in summaries and output directories.
    network
        How devices reach the server (:class:`~simfl.network.Network`: shared links, edge
        servers); ``None``: every device has a private link given by the fleet's columns.
    server
        The server's own costs (:class:`~simfl.server.Server`: aggregation compute, handling
        of each message, how many messages at once); ``None`` (or ``Server()``, every cost
        zero): the server takes no time.
    """

    task: Task | None
    algorithm: Algorithm[Any]
    fleet: Fleet
    policy: Policy
    rounds: int | None = None
    max_time: float | None = None
    target: Target | None = None
    eval_every: int = 1
    seed: int = 0
    name: str = "scenario"
    network: Network | None = None
    server: Server | None = None

    def __post_init__(self) -> None:
        if self.task is not None and not isinstance(self.task, Task):
            raise ValueError(f"Scenario.task must be a simfl task or None, got {self.task!r}")
        if not isinstance(self.algorithm, Algorithm):
            raise ValueError(
                f"Scenario.algorithm must be a simfl algorithm, got {self.algorithm!r}"
            )
        if not isinstance(self.fleet, Fleet):
            raise ValueError(f"Scenario.fleet must be a simfl.Fleet, got {self.fleet!r}")
        if not isinstance(self.policy, Policy):
            raise ValueError(f"Scenario.policy must be a simfl policy, got {self.policy!r}")
        if self.rounds is not None:
            check_int("Scenario.rounds", self.rounds, low=1)
        if self.max_time is not None:
            object.__setattr__(
                self,
                "max_time",
                check_real("Scenario.max_time", self.max_time, low=0.0, low_open=True),
            )
        if self.rounds is None and self.max_time is None:
            raise ValueError(
                "Scenario needs a stop rule: rounds (>= 1) or max_time (> 0 seconds); a target "
                "alone could run forever"
            )
        if self.target is not None:
            if not isinstance(self.target, Target):
                raise ValueError(f"Scenario.target must be a simfl.Target, got {self.target!r}")
            metrics = self.task.metrics if self.task is not None else ()
            if self.target.metric not in metrics:
                raise ValueError(
                    f"Scenario.target.metric must be one of the task's metrics {list(metrics)}, "
                    f"got {self.target.metric!r}"
                )
        check_int("Scenario.eval_every", self.eval_every, low=1)
        check_int("Scenario.seed", self.seed, low=0, high=2**63 - 1)
        if not isinstance(self.name, str):
            raise ValueError(f"Scenario.name must be a string, got {self.name!r}")
        if self.network is not None:
            if not isinstance(self.network, Network):
                raise ValueError(
                    f"Scenario.network must be a simfl Network or None, got {self.network!r}"
                )
            self.network.check(self.fleet.size)
        if self.server is not None and not isinstance(self.server, Server):
            raise ValueError(f"Scenario.server must be a simfl.Server or None, got {self.server!r}")
        self.policy.check(self.fleet.size)
        self.algorithm.check(self.task)
        self.policy.check_algorithm(self.algorithm)
        self.policy.check_network(self.network)
        self.policy.check_task(self.task)
        self._check_availability_horizon()

    def _check_availability_horizon(self) -> None:
        """Refuse a ``max_time`` beyond the horizon a fleet's availability was generated to.

        Past its ``known_until`` (the ``horizon`` of a generator or a trace) an availability
        has no more intervals, as if every device had left for good: a run with a longer
        ``max_time`` would end ``offline`` there, silently short of its budget. (Complete
        intervals, e.g. :meth:`~simfl.fleet.Availability.churn`, are known for ever: their
        devices do leave.)
        """
        av = self.fleet.availability
        if av is not None and self.max_time is not None and self.max_time > av.known_until:
            raise ValueError(
                f"Scenario.max_time ({self.max_time:g} s) must be <= the horizon the fleet's "
                f"availability was generated up to ({av.known_until:g} s, its known_until): "
                f"after it no device would come back and the run would end 'offline'; generate "
                f"the availability with horizon >= max_time, or lower max_time"
            )
