"""What a server learns of each device's speed by watching its jobs (no oracle).

A real server sees when it sent a job and when the update came back, so it knows the duration
of every job that *arrived*. Of a job that did not (late, cancelled by over-selection, or
dropped) it knows only that the job ran for at least the time it waited: a lower bound.
:class:`Observations` keeps both per device, for policies that learn speeds from outcomes
(Oort, TiFL, FedCS with ``estimate="observed"``).

Only arrivals are seen in full, and under a deadline only the fast draws arrive, so the mean of
the arrived durations underestimates a slow device. :meth:`Observations.time_on_test` corrects
for that the standard way for right-censored data: the total time the device's jobs ran
(arrived, late or cancelled) per arrival, the maximum-likelihood mean of exponential durations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from simfl.outcome import ARRIVED, CANCELLED, LATE, Outcome

__all__ = ["Observations"]

A = TypeVar("A", bound=NDArray[Any])


def _frozen(a: A) -> A:
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False)
class Observations:
    """Per-device record of the job durations a server has seen (read-only arrays).

    Attributes
    ----------
    total
        Sum of the durations of the device's arrived jobs, in seconds.
    count
        Number of its arrived jobs.
    last
        Duration of its most recent arrived job (NaN: none yet).
    bound
        The longest time one of its jobs ran without arriving since its last arrival (0: none):
        a lower bound on its current job duration.
    censored
        Total time its late and cancelled jobs ran (stopped by the server while running; a
        dropped job says nothing about speed and is left out).
    """

    total: NDArray[np.float64]
    count: NDArray[np.int64]
    last: NDArray[np.float64]
    bound: NDArray[np.float64]
    censored: NDArray[np.float64]

    @classmethod
    def empty(cls, n_devices: int) -> Observations:
        """Nothing seen yet, for a fleet of ``n_devices``."""
        return cls(
            total=_frozen(np.zeros(n_devices)),
            count=_frozen(np.zeros(n_devices, dtype=np.int64)),
            last=_frozen(np.full(n_devices, np.nan)),
            bound=_frozen(np.zeros(n_devices)),
            censored=_frozen(np.zeros(n_devices)),
        )

    def seen(self, outcome: Outcome) -> Observations:
        """The record after ``outcome``: arrivals add a duration, the other jobs a bound."""
        devices, status = outcome.devices, outcome.status
        elapsed = outcome.durations
        arrived = status == ARRIVED
        stopped = (status == LATE) | (status == CANCELLED)
        total, count, last = self.total.copy(), self.count.copy(), self.last.copy()
        bound, censored = self.bound.copy(), self.censored.copy()
        hit, miss = devices[arrived], devices[~arrived]
        total[hit] += elapsed[arrived]
        count[hit] += 1
        last[hit] = elapsed[arrived]
        bound[hit] = 0.0
        bound[miss] = np.maximum(bound[miss], elapsed[~arrived])
        censored[devices[stopped]] += elapsed[stopped]
        return Observations(
            _frozen(total), _frozen(count), _frozen(last), _frozen(bound), _frozen(censored)
        )

    def mean(self) -> NDArray[np.float64]:
        """Mean duration of each device's arrived jobs (NaN where none arrived)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.count > 0, self.total / np.maximum(self.count, 1), np.nan)

    def time_on_test(
        self, devices: NDArray[np.int64], prior: NDArray[np.float64]
    ) -> NDArray[np.float64]:
        """Mean job duration of each of ``devices``, from every job it ran and a ``prior``.

        ``(prior + total + censored) / (1 + count)``: the time its arrived, late and cancelled
        jobs ran, plus ``prior`` counted as one arrived job, per arrival. With nothing seen it
        is ``prior``; every late or cancelled job raises it.
        """
        ran = prior + self.total[devices] + self.censored[devices]
        return np.asarray(ran / (1 + self.count[devices]), dtype=np.float64)
