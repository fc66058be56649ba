"""FedRep for the linear representation task (FedRep Alg. 2, the instance SRPFL analyses).

Collins, Hassani, Mokhtari, Shakkottai, "Exploiting Shared Representations for Personalized
Federated Learning", ICML 2021, Section 4 (Algorithm 2). Each round, every participating client

1. draws its round samples ``(X_i, y_i)`` (fresh ones if the task says so),
2. computes its head exactly: ``w_i = argmin_w ||X_i B w - y_i||^2``,
3. takes one gradient step on the representation with that head fixed:
   ``B_i = B - eta * (1/m) X_i^T (X_i B w_i - y_i) w_i^T``,

and the server averages the ``B_i`` of the accepted clients and orthonormalises the average
(``B = Q`` of its QR factorisation). Heads stay on the clients and are never sent.

Departures and choices, each a parameter:

* ``init="mom"`` (default) is the paper's method-of-moments initialisation over all clients
  (``init_clients`` limits it to a uniform subset). The exchange of the ``Z_i`` matrices is not
  simulated in time: the clock starts at the first training round, as in SRPFL's code.
  The FedRep notebook instead uses 10 projected-GD iterations on all data (not reproduced here);
  ``init="random"`` starts from a random orthonormal matrix.
* ``orthonormalize=True`` follows the paper; the FedRep notebook skips the QR (``False``).
* ``step_size`` defaults to 0.25, the paper's ``1/(4 sigma_max^2)`` bound for the task's
  normalisation ``||w_i*|| = sqrt(k)``, where the average head covariance has eigenvalues near 1.
* Evaluation fits each evaluated client's head on that client's own samples for the current
  representation (exact least squares), then measures its test error.

Work is one unit per representation step (one exact head solve and ``local_steps`` gradient
steps over ``m`` samples; the paper's Algorithm 2 takes one, ``local_steps=1``, the default).
With ``local_steps > 1`` the head stays fixed at its exact solution while ``B`` takes several
steps (an extension, not in the paper), so partial work (``partial_work``) can stop a client
after any whole number of them; ``aggregation="fednova"`` then averages the normalised moves
of ``B`` (:mod:`simfl.algorithms.fednova`) before the QR.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from simfl._checks import check_bool, check_choice, check_int, check_real
from simfl.algorithms._linear import (
    check_init,
    check_linear_task,
    initial_representation,
    job_samples,
    layout_groups,
    per_client,
    prefetch_jobs,
    solve_heads,
    split_jobs,
    stack_like,
)
from simfl.algorithms.base import Algorithm, ClientMetrics, Updates
from simfl.algorithms.fednova import fednova, local_steps_done
from simfl.network import Payload, nbytes
from simfl.outcome import Outcome
from simfl.rng import Streams
from simfl.tasks.base import Task
from simfl.tasks.linear import LinearModel, LinearRepresentationData

__all__ = ["FedRep", "FedRepState"]

Array = NDArray[np.float64]


@dataclass(frozen=True)
class FedRepState:
    """The server's representation ``B`` (d x k)."""

    representation: Array


@dataclass(frozen=True)
class FedRep(Algorithm[FedRepState]):
    """Linear FedRep: exact local heads, one gradient step on ``B``, average, QR.

    Parameters
    ----------
    step_size
        Gradient step ``eta`` on the representation (> 0).
    init
        ``"mom"`` (method of moments, the paper) or ``"random"``.
    init_clients
        Number of clients in the method-of-moments estimate (``None``: all).
    orthonormalize
        Orthonormalise the averaged representation (paper: yes; FedRep notebook: no).
    local_steps
        Gradient steps on ``B`` per round with the exact head fixed (>= 1; paper: 1).
    aggregation
        ``"mean"`` (the paper) or ``"fednova"`` (normalised moves, for partial work).
    """

    step_size: float = 0.25
    init: str = "mom"
    init_clients: int | None = None
    orthonormalize: bool = True
    local_steps: int = 1
    aggregation: str = "mean"

    name: ClassVar[str] = "FedRep"
    partial_work: ClassVar[bool] = True
    fixed_jobs: ClassVar[bool] = True  # constant work, payload of fixed-shape arrays

    def __post_init__(self) -> None:
        check_real("FedRep.step_size", self.step_size, low=0.0, low_open=True)
        check_init("FedRep", self.init, self.init_clients)
        object.__setattr__(
            self, "orthonormalize", check_bool("FedRep.orthonormalize", self.orthonormalize)
        )
        check_int("FedRep.local_steps", self.local_steps, low=1)
        check_choice("FedRep.aggregation", self.aggregation, ("mean", "fednova"))

    def check(self, task: Task | None) -> None:  # noqa: D102
        check_linear_task("FedRep", task)

    def initial_state(self, data: LinearRepresentationData, streams: Streams) -> FedRepState:  # noqa: D102
        return FedRepState(initial_representation(self.init, self.init_clients, data, streams))

    def payload(self, state: FedRepState) -> Payload:
        """The representation travels both ways; heads never leave the clients."""
        size = nbytes(state.representation)
        return Payload(down=size, up=size)

    def work(self, state: FedRepState, clients: NDArray[np.int64]) -> NDArray[np.float64]:
        """One unit per representation step (``local_steps``)."""
        return np.full(clients.shape, float(self.local_steps))

    def local_updates(  # noqa: D102
        self,
        state: FedRepState,
        data: LinearRepresentationData,
        clients: NDArray[np.int64],
        round: int,
        streams: Streams,
    ) -> Updates:
        return self._train(state, data, clients, round, None)

    def partial_updates(  # noqa: D102
        self,
        state: FedRepState,
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
        states: Sequence[FedRepState],
        data: LinearRepresentationData,
        clients: NDArray[np.int64],
        keys: Sequence[int],
        streams: Streams,
    ) -> Updates:
        """The updates of asynchronous jobs in one call, each from its own representation.

        Every product is taken per job (stacks of one-job products: the samples of the
        task's ``job_batch``, the head solves, the steps), never across jobs, so row ``i``
        equals ``local_updates(states[i], data, clients[i:i + 1], keys[i], streams)`` to the
        last bit whatever jobs share the call.

        Each job's representation keeps its memory layout in the stack (:func:`stack_like`):
        a non-contiguous one (the method-of-moments start is a reversed view) takes numpy's
        loops instead of BLAS, as in the one-job call; a batch that mixes such a state with
        others is computed group by group.
        """
        reps = [s.representation for s in states]
        bases = stack_like(reps)
        if bases is None:
            groups = layout_groups(reps)
            return split_jobs(self, groups, states, data, clients, keys, streams)
        samples = job_samples(data, clients, keys)
        if samples is None:
            return super().job_updates(states, data, clients, keys, streams)
        x, y = samples
        heads = solve_heads(x, y, bases)
        theta = bases @ heads[:, :, None]  # (C, d, 1): B_i w_i, one product per job
        return self._descend(x, y, bases, heads, theta, clients, None)

    def _train(
        self,
        state: FedRepState,
        data: LinearRepresentationData,
        clients: NDArray[np.int64],
        round: int,
        steps: NDArray[np.int64] | None,
    ) -> Updates:
        """Exact heads, then ``local_steps`` steps on ``B`` (client ``i``: ``steps[i]`` of them)."""
        b = state.representation
        x, y = data.train_batch(clients, round)
        heads = solve_heads(x, y, b)
        theta = (b @ heads.T).T[:, :, None]  # (C, d, 1): B w_i, one product for the cohort
        return self._descend(x, y, b, heads, theta, clients, steps)

    def _descend(
        self,
        x: Array,
        y: Array,
        b: Array,
        heads: Array,
        theta: Array,
        clients: NDArray[np.int64],
        steps: NDArray[np.int64] | None,
    ) -> Updates:
        """The steps on ``B`` from the exact ``heads`` and ``theta = B w_i`` of each client.

        ``b`` is the cohort's ``(d, k)`` representation or one per client ``(C, d, k)``.
        """
        m = x.shape[1]
        residual = (x @ theta)[:, :, 0] - y  # (C, m)
        loss = 0.5 * np.mean(residual**2, axis=1)
        xtr = x.transpose(0, 2, 1) @ residual[:, :, None]  # (C, d, 1)
        grad = (xtr @ heads[:, None, :]) / m  # (C, d, k)
        bs = b - self.step_size * grad
        for step in range(1, self.local_steps):
            residual = ((x @ bs) @ heads[:, :, None])[:, :, 0] - y
            grad = ((x.transpose(0, 2, 1) @ residual[:, :, None]) @ heads[:, None, :]) / m
            if steps is None:
                bs = bs - self.step_size * grad
            else:  # clients past their steps keep their representation
                bs = np.where((steps > step)[:, None, None], bs - self.step_size * grad, bs)
        return Updates(clients.astype(np.int64), {"representation": bs, "head": heads}, loss=loss)

    def aggregate(self, state: FedRepState, updates: Updates, outcome: Outcome) -> FedRepState:
        """Average the clients' representations (or FedNova's), then orthonormalise."""
        reps = updates.params["representation"]
        if self.aggregation == "fednova":
            tau = local_steps_done(outcome, self.local_steps)
            return self.with_shared(
                state, {"representation": fednova(state.representation, reps, tau)}
            )
        return self.with_shared(state, {"representation": np.mean(reps, axis=0)})

    def shared(self, state: FedRepState) -> dict[str, Array]:  # noqa: D102
        return {"representation": state.representation}

    def with_shared(self, state: FedRepState, shared: dict[str, Array]) -> FedRepState:
        """The new representation, orthonormalised if ``orthonormalize``."""
        b = shared["representation"]
        return FedRepState(np.asarray(np.linalg.qr(b)[0] if self.orthonormalize else b))

    def personalize(self, state: FedRepState, data: LinearRepresentationData) -> LinearModel:
        """Each evaluated client's exact head on its own samples, for the current ``B``."""
        x, y = data.fit_batch()
        return LinearModel(state.representation, solve_heads(x, y, state.representation))

    def evaluate(self, state: FedRepState, data: Any) -> dict[str, float]:  # noqa: D102
        metrics: dict[str, float] = data.evaluate(self.personalize(state, data))
        return metrics

    def evaluate_clients(self, state: FedRepState, data: Any) -> ClientMetrics | None:
        """Each evaluated client's ``test_mse`` with its personalised head."""
        return per_client(data, self.personalize(state, data))
