"""Device jobs: what each selected device will do in a round, planned before it starts.

A job is ``download -> compute -> upload``. Its stage durations and its dropout instant are
functions of the keyed random streams, the fleet and the algorithm's work and payload, so they
are planned for the whole cohort in one vectorised step; the SimPy processes in
:mod:`simfl.engine` then play the plan out in simulated time.

Dropouts: a device fails at rate ``dropout_rate`` per busy second. Because the exponential clock
is memoryless, its time-to-failure can be drawn when the job starts and raced against the
job's stages; the job is dropped if the failure comes first.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from simfl.fleet import Fleet
from simfl.network import Payload, bytes_delivered, transfer_seconds
from simfl.rng import Streams

__all__ = [
    "ARRIVED",
    "CANCELLED",
    "DROPPED",
    "LATE",
    "RUNNING",
    "STATUSES",
    "JobPlan",
    "bytes_moved",
    "plan_jobs",
    "time_split",
]

#: Final status of a job, as stored in ``Results.clients["status"]``.
STATUSES = ("arrived", "late", "dropped", "cancelled")
ARRIVED, LATE, DROPPED, CANCELLED = 0, 1, 2, 3
#: Status of a job still in progress (never recorded).
RUNNING = -1

Array = NDArray[np.float64]


@dataclass(frozen=True)
class JobPlan:
    """The planned jobs of one cohort (arrays aligned with ``devices``)."""

    devices: NDArray[np.int64]
    t_start: float
    download: Array
    compute: Array
    upload: Array
    fail_after: Array  # busy seconds until the device fails (inf: it does not)
    work: Array
    payload: Payload

    @property
    def size(self) -> int:
        """Number of jobs."""
        return int(self.devices.size)


def plan_jobs(
    fleet: Fleet,
    devices: NDArray[np.int64],
    *,
    round: int,
    stage: int,
    t_start: float,
    work: Array,
    payload: Payload,
    streams: Streams,
) -> JobPlan:
    """Plan the jobs of ``devices`` starting at ``t_start`` in ``round``."""
    compute = work * fleet.compute_draws(devices, round=round, stage=stage, streams=streams)
    latency = fleet.latency[devices]
    download = transfer_seconds(payload.down, fleet.bandwidth_down[devices], latency)
    upload = transfer_seconds(payload.up, fleet.bandwidth_up[devices], latency)
    rate = fleet.dropout_rate[devices]
    u = streams.uniform("dropout", devices, round)
    with np.errstate(divide="ignore"):
        fail_after = np.where(rate > 0, -np.log(u) / rate, np.inf)
    return JobPlan(devices, t_start, download, compute, upload, fail_after, work, payload)


def time_split(plan: JobPlan, status: NDArray[np.int8], t_end: Array) -> tuple[Array, Array, Array]:
    """Seconds each job actually spent downloading, computing and uploading."""
    spent = t_end - plan.t_start
    down = np.minimum(plan.download, spent)
    comp = np.clip(spent - plan.download, 0.0, plan.compute)
    up = np.clip(spent - plan.download - plan.compute, 0.0, plan.upload)
    done = status == ARRIVED
    return (
        np.where(done, plan.download, down),
        np.where(done, plan.compute, comp),
        np.where(done, plan.upload, up),
    )


def bytes_moved(plan: JobPlan, fleet: Fleet, down_s: Array, up_s: Array) -> tuple[Array, Array]:
    """Bytes each job moved down and up in the seconds it spent on each transfer."""
    latency = fleet.latency[plan.devices]
    return (
        bytes_delivered(down_s, plan.payload.down, fleet.bandwidth_down[plan.devices], latency),
        bytes_delivered(up_s, plan.payload.up, fleet.bandwidth_up[plan.devices], latency),
    )
