"""What happened to the jobs of one aggregation: job statuses and the typed :class:`Outcome`.

The engine builds an :class:`Outcome` for every aggregation and hands it to the algorithm
(``Algorithm.aggregate(state, updates, outcome)``: stragglers and dropouts are an input of the
math, like Flower's ``aggregate_fit(results, failures)``) and to the policy
(``SyncPolicy.observe``: what a real server would see). It is a plain record of arrays aligned
with the jobs; nothing in it refers to the engine.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

__all__ = ["ARRIVED", "CANCELLED", "DROPPED", "LATE", "RUNNING", "STATUSES", "Outcome"]

#: Final status of a job, as stored in ``Results.clients["status"]`` (index = code).
STATUSES = ("arrived", "late", "dropped", "cancelled")
ARRIVED, LATE, DROPPED, CANCELLED = 0, 1, 2, 3
#: Status of a job still in progress (never recorded).
RUNNING = -1


@dataclass(frozen=True, eq=False)
class Outcome:
    """The jobs that ended in one aggregation, and how each ended.

    Arrays are aligned with the jobs. For synchronous rounds these are the round's cohort (one
    job per distinct device); for asynchronous aggregations, the updates in the buffer and the
    jobs that dropped since the previous aggregation.

    Attributes
    ----------
    round
        Index of the aggregation (the model version it creates is ``round + 1``).
    stage
        Stage (participation level) of the round.
    t_start, time
        Simulated seconds at which the round started and at which it closed.
    devices
        Device (client) of each job.
    status
        ``ARRIVED``, ``LATE``, ``DROPPED`` or ``CANCELLED`` per job.
    job_start, job_end
        When each job started, and when it arrived, dropped or was stopped.
    staleness
        Versions created between each job's download and its update's application (0 for
        synchronous arrivals; NaN for jobs whose update was not applied).
    repeats
        Times each job's device was drawn (sampling with replacement; ``None``: once each). The
        update of a device drawn twice counts twice.
    work
        Work units each job was given (``None``: not reported); less than the full work under
        partial work.
    steps
        Local steps each job did under partial work (:class:`~simfl.policies.RoundPlan`
        ``partial``: only the whole steps that fit before the deadline); ``None``: every job
        did its full local work. The ``tau_i`` that FedNova normalises by.
    loss
        Mean local training loss each client reported with its update (NaN for jobs whose
        update was not computed; ``None``: the algorithm reports none). What a real server
        receives, so policies may learn from it (Oort's statistical utility).
    """

    round: int
    stage: int
    t_start: float
    time: float
    devices: NDArray[np.int64]
    status: NDArray[np.int8]
    job_start: NDArray[np.float64]
    job_end: NDArray[np.float64]
    staleness: NDArray[np.float64]
    repeats: NDArray[np.int64] | None = None
    work: NDArray[np.float64] | None = None
    steps: NDArray[np.float64] | None = None
    loss: NDArray[np.float64] | None = None

    @property
    def arrived(self) -> NDArray[np.bool_]:
        """Mask of the jobs whose update is aggregated."""
        return np.asarray(self.status == ARRIVED, dtype=np.bool_)

    @property
    def durations(self) -> NDArray[np.float64]:
        """Seconds from each job's start to its end (arrival, dropout or stop)."""
        return self.job_end - self.job_start

    def count(self, status: int) -> int:
        """Number of jobs with ``status``."""
        return int(np.count_nonzero(self.status == status))

    @property
    def n_arrived(self) -> int:
        """Jobs whose update is aggregated."""
        return self.count(ARRIVED)
