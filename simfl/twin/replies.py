"""What the twin's server sends to a job and how it reads the reply, per algorithm.

The twin drives the scenario's own algorithm: it aggregates with ``Algorithm.aggregate`` and
evaluates with ``Algorithm.evaluate``, exactly as :func:`simfl.run` does; only the local
updates come from the SuperNodes instead of ``Algorithm.local_updates``. Two kinds of
algorithm can be played:

* :class:`~simfl.algorithms.TimingOnly`: nothing is sent or trained, the jobs only take their
  time (a twin of the clock alone; ``app=`` may still run a ClientApp in each compute window);
* a Flower app under simfl (:class:`simfl.flower.FlowerApp`): the strategy's train message
  goes to the SuperNode, the app's ClientApp trains there, seeded as :func:`simfl.run` seeds
  it, and the replies become the updates the strategy aggregates.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from flwr.app import Message, RecordDict

from simfl.algorithms.base import Algorithm, Updates
from simfl.algorithms.timing import TimingOnly
from simfl.rng import Streams

__all__ = ["TwinMath", "client_reference", "twin_math"]


class TwinMath(Protocol):
    """The algorithm-specific half of the twin's server."""

    def content(self, state: Any, device: int, round: int) -> RecordDict:
        """What ``device``'s job of ``round`` receives (the model and its instructions)."""

    def updates(self, state: Any, devices: np.ndarray[Any, Any], replies: list[Message]) -> Updates:
        """The updates of the arrived jobs, in ``devices`` order."""

    def seed(self, streams: Streams, device: int, round: int) -> int:
        """The seed of a job's training (torch, numpy and Python's ``random``)."""


class _Timing:
    def content(self, state: Any, device: int, round: int) -> RecordDict:
        return RecordDict()

    def updates(self, state: Any, devices: np.ndarray[Any, Any], replies: list[Message]) -> Updates:
        return Updates(np.asarray(devices, dtype=np.int64), {})

    def seed(self, streams: Streams, device: int, round: int) -> int:
        return 0


class _Flower:
    def __init__(self, app: Any) -> None:
        self.app = app

    def content(self, state: Any, device: int, round: int) -> RecordDict:
        return self.app.train_message(state, device, round + 1).content  # type: ignore[no-any-return]

    def updates(self, state: Any, devices: np.ndarray[Any, Any], replies: list[Message]) -> Updates:
        states = [RecordDict() for _ in replies]  # a SuperNode keeps its Context.state itself
        return self.app.updates_from(state, devices, replies, states)  # type: ignore[no-any-return]

    def seed(self, streams: Streams, device: int, round: int) -> int:
        return int(self.app.job_seed(streams, device, round))


def _is_flower_app(algorithm: Algorithm[Any]) -> bool:
    if "simfl.flower" not in sys.modules and "flwr" not in sys.modules:
        return False
    from simfl.flower import FlowerApp

    return isinstance(algorithm, FlowerApp)


def twin_math(algorithm: Algorithm[Any]) -> TwinMath:
    """The twin's half of ``algorithm``; a ``ValueError`` for one the twin cannot play."""
    if isinstance(algorithm, TimingOnly):
        return _Timing()
    if _is_flower_app(algorithm):
        return _Flower(algorithm)
    raise ValueError(
        f"Scenario.algorithm must be simfl.algorithms.TimingOnly or a Flower app under simfl "
        f"(simfl.flower.FlowerApp) for a twin, got {type(algorithm).__name__}: the twin trains "
        f"with the app's own ClientApp on the SuperNodes"
    )


def client_reference(algorithm: Algorithm[Any]) -> tuple[str, list[str]] | None:
    """``("module:attribute", [import root])`` of a FlowerApp's client, where it can be found.

    A ``client_fn`` (a module-level function) names itself; a ``ClientApp`` is looked up among
    the attributes of the modules imported so far. ``None``: not a Flower app, or its client
    lives nowhere importable (pass ``app=`` to :func:`simfl.twin.twin`).
    """
    if not _is_flower_app(algorithm):
        return None
    client = algorithm.client  # type: ignore[attr-defined]
    found: tuple[str, str] | None = None
    module = getattr(client, "__module__", None)
    qualname = getattr(client, "__qualname__", None)
    if callable(client) and module and qualname and "<" not in qualname:
        found = (module, qualname)
    else:
        for name, mod in list(sys.modules.items()):
            if name.startswith(("flwr", "simfl", "torch", "numpy", "_")) or mod is None:
                continue
            for attr, value in list(vars(mod).items()):
                if value is client:
                    found = (name, attr)
                    break
            if found:
                break
    if found is None or found[0] == "__main__":
        return None
    name, attr = found
    file = getattr(sys.modules.get(name), "__file__", None)
    if file is None:
        return None
    depth = name.count(".") + (1 if Path(file).name == "__init__.py" else 0)
    root = Path(file).resolve().parents[depth]
    return f"{name}:{attr}", [str(root)]
