"""Max-min fair rates of flows that share resources (the pure computation, no SimPy).

Rates are the max-min fair allocation found by progressive filling: raise every rate together;
a resource that fills freezes the flows through it. On a single link this is processor sharing,
each of the ``n`` flows getting ``C / n``.

>>> import numpy as np
>>> max_min_rates([np.array([0]), np.array([0, 1])], np.array([10.0, 2.0])).tolist()
[8.0, 2.0]
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

__all__ = ["max_min_rates"]


def max_min_rates(
    flows: list[NDArray[np.int64]], capacity: NDArray[np.float64]
) -> NDArray[np.float64]:
    """Max-min fair rates of flows over resources (``inf`` for flows with no finite resource).

    Parameters
    ----------
    flows
        For each flow, the indices of the resources (link directions) it crosses.
    capacity
        Capacity of every resource (bytes/s; ``inf`` for no limit).
    """
    n = len(flows)
    rates = np.full(n, math.inf)
    if n == 0:
        return rates
    finite = [f[np.isfinite(capacity[f])] for f in flows]
    used = np.concatenate(finite) if finite else np.empty(0, dtype=np.int64)
    if used.size == 0:
        return rates
    counts = np.bincount(used, minlength=capacity.size)
    # a resource crossed by one flow only is a cap on that flow; the others are shared
    cap = np.array(
        [capacity[f[counts[f] == 1]].min() if (counts[f] == 1).any() else math.inf for f in finite]
    )
    shared_ids = np.flatnonzero(counts > 1)
    col = {int(r): j for j, r in enumerate(shared_ids)}
    member = np.zeros((n, shared_ids.size), dtype=bool)
    for i, f in enumerate(finite):
        for r in f[counts[f] > 1]:
            member[i, col[int(r)]] = True
    left = capacity[shared_ids].astype(np.float64)
    free = np.ones(n, dtype=bool)
    while free.any():
        users = member[free].sum(axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(users > 0, left / users, math.inf)
        level = min(float(share.min()) if share.size else math.inf, float(cap[free].min()))
        if math.isinf(level):
            rates[free] = math.inf
            break
        capped = free & (cap <= level)
        if capped.any():  # these flows are limited by their own link, below the fair level
            frozen, value = capped, cap
        else:
            bottleneck = share <= level * (1.0 + 1e-12)
            frozen = free & member[:, bottleneck].any(axis=1)
            value = np.full(n, level)
        rates[frozen] = value[frozen]
        left = left - (member[frozen] * rates[frozen, None]).sum(axis=0)
        left = np.maximum(left, 0.0)
        free &= ~frozen
    return rates
