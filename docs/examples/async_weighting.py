"""A custom asynchronous weighting: FedBuff with FedAsync's hinge staleness function."""

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from simfl.algorithms.mixing import BufferedMix
from simfl.policies import FedBuff


@dataclass(frozen=True)
class HingeBuff(FedBuff):
    """FedBuff whose updates weigh 1 up to ``hinge`` versions stale, then decay.

    The weight of an update ``s`` versions stale is 1 for ``s <= hinge`` and
    ``1 / (1 + slope * (s - hinge))`` beyond (Xie et al. 2019, the hinge function).
    """

    hinge: int = 2
    slope: float = 1.0
    name: ClassVar[str] = "hinge-buff"

    def mixer(self, staleness: NDArray[np.int64]) -> BufferedMix:
        """FedBuff's mix of the deltas, with the hinge weights."""
        beyond = np.maximum(staleness.astype(np.float64) - self.hinge, 0.0)
        weights = 1.0 / (1.0 + self.slope * beyond)
        return BufferedMix(weights=weights, scale=self.server_lr / staleness.size)
