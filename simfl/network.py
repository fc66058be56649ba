"""The first network model: a private link per device (star topology, no contention).

A transfer of ``S`` bytes to or from device ``i`` takes ``latency[i] + S / bandwidth[i]``
seconds, with the downlink bandwidth for what the server sends and the uplink bandwidth for what
the device sends back. ``S`` is the real size of the parameters the algorithm exchanges
(:class:`Payload`), so an algorithm that sends less (FedRep sends its body, never the heads)
spends less simulated time on the network.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from simfl._checks import check_int

__all__ = ["Payload", "bytes_delivered", "nbytes", "transfer_seconds"]


@dataclass(frozen=True)
class Payload:
    """Bytes sent to each selected device (``down``) and returned by each device (``up``)."""

    down: int
    up: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "down", check_int("Payload.down", self.down, low=0))
        object.__setattr__(self, "up", check_int("Payload.up", self.up, low=0))


def nbytes(*arrays: NDArray[np.generic]) -> int:
    """Total size in bytes of the given arrays, as they would travel on the wire."""
    return int(sum(a.nbytes for a in arrays))


def transfer_seconds(size: int, bandwidth: ArrayLike, latency: ArrayLike) -> NDArray[np.float64]:
    """Seconds to move ``size`` bytes over links of the given bandwidth (bytes/s) and latency.

    An infinite bandwidth costs only the latency; a zero-byte payload costs only the latency.
    """
    bw = np.asarray(bandwidth, dtype=np.float64)
    return np.asarray(latency, dtype=np.float64) + (size / bw if size else np.zeros_like(bw))


def bytes_delivered(
    elapsed: ArrayLike, size: int, bandwidth: ArrayLike, latency: ArrayLike
) -> NDArray[np.float64]:
    """Bytes a transfer has delivered after ``elapsed`` seconds (0 during the latency)."""
    el = np.asarray(elapsed, dtype=np.float64)
    moving = np.maximum(el - np.asarray(latency, dtype=np.float64), 0.0)
    with np.errstate(invalid="ignore"):
        done = np.where(
            np.isinf(bandwidth),
            np.where(moving > 0, size, 0.0),
            moving * np.asarray(bandwidth, dtype=np.float64),
        )
    full = el >= np.asarray(transfer_seconds(size, bandwidth, latency))
    return np.asarray(np.where(full, float(size), np.minimum(done, size)), dtype=np.float64)
