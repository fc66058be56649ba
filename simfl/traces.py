"""Re-export of the functions of :mod:`simfl.fleet.traces` for the import path the README used."""

from simfl.fleet.traces import (
    fleet_from_fedscale,
    load_pickle,
    sample_trace,
    trace_intervals,
    write_sample_trace,
)

__all__ = [
    "fleet_from_fedscale",
    "load_pickle",
    "sample_trace",
    "trace_intervals",
    "write_sample_trace",
]
