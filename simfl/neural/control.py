"""Control-variate and normalised-averaging baselines: SCAFFOLD, SCAFFOLD+FT, FedNova.

Part of the seed papers' neural baselines (:mod:`simfl.neural.baselines` states the rules they
all share). SCAFFOLD and FedNova are evaluated with the global model (SCAFFOLD+FT fine-tunes the
head first, like FedAvg+FT).

Methods, papers and departures:

* SCAFFOLD -- Karimireddy et al., ICML 2020, Algorithm 1 with option II: local steps
  ``y <- y - lr (g(y) - c_i + c)``, then ``c_i+ = c_i - c + (x - y) / (K lr)`` (``K`` the steps
  taken), server ``x <- x + server_lr * (avg(y) - x)`` and ``c <- c + (1/N) sum_S (c_i+ - c_i)``
  (``N`` the number of clients). The corrected gradient enters the momentum buffer (the paper's
  SGD has none: set ``momentum=0``).
* FedNova -- Wang, Liu, Liang, Joshi, Poor, NeurIPS 2020, Eq. (6)-(7): FedAvg whose server
  averages normalised moves ``d_i = (x - y_i) / ||a_i||_1`` and scales by
  ``tau_eff = sum_i p_i ||a_i||_1``, with ``||a_i||_1 = (tau_i - rho (1 - rho^tau_i) / (1 - rho))
  / (1 - rho)`` for momentum ``rho`` (``tau_i`` for plain SGD) and ``tau_i`` the steps the client
  took (fewer under a partial-work deadline). Weight decay is left out of ``a_i``, as in the
  authors' code.

With a module's buffers (BatchNorm's running statistics): SCAFFOLD's controls, its corrected
steps and its server step ``server_lr`` cover the trainable parameters; a client's buffers are
updated by its forward passes, sent with its model, and the server takes their size-weighted
average (integer ones rounded). FedNova normalises the parameters' moves and averages the
buffers by size in the same way. Payload: SCAFFOLD sends the model (buffers included) and a
control variate (one tensor per trainable parameter) each way (the server ``x`` and ``c``
down, ``y_i`` and ``c_i+ - c_i`` up): twice the parameters FedAvg sends.
Optimisers: both take only :class:`~simfl.neural.SGD` as the client optimiser and no server
optimiser. SCAFFOLD's control variates correct SGD steps (``c_i+`` divides the move by
``K lr``) and its server step is its own ``server_lr``; FedNova's ``||a_i||_1`` is the sum of
the coefficients of momentum SGD's gradients, whose buffers start at zero each round (so its
``optimizer.state`` must be ``"reset"``), and its normalised averaging is its server rule.
SCAFFOLD with ``SGD(state="keep")`` carries each client's momentum buffers over to its next
round.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np
import torch
from numpy.typing import NDArray

from simfl._checks import check_real
from simfl.algorithms.base import Updates
from simfl.algorithms.fednova import fednova
from simfl.network import Payload
from simfl.neural.algorithms import NeuralFedAvg
from simfl.neural.base import NeuralState, weighted_means
from simfl.neural.models import Params
from simfl.neural.optim import DEFAULT_SGD, SGD, ClientOptimizer
from simfl.neural.personal import (
    CONTROL,
    Baseline,
    BaselineState,
    StepSeeds,
    batch_loss,
    check_common,
    grads,
    mean_loss,
    minibatches,
    stack_copy,
)
from simfl.neural.task import ClientImages
from simfl.outcome import Outcome
from simfl.rng import Streams

__all__ = ["SCAFFOLD", "SCAFFOLDFT", "NeuralFedNova", "momentum_norm"]

IntArray = NDArray[np.int64]


# ---------------------------------------------------------------------- SCAFFOLD
@dataclass(frozen=True, repr=False)
class SCAFFOLD(Baseline):
    """SCAFFOLD (option II control variates; see the module docstring).

    Parameters
    ----------
    epochs
        Local epochs per round (>= 1).
    server_lr
        Global step ``eta_g`` (> 0; the paper's default 1).
    optimizer
        Local SGD (``lr`` is ``eta_l``); a :class:`~simfl.neural.SGD` (module docstring).
    finetune_epochs
        Head epochs each client trains before it is evaluated (0: none; SCAFFOLD+FT: 10).
    """

    epochs: int = 5
    server_lr: float = 1.0
    optimizer: ClientOptimizer = DEFAULT_SGD
    finetune_epochs: int = 0

    name: ClassVar[str] = "SCAFFOLD"
    synchronous_only: ClassVar[str | None] = (
        "its client controls c_i are updated only by a synchronous aggregation"
    )
    sgd_only: ClassVar[str | None] = "SCAFFOLD's control variates correct SGD steps"
    server_rule: ClassVar[str | None] = "SCAFFOLD's server step is its own server_lr"

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_common(self)
        check_real(f"{owner}.server_lr", self.server_lr, low=0.0, low_open=True)

    def initial_extra(self, state: NeuralState) -> Params:
        """The server control ``c = 0``."""
        return self._zero_controls(state)

    @staticmethod
    def _zero_controls(state: NeuralState) -> Params:
        """A client's control before it first takes part: ``c_i = 0`` (trainable parameters)."""
        trainable = set(state.network.param_names)
        return {n: torch.zeros_like(p) for n, p in state.shared.items() if n in trainable}

    def payload(self, state: NeuralState) -> Payload:
        """The model (buffers included) and a control variate, each way."""
        model = super().payload(state)
        trainable = set(state.network.param_names)
        controls = sum(
            int(p.numel()) * p.element_size() for n, p in state.shared.items() if n in trainable
        )
        return Payload(down=model.down + controls, up=model.up + controls)

    def local_updates(  # noqa: D102
        self,
        state: NeuralState,
        data: ClientImages,
        clients: IntArray,
        round: int,
        streams: Streams,
        limit: NDArray[np.float64] | None = None,
    ) -> Updates:
        assert isinstance(state, BaselineState)
        net, sgd = state.network, self.optimizer
        assert isinstance(sgd, SGD)  # sgd_only
        idx, counts = self._data(data, clients)
        y = stack_copy(state.shared, clients.size, net.buffer_names)
        c_i = state.stacked(clients, self._zero_controls(state))
        corr = {n: state.extra[n] - c_i[n] for n in c_i}
        mom = self._momentum(state, clients, tuple(c_i))
        loss_sum, steps = np.zeros(clients.size), np.zeros(clients.size)
        rngs = self._rngs(streams, clients, round)
        seeds = StepSeeds(net, rngs)
        for (pos,), active in minibatches(rngs, counts, sgd.batch_size, self.epochs, limit):
            loss = batch_loss(net, y, data.x_train, data.y_train, idx, pos, seeds)
            g = grads(loss, y)
            mom.step(y, {n: g[n] + corr[n] for n in g}, active)
            loss_sum[active] += loss.detach().numpy()[active]
            steps[active] += 1
        k = torch.from_numpy(steps).to(torch.float32)
        params = {**y, **self._optimizer_rows(mom.bufs)}
        for n in c_i:
            p = y[n]
            scale = (k * sgd.lr).reshape(-1, *([1] * (p.dim() - 1)))
            moved = (state.shared[n] - p.detach()) / scale.clamp(min=1e-30)
            new_c = c_i[n] - state.extra[n] + moved
            params[CONTROL + n] = torch.where(scale > 0, new_c, c_i[n])
        return self._updates(state, clients, params, mean_loss(loss_sum, steps))

    def aggregate(self, state: NeuralState, updates: Updates, outcome: Outcome) -> NeuralState:
        """``x += server_lr (avg y - x)``; ``c += (1/N) sum (c_i+ - c_i)``; store ``c_i+``.

        Buffers take the average of the clients' (no server step).
        """
        assert isinstance(state, BaselineState)
        avg = weighted_means(updates, tuple(state.shared))
        trainable = set(state.network.param_names)
        shared = {
            n: p + self.server_lr * (avg[n] - p) if n in trainable else avg[n]
            for n, p in state.shared.items()
        }
        old = state.stacked(updates.clients, self._zero_controls(state)).items()
        n_clients = state.sizes.size
        extra = {
            n: state.extra[n]
            + torch.from_numpy(np.asarray(updates.params[CONTROL + n])).sub(c).sum(0) / n_clients
            for n, c in old
        }
        personal = self._personal_rows(state, updates, CONTROL)
        state = self.keep_opt_state(state, updates)
        return replace(state, shared=shared, extra=extra, personal=personal, round=state.round + 1)


@dataclass(frozen=True, repr=False)
class SCAFFOLDFT(SCAFFOLD):
    """SCAFFOLD whose evaluation fine-tunes each client's head first (default 10 epochs)."""

    finetune_epochs: int = 10

    name: ClassVar[str] = "SCAFFOLD+FT"


# ---------------------------------------------------------------------- FedNova
@dataclass(frozen=True, repr=False)
class NeuralFedNova(NeuralFedAvg):
    """FedNova: FedAvg with normalised averaging of unequal local work (module docstring)."""

    name: ClassVar[str] = "FedNova"
    sgd_only: ClassVar[str | None] = "FedNova's ||a_i||_1 normalises momentum SGD steps"
    reset_only: ClassVar[str | None] = (
        "FedNova's ||a_i||_1 counts momentum buffers that start at zero each round"
    )
    server_rule: ClassVar[str | None] = "FedNova's normalised averaging is its server step"

    def aggregate(self, state: NeuralState, updates: Updates, outcome: Outcome) -> NeuralState:
        """``x - tau_eff sum_i p_i (x - y_i) / ||a_i||_1`` over the shared parameters.

        Buffers take the size-weighted average; clients keep their local layers (a module's
        normalisation layers under ``Model(norm="local")``) as under FedAvg.
        """
        full = self.job_steps(state, updates.clients)
        if outcome.steps is None:
            tau = full
        else:
            done = np.asarray(outcome.steps[outcome.arrived], dtype=np.float64)
            if outcome.repeats is not None:
                done = np.repeat(done, outcome.repeats[outcome.arrived])
            tau = np.minimum(done, full)
        assert isinstance(self.optimizer, SGD)  # sgd_only
        norm = np.maximum(momentum_norm(tau, self.optimizer.momentum), 1e-12)  # 0 steps: no move
        weights = np.asarray(updates.weight, dtype=np.float64)
        buffers = set(state.network.buffer_names)
        averaged = weighted_means(updates, tuple(n for n in state.shared if n in buffers))
        shared = {
            n: averaged[n]
            if n in buffers
            else torch.from_numpy(
                fednova(
                    p.double().numpy(),
                    np.asarray(updates.params[n], dtype=np.float64),
                    norm,
                    weights,
                ).astype(np.float32)
            )
            for n, p in state.shared.items()
        }
        kept = self.keep_local(state, updates)
        return replace(kept, shared=shared, round=state.round + 1)


def momentum_norm(tau: NDArray[np.float64], rho: float) -> NDArray[np.float64]:
    """FedNova's ``||a_i||_1`` after ``tau`` steps with momentum ``rho`` (``tau`` when 0)."""
    tau = np.asarray(tau, dtype=np.float64)
    if rho == 0:
        return tau
    return np.asarray((tau - rho * (1 - rho**tau) / (1 - rho)) / (1 - rho), dtype=np.float64)
