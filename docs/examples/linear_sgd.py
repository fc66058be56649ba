"""A minimal algorithm: federated SGD of one linear model on the linear representation task."""

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from simfl.algorithms import Algorithm, Updates
from simfl.network import Payload
from simfl.outcome import Outcome
from simfl.rng import Streams
from simfl.tasks import LinearModel, LinearRepresentation, Task

Model = NDArray[np.float64]  # the server state: one linear model of the d inputs


@dataclass(frozen=True)
class LinearSGD(Algorithm[Model]):
    """Every arrived client takes one gradient step from the server model; the server averages."""

    step_size: float = 0.1
    name: ClassVar[str] = "linear-sgd"

    def check(self, task: Task | None) -> None:
        """Refuse, before the run, a task whose data this algorithm cannot read."""
        if not isinstance(task, LinearRepresentation):
            raise ValueError(f"Scenario.task must be a tasks.LinearRepresentation, got {task!r}")

    def initial_state(self, data: Any, streams: Streams) -> Model:
        """The zero model."""
        return np.zeros(data.d)

    def payload(self, state: Model) -> Payload:
        """The model goes down to each client and comes back up."""
        return Payload(state.nbytes, state.nbytes)

    def local_updates(
        self, state: Model, data: Any, clients: NDArray[np.int64], round: int, streams: Streams
    ) -> Updates:
        """One full-batch gradient step of each client's squared error, for the whole cohort."""
        x, y = data.train_batch(clients, round)  # (C, m, d) and (C, m)
        gradient = np.einsum("cmd,cm->cd", x, x @ state - y) / y.shape[1]
        return Updates(clients, {"model": state - self.step_size * gradient})

    def aggregate(self, state: Model, updates: Updates, outcome: Outcome) -> Model:
        """The mean of the arrived models."""
        return np.asarray(updates.params["model"].mean(axis=0))

    def evaluate(self, state: Model, data: Any) -> dict[str, float]:
        """The task's test error of the server model, for every evaluated client."""
        heads = np.tile(state, (len(data.eval_clients), 1))
        return dict(data.evaluate(LinearModel(None, heads)))
