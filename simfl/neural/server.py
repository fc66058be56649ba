"""Server optimisers: the server's step on the cohort's average (FedOpt).

Reddi, Charles, Zaheer, Garrett, Rush, Konecny, Kumar, McMahan, "Adaptive Federated
Optimization", ICLR 2021, Algorithm 2 (FedAdagrad, FedYogi, FedAdam), and Hsu, Qi, Brown,
"Measuring the Effects of Non-Identical Data Distribution for Federated Visual
Classification", 2019 (FedAvgM). The server treats the cohort's move as a gradient: with
``x`` the server's model and ``avg`` the size-weighted average of the cohort's models (the
average FedAvg would take), the pseudo-gradient is ``delta = avg - x`` and

* :class:`FedAvgM`: ``m = momentum * m + delta``, ``x += lr * m`` (Hsu et al.'s server
  momentum, written with Reddi et al.'s sign);
* :class:`FedAdagrad`: ``m = beta1 * m + (1 - beta1) * delta``, ``v = v + delta^2``;
* :class:`FedYogi`: ``m`` as above, ``v = v - (1 - beta2) * delta^2 * sign(v - delta^2)``;
* :class:`FedAdam`: ``m`` as above, ``v = beta2 * v + (1 - beta2) * delta^2``;

and for the last three ``x += lr * m / (sqrt(v) + tau)``, element by element, with
``m_{-1} = 0`` and ``v_{-1} = tau^2`` (the paper's initialisation ``v_{-1} >= tau^2`` at its
bound) and no bias correction (Algorithm 2 has none). ``FedAvgM(lr=1, momentum=0)`` is
FedAvg: ``x + (avg - x)``.

Which parameters: every shared parameter an update carries, except buffers (:func:`is_buffer`:
BatchNorm's running statistics and batch counts), which are not optimised: they take the
cohort's weighted average, as without a server optimiser.

Arithmetic: float64 throughout (the average is float64 already), the new parameters cast to
float32 once at the end; the state (``"<slot>/<parameter>"``, float64) lives in the
algorithm's state (:attr:`~simfl.neural.NeuralState.server_state`) and changes only in a
synchronous aggregation: asynchronous and tiered policies, which mix models through
``shared()``/``with_shared()``, refuse an algorithm with a server optimiser.
"""

# no ``from __future__ import annotations`` here: the field of :class:`ServerOptimizing` keeps
# its type as an object, so ``typing.get_type_hints`` of every subclass's ``__init__`` resolves
# it whatever module the subclass lives in

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch
from numpy.typing import NDArray

from simfl._checks import check_real
from simfl.neural.models import Params
from simfl.neural.optim import check_betas

__all__ = [
    "FedAdagrad",
    "FedAdam",
    "FedAvgM",
    "FedYogi",
    "ServerOptimizer",
    "ServerOptimizing",
    "is_buffer",
    "server_step",
]

F64 = NDArray[np.float64]
#: Name fragments of buffers: tensors a model updates without gradients (BatchNorm).
BUFFER_MARKS = ("running_", "num_batches_tracked")


def is_buffer(name: str) -> bool:
    """Whether ``name`` is a buffer: averaged, never optimised.

    Buffers: BatchNorm's ``running_mean``, ``running_var`` and ``num_batches_tracked``.
    """
    return any(mark in name for mark in BUFFER_MARKS)


class ServerOptimizer(ABC):
    """Base of the server optimisers (frozen dataclasses; see the module docstring)."""

    lr: float
    #: Names of the per-parameter state arrays.
    slots: ClassVar[tuple[str, ...]] = ()

    def initial(self, slot: str, like: F64) -> F64:
        """The state ``slot`` of a parameter like ``like`` before the first step: zeros."""
        return np.zeros_like(like)

    @abstractmethod
    def update(self, x: F64, delta: F64, state: dict[str, F64]) -> tuple[F64, dict[str, F64]]:
        """The new parameter and state from ``x``, the pseudo-gradient ``delta`` and the state."""


@dataclass(frozen=True)
class FedAvgM(ServerOptimizer):
    """FedAvg with server momentum (Hsu et al. 2019): ``m = momentum m + delta``, ``x += lr m``.

    Parameters
    ----------
    lr
        Server step size (> 0; 1 with ``momentum=0`` is FedAvg).
    momentum
        Server momentum in [0, 1).
    """

    lr: float = 1.0
    momentum: float = 0.9

    slots: ClassVar[tuple[str, ...]] = ("momentum",)

    def __post_init__(self) -> None:
        check_real("FedAvgM.lr", self.lr, low=0.0, low_open=True)
        check_real("FedAvgM.momentum", self.momentum, low=0.0, high=1.0, high_open=True)

    def update(  # noqa: D102
        self, x: F64, delta: F64, state: dict[str, F64]
    ) -> tuple[F64, dict[str, F64]]:
        m = float(self.momentum) * state["momentum"] + delta
        return x + float(self.lr) * m, {"momentum": m}


class _Adaptive(ServerOptimizer):
    """FedAdagrad, FedYogi, FedAdam: ``x += lr * m / (sqrt(v) + tau)`` (Algorithm 2)."""

    tau: float
    slots: ClassVar[tuple[str, ...]] = ("m", "v")

    def initial(self, slot: str, like: F64) -> F64:
        """``m_{-1} = 0``, ``v_{-1} = tau^2``."""
        if slot == "v":
            tau = float(self.tau)
            return np.full_like(like, tau * tau)
        return np.zeros_like(like)

    @abstractmethod
    def decay(self) -> float:
        """``beta1``, the first moment's decay."""

    @abstractmethod
    def second(self, v: F64, square: F64) -> F64:
        """The new second moment from ``v_{t-1}`` and ``delta^2``."""

    def update(self, x: F64, delta: F64, state: dict[str, F64]) -> tuple[F64, dict[str, F64]]:
        b1 = self.decay()
        m = b1 * state["m"] + (1 - b1) * delta
        v = self.second(state["v"], delta * delta)
        return x + float(self.lr) * m / (np.sqrt(v) + float(self.tau)), {"m": m, "v": v}

    def _check(self) -> None:
        owner = type(self).__name__
        check_real(f"{owner}.lr", self.lr, low=0.0, low_open=True)
        check_real(f"{owner}.tau", self.tau, low=0.0, low_open=True)


@dataclass(frozen=True)
class _Betas(_Adaptive):
    """The fields of FedAdam and FedYogi."""

    lr: float = 1e-2
    betas: tuple[float, float] = (0.9, 0.99)
    tau: float = 1e-3

    def __post_init__(self) -> None:
        self._check()
        check_betas(f"{type(self).__name__}.betas", self.betas)

    def decay(self) -> float:
        return float(self.betas[0])


@dataclass(frozen=True)
class FedAdam(_Betas):
    """FedAdam (Reddi et al., Algorithm 2): ``v = beta2 v + (1 - beta2) delta^2``.

    Parameters
    ----------
    lr
        Server step size ``eta`` (> 0).
    betas
        ``(beta1, beta2)``, each in [0, 1).
    tau
        Adaptivity ``tau`` (> 0): added to ``sqrt(v)``; ``v`` starts at ``tau^2``.
    """

    def second(self, v: F64, square: F64) -> F64:  # noqa: D102
        b2 = float(self.betas[1])
        return np.asarray(b2 * v + (1 - b2) * square, dtype=np.float64)


@dataclass(frozen=True)
class FedYogi(_Betas):
    """FedYogi (Reddi et al., Algorithm 2): ``v = v - (1 - beta2) delta^2 sign(v - delta^2)``.

    Parameters as for :class:`FedAdam`.
    """

    def second(self, v: F64, square: F64) -> F64:  # noqa: D102
        b2 = float(self.betas[1])
        return np.asarray(v - (1 - b2) * square * np.sign(v - square), dtype=np.float64)


@dataclass(frozen=True)
class FedAdagrad(_Adaptive):
    """FedAdagrad (Reddi et al., Algorithm 2): ``v = v + delta^2``.

    Parameters
    ----------
    lr
        Server step size ``eta`` (> 0).
    tau
        Adaptivity ``tau`` (> 0): added to ``sqrt(v)``; ``v`` starts at ``tau^2``.
    beta1
        First moment decay in [0, 1). 0 (default): ``m = delta``, the Adagrad step of the
        paper's FedAdagrad analysis; Algorithm 2 writes the same momentum for all three.
    """

    lr: float = 1e-2
    tau: float = 1e-3
    beta1: float = 0.0

    def __post_init__(self) -> None:
        self._check()
        check_real("FedAdagrad.beta1", self.beta1, low=0.0, high=1.0, high_open=True)

    def decay(self) -> float:  # noqa: D102
        return float(self.beta1)

    def second(self, v: F64, square: F64) -> F64:  # noqa: D102
        return np.asarray(v + square, dtype=np.float64)


def server_step(
    optimizer: ServerOptimizer,
    current: Mapping[str, torch.Tensor],
    means: Mapping[str, F64],
    state: Mapping[str, torch.Tensor],
) -> tuple[Params, Params]:
    """The server's new parameters and optimiser state after one aggregation.

    Parameters
    ----------
    optimizer
        The server optimiser.
    current
        The server's parameters (float32, no client axis).
    means
        The cohort's size-weighted average of each parameter it updated (float64).
    state
        The optimiser state, by ``"<slot>/<parameter>"`` (float64; missing: the initial one).

    Returns
    -------
    params, state
        The new value of every parameter of ``means`` (float32; buffers are the average) and
        the new state (``state`` with the stepped parameters' entries replaced).
    """
    new: Params = {}
    out = dict(state)
    for name, mean in means.items():
        if is_buffer(name):
            new[name] = torch.from_numpy(np.asarray(mean, dtype=np.float32))
            continue
        x = current[name].detach().cpu().double().numpy()
        slots = {}
        for slot in optimizer.slots:
            key = f"{slot}/{name}"
            slots[slot] = out[key].numpy() if key in out else optimizer.initial(slot, x)
        value, slots = optimizer.update(x, mean - x, slots)
        new[name] = torch.from_numpy(np.asarray(value, dtype=np.float32))
        for slot, arr in slots.items():
            out[f"{slot}/{name}"] = torch.from_numpy(np.asarray(arr, dtype=np.float64))
    return new, out


@dataclass(frozen=True)
class ServerOptimizing:
    """The ``server_optimizer`` field every neural algorithm has (keyword only, default None).

    ``None``: the server takes the cohort's size-weighted average (FedAvg's rule); a
    :class:`ServerOptimizer` steps from the server's model along the average's move instead,
    where the algorithm supports it (its ``server_rule`` is ``None``).
    """

    server_optimizer: ServerOptimizer | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        check_server_optimizer(type(self).__name__, self.server_optimizer)


def check_server_optimizer(owner: str, value: object) -> None:
    """Raise ``ValueError`` unless ``value`` is ``None`` or a :class:`ServerOptimizer`."""
    if value is not None and not isinstance(value, ServerOptimizer):
        raise ValueError(
            f"{owner}.server_optimizer must be None or a simfl.neural FedAvgM, FedAdam, "
            f"FedYogi or FedAdagrad (a ServerOptimizer), got {value!r}"
        )
