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


def transfer_seconds(
    size: ArrayLike, bandwidth: ArrayLike, latency: ArrayLike
) -> NDArray[np.float64]:
    """Seconds to move ``size`` bytes over links of the given bandwidth (bytes/s) and latency.

    An infinite bandwidth costs only the latency; a zero-byte payload costs only the latency.
    """
    lat = np.asarray(latency, dtype=np.float64)
    sz = np.asarray(size, dtype=np.float64)
    bw = np.asarray(bandwidth, dtype=np.float64)
    if sz.ndim == 0 and bw.ndim > 0:  # one payload for a cohort: fewer steps
        if sz == 0:
            shape = np.broadcast_shapes(lat.shape, bw.shape)
            return np.array(np.broadcast_to(lat, shape), dtype=np.float64)
        return np.asarray(lat + sz / bw, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        moving = np.where(sz == 0, 0.0, sz / bw)
    return np.asarray(lat + moving, dtype=np.float64)


def bytes_delivered(
    elapsed: ArrayLike, size: ArrayLike, bandwidth: ArrayLike, latency: ArrayLike
) -> NDArray[np.float64]:
    """Bytes a transfer of ``size`` bytes has delivered after ``elapsed`` seconds.

    Nothing moves during the latency; then bytes flow at ``bandwidth`` until all have arrived.
    """
    el = np.asarray(elapsed, dtype=np.float64)
    sz = np.asarray(size, dtype=np.float64)
    bw = np.asarray(bandwidth, dtype=np.float64)
    moving = np.maximum(el - np.asarray(latency, dtype=np.float64), 0.0)
    with np.errstate(invalid="ignore"):
        done = np.where(np.isinf(bw), np.where(moving > 0, sz, 0.0), moving * bw)
    full = el >= transfer_seconds(sz, bw, latency)
    return np.asarray(np.where(full, sz, np.minimum(done, sz)), dtype=np.float64)
