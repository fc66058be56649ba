"""Devices: their compute and link profiles, when they are online, and traces to build them from.

* :mod:`simfl.fleet.devices`: :class:`Fleet` (one row per device) and :class:`Profile`;
* :mod:`simfl.fleet.energy`: :class:`Energy`, what a device spends per unit of work, per byte
  and while it waits, and the energy of each job;
* :mod:`simfl.fleet.availability`: :class:`Availability` (per-device on/off intervals) and the
  engine's :class:`AvailabilityCursor` over them;
* :mod:`simfl.fleet.traces`: FedScale device traces imported into a fleet;
* :mod:`simfl.fleet.fit`: :func:`fit_fleet`, a fleet fitted from measured job durations (compute
  distributions by maximum likelihood, chosen by AIC or BIC, links, dropout hazards) and its
  report.
"""

from simfl.fleet.availability import Availability, AvailabilityCursor
from simfl.fleet.devices import Fleet, Profile
from simfl.fleet.energy import Energy
from simfl.fleet.fit import FAMILIES, DistFit, FitWarning, FleetFit, fit_dist, fit_fleet
from simfl.fleet.traces import (
    fleet_from_fedscale,
    load_pickle,
    sample_trace,
    trace_intervals,
    write_sample_trace,
)

__all__ = [
    "FAMILIES",
    "Availability",
    "AvailabilityCursor",
    "DistFit",
    "Energy",
    "FitWarning",
    "Fleet",
    "FleetFit",
    "Profile",
    "fit_dist",
    "fit_fleet",
    "fleet_from_fedscale",
    "load_pickle",
    "sample_trace",
    "trace_intervals",
    "write_sample_trace",
]
