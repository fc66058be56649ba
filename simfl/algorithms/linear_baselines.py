"""The baselines of FedRep's linear experiments: GD-GD, 10GD-GD and Local-only.

Collins, Hassani, Mokhtari, Shakkottai, "Exploiting Shared Representations for Personalized
Federated Learning", ICML 2021, Figures 1, 3 and 4, and their notebook
(``FedRep_linear_sims.ipynb``; algorithms.md 1.3-1.4). FedSGD is :class:`~simfl.algorithms.FedAvg`
with ``local_steps=1`` (and ``evaluate_heads="refit"`` for the Figure 1 evaluation).

GD-GD ("add" in the notebook) replaces FedRep's exact head solve by ``head_steps=1`` gradient
step on the client's head, 10GD-GD ("aff") by ten, before the one gradient step on ``B``. Heads
persist on the clients between their participations (the notebook's ``U`` matrix).

Departures and choices, each a parameter:

* Gradients are means over the client's ``m`` samples and the server averages the clients'
  ``B`` (FedRep's Alg. 2 convention); the notebook sums over clients and samples with data
  pre-scaled by ``1/sqrt(m)``, so its tuned step sizes are not ours. The reproduction script tunes
  every method's steps on a grid, as the paper did.
* ``orthonormalize=False`` by default, as in the notebook: with persistent heads a QR of the
  averaged ``B`` would change ``B w`` for every client.
* ``head_init="lstsq"`` (default) starts every client's head at its least-squares fit on its
  initialisation batch for the initial representation, the role the notebook's spectral
  initialisation plays for ``U``; ``"zero"`` starts them at zero.
* ``init`` ("mom" or "random") for ``B`` as in :class:`~simfl.algorithms.FedRep`.
* Work: ``head_steps + 1`` units per round, one per local gradient step over the client's
  ``m`` samples (each head step, then the step on ``B``), the rule of
  :class:`~simfl.algorithms.FedAvg` (``local_steps`` units) and
  :class:`~simfl.algorithms.FedMAvg` (``Q1 + Q2`` units): GD-GD costs 2 units, 10GD-GD 11.
  FedRep's exact head solve is not a gradient step and counts with its step on ``B`` as one
  unit. (In this numpy code a head step reuses ``X B`` and costs ``O(m k)``; a device running
  the method as published takes a full pass per step, which is what the units count.)

Local-only: every client fits its own d-dimensional model by ridge least squares (ridge 1e-5, as
in the notebook) on all the samples it has: its own data, plus, when the task draws fresh
samples, every batch it drew in the rounds it took part in. Nothing is communicated (payload 0);
its metrics have no ``distance`` (there is no shared representation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from simfl._checks import check_bool, check_choice, check_int, check_real
from simfl.algorithms._linear import (
    check_init,
    check_linear_task,
    initial_representation,
    per_client,
    solve_heads,
)
from simfl.algorithms.base import Algorithm, ClientMetrics, Updates
from simfl.network import Payload, nbytes
from simfl.outcome import Outcome
from simfl.rng import Streams
from simfl.tasks.base import Task
from simfl.tasks.linear import LinearModel, LinearRepresentationData

__all__ = ["GDGD", "GDGDState", "LocalOnly", "LocalOnlyState"]

Array = NDArray[np.float64]


@dataclass(frozen=True)
class GDGDState:
    """Representation ``B`` (d x k) and every client's persistent head (n x k)."""

    representation: Array
    heads: Array


@dataclass(frozen=True)
class GDGD(Algorithm[GDGDState]):
    """FedRep with gradient steps on the heads instead of the exact solve (GD-GD, 10GD-GD).

    Parameters
    ----------
    head_steps
        Gradient steps on the head per round (1: GD-GD, 10: 10GD-GD).
    head_step_size
        Step on the head (> 0).
    step_size
        Step on the representation (> 0).
    init, init_clients
        Initial representation, as for FedRep.
    head_init
        ``"lstsq"`` or ``"zero"`` (see the module docstring).
    orthonormalize
        QR after averaging (off by default, see the module docstring).

    Notes
    -----
    Work: ``head_steps + 1`` units per client and round (one per local gradient step, as
    ``FedAvg(local_steps=n)`` costs ``n``).
    """

    head_steps: int = 1
    head_step_size: float = 0.25
    step_size: float = 0.25
    init: str = "mom"
    init_clients: int | None = None
    head_init: str = "lstsq"
    orthonormalize: bool = False

    name: ClassVar[str] = "GD-GD"

    def __post_init__(self) -> None:
        check_int("GDGD.head_steps", self.head_steps, low=1)
        check_real("GDGD.head_step_size", self.head_step_size, low=0.0, low_open=True)
        check_real("GDGD.step_size", self.step_size, low=0.0, low_open=True)
        check_init("GDGD", self.init, self.init_clients)
        check_choice("GDGD.head_init", self.head_init, ("lstsq", "zero"))
        object.__setattr__(
            self, "orthonormalize", check_bool("GDGD.orthonormalize", self.orthonormalize)
        )

    def check(self, task: Task | None) -> None:  # noqa: D102
        check_linear_task("GDGD", task)

    def initial_state(self, data: LinearRepresentationData, streams: Streams) -> GDGDState:  # noqa: D102
        b = initial_representation(self.init, self.init_clients, data, streams)
        heads = np.zeros((data.n_clients, data.k))
        if self.head_init == "lstsq":
            for start in range(0, data.n_clients, 4096):
                chunk = np.arange(start, min(start + 4096, data.n_clients), dtype=np.int64)
                x, y = data.init_batch(chunk)
                heads[chunk] = solve_heads(x, y, b)
        return GDGDState(b, heads)

    def work(self, state: GDGDState, clients: NDArray[np.int64]) -> NDArray[np.float64]:
        """``head_steps + 1`` units: one per gradient step (the head steps, then ``B``'s)."""
        return np.full(clients.shape, float(self.head_steps + 1))

    def payload(self, state: GDGDState) -> Payload:
        """The representation travels both ways; heads stay on the clients."""
        size = nbytes(state.representation)
        return Payload(down=size, up=size)

    def local_updates(  # noqa: D102
        self,
        state: GDGDState,
        data: LinearRepresentationData,
        clients: NDArray[np.int64],
        round: int,
        streams: Streams,
    ) -> Updates:
        b = state.representation
        x, y = data.train_batch(clients, round)
        m = x.shape[1]
        xb = x @ b  # (C, m, k)
        w = state.heads[clients].copy()
        for _ in range(self.head_steps):
            residual = (xb @ w[:, :, None])[:, :, 0] - y
            w = (
                w
                - self.head_step_size * (xb.transpose(0, 2, 1) @ residual[:, :, None])[:, :, 0] / m
            )
        residual = (xb @ w[:, :, None])[:, :, 0] - y
        grad = (x.transpose(0, 2, 1) @ residual[:, :, None]) @ w[:, None, :] / m  # (C, d, k)
        return Updates(
            clients.astype(np.int64),
            {"representation": b[None, :, :] - self.step_size * grad, "head": w},
            loss=0.5 * np.mean(residual**2, axis=1),
        )

    def aggregate(self, state: GDGDState, updates: Updates, outcome: Outcome) -> GDGDState:
        """Average ``B`` (QR if asked); store the accepted clients' new heads."""
        b = np.mean(updates.params["representation"], axis=0)
        if self.orthonormalize:
            b = np.linalg.qr(b)[0]
        heads = state.heads.copy()
        heads[updates.clients] = updates.params["head"]
        return GDGDState(np.asarray(b), heads)

    def evaluate(self, state: GDGDState, data: Any) -> dict[str, float]:
        """Metrics with each evaluated client's own learned head."""
        metrics: dict[str, float] = data.evaluate(self._model(state, data))
        return metrics

    def evaluate_clients(self, state: GDGDState, data: Any) -> ClientMetrics | None:
        """Each evaluated client's ``test_mse`` with its own learned head."""
        return per_client(data, self._model(state, data))

    def _model(self, state: GDGDState, data: Any) -> LinearModel:
        return LinearModel(state.representation, state.heads[data.eval_clients])


@dataclass(frozen=True)
class LocalOnlyState:
    """Sufficient statistics of the samples each client has drawn in training rounds."""

    gram: Array | None  # (n, d, d), None until a fresh-sample round happens
    moment: Array | None  # (n, d)


@dataclass(frozen=True)
class LocalOnly(Algorithm[LocalOnlyState]):
    """Every client learns alone: ridge least squares in ``R^d`` on its own samples.

    Parameters
    ----------
    ridge
        Ridge penalty (>= 0; 1e-5 as in the FedRep notebook).
    """

    ridge: float = 1e-5

    name: ClassVar[str] = "Local-only"

    def __post_init__(self) -> None:
        check_real("LocalOnly.ridge", self.ridge, low=0.0)

    def check(self, task: Task | None) -> None:  # noqa: D102
        check_linear_task("LocalOnly", task)

    def initial_state(self, data: Any, streams: Streams) -> LocalOnlyState:  # noqa: D102
        return LocalOnlyState(None, None)

    def payload(self, state: LocalOnlyState) -> Payload:
        """Nothing is communicated."""
        return Payload(0, 0)

    def local_updates(  # noqa: D102
        self,
        state: LocalOnlyState,
        data: Any,
        clients: NDArray[np.int64],
        round: int,
        streams: Streams,
    ) -> Updates:
        x, y = data.train_batch(clients, round)
        xt = x.transpose(0, 2, 1)
        u = solve_heads(x, y, np.eye(data.d), self.ridge)
        residual = (x @ u[:, :, None])[:, :, 0] - y
        return Updates(
            clients.astype(np.int64),
            {"gram": xt @ x, "moment": (xt @ y[:, :, None])[:, :, 0]},
            loss=0.5 * np.mean(residual**2, axis=1),
        )

    def aggregate(
        self, state: LocalOnlyState, updates: Updates, outcome: Outcome
    ) -> LocalOnlyState:
        """Each accepted client adds its round's samples to its own statistics (no averaging)."""
        n, d = updates.params["gram"].shape[0], updates.params["gram"].shape[1]
        if n == 0:
            return state
        clients = updates.clients
        size = int(clients.max()) + 1
        gram = np.zeros((size, d, d)) if state.gram is None else state.gram
        moment = np.zeros((size, d)) if state.moment is None else state.moment
        if gram.shape[0] < size:
            gram = np.concatenate([gram, np.zeros((size - gram.shape[0], d, d))])
            moment = np.concatenate([moment, np.zeros((size - moment.shape[0], d))])
        gram, moment = gram.copy(), moment.copy()
        np.add.at(gram, clients, updates.params["gram"])
        np.add.at(moment, clients, updates.params["moment"])
        return LocalOnlyState(gram, moment)

    def evaluate(self, state: LocalOnlyState, data: Any) -> dict[str, float]:
        """Test MSE of each evaluated client's own ridge model (no ``distance``)."""
        metrics: dict[str, float] = data.evaluate(self._model(state, data))
        return metrics

    def evaluate_clients(self, state: LocalOnlyState, data: Any) -> ClientMetrics | None:
        """Each evaluated client's ``test_mse`` with its own ridge model."""
        return per_client(data, self._model(state, data))

    def _model(self, state: LocalOnlyState, data: Any) -> LinearModel:
        x, y = data.fit_batch()
        xt = x.transpose(0, 2, 1)
        gram = xt @ x
        moment = (xt @ y[:, :, None])[:, :, 0]
        if data.fresh_samples and state.gram is not None:
            ev = data.eval_clients
            known = ev < state.gram.shape[0]
            gram[known] += state.gram[ev[known]]
            assert state.moment is not None
            moment[known] += state.moment[ev[known]]
        gram = gram + self.ridge * np.eye(data.d)
        u = np.linalg.solve(gram, moment[:, :, None])[:, :, 0]
        return LinearModel(None, u)
