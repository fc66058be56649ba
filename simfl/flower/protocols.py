"""The two Flower families: what goes to a client, and what a strategy is given back.

Flower 1.42 has two APIs that do not mix: the *legacy* one (a ``client_fn(context)`` returning a
``Client`` or ``NumPyClient``, driven by a ``flwr.server.strategy`` strategy through ``FitIns``
/ ``FitRes``) and the *Message API* (a ``ClientApp`` with ``@app.train()`` / ``@app.evaluate()``
functions, driven by a ``flwr.serverapp.strategy`` strategy through ``RecordDict`` contents).
Both reach the client the same way, as a Flower :class:`~flwr.app.Message` passed to the
``ClientApp`` with the node's :class:`~flwr.app.Context` (a legacy ``client_fn`` is wrapped in
``ClientApp(client_fn)`` and its records converted as Flower's own compatibility layer converts
them). :class:`Legacy` and :class:`MessageAPI` hold what differs:

* ``configure``: the strategy's ``configure_fit`` / ``configure_train`` (or the evaluation
  twin) on a client manager / grid that lists the fleet's nodes and never waits, giving the
  instruction for each node it addressed;
* ``aggregate_fit``: the strategy's ``aggregate_fit(server_round, results, failures)`` or
  ``aggregate_train(server_round, replies)``, the arrived replies as results and the late,
  dropped and cancelled jobs as failures (legacy: a :class:`JobFailure` exception each;
  Message API: a reply carrying an :class:`~flwr.app.Error`);
* ``aggregate_evaluate`` and ``server_evaluate``: the metrics of a model.

The global model is kept as named numpy arrays (:data:`Arrays`): a legacy model's arrays are
named ``"0"``, ``"1"``, ... in their order (as ``ArrayRecord`` names a list of arrays), a
Message-API model's by its ``ArrayRecord`` keys.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Error,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.common import (
    Code,
    EvaluateIns,
    FitIns,
    FitRes,
    GetParametersIns,
    Parameters,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.common.constant import ErrorCode, MessageTypeLegacy
from flwr.compat.common import recorddict_compat as compat
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.criterion import Criterion
from flwr.server.strategy import FedAvg as LegacyFedAvg
from flwr.server.strategy import Strategy as LegacyStrategy
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg as MessageFedAvg
from flwr.serverapp.strategy import Strategy as MessageStrategy
from flwr.supercore.run import Run
from numpy.typing import NDArray

from simfl.outcome import CANCELLED, DROPPED, LATE, STATUSES

__all__ = [
    "Arrays",
    "Instructions",
    "JobFailure",
    "Legacy",
    "MessageAPI",
    "Protocol",
    "Reply",
]

#: The global model: numpy arrays by name, in the model's order.
Arrays = dict[str, NDArray[Any]]
#: What a failed job's reply says, by its simfl status (Message API).
_ERROR_CODES = {
    LATE: ErrorCode.REPLY_MESSAGE_UNAVAILABLE,
    DROPPED: ErrorCode.NODE_UNAVAILABLE,
    CANCELLED: ErrorCode.REPLY_MESSAGE_UNAVAILABLE,
}
_WHY = {
    LATE: "the reply missed the round's deadline",
    DROPPED: "the node dropped out during the job",
    CANCELLED: "the server stopped waiting for the reply",
}
#: How often a strategy may ask the grid for its nodes while configuring one round: Flower's
#: ``sample_nodes`` asks again, once a second, while fewer nodes than it needs are connected,
#: which on a fixed fleet would be for ever.
_MAX_NODE_QUERIES = 8


class JobFailure(Exception):  # noqa: N818 - the name says what a strategy sees in ``failures``
    """A job that did not bring its update back, as a legacy strategy's ``failures`` hold it.

    Flower's legacy server puts the exception of a client call that failed (a timeout, a lost
    connection) in ``aggregate_fit``'s ``failures``; simfl puts one of these for every late,
    dropped or cancelled job of the aggregation.

    Attributes
    ----------
    partition_id
        The client (``node_config["partition-id"]``).
    node_id
        The client's Flower node id.
    status
        ``"late"``, ``"dropped"`` or ``"cancelled"`` (simfl's job status).
    server_round
        The Flower server round of the aggregation.
    """

    def __init__(self, partition_id: int, node_id: int, status: str, server_round: int) -> None:
        self.partition_id = partition_id
        self.node_id = node_id
        self.status = status
        self.server_round = server_round
        super().__init__(
            f"partition {partition_id} (node {node_id}): {status} in server round {server_round}"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        """Copied and pickled by its fields (a strategy may keep its failures)."""
        return (type(self), (self.partition_id, self.node_id, self.status, self.server_round))


@dataclass(frozen=True, eq=False)
class Reply:
    """One client's reply to a training instruction, and its node's state after the call."""

    client: int
    node_id: int
    message: Message
    #: The ``Context.state`` the call left (kept only if the update is aggregated).
    context_state: RecordDict


@dataclass(frozen=True, eq=False)
class Instructions:
    """What a strategy's ``configure_*`` sent, by node; a node it did not address gets the first."""

    by_node: Mapping[int, Any]
    first: Any


def _proxy(node_id: int) -> ClientProxy:
    return _Proxy(str(node_id))


class _Proxy(ClientProxy):
    """The handle a legacy strategy holds for a node; simfl calls the client itself."""

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            "under simfl the strategy does not call clients: simfl's clock decides who replies"
        )

    get_properties = get_parameters = fit = evaluate = reconnect = _refuse


class _Manager(ClientManager):
    """A legacy client manager over the fleet's nodes that samples at once and never waits."""

    def __init__(self, node_ids: Sequence[int]) -> None:
        self.clients = {str(n): _proxy(n) for n in node_ids}

    def num_available(self) -> int:
        return len(self.clients)

    def register(self, client: ClientProxy) -> bool:
        return False

    def unregister(self, client: ClientProxy) -> None:
        return None

    def all(self) -> dict[str, ClientProxy]:
        return dict(self.clients)

    def wait_for(self, num_clients: int, timeout: int) -> bool:
        """Whether the fleet has ``num_clients`` (it never waits: the fleet is fixed)."""
        return num_clients <= len(self.clients)

    def sample(
        self,
        num_clients: int,
        min_num_clients: int | None = None,
        criterion: Criterion | None = None,
    ) -> list[ClientProxy]:
        """``num_clients`` nodes drawn as Flower's ``SimpleClientManager`` draws them."""
        need = num_clients if min_num_clients is None else min_num_clients
        if need > len(self.clients):
            raise ValueError(
                f"the strategy waits for {need} clients and the fleet has {len(self.clients)}: "
                f"Flower would wait for them for ever (lower the strategy's min_fit_clients / "
                f"min_evaluate_clients / min_available_clients, or use a larger fleet)"
            )
        available = [
            cid for cid, p in self.clients.items() if criterion is None or criterion.select(p)
        ]
        if num_clients > len(available):
            return []  # as Flower's manager does ("Sampling failed")
        # Flower's draw, from the global generator (seeded around the call: _runtime.seeded)
        return [self.clients[cid] for cid in random.sample(available, num_clients)]


class _Grid(Grid):
    """A Message-API grid over the fleet's nodes: it lists them and builds messages, nothing else.

    ``configure_train`` and ``configure_evaluate`` only sample nodes and build messages; simfl
    delivers the messages itself, at the simulated times, so sending refuses.
    """

    def __init__(self, node_ids: Sequence[int]) -> None:
        self._nodes = [int(n) for n in node_ids]
        self._queries = 0

    def set_run(self, run: Run) -> None:
        return None

    @property
    def run(self) -> Run:
        raise RuntimeError("simfl's grid belongs to no Flower run")

    def create_message(
        self,
        content: RecordDict,
        message_type: str,
        dst_node_id: int,
        group_id: str,
        ttl: float | None = None,
    ) -> Message:
        return Message(
            content=content,
            dst_node_id=dst_node_id,
            message_type=message_type,
            group_id=group_id,
            ttl=ttl,
        )

    def get_node_ids(self) -> list[int]:
        """The fleet's nodes (an error if asked so often that the strategy must be waiting)."""
        self._queries += 1
        if self._queries > _MAX_NODE_QUERIES:
            raise ValueError(
                f"the strategy keeps asking for nodes: it waits for more than the fleet's "
                f"{len(self._nodes)} (lower its min_train_nodes / min_evaluate_nodes / "
                f"min_available_nodes, or use a larger fleet)"
            )
        return list(self._nodes)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        raise RuntimeError("under simfl the strategy does not send messages: simfl delivers them")

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        raise RuntimeError("under simfl the strategy does not pull messages")

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        raise RuntimeError("under simfl the strategy does not send messages: simfl delivers them")


def _floats(values: Mapping[str, Any]) -> dict[str, float]:
    """The numeric scalars of a metrics mapping, as floats (lists and strings left out)."""
    out: dict[str, float] = {}
    for k, v in values.items():
        if isinstance(v, (bool, int, float, np.integer, np.floating)):
            out[str(k)] = float(v)
    return out


class Protocol:
    """What differs between the legacy API and the Message API (see the module docstring)."""

    #: ``"legacy"`` or ``"message"``.
    family: ClassVar[str]
    #: What the ``strategy`` needs to be, in words, and its base class.
    strategy_kind: ClassVar[str]

    def __init__(self, strategy: Any) -> None:
        self.strategy = strategy

    # -------------------------------------------------------------- the strategy's shape
    def averages(self) -> bool:
        """Whether the strategy's training aggregation is FedAvg's weighted mean."""
        raise NotImplementedError

    def minimum_nodes(self, strategy: Any, n: int) -> dict[str, int]:
        """The strategy's node minimums (by attribute name) that a fleet of ``n`` cannot meet."""
        names = self.minimum_names
        return {
            name: int(getattr(strategy, name))
            for name in names
            if isinstance(getattr(strategy, name, None), int) and getattr(strategy, name) > n
        }

    minimum_names: ClassVar[tuple[str, ...]] = ()

    def evaluates_on_clients(self, strategy: Any) -> bool:
        """Whether the strategy configures federated evaluation (``fraction_evaluate > 0``)."""
        return getattr(strategy, "fraction_evaluate", 1.0) != 0.0

    # -------------------------------------------------------------- the model
    def initial(
        self, strategy: Any, given: Any, node_ids: Sequence[int], ask: Callable[[Message], Message]
    ) -> Arrays:
        """The global model before round 1."""
        raise NotImplementedError

    def nbytes(self, arrays: Arrays) -> int:
        """Bytes of the model's arrays as Flower serialises them (``.npy`` each)."""
        return sum(len(Array(np.asarray(v)).data) for v in arrays.values())

    # -------------------------------------------------------------- instructions
    def configure(
        self,
        strategy: Any,
        kind: str,
        server_round: int,
        arrays: Arrays,
        node_ids: Sequence[int],
        config: Mapping[str, Any] | None,
    ) -> Instructions | None:
        """The strategy's instructions of a ``"train"`` or ``"evaluate"`` round (``None``: none).

        Calls ``strategy``'s configure method (which may change it, as FedOpt's keeps the
        arrays it sent): pass a copy where the strategy must not change.
        """
        raise NotImplementedError

    def message(
        self, instructions: Instructions, kind: str, node_id: int, server_round: int
    ) -> Message:
        """The message ``node_id`` receives (its own content, a copy for every call)."""
        raise NotImplementedError

    # -------------------------------------------------------------- replies
    def reply_arrays(self, reply: Message) -> Arrays | None:
        """The model a training reply carries (``None``: an error or a failed status)."""
        raise NotImplementedError

    def reply_weight(self, reply: Message) -> float:
        """The number of examples a training reply reports (0 for an error)."""
        raise NotImplementedError

    def reply_metrics(self, reply: Message) -> dict[str, float]:
        """The numeric metrics a training reply reports (``{}`` for an error)."""
        raise NotImplementedError

    def aggregate_fit(
        self,
        strategy: Any,
        server_round: int,
        instructions: Instructions,
        replies: Sequence[Reply],
        failures: Sequence[tuple[int, int, int]],
    ) -> tuple[Arrays | None, dict[str, Any]]:
        """The strategy's aggregation: new arrays (``None``: unchanged) and its metrics.

        ``failures`` holds ``(client, node_id, status)`` of each failed job.
        """
        raise NotImplementedError

    def eval_metrics(self, reply: Message) -> tuple[float, dict[str, float]]:
        """A client's evaluation reply: its number of examples and its numeric metrics."""
        raise NotImplementedError

    def aggregate_evaluate(
        self, strategy: Any, server_round: int, replies: Sequence[tuple[int, Message]]
    ) -> dict[str, float]:
        """The strategy's aggregate of ``(node_id, reply)`` evaluation replies."""
        raise NotImplementedError

    def server_evaluate(
        self, strategy: Any, evaluate_fn: Any, server_round: int, arrays: Arrays
    ) -> dict[str, float] | None:
        """The server-side evaluation of the model (``None``: the strategy gives none)."""
        raise NotImplementedError


class Legacy(Protocol):
    """A ``client_fn`` (``Client``/``NumPyClient``) driven by a ``flwr.server.strategy``."""

    family = "legacy"
    strategy_kind = "a flwr.server.strategy.Strategy"
    minimum_names = ("min_fit_clients", "min_evaluate_clients", "min_available_clients")

    def averages(self) -> bool:  # noqa: D102
        return isinstance(self.strategy, LegacyFedAvg) and (
            type(self.strategy).aggregate_fit is LegacyFedAvg.aggregate_fit
        )

    def initial(  # noqa: D102
        self, strategy: Any, given: Any, node_ids: Sequence[int], ask: Callable[[Message], Message]
    ) -> Arrays:
        parameters = strategy.initialize_parameters(_Manager(node_ids))
        if given is not None:
            if parameters is not None:
                raise ValueError(
                    "FlowerApp.initial is given and the strategy has initial_parameters: give "
                    "the initial model once (a FedOpt strategy steps from its own "
                    "initial_parameters, so give them there)"
                )
            return _named(list(given.values()))  # a legacy model is a list of arrays
        if parameters is None:  # Flower's server asks one client for its parameters
            content = compat.getparametersins_to_recorddict(GetParametersIns(config={}))
            reply = ask(Message(content, node_ids[0], MessageTypeLegacy.GET_PARAMETERS))
            res = compat.recorddict_to_getparametersres(reply.content, keep_input=True)
            parameters = res.parameters
        return _named(parameters_to_ndarrays(parameters))

    def configure(  # noqa: D102
        self,
        strategy: Any,
        kind: str,
        server_round: int,
        arrays: Arrays,
        node_ids: Sequence[int],
        config: Mapping[str, Any] | None,
    ) -> Instructions | None:
        parameters = ndarrays_to_parameters(list(arrays.values()))
        method = strategy.configure_fit if kind == "train" else strategy.configure_evaluate
        pairs = method(server_round, parameters, _Manager(node_ids))
        if not pairs:
            return None
        return Instructions({int(p.cid): ins for p, ins in pairs}, pairs[0][1])

    def message(  # noqa: D102
        self, instructions: Instructions, kind: str, node_id: int, server_round: int
    ) -> Message:
        ins = instructions.by_node.get(node_id, instructions.first)
        if kind == "train":
            assert isinstance(ins, FitIns)
            content = compat.fitins_to_recorddict(ins, keep_input=True)
        else:
            assert isinstance(ins, EvaluateIns)
            content = compat.evaluateins_to_recorddict(ins, keep_input=True)
        return Message(
            content=content,
            dst_node_id=node_id,
            message_type=MessageType.TRAIN if kind == "train" else MessageType.EVALUATE,
            group_id=str(server_round),
        )

    def _fitres(self, reply: Message) -> FitRes | None:
        if reply.has_error():
            return None
        return compat.recorddict_to_fitres(reply.content, keep_input=True)

    def reply_arrays(self, reply: Message) -> Arrays | None:  # noqa: D102
        res = self._fitres(reply)
        if res is None or res.status.code != Code.OK:
            return None
        return _named(parameters_to_ndarrays(res.parameters))

    def reply_weight(self, reply: Message) -> float:  # noqa: D102
        res = self._fitres(reply)
        return 0.0 if res is None or res.status.code != Code.OK else float(res.num_examples)

    def reply_metrics(self, reply: Message) -> dict[str, float]:  # noqa: D102
        res = self._fitres(reply)
        return {} if res is None else _floats(res.metrics)

    def aggregate_fit(  # noqa: D102
        self,
        strategy: Any,
        server_round: int,
        instructions: Instructions,
        replies: Sequence[Reply],
        failures: Sequence[tuple[int, int, int]],
    ) -> tuple[Arrays | None, dict[str, Any]]:
        results: list[tuple[ClientProxy, FitRes]] = []
        failed: list[tuple[ClientProxy, FitRes] | BaseException] = []
        for r in replies:
            res = self._fitres(r.message)
            if res is None:  # an error reply: Flower's legacy server counts it a failure
                failed.append(JobFailure(r.client, r.node_id, "error", server_round))
            elif res.status.code == Code.OK:
                results.append((_proxy(r.node_id), res))
            else:  # as Flower's server: a result whose status is not OK is a failure
                failed.append((_proxy(r.node_id), res))
        for client, node, status in failures:
            failed.append(JobFailure(client, node, STATUSES[status], server_round))
        parameters, metrics = strategy.aggregate_fit(server_round, results, failed)
        arrays = None if parameters is None else _named(parameters_to_ndarrays(parameters))
        return arrays, dict(metrics or {})

    def eval_metrics(self, reply: Message) -> tuple[float, dict[str, float]]:  # noqa: D102
        res = compat.recorddict_to_evaluateres(reply.content)
        if res.status.code != Code.OK:  # not a result (Flower's server counts it a failure)
            return 0.0, {}
        return float(res.num_examples), {"loss": float(res.loss), **_floats(res.metrics)}

    def aggregate_evaluate(  # noqa: D102
        self, strategy: Any, server_round: int, replies: Sequence[tuple[int, Message]]
    ) -> dict[str, float]:
        results = []
        for node, reply in replies:
            res = compat.recorddict_to_evaluateres(reply.content)
            if res.status.code == Code.OK:
                results.append((_proxy(node), res))
        loss, metrics = strategy.aggregate_evaluate(server_round, results, [])
        out = _floats(metrics or {})
        if loss is not None:
            out["loss"] = float(loss)
        return out

    def server_evaluate(  # noqa: D102
        self, strategy: Any, evaluate_fn: Any, server_round: int, arrays: Arrays
    ) -> dict[str, float] | None:
        found = strategy.evaluate(server_round, ndarrays_to_parameters(list(arrays.values())))
        if found is None:
            return None
        loss, metrics = found
        return {"loss": float(loss), **_floats(metrics or {})}


class MessageAPI(Protocol):
    """A ``ClientApp`` with ``@app.train()``/``@app.evaluate()``, a ``flwr.serverapp.strategy``."""

    family = "message"
    strategy_kind = "a flwr.serverapp.strategy.Strategy"
    minimum_names = ("min_train_nodes", "min_evaluate_nodes", "min_available_nodes")

    def averages(self) -> bool:  # noqa: D102
        return isinstance(self.strategy, MessageFedAvg) and (
            type(self.strategy).aggregate_train is MessageFedAvg.aggregate_train
        )

    @property
    def weight_key(self) -> str:
        """The metric each reply's weight is read from (``weighted_by_key``)."""
        return str(getattr(self.strategy, "weighted_by_key", "num-examples"))

    def initial(  # noqa: D102
        self, strategy: Any, given: Any, node_ids: Sequence[int], ask: Callable[[Message], Message]
    ) -> Arrays:
        if given is None:
            raise ValueError(
                "FlowerApp.initial is required with a Message-API strategy: the initial model "
                "a ServerApp passes to strategy.start(initial_arrays=...)"
            )
        return given  # type: ignore[no-any-return]

    def configure(  # noqa: D102
        self,
        strategy: Any,
        kind: str,
        server_round: int,
        arrays: Arrays,
        node_ids: Sequence[int],
        config: Mapping[str, Any] | None,
    ) -> Instructions | None:
        record = ArrayRecord({k: Array(np.asarray(v)) for k, v in arrays.items()})
        method = strategy.configure_train if kind == "train" else strategy.configure_evaluate
        messages = list(
            method(server_round, record, ConfigRecord(dict(config or {})), _Grid(node_ids))
        )
        if not messages:
            return None
        return Instructions(
            {int(m.metadata.dst_node_id): m.content for m in messages}, messages[0].content
        )

    def message(  # noqa: D102
        self, instructions: Instructions, kind: str, node_id: int, server_round: int
    ) -> Message:
        content = instructions.by_node.get(node_id, instructions.first)
        return Message(
            content=copy.deepcopy(content),  # each node gets its own, as over the wire
            dst_node_id=node_id,
            message_type=MessageType.TRAIN if kind == "train" else MessageType.EVALUATE,
            group_id=str(server_round),
        )

    def reply_arrays(self, reply: Message) -> Arrays | None:  # noqa: D102
        if reply.has_error():
            return None
        out: Arrays = {}
        for record in reply.content.array_records.values():
            for k, v in record.items():
                out[k] = v.numpy()
        return out

    def _metrics(self, reply: Message) -> dict[str, Any]:
        if reply.has_error():
            return {}
        out: dict[str, Any] = {}
        for record in reply.content.metric_records.values():
            out.update(record)
        return out

    def reply_weight(self, reply: Message) -> float:  # noqa: D102
        value = self._metrics(reply).get(self.weight_key, 0.0)
        return float(value) if isinstance(value, (int, float)) else 0.0

    def reply_metrics(self, reply: Message) -> dict[str, float]:  # noqa: D102
        return _floats(self._metrics(reply))

    def aggregate_fit(  # noqa: D102
        self,
        strategy: Any,
        server_round: int,
        instructions: Instructions,
        replies: Sequence[Reply],
        failures: Sequence[tuple[int, int, int]],
    ) -> tuple[Arrays | None, dict[str, Any]]:
        messages = [r.message for r in replies]
        for _client, node, status in failures:
            sent = self.message(instructions, "train", node, server_round)
            messages.append(Message(Error(_ERROR_CODES[status], _WHY[status]), reply_to=sent))
        arrays, metrics = strategy.aggregate_train(server_round, messages)
        out = None
        if arrays is not None:
            out = {k: v.numpy() for k, v in arrays.items()}
        return out, dict(metrics or {})

    def eval_metrics(self, reply: Message) -> tuple[float, dict[str, float]]:  # noqa: D102
        metrics = self._metrics(reply)
        weight = metrics.pop(self.weight_key, 0.0)
        return float(weight), _floats(metrics)

    def aggregate_evaluate(  # noqa: D102
        self, strategy: Any, server_round: int, replies: Sequence[tuple[int, Message]]
    ) -> dict[str, float]:
        found = strategy.aggregate_evaluate(server_round, [m for _, m in replies])
        return {} if found is None else _floats(found)

    def server_evaluate(  # noqa: D102
        self, strategy: Any, evaluate_fn: Any, server_round: int, arrays: Arrays
    ) -> dict[str, float] | None:
        record = ArrayRecord({k: Array(np.asarray(v)) for k, v in arrays.items()})
        found = evaluate_fn(server_round, record)
        if found is None:
            return None
        if not isinstance(found, MetricRecord):
            raise ValueError(
                f"FlowerApp.evaluate_fn must return a flwr.app.MetricRecord or None, got "
                f"{type(found).__name__}"
            )
        return _floats(found)


def _named(ndarrays: Sequence[NDArray[Any]]) -> Arrays:
    """A list of arrays named ``"0"``, ``"1"``, ... (as ``ArrayRecord`` names a list)."""
    return {str(i): np.asarray(a) for i, a in enumerate(ndarrays)}


def protocol_of(strategy: Any) -> Protocol:
    """The family of ``strategy`` (``ValueError`` naming ``FlowerApp.strategy`` otherwise)."""
    if isinstance(strategy, LegacyStrategy):
        return Legacy(strategy)
    if isinstance(strategy, MessageStrategy):
        return MessageAPI(strategy)
    raise ValueError(
        f"FlowerApp.strategy must be a Flower strategy (a flwr.server.strategy.Strategy, e.g. "
        f"FedAvg, or a flwr.serverapp.strategy.Strategy), got {strategy!r}"
    )


def as_arrays(value: Any, field: str) -> Arrays:
    """Named arrays from an ``ArrayRecord``, ``Parameters``, a list or a dict of arrays."""
    if isinstance(value, ArrayRecord):
        return {k: v.numpy() for k, v in value.items()}
    if isinstance(value, Parameters):
        return _named(parameters_to_ndarrays(value))
    if isinstance(value, Mapping):
        out: Arrays = {}
        for k, v in value.items():
            arr = v.detach().cpu().numpy() if hasattr(v, "detach") else np.asarray(v)
            out[str(k)] = np.array(arr)
        return out
    if isinstance(value, (list, tuple)) and all(isinstance(v, np.ndarray) for v in value):
        return _named([np.array(v) for v in value])
    raise ValueError(
        f"{field} must be a flwr.app.ArrayRecord, flwr.common.Parameters, a list of numpy "
        f"arrays or a dict of arrays (a torch state_dict), got {type(value).__name__}"
    )


def copy_strategy(strategy: Any) -> Any:
    """A private copy of ``strategy`` (its state, e.g. FedAdam's moments, included)."""
    return copy.deepcopy(strategy)
