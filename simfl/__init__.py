"""simfl: discrete-event simulation of federated learning on heterogeneous device fleets.

A SimPy event loop models every device's compute time, network transfers and dropouts, and at
the right simulated moments drives the real training math of the algorithms, so every run yields
both accuracy and simulated wall-clock time.

The pieces of a :class:`Scenario` are :mod:`simfl.fleet` (devices, when they are online, traces),
:mod:`simfl.network` (payloads, topologies, shared links), :mod:`simfl.policies`,
:mod:`simfl.algorithms` (and :mod:`simfl.neural`), :mod:`simfl.tasks` and, optionally, the
server's own costs (:class:`Server`); :func:`run` is the engine. :mod:`simfl.sweeps` runs grids
of scenarios into a store (:func:`sweep`), and :mod:`simfl.compare`, :mod:`simfl.plots` and
:mod:`simfl.report` read the results.

>>> import simfl
>>> from simfl import Scenario, Fleet, dists, policies, algorithms, tasks
>>> sc = Scenario(
...     task=tasks.LinearRepresentation(d=20, k=2, samples_per_client=10, noise_std=1e-3),
...     algorithm=algorithms.FedRep(),
...     fleet=Fleet.homogeneous(100, compute=dists.Exponential(mean=1.0)),
...     policy=policies.WaitAll(fraction=0.1),
...     rounds=5, seed=0)
>>> res = simfl.run(sc, progress=False)
>>> len(res.rounds), len(res.clients)
(5, 50)
"""

from typing import TYPE_CHECKING, Any

from simfl import algorithms, dists, policies, sweeps, tasks
from simfl.engine import run
from simfl.fleet import Fleet, Profile
from simfl.network import Payload
from simfl.results import Results
from simfl.rng import Streams
from simfl.scenario import Scenario, Target
from simfl.server import Server
from simfl.sweeps import Store, sweep

if TYPE_CHECKING:
    from simfl import tuning
    from simfl.tuning import tune

__all__ = [
    "Fleet",
    "Payload",
    "Profile",
    "Results",
    "Scenario",
    "Server",
    "Store",
    "Streams",
    "Target",
    "algorithms",
    "dists",
    "policies",
    "run",
    "sweep",
    "sweeps",
    "tasks",
    "tune",
    "tuning",
]


def __getattr__(name: str) -> Any:
    """``simfl.tune`` and ``simfl.tuning``, imported when first used (they load Optuna)."""
    if name in ("tune", "tuning"):
        import simfl.tuning

        return simfl.tuning if name == "tuning" else simfl.tuning.tune
    raise AttributeError(f"module 'simfl' has no attribute {name!r}")
