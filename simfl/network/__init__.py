"""How devices reach the server: payload sizes and link topologies.

* :mod:`simfl.network.payload`: :class:`Payload` (bytes each way) and transfer times on a
  dedicated link;
* :mod:`simfl.network.topology`: :class:`Network` (star, hierarchical or any graph) and the
  :class:`Topology` it binds to a fleet.

How transfers share the links of a topology (max-min fairly) is the engine's
(:mod:`simfl.engine.flows`).
"""

from simfl.network.payload import Payload, bytes_delivered, nbytes, transfer_seconds
from simfl.network.topology import Network, Topology

__all__ = [
    "Network",
    "Payload",
    "Topology",
    "bytes_delivered",
    "nbytes",
    "transfer_seconds",
]
