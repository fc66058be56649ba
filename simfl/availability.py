"""Re-export of :class:`simfl.fleet.Availability` for the import path the README used."""

from simfl.fleet.availability import Availability

__all__ = ["Availability"]
