"""An algorithm with no math, for timing-only simulations (queueing studies, benchmarks)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from simfl._checks import check_int, check_real
from simfl.algorithms.base import Algorithm, Updates
from simfl.network import Payload
from simfl.outcome import Outcome
from simfl.rng import Streams
from simfl.tasks.base import Task

__all__ = ["TimingOnly"]


@dataclass(frozen=True)
class TimingOnly(Algorithm[None]):
    """No training: every job performs ``work_units`` units of work and moves fixed payloads.

    Use it with ``Scenario(task=None, ...)`` to study round times, arrivals and dropouts alone.

    Parameters
    ----------
    work_units
        Work units per job (> 0); compute time is ``work_units`` times the device's draw.
        Under partial work a job stops after a whole number of units.
    bytes_down, bytes_up
        Payload sizes in bytes (>= 0).
    """

    work_units: float = 1.0
    bytes_down: int = 0
    bytes_up: int = 0

    name: ClassVar[str] = "timing-only"
    partial_work: ClassVar[bool] = True
    fixed_jobs: ClassVar[bool] = True
    inert: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_real("TimingOnly.work_units", self.work_units, low=0.0, low_open=True)
        check_int("TimingOnly.bytes_down", self.bytes_down, low=0)
        check_int("TimingOnly.bytes_up", self.bytes_up, low=0)

    def check(self, task: Task | None) -> None:  # noqa: D102
        return None

    def initial_state(self, data: Any, streams: Streams) -> None:  # noqa: D102
        return None

    def work(self, state: None, clients: NDArray[np.int64]) -> NDArray[np.float64]:  # noqa: D102
        return np.full(clients.shape, self.work_units, dtype=np.float64)

    def payload(self, state: None) -> Payload:  # noqa: D102
        return Payload(self.bytes_down, self.bytes_up)

    def local_updates(  # noqa: D102
        self, state: None, data: Any, clients: NDArray[np.int64], round: int, streams: Streams
    ) -> Updates:
        return Updates(clients.astype(np.int64), {})

    def job_updates(  # noqa: D102
        self,
        states: Sequence[None],
        data: Any,
        clients: NDArray[np.int64],
        keys: Sequence[int],
        streams: Streams,
    ) -> Updates:
        return Updates(clients.astype(np.int64), {})

    def partial_updates(  # noqa: D102
        self,
        state: None,
        data: Any,
        clients: NDArray[np.int64],
        round: int,
        streams: Streams,
        steps: NDArray[np.float64],
    ) -> Updates:
        return Updates(clients.astype(np.int64), {})

    def aggregate(self, state: None, updates: Updates, outcome: Outcome) -> None:  # noqa: D102
        return None

    def evaluate(self, state: None, data: Any) -> dict[str, float]:  # noqa: D102
        return {}

    def shared(self, state: None) -> dict[str, NDArray[Any]]:  # noqa: D102
        return {}

    def with_shared(self, state: None, shared: dict[str, NDArray[Any]]) -> None:  # noqa: D102
        return None
