"""Shared scenario builders and test doubles for the test suite."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from simfl import Fleet, Scenario, algorithms, dists, policies, tasks
from simfl.algorithms.base import Algorithm, Updates
from simfl.network import Payload
from simfl.outcome import ARRIVED, Outcome
from simfl.rng import Streams
from simfl.tasks.base import Task


def timing_scenario(
    n: int = 20,
    compute: dists.Dist | None = None,
    policy: policies.Policy | None = None,
    rounds: int = 10,
    seed: int = 0,
    **fleet_kw: Any,
) -> Scenario:
    """A timing-only scenario (no math) on a homogeneous fleet."""
    fleet = Fleet.homogeneous(n, compute=compute or dists.Exponential(mean=1.0), **fleet_kw)
    return Scenario(
        task=None,
        algorithm=algorithms.TimingOnly(),
        fleet=fleet,
        policy=policy or policies.WaitAll(),
        rounds=rounds,
        seed=seed,
    )


def linear_scenario(
    algorithm: Algorithm[Any] | None = None,
    policy: policies.Policy | None = None,
    n: int = 100,
    rounds: int = 30,
    seed: int = 0,
    **fleet_kw: Any,
) -> Scenario:
    """FedRep (by default) on the issue's linear task."""
    return Scenario(
        task=tasks.LinearRepresentation(d=20, k=2, samples_per_client=10, noise_std=1e-3),
        algorithm=algorithm or algorithms.FedRep(),
        fleet=Fleet.homogeneous(n, compute=dists.Exponential(mean=1.0), **fleet_kw),
        policy=policy or policies.WaitAll(fraction=0.1),
        rounds=rounds,
        seed=seed,
    )


@dataclass(frozen=True)
class Ledger(Algorithm[tuple[tuple[int, tuple[int, ...]], ...]]):
    """Test double: its state is the log of (round, clients) it aggregated.

    ``computed`` collects every client whose update was computed and ``aggregated`` the
    ``(round, client)`` pairs that were aggregated (shared mutable lists); ``outcomes`` and
    ``background_outcomes`` the outcomes it was handed; ``fail_at`` makes ``local_updates``
    raise in that round.
    """

    computed: list[int] = field(default_factory=list, compare=False)
    aggregated: list[tuple[int, int]] = field(default_factory=list, compare=False)
    #: (model version the update was computed from, client, data key) of every computed update
    bases: list[tuple[int, int, int]] = field(default_factory=list, compare=False)
    #: the Outcome handed to every ``aggregate`` call, in order
    outcomes: list[Outcome] = field(default_factory=list, compare=False)
    #: the Outcome handed to every ``background`` call (after every aggregation, async included)
    background_outcomes: list[Outcome] = field(default_factory=list, compare=False)
    fail_at: int | None = None

    name: ClassVar[str] = "ledger"

    def check(self, task: Task | None) -> None:
        return None

    def initial_state(self, data: Any, streams: Streams) -> tuple[()]:
        return ()

    def payload(self, state: Any) -> Payload:
        return Payload(0, 0)

    def local_updates(
        self, state: Any, data: Any, clients: NDArray[np.int64], round: int, streams: Streams
    ) -> Updates:
        if self.fail_at == round:
            raise RuntimeError(f"boom in round {round}")
        self.computed.extend(int(c) for c in clients)
        self.bases.extend((len(state), int(c), int(round)) for c in clients)
        return Updates(clients.copy(), {}, loss=clients.astype(float))

    def aggregate(self, state: Any, updates: Updates, outcome: Outcome) -> Any:
        r = outcome.round
        self.aggregated.extend((r, int(c)) for c in updates.clients)
        self.outcomes.append(outcome)
        return (*state, (r, tuple(int(c) for c in updates.clients)))

    def background(self, state: Any, data: Any, outcome: Outcome) -> Any:
        self.background_outcomes.append(outcome)
        return state

    def evaluate(self, state: Any, data: Any) -> dict[str, float]:
        return {}

    def shared(self, state: Any) -> dict[str, NDArray[Any]]:
        return {}

    def with_shared(self, state: Any, shared: dict[str, NDArray[Any]]) -> Any:
        return (*state, ("async",))


def tiny_linear(
    policy: policies.Policy | None = None, n: int = 12, rounds: int = 6, seed: int = 0
) -> Scenario:
    """A run of a few milliseconds: FedRep on a small linear task, dropouts included."""
    return Scenario(
        name="tiny",
        task=tasks.LinearRepresentation(d=6, k=2, samples_per_client=5, test_samples=20),
        algorithm=algorithms.FedRep(),
        fleet=Fleet.homogeneous(n, compute=dists.Exponential(mean=1.0), dropout_rate=0.1),
        policy=policy or policies.Deadline(1.5, count=4),
        rounds=rounds,
        seed=seed,
    )


@dataclass(frozen=True)
class BrokenFedRep(algorithms.FedRep):
    """Test double: FedRep that raises before its first round, so ``simfl.run`` itself raises."""

    def initial_state(self, data: Any, streams: Streams) -> Any:
        raise RuntimeError("broken on purpose")


@dataclass(frozen=True)
class GatedFedRep(algorithms.FedRep):
    """Test double: FedRep that waits until the file ``flag`` exists before its first round.

    Lets a test stop a sweep (or a worker) at a known point: while the gate is closed the run
    is in flight, deterministically.
    """

    flag: str = ""

    def initial_state(self, data: Any, streams: Streams) -> Any:
        import os
        import time

        deadline = time.monotonic() + 120
        while not os.path.exists(self.flag):
            if time.monotonic() > deadline:
                raise RuntimeError(f"gate {self.flag} never opened")
            time.sleep(0.02)
        return super().initial_state(data, streams)


def arrived(updates: Updates, round: int = 0) -> Outcome:
    """An outcome in which exactly the clients of ``updates`` arrived (for direct ``aggregate``)."""
    devices = np.asarray(updates.clients, dtype=np.int64)
    n = devices.size
    return Outcome(
        round=round,
        stage=0,
        t_start=0.0,
        time=1.0,
        devices=devices,
        status=np.full(n, ARRIVED, dtype=np.int8),
        job_start=np.zeros(n),
        job_end=np.ones(n),
        staleness=np.zeros(n),
    )


def rows(updates: Updates) -> dict[str, NDArray[Any]]:
    """Every array of ``updates`` by name (the clients, each parameter, loss and weight)."""
    out: dict[str, NDArray[Any]] = {"clients": updates.clients}
    out.update({f"params.{k}": v for k, v in updates.params.items()})
    if updates.loss is not None:
        out["loss"] = updates.loss
    if updates.weight is not None:
        out["weight"] = updates.weight
    return out
