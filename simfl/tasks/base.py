"""What every learning task provides to the engine."""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractContextManager, nullcontext
from typing import Any, ClassVar

from simfl.rng import Streams

__all__ = ["Task"]


class Task(ABC):
    """Specification of a learning problem: a frozen dataclass in each subclass.

    A task is bound to a fleet size at run time (:meth:`build`), which gives the object that
    generates or loads each client's data on demand and evaluates models. Client ``i`` of the
    task lives on device ``i`` of the fleet.
    """

    #: Names of the metrics the bound task's ``evaluate`` returns, in column order. A task whose
    #: metrics depend on its parameters may define this as a property instead.
    metrics: ClassVar[tuple[str, ...]] = ()
    #: For each metric, whether smaller (``"min"``) or larger (``"max"``) is better.
    goals: ClassVar[dict[str, str]] = {}

    @abstractmethod
    def build(self, n_clients: int, streams: Streams) -> Any:
        """Bind the task to ``n_clients`` clients and the run's random streams."""

    def session(self) -> AbstractContextManager[None]:
        """The context a run with this task computes in, from binding to the last evaluation.

        :func:`simfl.run` enters it before it builds the task and leaves it after the final
        metrics, so that settings which decide the run's numbers (the compute threads of a
        neural task, :attr:`simfl.neural.ImageClassification.threads`) belong to the scenario
        and not to the process that runs it. The default changes nothing.
        """
        return nullcontext()

    @property
    def fork_safe(self) -> bool:
        """Whether a forked worker can run this task after its parent used the libraries.

        Default: yes. A neural task with several CPU threads or on a GPU cannot: GNU OpenMP's
        threads and CUDA do not survive a fork, so such a worker hangs or fails; sweeps then
        start their workers fresh (:meth:`simfl.sweeps.Executor.fresh`).
        """
        return True
