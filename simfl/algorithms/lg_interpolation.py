"""LG-FedAvg's alpha-interpolation of a local and a global linear model (synthetic experiment).

Liang, Liu, Ziyin, Allen, Auerbach, Brent, Salakhutdinov, Morency, "Think Locally, Act Globally:
Federated Learning with Local and Global Representations", NeurIPS-W 2019 / arXiv 2001.01523,
Section 4 (the ensemble ``f = alpha f_u_m + (1 - alpha) f_v``), Section 5.1 and Appendix C.1,
and the published script ``plot_synthetic_data.py`` (algorithms.md 2.2). There is no iterative
training in that experiment: device ``m``'s local model is its OLS fit
``u_m = (X_m^T X_m)^{-1} X_m^T y_m`` and the global model is the OLS fit pooled over all devices,
``v = (sum_m X_m^T X_m)^{-1} sum_m X_m^T y_m`` (the ridgeless solution gradient descent converges
to, as the paper's Appendix A notes). Every device predicts with
``f_alpha = alpha u_m + (1 - alpha) v`` for each alpha of the task's grid.

The federated procedure simulated here: each participating device computes its sufficient
statistics ``X_m^T X_m`` and ``X_m^T y_m`` (and, for the recorded ``train_loss``, the training MSE
of its local OLS) and uploads the statistics (``d * d + d`` floats); the server adds the
statistics of every device whose update arrived to a running sum, each device counted once even
if it is selected again (its training set is fixed, so it would send the same numbers), and
solves the pooled normal equations. So the scenario runs under any fleet and policy: one round of
``WaitAll()`` over all ``M`` devices is the paper's experiment; with dropouts, deadlines or
over-selection the global model pools the devices that have arrived so far.

Choices and departures from the paper and the script:

* Global model before any device has arrived: the zero vector (the minimum-norm solution of the
  empty normal equations ``0 v = 0``). ``f_alpha`` is then ``alpha u_m``.
* Evaluation: every evaluated device uses its own local OLS (fitted on the device from its own
  training set; it needs no communication, so devices that never took part have one too) and
  the current global estimate. The final broadcast of the global model to every device is not
  simulated in time.
* Local OLS needs ``train_samples >= d`` (``check`` refuses fewer unless ``ridge > 0``).
  ``ridge`` (default 0, the paper) adds ``ridge * I`` to every local and to the pooled normal
  equations; an extension, not in the paper.
* The download is the current global model (``d`` floats) and the upload the full ``d x d``
  Gram matrix and ``X^T y``; sending only the upper triangle of the symmetric Gram matrix would
  save ``d (d - 1) / 2`` floats.
* The script draws its label noise with std ``sigma^2``, the paper with std ``sigma``: that is the
  task's ``convention`` (:class:`~simfl.tasks.lg_synthetic.LGSynthetic`, default the paper).
* Asynchronous policies are not supported (the server state is a sum of statistics, not
  parameters that could be mixed with staleness weights).

Work is one unit per job: one pass over the device's training set forming ``X^T X`` and
``X^T y`` and one ``d x d`` solve.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from simfl._checks import check_real
from simfl.algorithms.base import Algorithm, Updates
from simfl.network import Payload, nbytes
from simfl.outcome import Outcome
from simfl.rng import Streams
from simfl.tasks.base import Task
from simfl.tasks.lg_synthetic import LGSynthetic, LGSyntheticData

__all__ = ["LGInterpolation", "LGInterpolationState"]

Array = NDArray[np.float64]


@dataclass(frozen=True)
class LGInterpolationState:
    """The server's running sums of the arrived devices' statistics and the global estimate.

    Attributes
    ----------
    counted
        Per device of the fleet, whether its statistics are in the sums.
    gram, xty
        ``sum X_m^T X_m`` (d x d) and ``sum X_m^T y_m`` (d) over the counted devices.
    global_model
        The pooled least-squares solution (0 before any device has arrived).
    """

    counted: NDArray[np.bool_]
    gram: Array
    xty: Array
    global_model: Array

    @property
    def n_counted(self) -> int:
        """Devices pooled in the global model."""
        return int(self.counted.sum())


@dataclass(frozen=True)
class LGInterpolation(Algorithm[LGInterpolationState]):
    """Local OLS on each device, pooled OLS on the server, ``f_alpha`` interpolation.

    Parameters
    ----------
    ridge
        Ridge added to every normal equation (>= 0; default 0, exact OLS as in the paper).
    """

    ridge: float = 0.0

    name: ClassVar[str] = "LG-interpolation"

    def __post_init__(self) -> None:
        check_real("LGInterpolation.ridge", self.ridge, low=0.0)

    def check(self, task: Task | None) -> None:
        """Raise unless ``task`` is :class:`LGSynthetic` with enough samples for local OLS."""
        if not isinstance(task, LGSynthetic):
            raise ValueError(
                f"Scenario.task must be an LGSynthetic task (simfl.tasks.lg_synthetic) for "
                f"{self.name}, got {task!r}"
            )
        if self.ridge == 0.0 and task.train_samples < task.d:
            raise ValueError(
                f"LGSynthetic.train_samples must be >= LGSynthetic.d = {task.d} for local OLS "
                f"(LGInterpolation.ridge = 0), got {task.train_samples}"
            )

    def initial_state(self, data: LGSyntheticData, streams: Streams) -> LGInterpolationState:
        """Nothing pooled yet: zero sums and the zero global model."""
        d = data.d
        return LGInterpolationState(
            np.zeros(data.n_clients, dtype=bool), np.zeros((d, d)), np.zeros(d), np.zeros(d)
        )

    def payload(self, state: LGInterpolationState) -> Payload:
        """Down: the global model (d floats). Up: ``X^T X`` and ``X^T y`` (d*d + d floats)."""
        return Payload(down=nbytes(state.global_model), up=nbytes(state.gram, state.xty))

    def solve(self, gram: Array, xty: Array) -> Array:
        """``(gram + ridge I)^{-1} xty`` for one system or a stack of them."""
        if self.ridge > 0.0:
            gram = gram + self.ridge * np.eye(gram.shape[-1])
        return np.asarray(np.linalg.solve(gram, xty[..., None])[..., 0])

    def local_updates(
        self,
        state: LGInterpolationState,
        data: LGSyntheticData,
        clients: NDArray[np.int64],
        round: int,
        streams: Streams,
    ) -> Updates:
        """Each device's ``X^T X`` and ``X^T y`` (sent) and its local OLS train MSE (``loss``)."""
        gram, xty, yty = data.stats("train", clients)
        local = self.solve(gram, xty)
        quad = (local[:, None, :] @ gram @ local[:, :, None])[:, 0, 0]
        loss = (yty - 2.0 * np.sum(local * xty, axis=1) + quad) / data.spec.train_samples
        return Updates(np.asarray(clients, dtype=np.int64), {"gram": gram, "xty": xty}, loss=loss)

    def aggregate(
        self, state: LGInterpolationState, updates: Updates, outcome: Outcome
    ) -> LGInterpolationState:
        """Add the statistics of devices not yet counted (once each) and re-solve."""
        clients, first = np.unique(updates.clients, return_index=True)
        new = ~state.counted[clients]
        if not new.any():
            return state
        rows = first[new]
        counted = state.counted.copy()
        counted[clients[new]] = True
        gram = state.gram + updates.params["gram"][rows].sum(axis=0)
        xty = state.xty + updates.params["xty"][rows].sum(axis=0)
        return LGInterpolationState(counted, gram, xty, self.solve(gram, xty))

    def local_models(self, data: LGSyntheticData) -> Array:
        """Every evaluated device's local OLS model, ``(E, d)``."""
        gram, xty, _ = data.fit_stats()
        return self.solve(gram, xty)

    def evaluate(self, state: LGInterpolationState, data: Any) -> dict[str, float]:
        """The task's metrics of ``f_alpha`` for the local models and the current global one."""
        metrics: dict[str, float] = data.evaluate(self.local_models(data), state.global_model)
        return metrics
