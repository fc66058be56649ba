"""Job rows: what each job spent and moved, and the energy it used (a part of the run context)."""

from __future__ import annotations

import numpy as np
import simpy
from numpy.typing import NDArray

from simfl.engine.jobs import JobPlan
from simfl.engine.players import Jobs
from simfl.fleet import Fleet
from simfl.fleet.energy import job_energy
from simfl.outcome import ARRIVED, DROPPED
from simfl.results import Recorder

__all__ = ["JobRecords"]


class JobRecords:
    """Appending the rows of ended jobs to the run's records."""

    env: simpy.Environment
    fleet: Fleet
    jobs: Jobs
    recorder: Recorder

    def record_jobs(
        self,
        plan: JobPlan,
        status: NDArray[np.int8],
        t_end: NDArray[np.float64],
        *,
        round: int | NDArray[np.int64],
        stage: int,
        staleness: NDArray[np.float64] | None = None,
        waits: bool = True,
    ) -> tuple[float, float]:
        """Append the rows of the jobs of ``plan``; return the bytes they moved down and up.

        ``waits``: whether the jobs' devices wait, after their job, for the aggregation
        happening now (synchronous rounds); it sets their idle energy
        (:mod:`simfl.fleet.energy`) when the fleet declares an energy model.
        """
        b_down, b_up = self.record_job_rows(
            plan, status, t_end, round=round, stage=stage, staleness=staleness, waits=waits
        )
        return float(b_down.sum()), float(b_up.sum())

    def record_job_rows(
        self,
        plan: JobPlan,
        status: NDArray[np.int8],
        t_end: NDArray[np.float64],
        *,
        round: int | NDArray[np.int64],
        stage: int,
        staleness: NDArray[np.float64] | None = None,
        waits: bool = True,
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """:meth:`record_jobs`, returning the bytes each job moved down and up."""
        n = plan.size
        down, comp, up, b_down, b_up = self.jobs.split(plan, status, t_end)
        if staleness is None:
            staleness = np.where(status == ARRIVED, 0.0, np.nan)
        rounds = np.asarray(round, dtype=np.int64)
        starts = np.asarray(plan.t_start, dtype=np.float64)
        energy = {}
        if self.fleet.energy is not None:
            energy = self._job_energy(plan, status, t_end, comp, b_down, b_up, waits)
        self.recorder.add_jobs(
            {
                "round": np.full(n, rounds) if rounds.ndim == 0 else rounds,
                "stage": np.full(n, stage),
                "device": plan.devices,
                "status": status,
                "t_start": np.full(n, starts) if starts.ndim == 0 else starts,
                "t_end": t_end,
                "download": down,
                "compute": comp,
                "upload": up,
                "work": plan.work,
                "bytes_down": b_down,
                "bytes_up": b_up,
                "staleness": staleness,
                **energy,
            }
        )
        return b_down, b_up

    def _job_energy(
        self,
        plan: JobPlan,
        status: NDArray[np.int8],
        t_end: NDArray[np.float64],
        compute: NDArray[np.float64],
        b_down: NDArray[np.float64],
        b_up: NDArray[np.float64],
        waits: bool,
    ) -> dict[str, NDArray[np.float64]]:
        """The energy columns of the jobs of ``plan`` (see :mod:`simfl.fleet.energy`)."""
        assert self.fleet.energy is not None
        arrived = status == ARRIVED
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(plan.compute > 0, np.clip(compute / plan.compute, 0.0, 1.0), 0.0)
        share = np.where(arrived, 1.0, share)  # an arrived job did all its work
        idle = np.zeros(plan.size)
        if waits:
            idle = np.where(status == DROPPED, 0.0, np.maximum(self.env.now - t_end, 0.0))
        return job_energy(
            self.fleet.energy[plan.devices],
            work_done=plan.work * share,
            bytes_down=b_down,
            bytes_up=b_up,
            idle_seconds=idle,
        )
