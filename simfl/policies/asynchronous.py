"""Asynchronous aggregation: FedAsync and FedBuff.

The server keeps ``concurrency`` jobs in flight. Whenever one ends, it starts another on a device
drawn uniformly among the idle ones. Each job downloads the current model version; its update is
computed (lazily, when it is about to be applied) from *that* version, kept as a snapshot while a
job still refers to it. An update's staleness is the number of server versions created between
its download and its application.

FedAsync (Xie, Koyejo, Gupta, "Asynchronous Federated Optimization", 2019): every arrival is
mixed into the model at once, ``x <- (1 - a_s) x + a_s x_i`` with ``a_s = mixing * (1 + s)^-e``
(their polynomial staleness function; ``e = staleness_exponent``).

FedBuff (Nguyen et al., "Federated Learning with Buffered Asynchronous Aggregation", AISTATS
2022): arrivals wait in a buffer; every ``buffer_size`` arrivals the server applies
``x <- x + server_lr * (1/K) * sum_i w(s_i) (x_i - x_base(i))`` with ``w(s) = (1 + s)^-e``,
``e = 0.5`` by default (``1/sqrt(1 + s)``).

Both mix the algorithm's server-side parameters (:meth:`~simfl.algorithms.Algorithm.shared`):
the policy computes the staleness weights only (:meth:`AsyncPolicy.mixer`), the arithmetic of
the mix is on the algorithm side (:mod:`simfl.algorithms.mixing`), and the result goes back
through :meth:`~simfl.algorithms.Algorithm.with_shared` (linear FedRep re-orthonormalises
there). The engine plays the runs (:mod:`simfl.engine.asynchronous`, where the records are
described).

Both are stateless: their policy state is ``None`` and they learn nothing. They are typed
``AsyncPolicy[Any]`` so that a subclass may keep a state of its own type (a policy that learns
from lateness, ``docs/examples/skip_late_async.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from simfl._checks import check_int, check_real
from simfl.algorithms.mixing import BufferedMix, SequentialMix
from simfl.policies.base import AsyncPolicy

__all__ = ["AsyncPolicy", "FedAsync", "FedBuff"]


def _check_common(owner: str, concurrency: int, exponent: float, max_staleness: int | None) -> None:
    check_int(f"{owner}.concurrency", concurrency, low=1)
    check_real(f"{owner}.staleness_exponent", exponent, low=0.0)
    if max_staleness is not None:
        check_int(f"{owner}.max_staleness", max_staleness, low=0)


@dataclass(frozen=True)
class FedAsync(AsyncPolicy[Any]):
    """Mix every arrival into the model at once, weighted by its staleness.

    Parameters
    ----------
    mixing
        Base mixing weight ``alpha`` in (0, 1].
    staleness_exponent
        ``e`` in ``alpha * (1 + s)^-e`` (>= 0; 0 ignores staleness).
    concurrency
        Jobs in flight at any time (>= 1, at most the fleet size).
    max_staleness
        Discard updates staler than this (``None``: apply all).
    """

    mixing: float = 0.6
    staleness_exponent: float = 0.5
    concurrency: int = 10
    max_staleness: int | None = None

    name: ClassVar[str] = "fedasync"

    def __post_init__(self) -> None:
        check_real("FedAsync.mixing", self.mixing, low=0.0, high=1.0, low_open=True)
        _check_common("FedAsync", self.concurrency, self.staleness_exponent, self.max_staleness)

    def mixer(self, staleness: NDArray[np.int64]) -> SequentialMix:
        """One update after the other, ``a_i = mixing * (1 + s_i)^-e``."""
        return SequentialMix(
            tuple(self.mixing * (1.0 + float(s)) ** -self.staleness_exponent for s in staleness)
        )


@dataclass(frozen=True)
class FedBuff(AsyncPolicy[Any]):
    """Aggregate every ``buffer_size`` arrivals: staleness-weighted mean of their deltas.

    Parameters
    ----------
    buffer_size
        ``K``, arrivals per aggregation (>= 1).
    concurrency
        Jobs in flight at any time (>= 1, at most the fleet size).
    server_lr
        Server step on the mean delta (> 0).
    staleness_exponent
        ``e`` in the weight ``(1 + s)^-e`` (0.5 gives FedBuff's ``1/sqrt(1 + s)``).
    max_staleness
        Discard updates staler than this (``None``: apply all).
    """

    buffer_size: int = 10
    concurrency: int = 20
    server_lr: float = 1.0
    staleness_exponent: float = 0.5
    max_staleness: int | None = None

    name: ClassVar[str] = "fedbuff"

    def __post_init__(self) -> None:
        check_int("FedBuff.buffer_size", self.buffer_size, low=1)
        check_real("FedBuff.server_lr", self.server_lr, low=0.0, low_open=True)
        _check_common("FedBuff", self.concurrency, self.staleness_exponent, self.max_staleness)

    def buffer(self) -> int:  # noqa: D102
        return self.buffer_size

    def mixer(self, staleness: NDArray[np.int64]) -> BufferedMix:
        """Weights ``w_i = (1 + s_i)^-e`` and scale ``server_lr / K`` on the deltas' sum."""
        w = (1.0 + staleness.astype(np.float64)) ** -self.staleness_exponent
        return BufferedMix(w, self.server_lr / staleness.size)
