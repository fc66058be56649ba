"""The task of a Flower app: its metrics, how it is evaluated, and the run's Flower nodes.

A Flower app brings its own data (``load_data(partition_id, num_partitions)`` in the client
code), so :class:`FlowerTask` holds no data: it names the metrics the app's evaluation gives
(what :class:`~simfl.Target`, plots and comparisons read), says whether they come from the
clients' evaluation or the server's, and sets torch's compute threads for the run. Bound to a
fleet (:meth:`FlowerTask.build`) it gives :class:`FlowerNodes`: one Flower node per device,
client ``i`` with ``node_config = {"partition-id": i, "num-partitions": n}`` as a SuperNode
started with ``--node-config "partition-id=i num-partitions=n"`` has it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np
from flwr.app import Context, RecordDict
from numpy.typing import NDArray

from simfl._checks import check_choice, check_int
from simfl.flower.protocols import Reply
from simfl.rng import Streams
from simfl.tasks.base import Task

__all__ = ["FlowerNodes", "FlowerTask"]


@dataclass(frozen=True)
class FlowerTask(Task):
    """A Flower app's evaluation, as a simfl task (see the module docstring).

    Parameters
    ----------
    metrics
        The metrics the app's evaluation reports, in column order: with
        ``evaluation="federated"``, the keys of the strategy's aggregated evaluation (a legacy
        strategy's loss is ``"loss"``, next to the metrics of its
        ``evaluate_metrics_aggregation_fn``; a Message-API strategy's are the keys of the
        clients' ``MetricRecord``, e.g. ``"eval_loss"``, ``"eval_acc"``). A metric the strategy
        does not aggregate is the clients' values averaged with their numbers of examples as
        weights, as the Message API's default aggregation does.
    evaluation
        ``"federated"`` (default): every client evaluates the global model with its
        ``evaluate`` and the strategy aggregates the replies; ``"server"``: the strategy's
        server-side ``evaluate_fn`` (legacy) or :attr:`FlowerApp.evaluate_fn
        <simfl.flower.FlowerApp.evaluate_fn>` (Message API).
    minimize
        The metrics for which smaller is better (default: those whose name contains
        ``"loss"``); the others are better larger.
    threads
        torch's compute threads for the run (default 1: a client's numbers then do not depend
        on the machine; ``None`` leaves the process's setting).
    """

    metrics: tuple[str, ...] = ("loss", "accuracy")  # type: ignore[misc]
    evaluation: str = "federated"
    minimize: tuple[str, ...] | None = None
    threads: int | None = 1

    def __post_init__(self) -> None:
        metrics = self.metrics
        if (
            not isinstance(metrics, (tuple, list))
            or not metrics
            or not all(isinstance(m, str) and m for m in metrics)
            or len(set(metrics)) != len(metrics)
        ):
            raise ValueError(
                f"FlowerTask.metrics must be a non-empty tuple of distinct metric names, got "
                f"{metrics!r}"
            )
        object.__setattr__(self, "metrics", tuple(metrics))
        check_choice("FlowerTask.evaluation", self.evaluation, ("federated", "server"))
        if self.minimize is not None:
            if not isinstance(self.minimize, (tuple, list)) or any(
                m not in self.metrics for m in self.minimize
            ):
                raise ValueError(
                    f"FlowerTask.minimize must be a tuple of names among FlowerTask.metrics "
                    f"{list(self.metrics)}, got {self.minimize!r}"
                )
            object.__setattr__(self, "minimize", tuple(self.minimize))
        if self.threads is not None:
            check_int("FlowerTask.threads", self.threads, low=1)

    @property
    def goals(self) -> dict[str, str]:  # type: ignore[override]
        """``"min"`` for the metrics of :attr:`minimize`, ``"max"`` for the others."""
        low = (
            self.minimize
            if self.minimize is not None
            else tuple(m for m in self.metrics if "loss" in m.lower())
        )
        return {m: "min" if m in low else "max" for m in self.metrics}

    def session(self) -> AbstractContextManager[None]:
        """Set torch's threads to :attr:`threads` for the run (restored when it ends)."""
        if self.threads is None:
            return nullcontext()
        return _torch_threads(self.threads)

    @property
    def fork_safe(self) -> bool:
        """One torch thread survives a fork; several (GNU OpenMP's) do not."""
        return self.threads == 1

    def build(self, n_clients: int, streams: Streams) -> FlowerNodes:
        """The run's Flower nodes, one per device of the fleet."""
        return FlowerNodes(self, n_clients, streams)


@contextmanager
def _torch_threads(threads: int) -> Iterator[None]:
    try:
        from simfl.neural.task import torch_threads
    except ImportError:  # pragma: no cover - simfl[flower] installs torch
        yield
        return
    with torch_threads(threads):
        yield


class FlowerNodes:
    """The Flower side of one run: its nodes, their contexts, and the replies in flight.

    Attributes
    ----------
    task
        The task it was built from.
    n
        Number of clients (the fleet's devices).
    streams
        The run's keyed random streams.
    node_ids
        Each client's Flower node id: distinct random 64-bit ids from the keyed stream
        ``"flower/nodes"``, as a SuperLink gives them (an app must read the client's
        ``partition-id``, not its node id).
    run_id
        The run's Flower run id (keyed stream ``"flower/run"``).
    work
        Work units of one job of each client (``FlowerApp.client_work``; ``None``: one each).
    """

    def __init__(self, task: FlowerTask, n: int, streams: Streams) -> None:
        self.task = task
        self.n = n
        self.streams = streams
        rng = streams.generator("flower/nodes")
        ids = np.unique(rng.integers(2, 2**63, size=n))
        while ids.size < n:  # a collision among 2**63 values: draw the missing ones again
            ids = np.unique(np.concatenate([ids, rng.integers(2, 2**63, size=n - ids.size)]))
        self.node_ids: NDArray[np.int64] = rng.permutation(ids).astype(np.int64)
        self.run_id = int(streams.generator("flower/run").integers(1, 2**63))
        self.work: NDArray[np.float64] | None = None
        self._replies: dict[int, Reply] = {}
        self._next = 0

    def node(self, client: int) -> int:
        """The Flower node id of ``client``."""
        return int(self.node_ids[client])

    def context(
        self, client: int, state: RecordDict | None, run_config: Mapping[str, Any]
    ) -> Context:
        """The ``Context`` a call to ``client`` gets: its own copy of the node's state."""
        return Context(
            run_id=self.run_id,
            node_id=self.node(client),
            node_config={"partition-id": int(client), "num-partitions": self.n},
            state=RecordDict() if state is None else copy.deepcopy(state),
            run_config=dict(run_config),
        )

    def store(self, reply: Reply) -> int:
        """Keep ``reply`` until its update is aggregated; its id."""
        rid = self._next
        self._next += 1
        self._replies[rid] = reply
        return rid

    def take(self, ids: Sequence[int]) -> list[Reply]:
        """The replies of ``ids``, in order; every other reply kept so far is dropped.

        The engine aggregates each batch of updates as soon as it computes it, so replies
        not in the batch being aggregated (discarded updates of an eager run) are not needed
        again.
        """
        wanted = {int(i) for i in ids}
        missing = wanted - self._replies.keys()
        if missing:
            raise RuntimeError(
                f"simfl.flower: the replies {sorted(missing)} of these updates are gone (updates "
                f"aggregated out of order?)"
            )
        self._replies = {i: r for i, r in self._replies.items() if i in wanted}
        return [self._replies[int(i)] for i in ids]
