"""What the twin's server sends to a job and how it reads the reply, per algorithm.

The twin drives the scenario's own algorithm: it aggregates with ``Algorithm.aggregate`` and
evaluates with ``Algorithm.evaluate``, exactly as :func:`simfl.run` does; only the local
updates come from the SuperNodes instead of ``Algorithm.local_updates``. Two kinds of
algorithm can be played:

* :class:`~simfl.algorithms.TimingOnly`: nothing is sent or trained, the jobs only take their
  time (a twin of the clock alone);
* a Flower app under simfl (:class:`simfl.flower.FlowerAlgorithm`): the model goes to the
  SuperNodes, the user's ClientApp trains it there, the replies become the updates.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
from flwr.app import RecordDict

from simfl.algorithms.base import Algorithm, Updates
from simfl.algorithms.timing import TimingOnly
from simfl.rng import Streams

__all__ = ["TwinMath", "twin_math"]


class TwinMath(Protocol):
    """The algorithm-specific half of the twin's server."""

    def content(self, state: Any) -> RecordDict:
        """What every job of a round receives (the model)."""

    def updates(
        self, state: Any, devices: np.ndarray[Any, Any], replies: list[RecordDict]
    ) -> Updates:
        """The updates of the arrived jobs, in ``devices`` order."""

    def seed(self, streams: Streams, device: int, round: int) -> int:
        """The torch seed of a job's training."""


class _Timing:
    def content(self, state: Any) -> RecordDict:
        return RecordDict()

    def updates(
        self, state: Any, devices: np.ndarray[Any, Any], replies: list[RecordDict]
    ) -> Updates:
        return Updates(np.asarray(devices, dtype=np.int64), {})

    def seed(self, streams: Streams, device: int, round: int) -> int:
        return 0


def twin_math(algorithm: Algorithm[Any]) -> TwinMath:
    """The twin's half of ``algorithm``; a ``ValueError`` for one the twin cannot play."""
    if isinstance(algorithm, TimingOnly):
        return _Timing()
    raise ValueError(
        f"Scenario.algorithm must be simfl.algorithms.TimingOnly or a Flower app under simfl "
        f"(simfl.flower) for a twin, got {type(algorithm).__name__}: the twin trains with the "
        f"app's own ClientApp on the SuperNodes"
    )
