"""Client optimisers: the local step of a whole cohort, on stacked per-client tensors.

A client optimiser is a frozen dataclass of settings (:class:`SGD`, :class:`Adam`,
:class:`AdamW`) whose :meth:`~ClientOptimizer.step` updates every client of a cohort at once:
each parameter is a tensor with a leading client axis ``(C, ...)``, and so is every tensor of
the optimiser's state. Clients outside ``active`` (no minibatch in this step, or past their
step limit) are left untouched, parameters and state alike, so each client's result is what
``torch.optim`` gives training it alone.

The updates are ``torch.optim``'s, element for element:

* :class:`SGD` -- ``torch.optim.SGD`` (Robbins and Monro 1951; momentum as PyTorch writes it):
  ``g = grad + wd * w``, ``buf = momentum * buf + g`` (``buf = g`` at the first step),
  ``w -= lr * buf``.
* :class:`Adam` -- ``torch.optim.Adam`` (Kingma and Ba, ICLR 2015, Algorithm 1, with PyTorch's
  ``eps`` outside the square root): ``g = grad + wd * w`` (L2), ``m = b1 m + (1 - b1) g``,
  ``v = b2 v + (1 - b2) g^2``, ``w -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)``.
* :class:`AdamW` -- ``torch.optim.AdamW`` (Loshchilov and Hutter, ICLR 2019): Adam whose weight
  decay is decoupled from the gradient, ``w *= 1 - lr * wd`` before the step.

Weight decay applies to the parameters whose names end with ``.weight`` (weights, not
biases), for every optimiser: the FedRep code's SGD rule, kept for Adam and AdamW so that one
``weight_decay`` means the same parameters whatever the optimiser (``torch.optim`` decays
every parameter of a group unless the groups split them; :func:`decays` is the rule).

A proximal term ``(mu, w0)`` (FedProx) adds ``mu * (w - w0)`` to the gradient: for SGD after
the weight decay, as before; for Adam and AdamW before it, as ``torch.optim`` receives a loss
gradient that holds the proximal term.

Optimiser state. Each state tensor is named ``"<slot>/<parameter>"`` with ``torch.optim``'s slot
names (``momentum_buffer``; ``exp_avg``, ``exp_avg_sq``, ``step``) and has the client axis first,
the step counts too (shape ``(C,)``: bias correction is per client and per parameter, as
``torch.optim`` counts steps per parameter). Zeros are the state before a client's first
step, for every optimiser (a zero momentum buffer gives ``buf = g`` exactly). ``state`` says
what a client's optimiser state does between its local updates:

* ``"reset"`` (default): a new optimiser every local update (FedAvg's and the FedRep code's
  practice: the code builds its optimiser every round); the state carries over between the
  phases of one update, as the one optimiser of the code does.
* ``"keep"``: each client's state is stored with the algorithm's state when its update is
  aggregated (:attr:`~simfl.neural.NeuralState.opt_state`) and its next local update starts
  from it; a client that never took part starts from zeros.

Fine-tuning before evaluation (``finetune_epochs``) is not a local update: it always starts
from a fresh state and stores none.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from simfl._checks import check_choice, check_int, check_real
from simfl.neural.models import Params

__all__ = ["DEFAULT_SGD", "SGD", "Adam", "AdamW", "ClientOptimizer", "OptState", "decays"]

#: Optimiser state by ``"<slot>/<parameter>"``; tensors carry a leading client axis.
OptState = dict[str, Tensor]
#: What a client's optimiser state does between its local updates.
STATES = ("reset", "keep")


def decays(name: str) -> bool:
    """Whether weight decay applies to parameter ``name``: weights, not biases."""
    return name.endswith(".weight")


def _column(t: Tensor, like: Tensor) -> Tensor:
    """A per-client ``(C,)`` tensor shaped to broadcast against ``like`` ``(C, ...)``."""
    return t.reshape(-1, *([1] * (like.dim() - 1)))


class ClientOptimizer(ABC):
    """Base of the client optimisers (frozen dataclasses; see the module docstring).

    Every optimiser has ``lr`` (step size), ``batch_size`` (samples per minibatch) and
    ``state`` (``"reset"`` or ``"keep"``).
    """

    lr: float
    batch_size: int
    state: str
    #: ``torch.optim``'s names of the per-parameter state tensors.
    slots: ClassVar[tuple[str, ...]] = ()

    def _check_common(self) -> None:
        owner = type(self).__name__
        check_int(f"{owner}.batch_size", self.batch_size, low=1)
        check_choice(f"{owner}.state", self.state, STATES)

    def fresh(self, shapes: Mapping[str, tuple[int, ...]]) -> Params:
        """One client's state before its first step (zeros, no client axis).

        ``shapes``: the shape of each parameter the optimiser will step.
        """
        out: Params = {}
        for name, shape in shapes.items():
            for slot in self.slots:
                out[f"{slot}/{name}"] = torch.zeros(() if slot == "step" else shape)
        return out

    @abstractmethod
    def step(
        self,
        params: Params,
        state: OptState,
        names: Sequence[str],
        grads: Sequence[Tensor],
        active: Tensor,
        prox: tuple[float, Params] | None = None,
    ) -> None:
        """One step of the ``active`` clients on the parameters ``names`` (in place).

        Parameters
        ----------
        params
            The parameters, stacked ``(C, ...)``; ``params[n]`` for ``n`` in ``names`` is
            updated in place.
        state
            The optimiser state (tensors ``(C, ...)``, step counts ``(C,)``); entries are
            updated in place or replaced by new tensors, and missing ones are created (zeros
            for the inactive clients).
        names, grads
            The parameters to step and each one's gradient (a fresh tensor that may be
            changed in place), stacked like the parameters.
        active
            ``(C,)`` booleans: the clients that step. The others keep their parameters and
            state unchanged.
        prox
            ``(mu, w0)``: add ``mu * (w - w0)`` to the gradient (``w0`` stacked or shared).
        """


@dataclass(frozen=True)
class SGD(ClientOptimizer):
    """Local optimiser: minibatch SGD with momentum (defaults: the FedRep code's).

    Parameters
    ----------
    lr
        Step size (> 0).
    momentum
        Momentum coefficient in [0, 1).
    weight_decay
        L2 coefficient on weights (not biases), >= 0.
    batch_size
        Samples per minibatch (>= 1).
    state
        ``"reset"``: momentum buffers start at zero each local update; ``"keep"``: each
        client's buffers carry over to its next local update (module docstring).
    """

    lr: float = 0.01
    momentum: float = 0.5
    weight_decay: float = 1e-4
    batch_size: int = 10
    state: str = "reset"

    slots: ClassVar[tuple[str, ...]] = ("momentum_buffer",)

    def __post_init__(self) -> None:
        check_real("SGD.lr", self.lr, low=0.0, low_open=True)
        check_real("SGD.momentum", self.momentum, low=0.0, high=1.0, high_open=True)
        check_real("SGD.weight_decay", self.weight_decay, low=0.0)
        self._check_common()

    def step(  # noqa: D102
        self,
        params: Params,
        state: OptState,
        names: Sequence[str],
        grads: Sequence[Tensor],
        active: Tensor,
        prox: tuple[float, Params] | None = None,
    ) -> None:
        # ``buf = momentum * buf + g``, ``w -= lr * buf`` for the active clients; ``g`` gets the
        # weight decay and proximal terms first
        everyone = bool(active.all())
        with torch.no_grad():
            for n, g in zip(names, grads, strict=True):
                p = params[n]
                if self.weight_decay and decays(n):
                    g.add_(p, alpha=self.weight_decay)
                if prox is not None and prox[0] > 0:
                    g.add_(p - prox[1][n], alpha=prox[0])
                key = f"momentum_buffer/{n}"
                buf = state.get(key)
                if everyone:
                    if buf is None:  # torch.optim.SGD's first step: buf = g
                        state[key] = buf = g
                    else:
                        torch.add(g, buf, alpha=self.momentum, out=buf)
                    p.add_(buf, alpha=-self.lr)
                else:
                    mask = _column(active, p)
                    new = g if buf is None else torch.add(g, buf, alpha=self.momentum)
                    state[key] = torch.where(mask, new, 0.0 if buf is None else buf)
                    p.add_(state[key] * mask, alpha=-self.lr)


@dataclass(frozen=True)
class Adam(ClientOptimizer):
    """Local optimiser: ``torch.optim.Adam`` with L2 weight decay on weights (not biases).

    Parameters
    ----------
    lr
        Step size (> 0).
    betas
        ``(beta1, beta2)``, each in [0, 1): decay of the first and second moment estimates.
    eps
        Added to the denominator (> 0).
    weight_decay
        L2 coefficient on weights (not biases), >= 0, added to the gradient.
    batch_size
        Samples per minibatch (>= 1).
    state
        ``"reset"``: moments and step counts start at zero each local update; ``"keep"``: each
        client's carry over to its next local update (module docstring).
    """

    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    batch_size: int = 10
    state: str = "reset"

    slots: ClassVar[tuple[str, ...]] = ("exp_avg", "exp_avg_sq", "step")
    #: Whether weight decay is decoupled from the gradient (AdamW).
    decoupled: ClassVar[bool] = False

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_real(f"{owner}.lr", self.lr, low=0.0, low_open=True)
        check_betas(f"{owner}.betas", self.betas)
        check_real(f"{owner}.eps", self.eps, low=0.0, low_open=True)
        check_real(f"{owner}.weight_decay", self.weight_decay, low=0.0)
        self._check_common()

    def step(  # noqa: D102
        self,
        params: Params,
        state: OptState,
        names: Sequence[str],
        grads: Sequence[Tensor],
        active: Tensor,
        prox: tuple[float, Params] | None = None,
    ) -> None:
        # torch.optim's single-tensor Adam, operation for operation, with a per-client step
        # count: its bias corrections (float64, as torch computes them in Python) are cast to
        # float32 as torch casts its Python scalars
        lr, b1, b2 = float(self.lr), float(self.betas[0]), float(self.betas[1])
        everyone = bool(active.all())
        with torch.no_grad():
            for n, g in zip(names, grads, strict=True):
                p = params[n]
                if prox is not None and prox[0] > 0:
                    g.add_(p - prox[1][n], alpha=prox[0])
                keys = [f"{slot}/{n}" for slot in self.slots]
                m, v, t = (state.get(k) for k in keys)
                if m is None or v is None or t is None:
                    m, v, t = torch.zeros_like(p), torch.zeros_like(p), p.new_zeros(p.shape[0])
                mask = _column(active, p)
                t = t + active.to(t.dtype)
                wd = float(self.weight_decay) if decays(n) else 0.0
                if wd and self.decoupled:
                    if everyone:
                        p.mul_(1 - lr * wd)
                    else:
                        p.copy_(torch.where(mask, p * (1 - lr * wd), p))
                elif wd:
                    g = g.add(p, alpha=wd)
                m_new = m.lerp(g, 1 - b1)
                v_new = v.mul(b2).addcmul_(g, g, value=1 - b2)
                steps = t.double().clamp(min=1.0)  # an inactive client's 0: masked out below
                neg_step = (-lr / (1 - torch.pow(b1, steps))).to(p.dtype)
                root = (1 - torch.pow(b2, steps)).sqrt().to(p.dtype)
                denom = (v_new.sqrt() / _column(root, p)).add_(float(self.eps))
                move = (_column(neg_step, p) * m_new) / denom
                if everyone:
                    p.add_(move)
                else:
                    p.add_(torch.where(mask, move, 0.0))
                    m_new = torch.where(mask, m_new, m)
                    v_new = torch.where(mask, v_new, v)
                for key, value in zip(keys, (m_new, v_new, t), strict=True):
                    state[key] = value


@dataclass(frozen=True)
class AdamW(Adam):
    """Local optimiser: ``torch.optim.AdamW``, decoupled weight decay on weights (not biases).

    Parameters as for :class:`Adam`; ``weight_decay`` (default 1e-2, ``torch.optim.AdamW``'s)
    shrinks the weights by ``1 - lr * weight_decay`` before each step instead of entering the
    gradient.
    """

    weight_decay: float = 1e-2

    decoupled: ClassVar[bool] = True


def check_betas(field: str, betas: Any) -> None:
    """Raise ``ValueError`` unless ``betas`` is a tuple of two reals in [0, 1)."""
    if not (isinstance(betas, tuple) and len(betas) == 2):
        raise ValueError(f"{field} must be a tuple (beta1, beta2), got {betas!r}")
    for i, b in enumerate(betas):
        check_real(f"{field}[{i}]", b, low=0.0, high=1.0, high_open=True)


#: The FedRep code's local optimiser: lr 0.01, momentum 0.5, weight decay 1e-4, batch 10.
DEFAULT_SGD = SGD()
