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
    "concat_plans",
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
    t_start: float | Array  # one start for a cohort, or one per job
    download: Array
    compute: Array
    upload: Array
    fail_after: Array  # busy seconds until the device fails (inf: it does not)
    work: Array
    size_down: Array  # bytes each job downloads
    size_up: Array  # bytes each job uploads
    #: Stages each job has completed (0: downloading ... 3: uploaded), kept by its process.
    progress: NDArray[np.int8]

    @property
    def size(self) -> int:
        """Number of jobs."""
        return int(self.devices.size)

    @property
    def duration(self) -> Array:
        """Planned seconds from start to arrival of each job (ignoring dropouts)."""
        return self.download + self.compute + self.upload

    def start(self, j: int) -> float:
        """Start time of job ``j``."""
        return float(np.broadcast_to(self.t_start, self.devices.shape)[j])


def concat_plans(plans: list[JobPlan]) -> JobPlan:
    """One plan holding the jobs of several (each keeps its own start time)."""
    starts = [
        np.broadcast_to(np.asarray(p.t_start, dtype=np.float64), p.devices.shape) for p in plans
    ]
    return JobPlan(
        np.concatenate([p.devices for p in plans]),
        np.concatenate(starts),
        np.concatenate([p.download for p in plans]),
        np.concatenate([p.compute for p in plans]),
        np.concatenate([p.upload for p in plans]),
        np.concatenate([p.fail_after for p in plans]),
        np.concatenate([p.work for p in plans]),
        np.concatenate([p.size_down for p in plans]),
        np.concatenate([p.size_up for p in plans]),
        np.concatenate([p.progress for p in plans]),
    )


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
    n = devices.size
    return JobPlan(
        devices,
        t_start,
        download,
        compute,
        upload,
        fail_after,
        work,
        np.full(n, float(payload.down)),
        np.full(n, float(payload.up)),
        np.zeros(n, dtype=np.int8),
    )


def time_split(plan: JobPlan, t_end: Array) -> tuple[Array, Array, Array]:
    """Seconds each job actually spent downloading, computing and uploading.

    Completed stages count in full, the stage in progress at ``t_end`` counts up to ``t_end``.
    """
    spent = t_end - plan.t_start
    p = plan.progress
    d, c, u = plan.download, plan.compute, plan.upload
    zero = np.zeros_like(spent)
    down = np.where(p >= 1, d, np.minimum(spent, d))
    comp = np.where(p >= 2, c, np.where(p == 1, np.clip(spent - d, 0.0, c), zero))
    up = np.where(p >= 3, u, np.where(p == 2, np.clip(spent - d - c, 0.0, u), zero))
    return down, comp, up


def bytes_moved(plan: JobPlan, fleet: Fleet, down_s: Array, up_s: Array) -> tuple[Array, Array]:
    """Bytes each job moved: all of a completed transfer, the share of one in progress."""
    latency = fleet.latency[plan.devices]
    p = plan.progress
    down = np.where(
        p >= 1,
        plan.size_down,
        bytes_delivered(down_s, plan.size_down, fleet.bandwidth_down[plan.devices], latency),
    )
    up = np.where(
        p >= 3,
        plan.size_up,
        np.where(
            p == 2,
            bytes_delivered(up_s, plan.size_up, fleet.bandwidth_up[plan.devices], latency),
            0.0,
        ),
    )
    return down, up
