"""The seed papers' neural baselines: SCAFFOLD, Ditto, APFL, Per-FedAvg, pFedMe, L2GD, FedNova.

FedRep's Table 1 (Collins et al., ICML 2021) compares against SCAFFOLD, Ditto, APFL, Per-FedAvg
and L2GD; SRPFL (Tziotis et al., TMLR 2023) against HF-MAML and FLANP (FedAvg under SRPFL's
schedule: :func:`simfl.policies.flanp`); pFedMe and FedNova complete the set. Each is a small
frozen dataclass on :class:`~simfl.neural.base.NeuralAlgorithm`: every layer is shared, the
server state is a :class:`BaselineState` (the base state plus each client's ``personal``
tensors and the server's ``extra`` ones), and the local update of a cohort is one batched
computation (stacked parameters, one forward and backward pass per step for every client).

Common rules (as for the other neural algorithms):

* Minibatches: in every local epoch a client cuts a fresh permutation of its samples, drawn
  from the keyed stream ``("neural/batches", client, round)``, into batches of
  ``optimizer.batch_size``; algorithms that need several independent batches per step
  (Per-FedAvg) draw one permutation per batch role, in role order, each epoch. Ditto's personal
  update draws from ``("neural/personal", client, round)``.
* The main SGD step is ``torch.optim.SGD``'s (``optimizer``: momentum, weight decay on weights
  only, buffers new each round); the other steps of a method (inner steps, mixing weights,
  averaging steps) are plain gradient steps as in the papers.
* The server averages weighted by training-set size, as every simfl neural algorithm does (the
  papers average uniformly over the sampled clients; the two agree when sizes are equal, as
  with FedRep's shards).
* Personalised methods (Ditto, APFL, pFedMe, L2GD) are evaluated with each client's own
  personalised model on its own test split, like FedRep; a client that never took part uses
  the initial model as its personal one (every ``v_k^0 = w^0`` in the papers). Per-FedAvg and
  HF-MAML are evaluated after one adaptation step, SCAFFOLD and FedNova with the global model
  (SCAFFOLD+FT fine-tunes the head first, like FedAvg+FT). Every baseline takes
  ``finetune_epochs``: each client then trains the head of the model it is evaluated with for
  that many epochs before the test (:class:`~simfl.neural.personal.Baseline`), so a comparison
  can give every method the final fine-tuning budget of FedRep's "+FT" rows.
* Partial work: a step is one minibatch step of the client's schedule (for Ditto the personal
  steps come first, then the global ones), so a client stopped by a deadline did a prefix of
  its full update.
* Policies: every synchronous family (sync, edge) runs every baseline. Asynchronous and tiered
  policies mix only the server's model, so methods whose clients keep state that the
  aggregation updates (SCAFFOLD's controls, the personal models of Ditto, APFL, pFedMe and
  L2GD) refuse them at construction (:attr:`~simfl.algorithms.Algorithm.synchronous_only`);
  Per-FedAvg, HF-MAML and FedNova run under them (a FedNova update applied alone is its own
  normalised move, so the policy's mixing decides).

Methods, papers and departures:

* SCAFFOLD -- Karimireddy et al., ICML 2020, Algorithm 1 with option II: local steps
  ``y <- y - lr (g(y) - c_i + c)``, then ``c_i+ = c_i - c + (x - y) / (K lr)`` (``K`` the steps
  taken), server ``x <- x + server_lr * (avg(y) - x)`` and ``c <- c + (1/N) sum_S (c_i+ - c_i)``
  (``N`` the number of clients). The corrected gradient enters the momentum buffer (the paper's
  SGD has none: set ``momentum=0``).
* Ditto -- Li, Hu, Beirami, Smith, ICML 2021, Algorithm 1: each selected client first takes
  ``personal_epochs`` epochs of ``v <- v - lr (grad F(v) + lam (v - w^t))`` against the
  received global ``w^t``, then ``epochs`` epochs of local SGD on ``w`` (FedAvg); the server
  averages the ``w``.
* APFL -- Deng, Kamani, Mahdavi, 2020, Algorithm 1: a client trains the global copy ``w`` and
  its own ``v`` on the same minibatch, ``v`` through the mixture ``v_bar = a v + (1 - a) w``
  (gradient ``a grad f(v_bar)``), and with ``adapt=True`` also
  ``a <- clip(a - alpha_lr <v - w, grad f(v_bar)>, 0, 1)``; the server averages the ``w``. The
  personal model evaluated is ``a_i v_i + (1 - a_i) w`` with the current global ``w``.
* Per-FedAvg -- Fallah, Mokhtari, Ozdaglar, NeurIPS 2020, Algorithm 1: each local step draws
  batches ``D, D'`` (and ``D''``) and takes ``w_tmp = w - alpha grad f(w; D)``,
  ``w <- w - lr (I - alpha H(w; D'')) grad f(w_tmp; D')``; ``hessian="fo"`` drops the Hessian
  term (first order), ``"hf"`` replaces ``H v`` by ``(grad f(w + delta v) - grad f(w - delta v))
  / (2 delta)`` on ``D''`` (Hessian-free). Evaluation: one step ``w - alpha grad f_i(w)`` on the
  client's whole training set (the personalised model of the MAML objective).
* HF-MAML -- the Hessian-free Per-FedAvg with SRPFL's ``alpha=1e-2, lr (beta)=1e-1,
  delta=1e-3``.
* pFedMe -- T. Dinh, Tran, Nguyen, NeurIPS 2020, Algorithm 1: per minibatch, ``inner_steps``
  steps ``theta <- theta - personal_lr (grad f(theta; D) + lam (theta - w))`` (``theta`` starts
  each round at the received model and is warm-started across minibatches, as in the authors'
  code), then ``w <- w - lr lam (w - theta)``; the server takes
  ``w <- (1 - beta) w + beta avg(w_i)``. The personal model is the last ``theta``. Plain SGD
  (``optimizer.momentum`` and ``weight_decay`` must be 0).
* L2GD -- Hanzely and Richtarik, 2020 (loopless local GD on
  ``sum f_i(x_i) + lam/2 sum ||x_i - x_bar||^2``): each client trains its own ``x_i``; an
  averaging step moves every participant to ``x_i - mix (x_i - x_bar)`` (the paper's
  ``mix = eta lam / (n p)``, local step size ``optimizer.lr = eta / (n (1 - p))``). Departure:
  the paper's coin flips (probability ``p`` of averaging per step) are replaced by simfl's rounds:
  ``epochs`` epochs of local steps, then one averaging step among the round's participants.
* FedNova -- Wang, Liu, Liang, Joshi, Poor, NeurIPS 2020, Eq. (6)-(7): FedAvg whose server
  averages normalised moves ``d_i = (x - y_i) / ||a_i||_1`` and scales by
  ``tau_eff = sum_i p_i ||a_i||_1``, with ``||a_i||_1 = (tau_i - rho (1 - rho^tau_i) / (1 - rho))
  / (1 - rho)`` for momentum ``rho`` (``tau_i`` for plain SGD) and ``tau_i`` the steps the client
  took (fewer under a partial-work deadline). Weight decay is left out of ``a_i``, as in the
  authors' code.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

from simfl._checks import check_bool, check_choice, check_int, check_real
from simfl.algorithms.base import Updates
from simfl.algorithms.fednova import fednova
from simfl.neural.algorithms import NeuralFedAvg
from simfl.neural.base import NeuralState, weighted_means
from simfl.neural.models import Params
from simfl.neural.personal import (
    CONTROL,
    PERSONAL,
    Baseline,
    BaselineState,
    Momentum,
    batch_loss,
    check_common,
    grads,
    leaves,
    masked,
    mean_loss,
    minibatches,
    stack_copy,
)
from simfl.neural.task import ClientImages
from simfl.neural.train import DEFAULT_SGD, SGD, Phase, train_cohort
from simfl.outcome import Outcome
from simfl.rng import Streams

__all__ = [
    "APFL",
    "HFMAML",
    "L2GD",
    "SCAFFOLD",
    "Ditto",
    "NeuralFedNova",
    "PFedMe",
    "PerFedAvg",
    "SCAFFOLDFT",
]

IntArray = NDArray[np.int64]
#: Per-FedAvg's and HF-MAML's outer step: plain SGD with SRPFL's beta = 0.1.
META_SGD = SGD(lr=0.1, momentum=0.0, weight_decay=0.0)
#: pFedMe's MNIST settings: eta = 0.005, minibatches of 20, plain SGD.
PFEDME_SGD = SGD(lr=0.005, momentum=0.0, weight_decay=0.0, batch_size=20)


# ---------------------------------------------------------------------- SCAFFOLD
@dataclass(frozen=True)
class SCAFFOLD(Baseline):
    """SCAFFOLD (option II control variates; see the module docstring).

    Parameters
    ----------
    epochs
        Local epochs per round (>= 1).
    server_lr
        Global step ``eta_g`` (> 0; the paper's default 1).
    optimizer
        Local SGD (``lr`` is ``eta_l``).
    finetune_epochs
        Head epochs each client trains before it is evaluated (0: none; SCAFFOLD+FT: 10).
    """

    epochs: int = 5
    server_lr: float = 1.0
    optimizer: SGD = DEFAULT_SGD
    finetune_epochs: int = 0

    name: ClassVar[str] = "SCAFFOLD"
    synchronous_only: ClassVar[str | None] = (
        "its client controls c_i are updated only by a synchronous aggregation"
    )

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_common(owner, self.epochs, self.optimizer, self.finetune_epochs)
        check_real(f"{owner}.server_lr", self.server_lr, low=0.0, low_open=True)

    def initial_extra(self, state: NeuralState) -> Params:
        """The server control ``c = 0``."""
        return self._zero_controls(state)

    @staticmethod
    def _zero_controls(state: NeuralState) -> Params:
        """A client's control before it first takes part: ``c_i = 0``."""
        return {n: torch.zeros_like(p) for n, p in state.shared.items()}

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
        idx, counts = self._data(data, clients)
        y = stack_copy(state.shared, clients.size)
        c_i = state.stacked(clients, self._zero_controls(state))
        corr = {n: state.extra[n] - c_i[n] for n in y}
        mom = Momentum(sgd)
        loss_sum, steps = np.zeros(clients.size), np.zeros(clients.size)
        rngs = self._rngs(streams, clients, round)
        for (pos,), active in minibatches(rngs, counts, sgd.batch_size, self.epochs, limit):
            loss = batch_loss(net, y, data.x_train, data.y_train, idx, pos)
            g = grads(loss, y)
            mom.step(y, {n: g[n] + corr[n] for n in y}, active)
            loss_sum[active] += loss.detach().numpy()[active]
            steps[active] += 1
        k = torch.from_numpy(steps).to(torch.float32)
        params = dict(y)
        for n, p in y.items():
            scale = (k * sgd.lr).reshape(-1, *([1] * (p.dim() - 1)))
            moved = (state.shared[n] - p.detach()) / scale.clamp(min=1e-30)
            new_c = c_i[n] - state.extra[n] + moved
            params[CONTROL + n] = torch.where(scale > 0, new_c, c_i[n])
        return self._updates(state, clients, params, mean_loss(loss_sum, steps))

    def aggregate(self, state: NeuralState, updates: Updates, outcome: Outcome) -> NeuralState:
        """``x += server_lr (avg y - x)``; ``c += (1/N) sum (c_i+ - c_i)``; store ``c_i+``."""
        assert isinstance(state, BaselineState)
        avg = weighted_means(updates, tuple(state.shared))
        shared = {n: p + self.server_lr * (avg[n] - p) for n, p in state.shared.items()}
        old = state.stacked(updates.clients, self._zero_controls(state)).items()
        n_clients = state.sizes.size
        extra = {
            n: state.extra[n]
            + torch.from_numpy(np.asarray(updates.params[CONTROL + n])).sub(c).sum(0) / n_clients
            for n, c in old
        }
        personal = self._personal_rows(state, updates, CONTROL)
        return replace(state, shared=shared, extra=extra, personal=personal, round=state.round + 1)


@dataclass(frozen=True)
class SCAFFOLDFT(SCAFFOLD):
    """SCAFFOLD whose evaluation fine-tunes each client's head first (default 10 epochs)."""

    finetune_epochs: int = 10

    name: ClassVar[str] = "SCAFFOLD+FT"


# ---------------------------------------------------------------------- Ditto
@dataclass(frozen=True)
class Ditto(Baseline):
    """Ditto: a global model by FedAvg and a personal model regularised towards it.

    Parameters
    ----------
    epochs
        Local epochs on the global model per round (>= 1).
    personal_epochs
        Epochs on the personal model per round (>= 1).
    lam
        Regularisation ``lambda`` towards the received global model (>= 0).
    optimizer
        SGD of both updates.
    finetune_epochs
        Head epochs each client trains on the model it is evaluated with, before it is
        evaluated (0: none; see :class:`~simfl.neural.personal.Baseline`).
    """

    evaluates_personal: ClassVar[bool] = True

    epochs: int = 5
    personal_epochs: int = 5
    lam: float = 0.1
    optimizer: SGD = DEFAULT_SGD
    finetune_epochs: int = 0

    name: ClassVar[str] = "Ditto"
    synchronous_only: ClassVar[str | None] = (
        "its personal models are updated only by a synchronous aggregation"
    )

    def __post_init__(self) -> None:
        check_common("Ditto", self.epochs, self.optimizer, self.finetune_epochs)
        check_int("Ditto.personal_epochs", self.personal_epochs, low=1)
        check_real("Ditto.lam", self.lam, low=0.0)

    def local_epochs(self) -> int:  # noqa: D102
        return self.epochs + self.personal_epochs

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
        index = data.train_index(clients)
        per_epoch = np.ceil((index >= 0).sum(axis=1) / sgd.batch_size)
        own_limit = per_epoch * self.personal_epochs if limit is None else limit
        everything = (Phase(net.layer_names, self.personal_epochs),)
        v, _ = train_cohort(
            net,
            state.stacked(clients, state.start),
            data.x_train,
            data.y_train,
            index,
            everything,
            sgd,
            self._rngs(streams, clients, round, "neural/personal"),
            (self.lam, state.shared),
            limit=None if limit is None else np.minimum(limit, own_limit),
        )
        rest = None if limit is None else np.maximum(limit - own_limit, 0.0)
        w, loss = train_cohort(
            net,
            dict(state.shared),
            data.x_train,
            data.y_train,
            index,
            (Phase(net.layer_names, self.epochs),),
            sgd,
            self._rngs(streams, clients, round),
            limit=rest,
        )
        params = {**w, **{PERSONAL + n: p for n, p in v.items()}}
        return self._updates(state, clients, params, loss)

    def aggregate(self, state: NeuralState, updates: Updates, outcome: Outcome) -> NeuralState:
        """Size-weighted average of the global models; clients keep their personal ones."""
        assert isinstance(state, BaselineState)
        shared = {**state.shared, **weighted_means(updates, tuple(state.shared))}
        personal = self._personal_rows(state, updates, PERSONAL)
        return replace(state, shared=shared, personal=personal, round=state.round + 1)


# ---------------------------------------------------------------------- APFL
@dataclass(frozen=True)
class APFL(Baseline):
    """APFL: a global copy ``w`` and a personal ``v`` mixed as ``a v + (1 - a) w``.

    Parameters
    ----------
    epochs
        Local epochs per round (>= 1); every step updates ``w``, ``v`` (and ``a``).
    alpha
        Initial mixing weight ``a`` in [0, 1] (the paper's experiments start at 0.25).
    adapt
        Learn each client's ``a`` by gradient steps (the paper's adaptive APFL).
    alpha_lr
        Step size of ``a`` (> 0; ``None``: ``optimizer.lr``, as in the paper).
    optimizer
        SGD of ``w`` and ``v`` (each with its own momentum buffers).
    finetune_epochs
        Head epochs each client trains on the model it is evaluated with, before it is
        evaluated (0: none; see :class:`~simfl.neural.personal.Baseline`).
    """

    epochs: int = 5
    alpha: float = 0.25
    adapt: bool = True
    alpha_lr: float | None = None
    optimizer: SGD = DEFAULT_SGD
    finetune_epochs: int = 0

    name: ClassVar[str] = "APFL"
    passes: ClassVar[float] = 2.0
    synchronous_only: ClassVar[str | None] = (
        "its personal models and mixing weights are updated only by a synchronous aggregation"
    )

    def __post_init__(self) -> None:
        check_common("APFL", self.epochs, self.optimizer, self.finetune_epochs)
        check_real("APFL.alpha", self.alpha, low=0.0, high=1.0)
        object.__setattr__(self, "adapt", check_bool("APFL.adapt", self.adapt))
        if self.alpha_lr is not None:
            check_real("APFL.alpha_lr", self.alpha_lr, low=0.0, low_open=True)

    def _personal_default(self, state: BaselineState) -> Params:
        return {**state.start, "alpha": torch.tensor(self.alpha, dtype=torch.float32)}

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
        idx, counts = self._data(data, clients)
        own = state.stacked(clients, self._personal_default(state))
        a = own.pop("alpha").clone()
        w, v = stack_copy(state.shared, clients.size), leaves(own)
        mom_w, mom_v = Momentum(sgd), Momentum(sgd)
        a_lr = sgd.lr if self.alpha_lr is None else self.alpha_lr
        loss_sum, steps = np.zeros(clients.size), np.zeros(clients.size)
        rngs = self._rngs(streams, clients, round)
        for (pos,), active in minibatches(rngs, counts, sgd.batch_size, self.epochs, limit):
            loss = batch_loss(net, w, data.x_train, data.y_train, idx, pos)
            g_w = grads(loss, w)
            a_leaf = a.clone().requires_grad_(True)
            mixed = {n: _mix(a_leaf, v[n], w[n].detach()) for n in w}
            mixed_loss = batch_loss(net, mixed, data.x_train, data.y_train, idx, pos)
            g_v = grads(mixed_loss, {**v, "alpha": a_leaf})
            g_a = g_v.pop("alpha")
            mom_w.step(w, g_w, active)
            mom_v.step(v, g_v, active)
            if self.adapt:
                step = torch.from_numpy(active).to(a.dtype) * a_lr * g_a
                a = (a - step).clamp(0.0, 1.0)
            loss_sum[active] += mixed_loss.detach().numpy()[active]
            steps[active] += 1
        params = {**w, **{PERSONAL + n: p for n, p in v.items()}, PERSONAL + "alpha": a}
        return self._updates(state, clients, params, mean_loss(loss_sum, steps))

    def aggregate(self, state: NeuralState, updates: Updates, outcome: Outcome) -> NeuralState:
        """Size-weighted average of the ``w``; clients keep their ``v`` and ``a``."""
        assert isinstance(state, BaselineState)
        shared = {**state.shared, **weighted_means(updates, tuple(state.shared))}
        personal = self._personal_rows(state, updates, PERSONAL)
        return replace(state, shared=shared, personal=personal, round=state.round + 1)

    def eval_params(  # noqa: D102
        self, state: BaselineState, data: ClientImages, clients: IntArray
    ) -> Params:
        own = state.stacked(clients, self._personal_default(state))
        a = own.pop("alpha")
        return {n: _mix(a, v, state.shared[n]) for n, v in own.items()}


def _mix(a: Tensor, v: Tensor, w: Tensor) -> Tensor:
    """``a v + (1 - a) w`` with one ``a`` per client (leading axis of ``v``)."""
    shape = (-1, *([1] * (v.dim() - 1)))
    return a.reshape(shape) * v + (1 - a.reshape(shape)) * w


# ---------------------------------------------------------------------- Per-FedAvg, HF-MAML
@dataclass(frozen=True)
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
        The outer step (``lr`` is the paper's ``beta``); defaults to plain SGD, lr 0.1.
    finetune_epochs
        Head epochs each client trains on the model it is evaluated with, before it is
        evaluated (0: none; see :class:`~simfl.neural.personal.Baseline`).
    """

    epochs: int = 5
    alpha: float = 1e-2
    hessian: str = "fo"
    delta: float = 1e-3
    optimizer: SGD = META_SGD
    finetune_epochs: int = 0

    name: ClassVar[str] = "PerFedAvg"

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_common(owner, self.epochs, self.optimizer, self.finetune_epochs)
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
        w = stack_copy(state.shared, clients.size)
        mom = Momentum(sgd)
        loss_sum, steps = np.zeros(clients.size), np.zeros(clients.size)
        rngs = self._rngs(streams, clients, round)
        roles = 3 if self.hessian == "hf" else 2
        x, y = data.x_train, data.y_train
        for pos, active in minibatches(rngs, counts, sgd.batch_size, self.epochs, limit, roles):
            g = grads(batch_loss(net, w, x, y, idx, pos[0]), w)
            tmp = leaves({n: w[n].detach() - self.alpha * g[n] for n in w})
            outer = batch_loss(net, tmp, x, y, idx, pos[1])
            d = grads(outer, tmp)
            if self.hessian == "hf":
                plus = leaves({n: w[n].detach() + self.delta * d[n] for n in w})
                minus = leaves({n: w[n].detach() - self.delta * d[n] for n in w})
                hp = grads(batch_loss(net, plus, x, y, idx, pos[2]), plus)
                hm = grads(batch_loss(net, minus, x, y, idx, pos[2]), minus)
                scale = self.alpha / (2 * self.delta)
                d = {n: d[n] - scale * (hp[n] - hm[n]) for n in d}
            mom.step(w, d, active)
            loss_sum[active] += outer.detach().numpy()[active]
            steps[active] += 1
        return self._updates(state, clients, w, mean_loss(loss_sum, steps))

    def eval_params(self, state: BaselineState, data: ClientImages, clients: IntArray) -> Params:
        """One step ``w - alpha grad f_i(w)`` on each client's whole training set."""
        idx, _ = self._data(data, clients)
        w = stack_copy(state.shared, clients.size)
        every = torch.arange(idx.shape[1]).expand(idx.shape[0], -1)
        pos = torch.where(idx >= 0, every, -1)
        g = grads(batch_loss(state.network, w, data.x_train, data.y_train, idx, pos), w)
        return {n: (w[n] - self.alpha * g[n]).detach() for n in w}


@dataclass(frozen=True)
class HFMAML(PerFedAvg):
    """SRPFL's HF-MAML baseline: Hessian-free Per-FedAvg, alpha 1e-2, beta 1e-1, delta 1e-3."""

    hessian: str = "hf"

    name: ClassVar[str] = "HF-MAML"


# ---------------------------------------------------------------------- pFedMe
@dataclass(frozen=True)
class PFedMe(Baseline):
    """pFedMe: Moreau-envelope personalisation (see the module docstring).

    Parameters
    ----------
    epochs
        Local epochs per round (>= 1); each minibatch is one outer step (the paper's ``R``
        local rounds are the minibatches of these epochs).
    lam
        Regularisation ``lambda`` (> 0; paper 15).
    inner_steps
        Gradient steps ``K`` on ``theta`` per minibatch (>= 1; paper 5).
    personal_lr
        Step size of ``theta`` (> 0).
    beta
        Server mixing ``beta`` (> 0; 1 is plain averaging).
    optimizer
        ``lr`` is the outer step ``eta`` and ``batch_size`` the minibatch; plain SGD only.
    finetune_epochs
        Head epochs each client trains on the model it is evaluated with, before it is
        evaluated (0: none; see :class:`~simfl.neural.personal.Baseline`).
    """

    evaluates_personal: ClassVar[bool] = True

    epochs: int = 5
    lam: float = 15.0
    inner_steps: int = 5
    personal_lr: float = 0.1
    beta: float = 1.0
    optimizer: SGD = PFEDME_SGD
    finetune_epochs: int = 0

    name: ClassVar[str] = "pFedMe"
    synchronous_only: ClassVar[str | None] = (
        "its personal models are updated only by a synchronous aggregation"
    )

    def __post_init__(self) -> None:
        check_common("PFedMe", self.epochs, self.optimizer, self.finetune_epochs)
        check_real("PFedMe.lam", self.lam, low=0.0, low_open=True)
        check_int("PFedMe.inner_steps", self.inner_steps, low=1)
        check_real("PFedMe.personal_lr", self.personal_lr, low=0.0, low_open=True)
        check_real("PFedMe.beta", self.beta, low=0.0, low_open=True)
        for knob in ("momentum", "weight_decay"):
            if getattr(self.optimizer, knob) != 0:
                raise ValueError(
                    f"PFedMe.optimizer.{knob} must be 0 (pFedMe's steps are plain gradient "
                    f"steps), got {getattr(self.optimizer, knob)!r}"
                )

    @property
    def passes(self) -> float:  # type: ignore[override]
        """One gradient per inner step."""
        return float(self.inner_steps)

    def local_updates(  # noqa: D102
        self,
        state: NeuralState,
        data: ClientImages,
        clients: IntArray,
        round: int,
        streams: Streams,
        limit: NDArray[np.float64] | None = None,
    ) -> Updates:
        net = state.network
        idx, counts = self._data(data, clients)
        w = stack_copy(state.shared, clients.size)
        theta = stack_copy(state.shared, clients.size)
        loss_sum, steps = np.zeros(clients.size), np.zeros(clients.size)
        rngs = self._rngs(streams, clients, round)
        batch = self.optimizer.batch_size
        for (pos,), active in minibatches(rngs, counts, batch, self.epochs, limit):
            for _ in range(self.inner_steps):
                loss = batch_loss(net, theta, data.x_train, data.y_train, idx, pos)
                g = grads(loss, theta)
                with torch.no_grad():
                    for n, p in theta.items():
                        move = g[n] + self.lam * (p - w[n])
                        p.sub_(self.personal_lr * move * masked(active, p))
            with torch.no_grad():
                for n, p in w.items():
                    p.sub_(self.optimizer.lr * self.lam * (p - theta[n]) * masked(active, p))
            loss_sum[active] += loss.detach().numpy()[active]
            steps[active] += 1
        params = {**w, **{PERSONAL + n: p for n, p in theta.items()}}
        return self._updates(state, clients, params, mean_loss(loss_sum, steps))

    def aggregate(self, state: NeuralState, updates: Updates, outcome: Outcome) -> NeuralState:
        """``w <- (1 - beta) w + beta avg(w_i)``; clients keep their ``theta``."""
        assert isinstance(state, BaselineState)
        avg = weighted_means(updates, tuple(state.shared))
        shared = {n: (1 - self.beta) * p + self.beta * avg[n] for n, p in state.shared.items()}
        personal = self._personal_rows(state, updates, PERSONAL)
        return replace(state, shared=shared, personal=personal, round=state.round + 1)


# ---------------------------------------------------------------------- L2GD
@dataclass(frozen=True)
class L2GD(Baseline):
    """L2GD: personal models pulled towards their average (see the module docstring).

    Parameters
    ----------
    epochs
        Local epochs on the client's own ``x_i`` per round (>= 1).
    mix
        Averaging step ``eta lam / (n p)`` in (0, 1] (1: every participant becomes the average).
    optimizer
        Local SGD (``lr`` is ``eta / (n (1 - p))``).
    finetune_epochs
        Head epochs each client trains on the model it is evaluated with, before it is
        evaluated (0: none; see :class:`~simfl.neural.personal.Baseline`).
    """

    evaluates_personal: ClassVar[bool] = True

    epochs: int = 5
    mix: float = 0.5
    optimizer: SGD = DEFAULT_SGD
    finetune_epochs: int = 0

    name: ClassVar[str] = "L2GD"
    synchronous_only: ClassVar[str | None] = (
        "its personal models are updated only by a synchronous aggregation"
    )

    def __post_init__(self) -> None:
        check_common("L2GD", self.epochs, self.optimizer, self.finetune_epochs)
        check_real("L2GD.mix", self.mix, low=0.0, high=1.0, low_open=True)

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
        net = state.network
        x, loss = train_cohort(
            net,
            state.stacked(clients, state.start),
            data.x_train,
            data.y_train,
            data.train_index(clients),
            (Phase(net.layer_names, self.epochs),),
            self.optimizer,
            self._rngs(streams, clients, round),
            limit=limit,
        )
        return self._updates(state, clients, x, loss)

    def aggregate(self, state: NeuralState, updates: Updates, outcome: Outcome) -> NeuralState:
        """``x_bar`` = size-weighted average; each participant ``x_i -= mix (x_i - x_bar)``."""
        assert isinstance(state, BaselineState)
        avg = weighted_means(updates, tuple(state.shared))
        personal = dict(state.personal)
        for j, c in enumerate(updates.clients):
            own = {n: torch.from_numpy(np.array(v[j])) for n, v in updates.params.items()}
            personal[int(c)] = {n: x - self.mix * (x - avg[n]) for n, x in own.items()}
        return replace(state, shared=avg, personal=personal, round=state.round + 1)


# ---------------------------------------------------------------------- FedNova
@dataclass(frozen=True)
class NeuralFedNova(NeuralFedAvg):
    """FedNova: FedAvg with normalised averaging of unequal local work (module docstring)."""

    name: ClassVar[str] = "FedNova"

    def aggregate(self, state: NeuralState, updates: Updates, outcome: Outcome) -> NeuralState:
        """``x - tau_eff sum_i p_i (x - y_i) / ||a_i||_1`` over the shared parameters."""
        full = self.job_steps(state, updates.clients)
        if outcome.steps is None:
            tau = full
        else:
            done = np.asarray(outcome.steps[outcome.arrived], dtype=np.float64)
            if outcome.repeats is not None:
                done = np.repeat(done, outcome.repeats[outcome.arrived])
            tau = np.minimum(done, full)
        norm = np.maximum(momentum_norm(tau, self.optimizer.momentum), 1e-12)  # 0 steps: no move
        weights = np.asarray(updates.weight, dtype=np.float64)
        shared = {
            n: torch.from_numpy(
                fednova(
                    p.double().numpy(),
                    np.asarray(updates.params[n], dtype=np.float64),
                    norm,
                    weights,
                ).astype(np.float32)
            )
            for n, p in state.shared.items()
        }
        return replace(state, shared=shared, round=state.round + 1)


def momentum_norm(tau: NDArray[np.float64], rho: float) -> NDArray[np.float64]:
    """FedNova's ``||a_i||_1`` after ``tau`` steps with momentum ``rho`` (``tau`` when 0)."""
    tau = np.asarray(tau, dtype=np.float64)
    if rho == 0:
        return tau
    return np.asarray((tau - rho * (1 - rho**tau) / (1 - rho)) / (1 - rho), dtype=np.float64)
