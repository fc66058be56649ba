"""FedAvg for the linear representation task: one shared model ``(B, w)`` for every client.

McMahan et al., "Communication-Efficient Learning of Deep Networks from Decentralized Data",
AISTATS 2017, applied to the model ``y = w^T B^T x`` as in the FedRep paper's comparison
(Collins et al., ICML 2021, Section 4: a single ``(B, w)`` cannot fit heterogeneous heads, since
the best it can do is ``B w = B* mean(w_i*)``).

Each participating client takes ``local_steps`` full-batch gradient steps of size
``step_size`` on ``f_i(B, w) = (1/2m) ||X_i B w - y_i||^2`` jointly in ``B`` and ``w``, starting
from the server model; the server averages the accepted ``(B_i, w_i)`` with equal weights (all
clients hold ``m`` samples). With ``local_steps=1`` this is FedSGD. Evaluation uses the shared
model for every client (no fine-tuning) by default; ``evaluate_heads="refit"`` instead refits
each evaluated client's head on its own samples for the learned ``B`` (ridge 1e-5), which is how
the FedRep paper scores FedSGD in its Figure 1. Work is ``local_steps`` units per round.

Partial work (``partial_work``): a client that did only ``tau_i <= local_steps`` of its steps
(a deadline round with :class:`~simfl.policies.RoundPlan` ``partial``) sends the model after
those steps. ``aggregation="fednova"`` then averages the normalised updates (Wang, Liu, Liang,
Joshi, Poor, "Tackling the Objective Inconsistency Problem in Heterogeneous Federated
Optimization", NeurIPS 2020, Eq. 6 with plain SGD, so ``a_i`` has ``||a_i||_1 = tau_i``):
``x <- x - tau_eff * mean_i((x - x_i) / tau_i)`` with ``tau_eff = mean_i tau_i`` (equal weights:
every client holds ``m`` samples). The default ``"mean"`` is FedAvg's plain average, which
over-weights the clients that did more steps (the objective inconsistency FedNova removes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from simfl._checks import check_choice, check_int, check_real
from simfl.algorithms._linear import (
    check_init,
    check_linear_task,
    initial_representation,
    job_samples,
    per_client,
    prefetch_jobs,
    solve_heads,
)
from simfl.algorithms.base import Algorithm, ClientMetrics, Updates
from simfl.algorithms.fednova import fednova, local_steps_done
from simfl.network import Payload, nbytes
from simfl.outcome import Outcome
from simfl.rng import Streams
from simfl.tasks.base import Task
from simfl.tasks.linear import LinearModel, LinearRepresentationData

__all__ = ["FedAvg", "FedAvgState"]

Array = NDArray[np.float64]


@dataclass(frozen=True)
class FedAvgState:
    """The shared representation ``B`` (d x k) and the shared head ``w`` (k)."""

    representation: Array
    head: Array


@dataclass(frozen=True)
class FedAvg(Algorithm[FedAvgState]):
    """Linear FedAvg on one shared ``(B, w)``.

    Parameters
    ----------
    step_size
        Local gradient step (> 0).
    local_steps
        Full-batch gradient steps per round (>= 1).
    init
        ``"random"`` (default: a random orthonormal ``B``) or ``"mom"``; the head starts at 0.
    init_clients
        Clients in the method-of-moments estimate when ``init="mom"`` (``None``: all).
    evaluate_heads
        ``"shared"`` (the FedAvg model as is) or ``"refit"`` (each client refits its head).
    aggregation
        ``"mean"`` (FedAvg) or ``"fednova"`` (normalised averaging, see the module docstring).
    """

    step_size: float = 0.1
    local_steps: int = 1
    init: str = "random"
    init_clients: int | None = None
    evaluate_heads: str = "shared"
    aggregation: str = "mean"

    name: ClassVar[str] = "FedAvg"
    partial_work: ClassVar[bool] = True
    fixed_jobs: ClassVar[bool] = True  # constant work, payload of fixed-shape arrays

    def __post_init__(self) -> None:
        check_real("FedAvg.step_size", self.step_size, low=0.0, low_open=True)
        check_int("FedAvg.local_steps", self.local_steps, low=1)
        check_init("FedAvg", self.init, self.init_clients)
        check_choice("FedAvg.evaluate_heads", self.evaluate_heads, ("shared", "refit"))
        check_choice("FedAvg.aggregation", self.aggregation, ("mean", "fednova"))

    def check(self, task: Task | None) -> None:  # noqa: D102
        check_linear_task("FedAvg", task)

    def initial_state(self, data: LinearRepresentationData, streams: Streams) -> FedAvgState:  # noqa: D102
        b = initial_representation(self.init, self.init_clients, data, streams)
        return FedAvgState(b, np.zeros(data.k))

    def work(self, state: FedAvgState, clients: NDArray[np.int64]) -> NDArray[np.float64]:  # noqa: D102
        return np.full(clients.shape, float(self.local_steps))

    def payload(self, state: FedAvgState) -> Payload:
        """The whole model ``(B, w)`` travels both ways."""
        size = nbytes(state.representation, state.head)
        return Payload(down=size, up=size)

    def local_updates(  # noqa: D102
        self,
        state: FedAvgState,
        data: LinearRepresentationData,
        clients: NDArray[np.int64],
        round: int,
        streams: Streams,
    ) -> Updates:
        return self._train(state, data, clients, round, None)

    def partial_updates(  # noqa: D102
        self,
        state: FedAvgState,
        data: LinearRepresentationData,
        clients: NDArray[np.int64],
        round: int,
        streams: Streams,
        steps: NDArray[np.float64],
    ) -> Updates:
        return self._train(state, data, clients, round, np.asarray(steps, dtype=np.int64))

    def prepare_jobs(  # noqa: D102
        self, data: LinearRepresentationData, clients: NDArray[np.int64], keys: NDArray[np.int64]
    ) -> None:
        prefetch_jobs(data, clients, keys)

    def job_updates(
        self,
        states: Sequence[FedAvgState],
        data: LinearRepresentationData,
        clients: NDArray[np.int64],
        keys: Sequence[int],
        streams: Streams,
    ) -> Updates:
        """The updates of asynchronous jobs in one call, each from its own model.

        Every product is taken per job (the samples of the task's ``job_batch``, then the
        same stacked steps as :meth:`local_updates`), so row ``i`` equals
        ``local_updates(states[i], data, clients[i:i + 1], keys[i], streams)`` to the last
        bit whatever jobs share the call.
        """
        samples = job_samples(data, clients, keys)
        if samples is None:
            return super().job_updates(states, data, clients, keys, streams)
        x, y = samples
        b = np.stack([s.representation for s in states])  # (C, d, k)
        w = np.stack([s.head for s in states])  # (C, k)
        return self._descend(x, y, b, w, clients, None)

    def _train(
        self,
        state: FedAvgState,
        data: LinearRepresentationData,
        clients: NDArray[np.int64],
        round: int,
        steps: NDArray[np.int64] | None,
    ) -> Updates:
        """``local_steps`` joint steps per client (client ``i`` stops after ``steps[i]``)."""
        x, y = data.train_batch(clients, round)
        c = clients.size
        b = np.broadcast_to(state.representation, (c, *state.representation.shape)).copy()
        w = np.broadcast_to(state.head, (c, state.head.size)).copy()
        return self._descend(x, y, b, w, clients, steps)

    def _descend(
        self,
        x: Array,
        y: Array,
        b: Array,
        w: Array,
        clients: NDArray[np.int64],
        steps: NDArray[np.int64] | None,
    ) -> Updates:
        """The joint steps from each client's own ``b`` ``(C, d, k)`` and ``w`` ``(C, k)``."""
        m = x.shape[1]
        loss = np.zeros(clients.size)
        for step in range(self.local_steps):
            xb = x @ b  # (C, m, k)
            residual = (xb @ w[:, :, None])[:, :, 0] - y  # (C, m)
            if step == 0:
                loss = 0.5 * np.mean(residual**2, axis=1)
            xtr = x.transpose(0, 2, 1) @ residual[:, :, None]  # (C, d, 1)
            grad_w = (xb.transpose(0, 2, 1) @ residual[:, :, None])[:, :, 0] / m
            grad_b = (xtr @ w[:, None, :]) / m
            if steps is None:
                b = b - self.step_size * grad_b
                w = w - self.step_size * grad_w
            else:  # clients past their steps keep their model
                on = steps > step
                b = np.where(on[:, None, None], b - self.step_size * grad_b, b)
                w = np.where(on[:, None], w - self.step_size * grad_w, w)
        return Updates(clients.astype(np.int64), {"representation": b, "head": w}, loss=loss)

    def aggregate(self, state: FedAvgState, updates: Updates, outcome: Outcome) -> FedAvgState:
        """The mean of the clients' models, or FedNova's normalised average."""
        params = updates.params
        if self.aggregation == "fednova":
            tau = local_steps_done(outcome, self.local_steps)
            return FedAvgState(
                fednova(state.representation, params["representation"], tau),
                fednova(state.head, params["head"], tau),
            )
        return FedAvgState(
            np.mean(params["representation"], axis=0), np.mean(params["head"], axis=0)
        )

    def shared(self, state: FedAvgState) -> dict[str, Array]:  # noqa: D102
        return {"representation": state.representation, "head": state.head}

    def with_shared(self, state: FedAvgState, shared: dict[str, Array]) -> FedAvgState:  # noqa: D102
        return FedAvgState(shared["representation"], shared["head"])

    def evaluated_model(self, state: FedAvgState, data: Any) -> LinearModel:
        """The model evaluated: the shared one, or ``B`` with refitted heads (see above)."""
        if self.evaluate_heads == "refit":
            x, y = data.fit_batch()
            heads = solve_heads(x, y, state.representation, 1e-5)
        else:
            heads = np.broadcast_to(state.head, (data.eval_clients.size, state.head.size))
        return LinearModel(state.representation, heads)

    def evaluate(self, state: FedAvgState, data: Any) -> dict[str, float]:
        """Metrics of the shared model (or of ``B`` with refitted heads, see above)."""
        metrics: dict[str, float] = data.evaluate(self.evaluated_model(state, data))
        return metrics

    def evaluate_clients(self, state: FedAvgState, data: Any) -> ClientMetrics | None:
        """Each evaluated client's ``test_mse`` under :meth:`evaluated_model`."""
        return per_client(data, self.evaluated_model(state, data))
