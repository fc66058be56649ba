"""Personal-model baselines: Ditto, APFL, pFedMe, L2GD.

Part of the seed papers' neural baselines (:mod:`simfl.neural.baselines` states the rules they
all share). Each client keeps a personal model besides the global one; each is evaluated with
the client's own personalised model on its own test split, like FedRep, and refuses
asynchronous and tiered policies (the aggregation updates the personal models).

Methods, papers and departures:

* Ditto -- Li, Hu, Beirami, Smith, ICML 2021, Algorithm 1: each selected client first takes
  ``personal_epochs`` epochs of ``v <- v - lr (grad F(v) + lam (v - w^t))`` against the
  received global ``w^t``, then ``epochs`` epochs of local SGD on ``w`` (FedAvg); the server
  averages the ``w``.
* APFL -- Deng, Kamani, Mahdavi, 2020, Algorithm 1: a client trains the global copy ``w`` and
  its own ``v`` on the same minibatch, ``v`` through the mixture ``v_bar = a v + (1 - a) w``
  (gradient ``a grad f(v_bar)``), and with ``adapt=True`` also
  ``a <- clip(a - alpha_lr <v - w, grad f(v_bar)>, 0, 1)``; the server averages the ``w``. The
  personal model evaluated is ``a_i v_i + (1 - a_i) w`` with the current global ``w``.
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

With a module's buffers (BatchNorm's running statistics), each model keeps its own, updated
by the training forward passes that run with it; the regularisation, proximal, mixing and
averaging terms above are over the trainable parameters only. Ditto: the personal ``v`` and
the global ``w`` each have their own buffers (the server averages ``w``'s by size). APFL: ``w``'s
are updated by its own passes and averaged by the server; the mixture ``a v + (1 - a) w`` runs
with ``v``'s buffers (the personal model's own, updated by the mixed passes), and so does the
evaluated personal model. pFedMe: the local copy ``w`` carries the buffers of the personal
model ``theta`` (the one module its code trains), which the server averages (``beta`` mixes
the parameters). L2GD: the averaging step moves the parameters; each personal model keeps its
own buffers, and the server's model takes their size-weighted average.
Optimisers: Ditto, APFL and L2GD take any client optimiser (:mod:`simfl.neural.optim`; the
papers' local solver is SGD, and the methods' updates are written for any local solver of
their objectives): Ditto's two updates and APFL's ``w`` and ``v`` each have their own
optimiser state (kept apart with ``state="keep"``). APFL's mixing weight ``a`` and pFedMe's
and L2GD's other steps stay plain gradient steps. pFedMe takes only plain SGD (its steps are
plain gradient steps by the formulas above, with no optimiser state). Ditto and APFL take a
server optimiser on the average of the global models; pFedMe (its server step is its
``beta`` mixing) and L2GD (its averaging step moves the personal models; there is no server
model to step) refuse one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

from simfl._checks import check_bool, check_int, check_real
from simfl.algorithms.base import Updates
from simfl.neural.base import OPTIM, NeuralState, weighted_means
from simfl.neural.models import Params
from simfl.neural.optim import DEFAULT_SGD, SGD, ClientOptimizer
from simfl.neural.personal import (
    PERSONAL,
    Baseline,
    BaselineState,
    StepSeeds,
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
from simfl.neural.train import Phase, train_cohort
from simfl.outcome import Outcome
from simfl.rng import Streams

__all__ = ["APFL", "L2GD", "Ditto", "PFedMe"]

IntArray = NDArray[np.int64]
#: pFedMe's MNIST settings: eta = 0.005, minibatches of 20, plain SGD.
PFEDME_SGD = SGD(lr=0.005, momentum=0.0, weight_decay=0.0, batch_size=20)


# ---------------------------------------------------------------------- Ditto
@dataclass(frozen=True, repr=False)
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
        The client optimiser of both updates (each with its own state).
    finetune_epochs
        Head epochs each client trains on the model it is evaluated with, before it is
        evaluated (0: none; see :class:`~simfl.neural.personal.Baseline`).
    """

    evaluates_personal: ClassVar[bool] = True

    epochs: int = 5
    personal_epochs: int = 5
    lam: float = 0.1
    optimizer: ClientOptimizer = DEFAULT_SGD
    finetune_epochs: int = 0

    name: ClassVar[str] = "Ditto"
    synchronous_only: ClassVar[str | None] = (
        "its personal models are updated only by a synchronous aggregation"
    )

    def __post_init__(self) -> None:
        check_common(self)
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
        names = net.params_of(net.layer_names)
        own_state = self.start_opt_state(state, clients, names, PERSONAL)
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
            opt_state=own_state,
        )
        rest = None if limit is None else np.maximum(limit - own_limit, 0.0)
        global_state = self.start_opt_state(state, clients, names)
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
            opt_state=global_state,
        )
        params = {
            **w,
            **{PERSONAL + n: p for n, p in v.items()},
            **self._optimizer_rows(own_state, PERSONAL),
            **self._optimizer_rows(global_state),
        }
        return self._updates(state, clients, params, loss)

    def aggregate(self, state: NeuralState, updates: Updates, outcome: Outcome) -> NeuralState:
        """Size-weighted average of the global models (or the server optimiser's step).

        Clients keep their personal models and optimiser state.
        """
        assert isinstance(state, BaselineState)
        shared, server = self.server_update(state, updates, state.shared)
        personal = self._personal_rows(state, updates, PERSONAL)
        state = self.keep_opt_state(state, updates)
        return replace(
            state, shared=shared, personal=personal, server_state=server, round=state.round + 1
        )


@dataclass(frozen=True, repr=False)
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
        The client optimiser of ``w`` and ``v`` (each with its own state).
    finetune_epochs
        Head epochs each client trains on the model it is evaluated with, before it is
        evaluated (0: none; see :class:`~simfl.neural.personal.Baseline`).
    """

    epochs: int = 5
    alpha: float = 0.25
    adapt: bool = True
    alpha_lr: float | None = None
    optimizer: ClientOptimizer = DEFAULT_SGD
    finetune_epochs: int = 0

    name: ClassVar[str] = "APFL"
    passes: ClassVar[float] = 2.0
    synchronous_only: ClassVar[str | None] = (
        "its personal models and mixing weights are updated only by a synchronous aggregation"
    )

    def __post_init__(self) -> None:
        check_common(self)
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
        buffers = net.buffer_names
        w, v = stack_copy(state.shared, clients.size, buffers), leaves(own, buffers)
        mom_w = self._momentum(state, clients, tuple(n for n in w if n not in buffers))
        mom_v = self._momentum(state, clients, tuple(n for n in v if n not in buffers), PERSONAL)
        a_lr = sgd.lr if self.alpha_lr is None else self.alpha_lr
        loss_sum, steps = np.zeros(clients.size), np.zeros(clients.size)
        rngs = self._rngs(streams, clients, round)
        seeds = StepSeeds(net, rngs)
        for (pos,), active in minibatches(rngs, counts, sgd.batch_size, self.epochs, limit):
            loss = batch_loss(net, w, data.x_train, data.y_train, idx, pos, seeds)
            g_w = grads(loss, w)
            a_leaf = a.clone().requires_grad_(True)
            mixed = {n: v[n] if n in buffers else _mix(a_leaf, v[n], w[n].detach()) for n in w}
            mixed_loss = batch_loss(net, mixed, data.x_train, data.y_train, idx, pos, seeds)
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
        params.update(self._optimizer_rows(mom_w.bufs))
        params.update(self._optimizer_rows(mom_v.bufs, PERSONAL))
        return self._updates(state, clients, params, mean_loss(loss_sum, steps))

    def aggregate(self, state: NeuralState, updates: Updates, outcome: Outcome) -> NeuralState:
        """Size-weighted average of the ``w`` (or the server optimiser's step).

        Clients keep their ``v``, ``a`` and optimiser state.
        """
        assert isinstance(state, BaselineState)
        shared, server = self.server_update(state, updates, state.shared)
        personal = self._personal_rows(state, updates, PERSONAL)
        state = self.keep_opt_state(state, updates)
        return replace(
            state, shared=shared, personal=personal, server_state=server, round=state.round + 1
        )

    def eval_params(  # noqa: D102
        self, state: BaselineState, data: ClientImages, clients: IntArray
    ) -> Params:
        own = state.stacked(clients, self._personal_default(state))
        a = own.pop("alpha")
        buffers = state.network.buffer_names
        return {n: v if n in buffers else _mix(a, v, state.shared[n]) for n, v in own.items()}


def _mix(a: Tensor, v: Tensor, w: Tensor) -> Tensor:
    """``a v + (1 - a) w`` with one ``a`` per client (leading axis of ``v``)."""
    shape = (-1, *([1] * (v.dim() - 1)))
    return a.reshape(shape) * v + (1 - a.reshape(shape)) * w


# ---------------------------------------------------------------------- pFedMe
@dataclass(frozen=True, repr=False)
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
    optimizer: ClientOptimizer = PFEDME_SGD
    finetune_epochs: int = 0

    name: ClassVar[str] = "pFedMe"
    synchronous_only: ClassVar[str | None] = (
        "its personal models are updated only by a synchronous aggregation"
    )
    sgd_only: ClassVar[str | None] = "pFedMe's steps are plain gradient steps"
    reset_only: ClassVar[str | None] = "pFedMe's plain gradient steps keep no optimizer state"
    server_rule: ClassVar[str | None] = "pFedMe's server step is its own beta mixing"

    def __post_init__(self) -> None:
        check_common(self)
        check_real("PFedMe.lam", self.lam, low=0.0, low_open=True)
        check_int("PFedMe.inner_steps", self.inner_steps, low=1)
        check_real("PFedMe.personal_lr", self.personal_lr, low=0.0, low_open=True)
        check_real("PFedMe.beta", self.beta, low=0.0, low_open=True)
        for knob in ("momentum", "weight_decay"):
            if getattr(self.optimizer, knob) != 0:  # an SGD: check_common
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
        buffers = net.buffer_names
        theta = stack_copy(state.shared, clients.size, buffers)
        w = stack_copy(state.shared, clients.size, buffers)
        w.update({n: theta[n] for n in buffers})  # the one module's running statistics
        loss_sum, steps = np.zeros(clients.size), np.zeros(clients.size)
        rngs = self._rngs(streams, clients, round)
        seeds = StepSeeds(net, rngs)
        batch = self.optimizer.batch_size
        for (pos,), active in minibatches(rngs, counts, batch, self.epochs, limit):
            for _ in range(self.inner_steps):
                loss = batch_loss(net, theta, data.x_train, data.y_train, idx, pos, seeds)
                g = grads(loss, theta)
                with torch.no_grad():
                    for n in g:
                        p = theta[n]
                        move = g[n] + self.lam * (p - w[n])
                        p.sub_(self.personal_lr * move * masked(active, p))
            with torch.no_grad():
                for n in g:
                    p = w[n]
                    p.sub_(self.optimizer.lr * self.lam * (p - theta[n]) * masked(active, p))
            loss_sum[active] += loss.detach().numpy()[active]
            steps[active] += 1
        params = {**w, **{PERSONAL + n: p for n, p in theta.items()}}
        return self._updates(state, clients, params, mean_loss(loss_sum, steps))

    def aggregate(self, state: NeuralState, updates: Updates, outcome: Outcome) -> NeuralState:
        """``w <- (1 - beta) w + beta avg(w_i)``; clients keep their ``theta``.

        Buffers take the average of the clients' (``beta`` mixes parameters).
        """
        assert isinstance(state, BaselineState)
        avg = weighted_means(updates, tuple(state.shared))
        trainable = set(state.network.param_names)
        shared = {
            n: (1 - self.beta) * p + self.beta * avg[n] if n in trainable else avg[n]
            for n, p in state.shared.items()
        }
        personal = self._personal_rows(state, updates, PERSONAL)
        return replace(state, shared=shared, personal=personal, round=state.round + 1)


@dataclass(frozen=True, repr=False)
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
    optimizer: ClientOptimizer = DEFAULT_SGD
    finetune_epochs: int = 0

    name: ClassVar[str] = "L2GD"
    synchronous_only: ClassVar[str | None] = (
        "its personal models are updated only by a synchronous aggregation"
    )
    server_rule: ClassVar[str | None] = (
        "L2GD's averaging step moves the personal models; it has no server model to step"
    )

    def __post_init__(self) -> None:
        check_common(self)
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
        opt_state = self.start_opt_state(state, clients, net.params_of(net.layer_names))
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
            opt_state=opt_state,
        )
        return self._updates(state, clients, {**x, **self._optimizer_rows(opt_state)}, loss)

    def aggregate(self, state: NeuralState, updates: Updates, outcome: Outcome) -> NeuralState:
        """``x_bar`` = size-weighted average; each participant ``x_i -= mix (x_i - x_bar)``.

        Buffers: each participant keeps its own; ``x_bar``'s are their average.
        """
        assert isinstance(state, BaselineState)
        avg = weighted_means(updates, tuple(state.shared))
        buffers = state.network.buffer_names
        personal = dict(state.personal)
        models = {n: v for n, v in updates.params.items() if not n.startswith(OPTIM)}
        for j, c in enumerate(updates.clients):
            own = {n: torch.from_numpy(np.array(v[j])) for n, v in models.items()}
            personal[int(c)] = {
                n: x if n in buffers else x - self.mix * (x - avg[n]) for n, x in own.items()
            }
        state = self.keep_opt_state(state, updates)
        return replace(state, shared=avg, personal=personal, round=state.round + 1)
