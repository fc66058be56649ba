"""Device jobs: what each selected device will do, planned before it starts.

A job is ``download -> compute -> upload``. Its stage durations and its dropout instant are
functions of the keyed random streams, the fleet and the algorithm's work and payload, so they
are planned for the whole cohort in one vectorised step; the SimPy processes in
:mod:`simfl.engine.playbacks` then plays the plan out in simulated time.

Dropouts: a device fails at rate ``dropout_rate`` per busy second. Because the exponential clock
is memoryless, its time-to-failure can be drawn when the job starts and raced against the
job's stages; the job is dropped if the failure comes first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from simfl.fleet import Fleet
from simfl.network import Payload, bytes_delivered, transfer_seconds
from simfl.outcome import ARRIVED, DROPPED
from simfl.rng import Streams

__all__ = [
    "JobPlan",
    "bytes_moved",
    "concat_plans",
    "failure_clocks",
    "fit_work",
    "plan_jobs",
    "planned_split",
    "resolution",
    "time_split",
]

Array = NDArray[np.float64]


@dataclass(frozen=True)
class JobPlan:
    """The jobs of one cohort (arrays aligned with ``devices``).

    The planned part (durations on uncontended links, the failure clock, work and payload) is
    fixed when the jobs start. The record part is kept up to date by the job processes:
    ``progress`` (stages completed, 0: downloading ... 3: uploaded), ``spent`` (busy seconds per
    stage so far), ``active_since`` (start of the current busy spell; NaN while paused or once
    ended) and ``moved`` (bytes delivered by an interrupted transfer; NaN: derive it from the
    time spent on a private link).
    """

    devices: NDArray[np.int64]
    t_start: float | Array  # one start for a cohort, or one per job
    download: Array
    compute: Array
    upload: Array
    fail_after: Array  # busy seconds until the device fails (inf: it does not)
    work: Array
    size_down: Array  # bytes each job downloads
    size_up: Array  # bytes each job uploads
    progress: NDArray[np.int8]
    spent: Array  # (n, 3)
    active_since: Array
    moved: Array  # (n, 2)
    #: Local steps each job does, under partial work (``None``: the algorithm's full job).
    steps: Array | None = None

    @property
    def size(self) -> int:
        """Number of jobs."""
        return int(self.devices.size)

    @property
    def duration(self) -> Array:
        """Planned seconds from start to arrival of each job (uncontended, no dropouts)."""
        return self.download + self.compute + self.upload

    def start(self, j: int) -> float:
        """Start time of job ``j``."""
        t = self.t_start
        return float(t) if isinstance(t, (float, int)) else float(t[j])

    def take(self, rows: NDArray[np.int64]) -> JobPlan:
        """The plan of the jobs numbered ``rows``."""
        t = self.t_start
        return replace(
            self,
            devices=self.devices[rows],
            t_start=t if np.ndim(t) == 0 else np.asarray(t)[rows],
            **{f: getattr(self, f)[rows] for f in _ROW_FIELDS},
            steps=None if self.steps is None else self.steps[rows],
        )


#: The fields of :class:`JobPlan` with one entry (or row) per job, besides ``devices``.
_ROW_FIELDS = (
    "download",
    "compute",
    "upload",
    "fail_after",
    "work",
    "size_down",
    "size_up",
    "progress",
    "spent",
    "active_since",
    "moved",
)


def concat_plans(plans: list[JobPlan]) -> JobPlan:
    """One plan holding the jobs of several (each keeps its own start time)."""
    starts = [
        np.broadcast_to(np.asarray(p.t_start, dtype=np.float64), p.devices.shape) for p in plans
    ]
    fields = ("devices", *_ROW_FIELDS)
    cat = {f: np.concatenate([getattr(p, f) for p in plans]) for f in fields}
    return JobPlan(t_start=np.concatenate(starts), **cat)


def failure_clocks(
    fleet: Fleet, devices: NDArray[np.int64], keys: int | NDArray[np.int64], streams: Streams
) -> Array:
    """Busy seconds until each job's device fails (``inf``: it does not), from keyed draws.

    The hazard is memoryless, so the whole clock is drawn when the job is planned, keyed by
    the device and ``keys`` (the round, or the device's job index).
    """
    rate = fleet.dropout_rate[devices]
    if not rate.any():  # no device can fail: skip the draws (keyed, so no other draw changes)
        return np.full(devices.size, np.inf)
    u = streams.uniform("dropout", devices, keys)
    with np.errstate(divide="ignore"):
        return np.where(rate > 0, -np.log(u) / rate, np.inf)


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
    links: tuple[Array, Array, Array] | None = None,
) -> JobPlan:
    """Plan the jobs of ``devices`` starting at ``t_start`` in ``round``.

    ``links`` (latency, downward and upward bottleneck bandwidth of each device's path) replaces
    the fleet's private links when the scenario has a network; transfers may then take longer
    than planned when links are shared.
    """
    compute = work * fleet.compute_draws(devices, round=round, stage=stage, streams=streams)
    if links is None:
        latency, bw_down, bw_up = (
            fleet.latency[devices],
            fleet.bandwidth_down[devices],
            fleet.bandwidth_up[devices],
        )
    else:
        latency, bw_down, bw_up = (a[devices] for a in links)
    download = transfer_seconds(payload.down, bw_down, latency)
    upload = transfer_seconds(payload.up, bw_up, latency)
    total = download + compute + upload
    if total.size and not total.max() < math.inf:  # inf or NaN: refused, with the job named
        bad = int(np.flatnonzero(~np.isfinite(total))[0])
        raise ValueError(
            f"the planned job of device {int(devices[bad])} in round {round} lasts "
            f"{float(download[bad])!r} + {float(compute[bad])!r} + {float(upload[bad])!r} "
            f"seconds (download + compute + upload): job durations must be finite; lower the "
            f"fleet's compute distribution or scale, or the algorithm's work"
        )
    fail_after = failure_clocks(fleet, devices, round, streams)
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
        progress=np.zeros(n, dtype=np.int8),
        spent=np.zeros((n, 3)),
        active_since=(
            np.full(n, float(t_start))
            if np.ndim(t_start) == 0
            else np.array(t_start, dtype=np.float64)
        ),
        moved=np.full((n, 2), np.nan),
    )


def fit_work(plan: JobPlan, t_start: float, deadline: float, steps: Array) -> JobPlan:
    """The jobs doing only the whole local steps that fit before ``t_start + deadline``.

    Partial work (:class:`~simfl.policies.RoundPlan` ``partial``): job ``j``'s full work is
    ``steps[j]`` local steps of ``compute / steps`` seconds each, so it does ``floor((deadline
    - download - upload) / step)`` of them, at most all, and then arrives by the deadline
    (exactly as the round's clock reckons it: ``t_start + duration <= t_start + deadline``). A
    job that cannot fit one step keeps its full work (it will be late). Work and compute shrink
    in proportion; the draws are unchanged. The plan's ``steps`` records the steps each job
    does.
    """
    full = np.asarray(steps, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        unit = np.where(full > 0, plan.compute / full, 0.0)
        room = deadline - plan.download - plan.upload
        done = np.where(unit > 0, np.floor(room / unit), full)
    done = np.clip(done, 0.0, full)
    compute = np.where(done < full, done * unit, plan.compute)
    for _ in range(2):  # rounding: step back one step where the sum would pass the deadline
        over = t_start + (plan.download + compute + plan.upload) > t_start + deadline
        done = np.where(over & (done > 0), done - 1.0, done)
        compute = np.where(done < full, done * unit, plan.compute)
    fits = done >= 1.0
    done = np.where(fits, done, full)
    with np.errstate(divide="ignore", invalid="ignore"):
        work = np.where(done < full, plan.work * (done / full), plan.work)
    return replace(plan, compute=np.where(fits, compute, plan.compute), work=work, steps=done)


def resolution(plan: JobPlan) -> tuple[Array, NDArray[np.bool_]]:
    """Busy seconds from each job's start until it resolves, and whether it arrives.

    On private links with the device always online a job is one race: it arrives after
    ``download + compute + upload`` seconds unless its failure clock runs out strictly before
    (then it is dropped at that instant). Both the one-timeout-per-job processes and the
    event-free synchronous rounds play jobs out from these numbers.
    """
    total = plan.duration
    arrives = plan.fail_after >= total
    return np.where(arrives, total, plan.fail_after), arrives


def planned_split(
    plan: JobPlan, status: NDArray[np.int8], t_end: Array
) -> tuple[Array, Array, Array, NDArray[np.int8]]:
    """Busy seconds per stage and stages completed of jobs played out as planned.

    The counterpart of :func:`time_split` for jobs on private links whose devices stay online:
    nothing is tracked while they run, because where a job stands at any instant follows from
    its plan. An arrived job completed every stage, a dropped one stopped at its failure
    instant, and a job the server stopped (late or cancelled) at ``t_end``.

    Returns
    -------
    download, compute, upload, progress
        Seconds per stage, and the number of stages completed (0 to 3).
    """
    stages = np.stack([plan.download, plan.compute, plan.upload], axis=1)
    ends = np.cumsum(stages, axis=1)  # busy seconds at the end of each stage
    start = np.broadcast_to(np.asarray(plan.t_start, dtype=np.float64), plan.devices.shape)
    elapsed = np.minimum(np.minimum(t_end - start, plan.fail_after), ends[:, 2])
    elapsed = np.where(status == ARRIVED, ends[:, 2], elapsed)
    elapsed = np.where(status == DROPPED, plan.fail_after, elapsed)
    progress = (ends <= elapsed[:, None]).sum(axis=1).astype(np.int8)
    begun = np.concatenate([np.zeros((plan.size, 1)), ends[:, :2]], axis=1)
    stage = np.arange(3)[None, :]
    current = np.maximum(elapsed[:, None] - begun, 0.0)
    spent = np.where(
        stage < progress[:, None], stages, np.where(stage == progress[:, None], current, 0.0)
    )
    return spent[:, 0], spent[:, 1], spent[:, 2], progress


def time_split(plan: JobPlan, t_end: Array) -> tuple[Array, Array, Array]:
    """Busy seconds each job spent downloading, computing and uploading.

    Completed stages count in full; a stage still in progress at ``t_end`` (a job stopped by
    the server or by the end of the run) counts up to ``t_end``. Paused time is not counted.
    """
    spent = plan.spent.copy()
    open_ = np.isfinite(plan.active_since) & (plan.progress < 3)
    rows = np.flatnonzero(open_)
    spent[rows, plan.progress[rows]] += t_end[rows] - plan.active_since[rows]
    return spent[:, 0], spent[:, 1], spent[:, 2]


def bytes_moved(
    plan: JobPlan,
    fleet: Fleet,
    down_s: Array,
    up_s: Array,
    links: tuple[Array, Array, Array] | None = None,
    progress: NDArray[np.int8] | None = None,
) -> tuple[Array, Array]:
    """Bytes each job moved: all of a completed transfer, the share of one in progress.

    ``progress`` (stages completed) defaults to the one the job processes kept in ``plan``.
    """
    d = plan.devices
    if links is None:
        latency, bw_down, bw_up = fleet.latency[d], fleet.bandwidth_down[d], fleet.bandwidth_up[d]
    else:
        latency, bw_down, bw_up = (a[d] for a in links)
    p = plan.progress if progress is None else progress
    part_down = np.where(
        np.isnan(plan.moved[:, 0]),
        bytes_delivered(down_s, plan.size_down, bw_down, latency),
        plan.moved[:, 0],
    )
    part_up = np.where(
        np.isnan(plan.moved[:, 1]),
        bytes_delivered(up_s, plan.size_up, bw_up, latency),
        plan.moved[:, 1],
    )
    down = np.where(p >= 1, plan.size_down, part_down)
    up = np.where(p >= 3, plan.size_up, np.where(p == 2, part_up, 0.0))
    return down, up
