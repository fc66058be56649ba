"""A hand-built policy view and outcomes, for testing policy decisions without the engine."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from simfl.outcome import ARRIVED, Outcome
from simfl.rng import Streams


@dataclass
class FakeView:
    """A :class:`simfl.policies.View` whose every answer is set by the test.

    ``expected`` holds the (download, compute, upload) seconds each device reports (zeros by
    default), ``planned`` the oracle's job durations, ``sizes`` the client sizes.
    """

    n_devices: int = 10
    round: int = 0
    now: float = 0.0
    streams: Streams = field(default_factory=lambda: Streams(0))
    goals: dict[str, str] = field(default_factory=dict)
    mask: NDArray[np.bool_] | None = None
    expected: tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]] | None = None
    planned: NDArray[np.float64] | None = None
    sizes: NDArray[np.float64] | None = None
    last_row: dict[str, float] = field(default_factory=dict)

    def online(self) -> NDArray[np.int64]:
        if self.mask is None:
            return np.arange(self.n_devices, dtype=np.int64)
        return np.flatnonzero(self.mask).astype(np.int64)

    def online_mask(self) -> NDArray[np.bool_] | None:
        return self.mask

    def is_online(self, device: int) -> bool:
        return self.mask is None or bool(self.mask[device])

    def durations(self, devices: NDArray[np.int64], *, stage: int) -> NDArray[np.float64]:
        assert self.planned is not None
        return self.planned[devices]

    def expected_times(
        self, devices: NDArray[np.int64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
        if self.expected is None:
            zero = np.zeros(devices.size)
            return zero, zero.copy(), zero.copy()
        down, compute, up = (np.asarray(a, dtype=np.float64) for a in self.expected)
        return down[devices], compute[devices], up[devices]

    def client_sizes(self) -> NDArray[np.float64] | None:
        return self.sizes

    def last(self, column: str) -> float:
        return self.last_row.get(column, math.nan)


def outcome(
    devices: list[int],
    status: list[int],
    durations: list[float],
    loss: list[float] | None = None,
    round: int = 0,
) -> Outcome:
    """A synchronous round's outcome: jobs all started at 0 and ended after ``durations``."""
    st = np.array(status, dtype=np.int8)
    return Outcome(
        round=round,
        stage=0,
        t_start=0.0,
        time=max(durations),
        devices=np.array(devices, dtype=np.int64),
        status=st,
        job_start=np.zeros(len(devices)),
        job_end=np.array(durations, dtype=np.float64),
        staleness=np.where(st == ARRIVED, 0.0, np.nan),
        loss=None if loss is None else np.array(loss, dtype=np.float64),
    )
