"""Sweeps: grids of scenarios x seeds, run on local processes or Dask into a results store.

* :mod:`simfl.sweeps.grid`: :func:`grid` of a base scenario's fields, as :class:`Case` objects,
  and the rule for seeds (:func:`with_seeds`);
* :mod:`simfl.sweeps.run`: :func:`sweep` (also ``simfl.sweep``), which runs the cases;
* :mod:`simfl.sweeps.executors`: where the runs execute (inline, local processes, Dask);
* :mod:`simfl.sweeps.scheduler`: Dask scheduler addresses, checked before connecting;
* :mod:`simfl.sweeps.worker`: what an executor runs for one case;
* :mod:`simfl.sweeps.store`: the results store the workers write into (:class:`Store`;
  :class:`StoreWriteError` when it cannot be written);
* :mod:`simfl.sweeps.claims`: the claims on runs that let sweeps share a store;
* :mod:`simfl.sweeps.integrity`: how the store checks its files (:class:`StoreError`,
  :class:`BadRun`);
* :mod:`simfl.sweeps.record`: the fields of a stored run's ``run.json`` and what they may hold;
* :mod:`simfl.sweeps.versions`: which stored runs are older versions of an edited scenario;
* :mod:`simfl.sweeps.fingerprint`: stable fingerprints of scenarios, part of every run id.
"""

from simfl.sweeps.executors import Dask, Executor, Inline, Processes, make_executor
from simfl.sweeps.grid import Case, grid, with_seeds
from simfl.sweeps.integrity import BadRun, StoreError, StoreWarning
from simfl.sweeps.run import SweepInterrupted, SweepOutcome, sweep
from simfl.sweeps.scheduler import SchedulerError
from simfl.sweeps.store import MemoryStore, Store, StoreWriteError

__all__ = [
    "BadRun",
    "Case",
    "Dask",
    "Executor",
    "Inline",
    "MemoryStore",
    "Processes",
    "SchedulerError",
    "Store",
    "StoreError",
    "StoreWarning",
    "StoreWriteError",
    "SweepInterrupted",
    "SweepOutcome",
    "grid",
    "make_executor",
    "sweep",
    "with_seeds",
]
