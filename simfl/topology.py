"""Re-export of :class:`simfl.network.Network` for the import path the README used."""

from simfl.network.topology import Network

__all__ = ["Network"]
