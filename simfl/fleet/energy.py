"""What devices spend: an optional energy model, and the energy of each job.

A device may declare :class:`Energy`: joules per unit of work, per byte received and per byte
sent, and an idle power (watts) while it waits for the round it took part in. A fleet that
declares it (:meth:`simfl.Fleet.with_energy`, or :class:`simfl.Profile` ``energy=``) makes every
run record the energy of each job in ``Results.clients`` (:data:`ENERGY_COLUMNS`):

``energy_compute``
    ``per_work`` x the work the job did: its ``work`` units if it finished computing, else the
    share of them done when it stopped (compute seconds done / compute seconds needed);
``energy_transfer``
    ``per_byte_down`` x ``bytes_down`` + ``per_byte_up`` x ``bytes_up`` (the bytes actually
    moved, partial transfers included);
``energy_idle``
    ``idle_power`` x the seconds from the job's end to the aggregation that closed its
    synchronous round (``t_end`` to the round's ``time``): an arrived update waits for the
    others. Zero for dropped jobs (the device failed), for jobs the server stopped (they end at
    the close) and for asynchronous policies (a device leaves as soon as it has uploaded);
``energy``
    their sum, in joules.

Fleets without an energy model record none of these columns, so their results are unchanged.

Finite joules: every field of :class:`Energy` is at most :data:`MAX_RATE` = ``1e7``, by the
reasoning that bounds durations (:data:`simfl.dists.MAX_DRAW`). The quantities they multiply are
bounded already: bytes by :data:`simfl.dists.MAX_BYTES` (about ``9.2e18``), an idle wait by the
job that closes its round (a download, a compute and an upload, each at most ``MAX_DRAW``:
``3e300`` s). So the transfer terms stay below ``1e26`` J and the idle term below
``1e7 * 3e300 = 3e307`` J, a factor 6 below the largest float for the sum of a job's terms.
The compute term is ``per_work`` times the algorithm's work units (known only once a run has
built its state): it stays finite for any work below ``1.8e301`` units a job. A larger field
would let a run report ``inf`` joules while its status is ``ok``; ``1e7`` W or J is beyond any
device (10 MW; 2.8 kWh per unit of work).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np
from numpy.typing import NDArray

from simfl._checks import check_real

__all__ = [
    "ENERGY_COLUMNS",
    "ENERGY_FIELDS",
    "MAX_RATE",
    "Energy",
    "EnergySpec",
    "energy_table",
    "job_energy",
]

#: The fields of :class:`Energy`, in the column order of :attr:`simfl.Fleet.energy`.
ENERGY_FIELDS = ("per_work", "per_byte_down", "per_byte_up", "idle_power")
#: The columns a run records in ``Results.clients`` when its fleet declares energy.
ENERGY_COLUMNS = ("energy", "energy_compute", "energy_transfer", "energy_idle")
#: The largest value of each :class:`Energy` field (J per unit of work, J per byte, W): joules
#: stay finite (see the module docstring).
MAX_RATE = 1e7


@dataclass(frozen=True)
class Energy:
    """The energy model of one kind of device (all in ``[0, MAX_RATE]``; 0: free).

    Parameters
    ----------
    per_work
        Joules per unit of work (the algorithm's work units; see ``Algorithm.work``).
    per_byte_down
        Joules per byte received (the model download).
    per_byte_up
        Joules per byte sent (the update upload).
    idle_power
        Watts drawn while the device waits, after its upload, for the synchronous round it took
        part in to close.

    Examples
    --------
    >>> Energy(per_work=2.0, per_byte_up=1e-6).per_byte_up
    1e-06
    """

    per_work: float = 0.0
    per_byte_down: float = 0.0
    per_byte_up: float = 0.0
    idle_power: float = 0.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = check_real(f"Energy.{f.name}", getattr(self, f.name), low=0.0, high=MAX_RATE)
            object.__setattr__(self, f.name, value)

    def row(self) -> tuple[float, float, float, float]:
        """The four values in the order of :data:`ENERGY_FIELDS`."""
        return (self.per_work, self.per_byte_down, self.per_byte_up, self.idle_power)


#: What a fleet's energy can be given as: one model, one per device, or their ``(n, 4)`` table.
EnergySpec = Energy | Sequence[Energy] | NDArray[np.float64]


def energy_table(energy: EnergySpec, n: int, field: str) -> NDArray[np.float64]:
    """The ``(n, 4)`` per-device table of ``energy`` (columns :data:`ENERGY_FIELDS`).

    ``energy`` is one :class:`Energy` for all ``n`` devices, a sequence of ``n`` of them, or
    the table itself (a float array of shape ``(n, 4)``, values finite and >= 0).

    Raises
    ------
    ValueError
        Naming ``field`` if ``energy`` is none of these.
    """
    if isinstance(energy, Energy):
        table = np.tile(np.array(energy.row(), dtype=np.float64), (n, 1))
    elif isinstance(energy, np.ndarray):
        if energy.dtype.kind not in "iuf":  # the type rule of simfl._checks: numbers only
            raise ValueError(
                f"{field} as an array must hold numbers (int or float; not bool, str, bytes or "
                f"objects), got dtype {energy.dtype}"
            )
        table = np.array(energy, dtype=np.float64)
        if table.shape != (n, len(ENERGY_FIELDS)):
            raise ValueError(
                f"{field} as an array must have shape ({n}, {len(ENERGY_FIELDS)}) (one row of "
                f"{', '.join(ENERGY_FIELDS)} per device), got {energy.shape}"
            )
        if not (np.isfinite(table).all() and (table >= 0).all() and (table <= MAX_RATE).all()):
            row, col = np.argwhere(~((table >= 0) & (table <= MAX_RATE)))[0]
            value = float(table[row, col])
            raise ValueError(
                f"{field} values must be in [0, {MAX_RATE:g}] (simfl.fleet.energy.MAX_RATE: "
                f"joules stay finite); device {row} has {ENERGY_FIELDS[col]} = {value!r}"
            )
    else:
        items = list(energy) if isinstance(energy, Sequence) else None
        if items is None or len(items) != n:
            got = "a sequence of " + str(len(items)) if items is not None else repr(energy)
            raise ValueError(
                f"{field} must be a simfl Energy or a sequence of {n} (one per device), got {got}"
            )
        for i, e in enumerate(items):
            if not isinstance(e, Energy):
                raise ValueError(f"{field}[{i}] must be a simfl Energy, got {e!r}")
        table = np.array([e.row() for e in items], dtype=np.float64).reshape(n, 4)
    table.setflags(write=False)
    return table


def job_energy(
    table: NDArray[np.float64],
    *,
    work_done: NDArray[np.float64],
    bytes_down: NDArray[np.float64],
    bytes_up: NDArray[np.float64],
    idle_seconds: NDArray[np.float64],
) -> dict[str, NDArray[np.float64]]:
    """The energy of jobs (:data:`ENERGY_COLUMNS`), from their devices' rows of the table.

    Parameters
    ----------
    table
        ``(n_jobs, 4)``: each job's device's :data:`ENERGY_FIELDS`.
    work_done
        Work units each job did.
    bytes_down, bytes_up
        Bytes each job received and sent.
    idle_seconds
        Seconds each job's device waited for its round to close.
    """
    compute = table[:, 0] * work_done
    transfer = table[:, 1] * bytes_down + table[:, 2] * bytes_up
    idle = table[:, 3] * idle_seconds
    return {
        "energy": compute + transfer + idle,
        "energy_compute": compute,
        "energy_transfer": transfer,
        "energy_idle": idle,
    }
