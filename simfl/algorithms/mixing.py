"""Asynchronous mixing: how staleness-weighted updates combine with the server's parameters.

The asynchronous policies (:mod:`simfl.policies.asynchronous`) decide *when* updates are applied
and with which weights; the arithmetic of the mix is here, on the algorithm side, and works on
the algorithm's server-side parameters (:meth:`~simfl.algorithms.Algorithm.shared`, a dict of
arrays by name) and the matching ``params`` of the :class:`~simfl.algorithms.Updates`:

* :class:`SequentialMix` (FedAsync): every update in turn, ``x <- (1 - a_i) x + a_i x_i``;
* :class:`BufferedMix` (FedBuff): ``x <- x + scale * sum_i w_i (x_i - base_i)``, where
  ``base_i`` is the server's parameters at the version update ``i`` was computed from;
* :class:`GroupMix` (semi-asynchronous tiers, FedAT): ``x <- sum_g w_g x_g`` over the latest
  model ``x_g`` of every group.

No SimPy and no policy state: pure numpy, so the mixes are tested on hand-computed values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simfl.algorithms.base import Updates

__all__ = ["BufferedMix", "GroupMix", "SequentialMix", "Shared"]

#: Server-side parameters by name (what ``Algorithm.shared`` returns).
Shared = dict[str, NDArray[Any]]


@dataclass(frozen=True)
class SequentialMix:
    """Mix the updates in order: for each row ``i``, ``x <- (1 - a_i) x + a_i x_i``.

    Attributes
    ----------
    alphas
        ``a_i`` of each row of the updates, in row order.
    """

    alphas: tuple[float, ...]

    def apply(self, current: Shared, updates: Updates, bases: Sequence[Shared]) -> Shared:
        """The parameters after mixing every row of ``updates`` into ``current`` in turn.

        ``bases`` (the parameters each row started from) are not used by this mix.
        """
        params = updates.params
        out = dict(current)
        for i, a in enumerate(self.alphas):
            out = {k: (1.0 - a) * out[k] + a * params[k][i] for k in out}
        return out


@dataclass(frozen=True, eq=False)
class BufferedMix:
    """Add the weighted deltas: ``x <- x + scale * sum_i w_i (x_i - base_i)``.

    Attributes
    ----------
    weights
        ``w_i`` of each row of the updates, in row order.
    scale
        The factor on the weighted sum (FedBuff: ``server_lr / K``).
    """

    weights: NDArray[np.float64]
    scale: float

    def apply(self, current: Shared, updates: Updates, bases: Sequence[Shared]) -> Shared:
        """The parameters ``current`` plus the scaled, weighted sum of the rows' deltas.

        ``bases[i]`` holds the parameters row ``i`` of ``updates`` was computed from.
        """
        params, w = updates.params, self.weights
        out = {}
        for k, x in current.items():
            out[k] = x + self.scale * _weighted_sum(w, params[k], [b[k] for b in bases])
        return out


def _weighted_sum(
    w: NDArray[np.float64], rows: NDArray[Any], bases: Sequence[NDArray[Any]]
) -> NDArray[Any]:
    """``sum(w[i] * (rows[i] - bases[i]) for i ...)`` in one pass, to the last bit.

    The terms are added row after row from 0, as Python's ``sum`` adds them: an
    accumulation (never a reduction, which numpy may add pairwise), with ``0 + t_0`` first
    (it turns a ``-0.0`` into ``0.0`` as ``sum`` does).
    """
    terms = w.reshape((-1,) + (1,) * (rows.ndim - 1)) * (rows - np.stack(bases))
    terms[0] += 0.0
    out: NDArray[Any] = np.add.accumulate(terms, axis=0)[-1]
    return out


@dataclass(frozen=True, eq=False)
class GroupMix:
    """The weighted sum of the groups' latest models: ``x <- sum_g w_g x_g``.

    Attributes
    ----------
    weights
        ``w_g`` of each group (summing to 1).
    """

    weights: NDArray[np.float64]

    def apply(self, models: Sequence[Shared]) -> Shared:
        """The mix of ``models`` (one per group, in group order) with :attr:`weights`."""
        w = self.weights
        if len(models) != w.size:
            raise ValueError(f"GroupMix: {w.size} weights for {len(models)} group models")
        used = [g for g in range(w.size) if w[g] != 0.0]
        return {k: sum(w[g] * models[g][k] for g in used) for k in models[0]}
