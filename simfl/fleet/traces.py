"""Device traces in FedScale's formats, imported into a :class:`~simfl.Fleet`.

FedScale (Lai et al., "FedScale: Benchmarking Model and System Performance of Federated
Learning at Scale", ICML 2022) ships two pickled dicts keyed by client id:

``client_device_capacity``
    ``{client_id: {"computation": float, "communication": float}}``: milliseconds per training
    sample and per pass, and bandwidth in kbit/s (FedScale divides bits by 1024). FedScale
    charges ``3 * samples * computation / 1000`` seconds for a local update (forward and
    backward) and ``size / communication`` for a transfer.
``client_behave_trace``
    ``{client_id: {"active": [s, ...], "inactive": [e, ...], "finish_time": T, "duration": ...,
    "model": ...}}``: the client is online during ``[active[k], inactive[k]]``, and the pattern
    repeats with period ``finish_time``.

:func:`fleet_from_fedscale` turns them into a fleet: a constant compute time per unit of work of
``3 * computation / 1000 * samples_per_unit`` seconds (so choose ``samples_per_unit`` = samples
processed per work unit of the algorithm, e.g. batch size x local steps), symmetric bandwidth
``communication * 1024 / 8`` bytes/s, and the behaviour trace replayed periodically up to
``horizon`` as the fleet's availability. The real FedScale files cannot be downloaded here;
:func:`sample_trace` points to a small synthetic trace in the same format that ships with simfl
(:func:`write_sample_trace` made it).

Note: the files are Python pickles; only load traces you trust.
"""

from __future__ import annotations

import math
import os
import pickle
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from simfl._checks import check_real
from simfl.dists import Constant
from simfl.fleet.availability import Availability
from simfl.fleet.devices import Fleet
from simfl.rng import Streams

__all__ = [
    "fleet_from_fedscale",
    "load_pickle",
    "sample_trace",
    "trace_intervals",
    "write_sample_trace",
]

SAMPLE_DIR = Path(__file__).resolve().parents[1] / "data" / "fedscale_sample"
CAPACITY = "client_device_capacity"
BEHAVE = "client_behave_trace"


def sample_trace() -> tuple[Path, Path]:
    """Paths of the synthetic FedScale-format trace shipped with simfl (capacity, behaviour)."""
    return SAMPLE_DIR / CAPACITY, SAMPLE_DIR / BEHAVE


def load_pickle(source: str | os.PathLike[str] | Mapping[Any, Any]) -> dict[Any, Any]:
    """A FedScale trace dict from a pickle file (or the dict itself)."""
    if isinstance(source, Mapping):
        return dict(source)
    path = Path(source)
    if not path.is_file():
        raise FileNotFoundError(f"FedScale trace file {path} does not exist")
    with path.open("rb") as fh:
        data = pickle.load(fh)  # FedScale's format: load only traces you trust
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a FedScale trace (a pickled dict), got {type(data)}")
    return data


def trace_intervals(entry: Mapping[str, Any], horizon: float) -> list[tuple[float, float]]:
    """On-intervals of one client's behaviour trace.

    The pattern repeats every ``finish_time``; intervals that start before ``horizon`` are kept.
    """
    active = np.asarray(entry["active"], dtype=np.float64)
    inactive = np.asarray(entry["inactive"], dtype=np.float64)
    if active.size != inactive.size:
        raise ValueError("a FedScale behaviour trace needs as many 'active' as 'inactive' times")
    period = float(entry.get("finish_time", math.inf))
    if not math.isfinite(period) or period <= 0:
        return list(zip(active.tolist(), inactive.tolist(), strict=True))
    rows: list[tuple[float, float]] = []
    k = 0
    while k * period < horizon:
        rows.extend(
            (k * period + a, k * period + min(b, period))
            for a, b in zip(active, inactive, strict=True)
            if a < period and k * period + a < horizon
        )
        k += 1
    return rows


def fleet_from_fedscale(
    capacity: str | os.PathLike[str] | Mapping[Any, Any],
    behave: str | os.PathLike[str] | Mapping[Any, Any] | None = None,
    *,
    samples_per_unit: float,
    horizon: float = 7 * 86_400.0,
    clients: Sequence[Any] | None = None,
    offline: str = "abort",
    latency: float = 0.0,
) -> Fleet:
    """A fleet replaying FedScale device traces (see the module docstring).

    Parameters
    ----------
    capacity, behave
        The two trace dicts, or paths of their pickles (``behave=None``: always online).
    samples_per_unit
        Training samples processed per unit of the algorithm's work (> 0).
    horizon
        How far to replay the periodic behaviour trace, in seconds (> 0).
    clients
        Which client ids, in device order (default: the capacity trace's ids, sorted; with a
        behaviour trace, those present in both).
    offline
        ``"abort"`` or ``"pause"``, see :meth:`simfl.Fleet.with_availability`.
    latency
        Latency added to every transfer, seconds (FedScale has none).
    """
    check_real("fleet_from_fedscale samples_per_unit", samples_per_unit, low=0.0, low_open=True)
    check_real("fleet_from_fedscale horizon", horizon, low=0.0, low_open=True)
    cap = load_pickle(capacity)
    beh = None if behave is None else load_pickle(behave)
    if clients is None:
        ids = sorted(cap) if beh is None else sorted(set(cap) & set(beh))
    else:
        ids = list(clients)
    missing = [c for c in ids if c not in cap or (beh is not None and c not in beh)]
    if not ids or missing:
        raise ValueError(
            f"fleet_from_fedscale: no usable clients, or clients missing from the "
            f"traces: {missing[:5]}"
        )
    comp = np.array([float(cap[c]["computation"]) for c in ids])
    comm = np.array([float(cap[c]["communication"]) for c in ids])
    if (comp <= 0).any() or (comm <= 0).any() or not np.isfinite(comp + comm).all():
        raise ValueError("fleet_from_fedscale: computation and communication must be positive")
    bandwidth = comm * 1024 / 8  # kbit/s (1 kbit = 1024 bits, as FedScale) to bytes/s
    fleet = Fleet(
        [Constant(1.0)],
        np.zeros(len(ids), dtype=np.int64),
        scale=3.0 * comp / 1000.0 * samples_per_unit,
        bandwidth_down=bandwidth,
        bandwidth_up=bandwidth,
        latency=latency,
        redraw="run",
        group_names=["fedscale"],
    )
    if beh is None:
        return fleet
    availability = Availability([trace_intervals(beh[c], horizon) for c in ids], horizon)
    return fleet.with_availability(availability, offline)


def write_sample_trace(directory: str | os.PathLike[str], n: int = 40, seed: int = 0) -> None:
    """Write a synthetic trace in FedScale's two formats (how the shipped sample was made).

    Compute times are log-normal around 100 ms per sample, bandwidths log-normal around 5 Mbit/s;
    each client's behaviour over a two-day period comes from a diurnal availability.
    """
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    streams = Streams(seed)
    ids = np.arange(n)
    comp = np.exp(np.log(100.0) + 0.6 * streams.normal("trace/comp", ids))
    comm = np.exp(np.log(5000.0) + 0.8 * streams.normal("trace/comm", ids))
    period = 2 * 86_400.0
    av = Availability.diurnal(n, mean_on=3600.0, low=0.1, high=0.7, horizon=period, seed=seed)
    capacity = {
        int(i) + 1: {
            "computation": round(float(comp[i]), 3),
            "communication": round(float(comm[i]), 3),
        }
        for i in ids
    }
    behave = {}
    for i in ids:
        s, e = av.intervals(int(i))
        keep = s < period
        behave[int(i) + 1] = {
            "active": [round(float(x), 1) for x in s[keep]],
            "inactive": [round(float(min(x, period)), 1) for x in e[keep]],
            "finish_time": period,
            "duration": period,
            "model": "synthetic",
        }
    for name, data in ((CAPACITY, capacity), (BEHAVE, behave)):
        with (out / name).open("wb") as fh:
            pickle.dump(data, fh, protocol=4)
