"""What every learning task provides to the engine."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from simfl.rng import Streams

__all__ = ["Task"]


class Task(ABC):
    """Specification of a learning problem: a frozen dataclass in each subclass.

    A task is bound to a fleet size at run time (:meth:`build`), which gives the object that
    generates or loads each client's data on demand and evaluates models. Client ``i`` of the
    task lives on device ``i`` of the fleet.
    """

    #: Names of the metrics the bound task's ``evaluate`` returns, in column order. A task whose
    #: metrics depend on its parameters may define this as a property instead.
    metrics: ClassVar[tuple[str, ...]] = ()
    #: For each metric, whether smaller (``"min"``) or larger (``"max"``) is better.
    goals: ClassVar[dict[str, str]] = {}

    @abstractmethod
    def build(self, n_clients: int, streams: Streams) -> Any:
        """Bind the task to ``n_clients`` clients and the run's random streams."""
