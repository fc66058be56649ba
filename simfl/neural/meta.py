"""Meta-learning baselines: Per-FedAvg and HF-MAML.

Part of the seed papers' neural baselines (:mod:`simfl.neural.baselines` states the rules they
all share). Both are evaluated after one adaptation step and run under every policy (only the
server's model is kept).

Methods, papers and departures:

* Per-FedAvg -- Fallah, Mokhtari, Ozdaglar, NeurIPS 2020, Algorithm 1: each local step draws
  batches ``D, D'`` (and ``D''``) and takes ``w_tmp = w - alpha grad f(w; D)``,
  ``w <- w - lr (I - alpha H(w; D'')) grad f(w_tmp; D')``; ``hessian="fo"`` drops the Hessian
  term (first order), ``"hf"`` replaces ``H v`` by ``(grad f(w + delta v) - grad f(w - delta v))
  / (2 delta)`` on ``D''`` (Hessian-free). Evaluation: one step ``w - alpha grad f_i(w)`` on the
  client's whole training set (the personalised model of the MAML objective).
* HF-MAML -- the Hessian-free Per-FedAvg with SRPFL's ``alpha=1e-2, lr (beta)=1e-1,
  delta=1e-3``.

With a module's buffers (BatchNorm's running statistics): a client's update is what one torch
module trained by the papers' code does, so every training forward pass of a step (at ``w``,
at the adapted ``w_tmp``, and HF-MAML's two at ``w +- delta v``) updates the model's running
statistics (2 updates per step, 4 with ``"hf"``), which travel with the model and are averaged
by the server; the steps move the trainable parameters only. The evaluation's adaptation step
runs in training mode like a local step (dropout masks from the keyed stream
``("neural/adapt", client, aggregations so far)``), updating the running statistics that the
test then uses.
Optimisers: the outer step is the client optimiser's (any of :mod:`simfl.neural.optim`: MAML's
outer step is a plain optimiser step on the meta-gradient, commonly Adam), the inner
adaptation step stays a plain gradient step; the server averages the meta-models, so a
server optimiser steps on that average.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from numpy.typing import NDArray

from simfl._checks import check_choice, check_real
from simfl.algorithms.base import Updates
from simfl.neural.base import NeuralState
from simfl.neural.models import Params
from simfl.neural.optim import SGD, ClientOptimizer
from simfl.neural.personal import (
    Baseline,
    BaselineState,
    StepSeeds,
    batch_loss,
    check_common,
    grads,
    leaves,
    mean_loss,
    minibatches,
    stack_copy,
)
from simfl.neural.task import ClientImages
from simfl.rng import Streams

__all__ = ["HFMAML", "PerFedAvg"]

IntArray = NDArray[np.int64]
#: Per-FedAvg's and HF-MAML's outer step: plain SGD with SRPFL's beta = 0.1.
META_SGD = SGD(lr=0.1, momentum=0.0, weight_decay=0.0)


# ---------------------------------------------------------------------- Per-FedAvg, HF-MAML
@dataclass(frozen=True, repr=False)
class PerFedAvg(Baseline):
    """Per-FedAvg: FedAvg on the MAML objective ``f_i(w - alpha grad f_i(w))``.

    Parameters
    ----------
    epochs
        Local epochs per round (>= 1); a step consumes one minibatch of each role.
    alpha
        Inner (adaptation) step size (> 0).
    hessian
        ``"fo"`` (first order) or ``"hf"`` (Hessian-free finite differences).
    delta
        Finite-difference radius of ``"hf"`` (> 0).
    optimizer
        The outer step's client optimiser (``lr`` is the paper's ``beta``); defaults to plain
        SGD, lr 0.1.
    finetune_epochs
        Head epochs each client trains on the model it is evaluated with, before it is
        evaluated (0: none; see :class:`~simfl.neural.personal.Baseline`).
    """

    epochs: int = 5
    alpha: float = 1e-2
    hessian: str = "fo"
    delta: float = 1e-3
    optimizer: ClientOptimizer = META_SGD
    finetune_epochs: int = 0

    name: ClassVar[str] = "PerFedAvg"

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_common(self)
        check_real(f"{owner}.alpha", self.alpha, low=0.0, low_open=True)
        check_choice(f"{owner}.hessian", self.hessian, ("fo", "hf"))
        check_real(f"{owner}.delta", self.delta, low=0.0, low_open=True)

    @property
    def passes(self) -> float:  # type: ignore[override]
        """Two gradients per step, four with the Hessian-free correction."""
        return 4.0 if self.hessian == "hf" else 2.0

    def local_updates(  # noqa: D102
        self,
        state: NeuralState,
        data: ClientImages,
        clients: IntArray,
        round: int,
        streams: Streams,
        limit: NDArray[np.float64] | None = None,
    ) -> Updates:
        net, sgd = state.network, self.optimizer
        idx, counts = self._data(data, clients)
        w = stack_copy(state.shared, clients.size, net.buffer_names)
        bufs = {n: w[n] for n in net.buffer_names}  # the model's, updated by every pass
        mom = self._momentum(state, clients, tuple(n for n in w if n not in bufs))
        loss_sum, steps = np.zeros(clients.size), np.zeros(clients.size)
        rngs = self._rngs(streams, clients, round)
        seeds = StepSeeds(net, rngs)
        roles = 3 if self.hessian == "hf" else 2
        x, y = data.x_train, data.y_train
        for pos, active in minibatches(rngs, counts, sgd.batch_size, self.epochs, limit, roles):
            g = grads(batch_loss(net, w, x, y, idx, pos[0], seeds), w)
            tmp = {**leaves({n: w[n].detach() - self.alpha * g[n] for n in g}), **bufs}
            outer = batch_loss(net, tmp, x, y, idx, pos[1], seeds)
            d = grads(outer, tmp)
            if self.hessian == "hf":
                plus = {**leaves({n: w[n].detach() + self.delta * d[n] for n in d}), **bufs}
                minus = {**leaves({n: w[n].detach() - self.delta * d[n] for n in d}), **bufs}
                hp = grads(batch_loss(net, plus, x, y, idx, pos[2], seeds), plus)
                hm = grads(batch_loss(net, minus, x, y, idx, pos[2], seeds), minus)
                scale = self.alpha / (2 * self.delta)
                d = {n: d[n] - scale * (hp[n] - hm[n]) for n in d}
            mom.step(w, d, active)
            loss_sum[active] += outer.detach().numpy()[active]
            steps[active] += 1
        params = {**w, **self._optimizer_rows(mom.bufs)}
        return self._updates(state, clients, params, mean_loss(loss_sum, steps))

    def eval_params(self, state: BaselineState, data: ClientImages, clients: IntArray) -> Params:
        """One step ``w - alpha grad f_i(w)`` on each client's whole training set.

        A module's step runs in training mode (its buffers updated, dropout seeded from the
        keyed stream ``("neural/adapt", client, aggregations so far)``).
        """
        net = state.network
        idx, _ = self._data(data, clients)
        w = stack_copy(state.shared, clients.size, net.buffer_names)
        every = torch.arange(idx.shape[1]).expand(idx.shape[0], -1)
        pos = torch.where(idx >= 0, every, -1)
        seeds = StepSeeds(net, self._rngs(data.streams, clients, state.round, "neural/adapt"))
        g = grads(batch_loss(net, w, data.x_train, data.y_train, idx, pos, seeds), w)
        adapted = {n: (w[n] - self.alpha * g[n]).detach() for n in g}
        return {**adapted, **{n: w[n] for n in net.buffer_names}}


@dataclass(frozen=True, repr=False)
class HFMAML(PerFedAvg):
    """SRPFL's HF-MAML baseline: Hessian-free Per-FedAvg, alpha 1e-2, beta 1e-1, delta 1e-3."""

    hessian: str = "hf"

    name: ClassVar[str] = "HF-MAML"
