"""The read-only view of a run that policies decide from."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import simpy
from numpy.typing import NDArray

from simfl.engine.jobs import JobPlan
from simfl.engine.players import Jobs
from simfl.fleet import AvailabilityCursor, Fleet
from simfl.network import transfer_seconds
from simfl.results import Recorder
from simfl.rng import Streams

__all__ = ["PolicyView", "Viewed"]


class Viewed(Protocol):
    """What the view reads of a run (:class:`~simfl.engine.context.RunContext`)."""

    round: int
    env: simpy.Environment
    fleet: Fleet
    streams: Streams
    goals: dict[str, str]
    cursor: AvailabilityCursor | None
    jobs: Jobs
    algorithm: Any
    state: Any
    data: Any
    recorder: Recorder

    def online(self) -> NDArray[np.int64]:
        """The devices online now."""

    def plan(self, devices: NDArray[np.int64], *, key: int, stage: int) -> JobPlan:
        """Jobs of ``devices`` starting now."""


class PolicyView:
    """The read-only :class:`~simfl.policies.View` of a run that policies decide from."""

    __slots__ = ("_ctx",)

    def __init__(self, ctx: Viewed) -> None:
        self._ctx = ctx

    @property
    def round(self) -> int:  # noqa: D102
        return self._ctx.round

    @property
    def now(self) -> float:  # noqa: D102
        return float(self._ctx.env.now)

    @property
    def n_devices(self) -> int:  # noqa: D102
        return self._ctx.fleet.size

    @property
    def streams(self) -> Streams:  # noqa: D102
        return self._ctx.streams

    @property
    def goals(self) -> dict[str, str]:  # noqa: D102
        return self._ctx.goals

    def online(self) -> NDArray[np.int64]:  # noqa: D102
        return self._ctx.online()

    def online_mask(self) -> NDArray[np.bool_] | None:  # noqa: D102
        cursor = self._ctx.cursor
        return None if cursor is None else cursor.online(self._ctx.env.now)

    def is_online(self, device: int) -> bool:  # noqa: D102
        cursor = self._ctx.cursor
        return cursor is None or cursor.window(device, self._ctx.env.now)[0]

    def durations(self, devices: NDArray[np.int64], *, stage: int) -> NDArray[np.float64]:  # noqa: D102
        ctx = self._ctx
        return ctx.plan(devices, key=ctx.round, stage=stage).duration

    def expected_times(  # noqa: D102
        self, devices: NDArray[np.int64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
        ctx = self._ctx
        devices = np.asarray(devices, dtype=np.int64)
        fleet = ctx.fleet
        links = ctx.jobs.links
        if links is None:
            latency, bw_down, bw_up = (
                fleet.latency[devices],
                fleet.bandwidth_down[devices],
                fleet.bandwidth_up[devices],
            )
        else:
            latency, bw_down, bw_up = (a[devices] for a in links)
        payload = ctx.algorithm.payload(ctx.state)
        compute = fleet.mean_compute[devices] * ctx.algorithm.work(ctx.state, devices)
        return (
            transfer_seconds(payload.down, bw_down, latency),
            np.asarray(compute, dtype=np.float64),
            transfer_seconds(payload.up, bw_up, latency),
        )

    def client_sizes(self) -> NDArray[np.float64] | None:  # noqa: D102
        sizes = getattr(self._ctx.data, "client_sizes", None)
        return None if sizes is None else np.asarray(sizes(), dtype=np.float64)

    def last(self, column: str) -> float:  # noqa: D102
        return float(self._ctx.recorder.last_round(column))
