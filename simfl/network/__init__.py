"""How devices reach the server: payload sizes, link topologies and max-min fair sharing.

* :mod:`simfl.network.payload`: :class:`Payload` (bytes each way) and transfer times on a
  dedicated link;
* :mod:`simfl.network.topology`: :class:`Network` (star, hierarchical or any graph) and the
  :class:`Topology` it binds to a fleet;
* :mod:`simfl.network.flows`: :func:`max_min_rates`, the rates of flows sharing links;
* :mod:`simfl.network.sharing`: :class:`SharedLink`, one link's processor sharing with
  per-flow caps at ``O(log n)`` per flow event (what the fast shared links are made of).
"""

from simfl.network.flows import max_min_rates
from simfl.network.payload import Payload, bytes_delivered, nbytes, transfer_seconds
from simfl.network.topology import Network, Topology

__all__ = [
    "Network",
    "Payload",
    "Topology",
    "bytes_delivered",
    "max_min_rates",
    "nbytes",
    "transfer_seconds",
]
