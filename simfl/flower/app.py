"""A Flower app as a simfl algorithm: its clients' code and its strategy, on simfl's clock.

:class:`FlowerApp` plays an unmodified Flower app. simfl's fleet, network and policy decide
who trains and which replies arrive in time; the app's own code does the rest:

* **Clients.** Each job is one call of the app's ``ClientApp`` with a Flower
  :class:`~flwr.app.Message` (``message_type="train"``) and the node's
  :class:`~flwr.app.Context`, as a SuperNode makes it: ``node_config`` holds the client's
  ``"partition-id"`` and ``"num-partitions"`` (the fleet size), ``run_config`` the app's
  configuration (:attr:`FlowerApp.run_config`, e.g. :func:`~simfl.flower.run_config` of the
  app's ``pyproject.toml``), ``state`` what the node kept from its earlier aggregated jobs.
  The content is what the strategy's ``configure_fit`` / ``configure_train`` sends that node
  in that server round (the global model and its config: ``server-round``, FedProx's proximal
  term, ``on_fit_config_fn``'s values).
* **Strategy.** The run works on its own deep copy of :attr:`FlowerApp.strategy`, and every
  aggregation on a copy of the last one, so the state a strategy keeps (FedAdam's moments)
  belongs to the run and runs are independent. Each synchronous aggregation calls the
  strategy's configure method then ``aggregate_fit(server_round, results, failures)`` (legacy)
  or ``aggregate_train(server_round, replies)`` (Message API), as Flower's server loop does:
  the arrived replies are the results, with the examples and metrics each client reported;
  the late, dropped and cancelled jobs are the failures (a
  :class:`~simfl.flower.JobFailure` each, or a reply carrying a Flower ``Error``). The server
  round is simfl's round index plus 1.
* **Asynchronous and tiered policies** (FedAsync, FedBuff, FedAT) mix the clients' models with
  their own staleness weights (:mod:`simfl.algorithms.mixing`) instead of the strategy's
  aggregation; they accept a strategy whose aggregation is FedAvg's weighted mean (FedAvg,
  FedProx) and refuse the others (FedAdam's moments, FedMedian's rule would be lost). The
  strategy still configures each job (from the model version the job downloaded).
* **Evaluation** (:class:`~simfl.flower.FlowerTask`): every client evaluates the global model
  and the strategy aggregates the replies (``aggregate_evaluate``), or the server evaluates it.
  Evaluation measures the model off the clock: every client takes part, whatever the
  strategy's ``fraction_evaluate``.

**Determinism.** A Flower app draws from the global generators (torch's through ``Net()``
and a shuffling ``DataLoader``; Flower samples nodes with ``random``). Every call into the app
or the strategy runs with torch's, numpy's and Python's global generators seeded from a keyed
stream of the run and restored afterwards: a client's training call from
``("flower/fit", partition_id, key)`` (``key`` is the round index under synchronous policies,
the job's key under asynchronous ones), its evaluation from ``("flower/evaluate",
partition_id, server_round)``, the strategy's calls from ``("flower/configure", ...)`` and
``("flower/aggregate", server_round)``. The same scenario and seed give the same results, bit
for bit, and a client's update depends on its own data and the model only (lazy exactness).

**Node state.** A node's ``Context.state`` carries over to its next call only from jobs whose
update was aggregated (a late client's work is never computed: simfl computes the updates it
aggregates); evaluation calls get a copy and their changes are dropped.

**Errors.** An exception in the app's client code stops the run with a
:class:`~simfl.flower.ClientError` naming the client, the call and the server round
(``meta["error"]`` holds the traceback), where Flower would log it and count the job a
failure: a crash of the app's code is a bug to see, not a dropout (the fleet models those).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar

import numpy as np
from flwr.app import ArrayRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from numpy.typing import NDArray

from simfl._checks import check_bool
from simfl.algorithms.base import Algorithm, ClientMetrics, Updates
from simfl.flower._runtime import SERVER_NODE_ID, ClientError, calling, identity
from simfl.flower.protocols import (
    Arrays,
    Instructions,
    Protocol,
    Reply,
    as_arrays,
    copy_strategy,
    protocol_of,
)
from simfl.flower.task import FlowerNodes, FlowerTask
from simfl.network import Payload
from simfl.outcome import ARRIVED, Outcome
from simfl.rng import Streams
from simfl.tasks.base import Task

__all__ = ["REPLY", "FlowerApp", "FlowerState"]

IntArray = NDArray[np.int64]
#: The row of an update that holds the id of the client's reply (kept until aggregated).
REPLY = "flower/reply"
_KIND = {"train": 0, "evaluate": 1}


@dataclass(frozen=True, eq=False)
class FlowerState:
    """The server side of a Flower app between aggregations: a value, never changed in place.

    Attributes
    ----------
    arrays
        The global model: numpy arrays by name (a legacy model's named ``"0"``, ``"1"``, ...;
        a Message-API model's by its ``ArrayRecord`` keys), as the strategy last returned it.
    strategy
        The run's strategy after this many aggregations (its own state included, e.g.
        FedAdam's moments); never called again: each aggregation works on a copy.
    round
        The Flower server round this model closed (0 before the first).
    node_states
        Each client's ``Context.state`` after its last aggregated job.
    train_metrics
        ``(server_round, metrics)`` of every aggregation: the strategy's aggregated training
        metrics.
    nodes
        The run's Flower nodes (:class:`~simfl.flower.FlowerNodes`).
    """

    arrays: Arrays
    strategy: Any
    round: int
    node_states: Mapping[int, RecordDict]
    train_metrics: tuple[tuple[int, dict[str, Any]], ...]
    nodes: FlowerNodes = field(repr=False)
    _cache: dict[Any, Any] = field(default_factory=dict, init=False, repr=False)


def _seed(streams: Streams, purpose: str, *keys: int) -> int:
    return int(streams.generator(purpose, *(int(k) for k in keys)).integers(2**63))


def _client_app(client: Any) -> tuple[ClientApp, str]:
    """The ``ClientApp`` that runs ``client`` and its family (``"legacy"`` or ``"message"``).

    A ``ClientApp`` has no public word on which API built it; its two private attributes say
    (``_call``: the handler of a ``client_fn``; ``_registered_funcs``: the ``@app.train()``
    and ``@app.evaluate()`` functions), as in the Flower release the extra pins.
    """
    if isinstance(client, ClientApp):
        if getattr(client, "_call", None) is not None:  # ClientApp(client_fn)
            return client, "legacy"
        if "train.default" not in getattr(client, "_registered_funcs", {}):
            raise ValueError(
                "FlowerApp.client is a ClientApp without a train function: register one with "
                "@app.train()"
            )
        return client, "message"
    if callable(client):
        try:
            return ClientApp(client_fn=client), "legacy"
        except ValueError as exc:
            raise ValueError(f"FlowerApp.client: {exc}") from None
    raise ValueError(
        f"FlowerApp.client must be a flwr ClientApp or a client_fn(context) -> Client, got "
        f"{client!r}"
    )


def _check_config(field_name: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise ValueError(f"{field_name} must be a mapping of str keys, got {value!r}")
    for k, v in value.items():
        if not isinstance(v, (bool, int, float, str)):
            raise ValueError(
                f"{field_name}[{k!r}] must be a bool, int, float or str (a Flower config "
                f"value), got {v!r}"
            )
    return dict(value)


@dataclass(frozen=True, eq=False)
class FlowerApp(Algorithm[FlowerState]):
    """An unmodified Flower app as a simfl algorithm (see the module docstring).

    Parameters
    ----------
    client
        The app's client: a ``client_fn(context)`` returning a ``Client`` (or
        ``NumPyClient``), a ``ClientApp(client_fn)``, or a Message-API ``ClientApp`` with
        ``@app.train()`` (and ``@app.evaluate()`` for federated evaluation) functions.
    strategy
        A Flower strategy of the client's family: a ``flwr.server.strategy`` one (``FedAvg``,
        ``FedProx``, ``FedAdam``, ...) for a ``client_fn``, a ``flwr.serverapp.strategy`` one
        for a Message-API ``ClientApp``, as Flower itself pairs them. Never changed: each run
        copies it.
    initial
        The initial global model (what a Message-API ``ServerApp`` passes to
        ``strategy.start(initial_arrays=...)``): an ``ArrayRecord``, ``Parameters``, a list of
        numpy arrays, a dict of arrays (a torch ``state_dict``), or a callable returning one,
        called at the start of each run with the global generators seeded from the keyed
        stream ``"flower/init"`` (``lambda: ArrayRecord(Net().state_dict())`` then depends on
        the scenario's seed). Required with a Message-API strategy; with a legacy one,
        ``None`` takes the strategy's ``initial_parameters`` or, without them, partition 0's
        ``get_parameters`` (Flower's server asks one client).
    run_config
        The run config every client's ``Context`` holds (the ``[tool.flwr.app.config]`` of the
        app's ``pyproject.toml``: :func:`~simfl.flower.run_config`).
    train_config, evaluate_config
        The ``ConfigRecord`` passed to a Message-API strategy's ``configure_train`` /
        ``configure_evaluate`` (``strategy.start``'s ``train_config`` / ``evaluate_config``).
        A legacy strategy makes its own (``on_fit_config_fn``).
    evaluate_fn
        A Message-API server-side evaluation ``evaluate_fn(server_round, arrays) ->
        MetricRecord | None`` (``strategy.start``'s), for ``FlowerTask(evaluation="server")``;
        a legacy strategy holds its own.
    client_work
        Compute work units of one job of each client, ``client_work(partition_id) -> float``
        (e.g. its training examples times local epochs; times the device's seconds per unit);
        default: 1 per job.
    loss_metric
        The training metric recorded as the round's ``train_loss`` (when every arrived client
        reports it; ``None``: none).
    quiet
        Silence Flower's INFO log lines (default ``True``).
    """

    client: Any
    strategy: Any
    initial: Any = None
    run_config: Mapping[str, Any] = field(default_factory=dict)
    train_config: Mapping[str, Any] | None = None
    evaluate_config: Mapping[str, Any] | None = None
    evaluate_fn: Callable[[int, Any], Any] | None = None
    client_work: Callable[[int], float] | None = None
    loss_metric: str | None = "train_loss"
    quiet: bool = True
    _protocol: Protocol = field(init=False, repr=False)
    _app: ClientApp = field(init=False, repr=False)

    name: ClassVar[str] = "flower"

    def __repr__(self) -> str:
        """The fields that are set, code by its qualified name and a strategy by its settings.

        Stable across processes (no object addresses), so a scenario's ``repr`` recorded in
        ``meta["scenario_repr"]`` says which app and which strategy ran.
        """
        parts = [f"client={_describe(self.client)}", f"strategy={_describe(self.strategy)}"]
        for f in fields(self):
            if f.name in ("client", "strategy") or not f.repr:
                continue
            value = getattr(self, f.name)
            if value != f.default and not (isinstance(value, dict) and not value):
                parts.append(f"{f.name}={_describe(value)}")
        return f"FlowerApp({', '.join(parts)})"

    def __post_init__(self) -> None:
        protocol = protocol_of(self.strategy)
        app, family = _client_app(self.client)
        if family != protocol.family:
            kinds = {
                "legacy": "a client_fn / ClientApp(client_fn) (Flower's legacy API)",
                "message": "a Message-API ClientApp (@app.train())",
            }
            raise ValueError(
                f"FlowerApp.client is {kinds[family]} and FlowerApp.strategy is "
                f"{type(self.strategy).__name__} from the other API "
                f"({protocol.strategy_kind}): Flower pairs a client_fn with a "
                f"flwr.server.strategy strategy and a Message-API ClientApp with a "
                f"flwr.serverapp.strategy one"
            )
        object.__setattr__(self, "_protocol", protocol)
        object.__setattr__(self, "_app", app)
        object.__setattr__(
            self, "run_config", _check_config("FlowerApp.run_config", self.run_config)
        )
        for name in ("train_config", "evaluate_config", "evaluate_fn"):
            value = getattr(self, name)
            if value is None:
                continue
            if protocol.family == "legacy":
                raise ValueError(
                    f"FlowerApp.{name} is for a Message-API strategy; a legacy strategy "
                    f"({type(self.strategy).__name__}) holds its own (on_fit_config_fn, "
                    f"on_evaluate_config_fn, evaluate_fn)"
                )
            if name == "evaluate_fn":
                if not callable(value):
                    raise ValueError(f"FlowerApp.evaluate_fn must be callable, got {value!r}")
            else:
                object.__setattr__(self, name, _check_config(f"FlowerApp.{name}", value))
        if self.initial is not None and not callable(self.initial):
            as_arrays(self.initial, "FlowerApp.initial")
        if self.client_work is not None and not callable(self.client_work):
            raise ValueError(
                f"FlowerApp.client_work must be a callable client_work(partition_id) -> float "
                f"or None, got {self.client_work!r}"
            )
        if self.loss_metric is not None and not isinstance(self.loss_metric, str):
            raise ValueError(
                f"FlowerApp.loss_metric must be a metric name or None, got {self.loss_metric!r}"
            )
        check_bool("FlowerApp.quiet", self.quiet)

    # ------------------------------------------------------------------ what simfl asks
    def check(self, task: Task | None) -> None:
        """A :class:`~simfl.flower.FlowerTask` whose evaluation this app can give."""
        if not isinstance(task, FlowerTask):
            raise ValueError(
                f"Scenario.task must be a simfl.flower.FlowerTask for a FlowerApp, got {task!r}"
            )
        strategy = self.strategy
        if task.evaluation == "server":
            if self._protocol.family == "message" and self.evaluate_fn is None:
                raise ValueError(
                    "FlowerTask(evaluation='server') needs FlowerApp.evaluate_fn with a "
                    "Message-API strategy (the evaluate_fn a ServerApp passes to "
                    "strategy.start)"
                )
            if self._protocol.family == "legacy" and getattr(strategy, "evaluate_fn", 0) is None:
                raise ValueError(
                    f"FlowerTask(evaluation='server') needs the strategy's evaluate_fn: "
                    f"{type(strategy).__name__}(evaluate_fn=...)"
                )
            return
        if not self._protocol.evaluates_on_clients(strategy):
            raise ValueError(
                f"FlowerTask(evaluation='federated') needs a strategy that evaluates on "
                f"clients: {type(strategy).__name__}.fraction_evaluate is 0"
            )
        registered = getattr(self._app, "_registered_funcs", {})
        if self._protocol.family == "message" and "evaluate.default" not in registered:
            raise ValueError(
                "FlowerTask(evaluation='federated') needs an evaluate function in the "
                "ClientApp (@app.evaluate()), or FlowerTask(evaluation='server')"
            )

    def synchronous_only_reason(self) -> str | None:
        """Why asynchronous and tiered policies refuse this strategy (``None``: they take it)."""
        if self._protocol.averages():
            return None
        return (
            f"its strategy {type(self.strategy).__name__} aggregates by its own rule (not "
            f"FedAvg's weighted mean), which asynchronous and tiered policies would replace by "
            f"their staleness-weighted mixing (and lose the strategy's state)"
        )

    def initial_state(self, data: FlowerNodes, streams: Streams) -> FlowerState:
        """The run's copy of the strategy and the initial global model."""
        strategy = copy_strategy(self.strategy)
        over = self._protocol.minimum_nodes(strategy, data.n)
        if over:
            name, value = next(iter(over.items()))
            raise ValueError(
                f"FlowerApp.strategy.{name} ({value}) is more than the fleet's {data.n} "
                f"clients: Flower would wait for more nodes for ever"
            )
        given = self.initial
        if callable(given):
            with self._server(data, _seed(streams, "flower/init")):
                given = given()
        arrays = None if given is None else as_arrays(given, "FlowerApp.initial")

        def ask(message: Message) -> Message:
            context = data.context(0, None, self.run_config)
            return self._call(message, context, _seed(streams, "flower/init-client"), 0, 0)

        with self._server(data, _seed(streams, "flower/init-strategy")):
            arrays = self._protocol.initial(strategy, arrays, list(map(int, data.node_ids)), ask)
        if self.client_work is not None:
            units = np.array([self.client_work(i) for i in range(data.n)], dtype=np.float64)
            if units.shape != (data.n,) or not (np.isfinite(units).all() and (units > 0).all()):
                raise ValueError(
                    f"FlowerApp.client_work must give a finite number > 0 for every partition, got "
                    f"{units!r}"
                )
            data.work = units
        return FlowerState(arrays, strategy, 0, {}, (), data)

    def work(self, state: FlowerState, clients: IntArray) -> NDArray[np.float64]:
        """:attr:`client_work` of each client (default: one unit per job)."""
        units = state.nodes.work
        if units is None:
            return np.ones(clients.shape, dtype=np.float64)
        return np.asarray(units[clients], dtype=np.float64)

    def payload(self, state: FlowerState) -> Payload:
        """The model's arrays as Flower serialises them (``.npy`` bytes), each way."""
        size = state._cache.get("nbytes")
        if size is None:
            size = state._cache["nbytes"] = self._protocol.nbytes(state.arrays)
        return Payload(down=size, up=size)

    def local_updates(
        self,
        state: FlowerState,
        data: FlowerNodes,
        clients: IntArray,
        round: int,
        streams: Streams,
    ) -> Updates:
        """Each client's reply to the strategy's instruction of server round ``round + 1``."""
        return self._train(state, clients, round + 1, [round] * len(clients), streams)

    def job_updates(
        self,
        states: Sequence[FlowerState],
        data: FlowerNodes,
        clients: IntArray,
        keys: Sequence[int],
        streams: Streams,
    ) -> Updates:
        """Each job's reply to the instruction of the model version it downloaded."""
        parts = [
            self._train(state, clients[i : i + 1], state.round + 1, [key], streams)
            for i, (state, key) in enumerate(zip(states, keys, strict=True))
        ]
        return Updates.concat(parts) if len(parts) > 1 else parts[0]

    def aggregate(self, state: FlowerState, updates: Updates, outcome: Outcome) -> FlowerState:
        """The strategy's aggregation of the arrived replies, with the failed jobs as failures."""
        server_round = outcome.round + 1
        nodes = state.nodes
        replies = nodes.take(updates.params[REPLY].tolist())
        strategy = copy_strategy(state.strategy)
        # Flower's server configures the round on the strategy before it aggregates (FedOpt
        # keeps the arrays it sends there): the same call, with the same seed
        instructions = self._configure(strategy, state, "train", server_round)
        failures = [
            (int(c), nodes.node(int(c)), int(s))
            for c, s in zip(outcome.devices, outcome.status, strict=True)
            if s != ARRIVED
        ]
        with self._server(nodes, _seed(nodes.streams, "flower/aggregate", server_round)):
            arrays, metrics = self._protocol.aggregate_fit(
                strategy, server_round, instructions, replies, failures
            )
        return FlowerState(
            state.arrays if arrays is None else arrays,
            strategy,
            server_round,
            _kept(state.node_states, replies),
            (*state.train_metrics, (server_round, metrics)),
            nodes,
        )

    def shared(self, state: FlowerState) -> dict[str, NDArray[Any]]:
        """The global model's arrays (asynchronous and tiered policies mix them)."""
        return dict(state.arrays)

    def with_shared(self, state: FlowerState, shared: dict[str, NDArray[Any]]) -> FlowerState:
        """``state`` with a mixed model, each array in its dtype (integers rounded)."""
        arrays: Arrays = {}
        for name, old in state.arrays.items():
            value = np.asarray(shared[name])
            if np.issubdtype(old.dtype, np.integer):
                value = np.rint(value)
            arrays[name] = value.astype(old.dtype)
        return replace(state, arrays=arrays)

    def keep_local(self, state: FlowerState, updates: Updates) -> FlowerState:
        """The applied clients' node states kept; the server round moves on (asynchronous)."""
        replies = state.nodes.take(updates.params[REPLY].tolist())
        return replace(state, node_states=_kept(state.node_states, replies), round=state.round + 1)

    def evaluate(self, state: FlowerState, data: FlowerNodes) -> dict[str, float]:
        """The task's metrics of the global model (see :class:`~simfl.flower.FlowerTask`)."""
        task = data.task
        nodes = state.nodes
        if task.evaluation == "server":
            seed = _seed(nodes.streams, "flower/server-evaluate", state.round)
            with self._server(nodes, seed):
                found = self._protocol.server_evaluate(
                    copy_strategy(state.strategy), self.evaluate_fn, state.round, state.arrays
                )
            if found is None:
                raise ValueError(
                    f"the server-side evaluation gave no metrics in server round {state.round} "
                    f"(evaluate_fn returned None)"
                )
            return _pick(found, task, "the server-side evaluation")
        replies = self._evaluations(state)
        with self._server(nodes, _seed(nodes.streams, "flower/eval-aggregate", state.round)):
            found = self._protocol.aggregate_evaluate(
                copy_strategy(state.strategy),
                state.round,
                [(nodes.node(c), m) for c, m in enumerate(replies)],
            )
        for name, value in _weighted_means(self._protocol, replies).items():
            found.setdefault(name, value)
        return _pick(found, task, "the federated evaluation")

    def evaluate_clients(self, state: FlowerState, data: FlowerNodes) -> ClientMetrics | None:
        """Each client's own evaluation metrics of the final model (federated evaluation)."""
        task = data.task
        if task.evaluation != "federated":
            return None
        per_client = [self._protocol.eval_metrics(m)[1] for m in self._evaluations(state)]
        values = {
            name: np.array([m.get(name, math.nan) for m in per_client], dtype=np.float64)
            for name in task.metrics
            if any(name in m for m in per_client)
        }
        return np.arange(data.n, dtype=np.int64), values

    # ------------------------------------------------------------------ Flower calls
    def _server(self, nodes: FlowerNodes, seed: int) -> AbstractContextManager[None]:
        """A call into the strategy (or the server's code), seeded with ``seed``."""
        return calling(self.quiet, seed, nodes.run_id, SERVER_NODE_ID)

    def _call(
        self, message: Message, context: Context, seed: int, client: int, server_round: int
    ) -> Message:
        """The app's reply to ``message``, with the global generators seeded with ``seed``."""
        what = message.metadata.message_type
        try:
            with calling(self.quiet, seed, context.run_id, context.node_id):
                reply = self._app(message, context)
        except Exception as exc:
            raise ClientError(
                f"the Flower client of partition {client} (node {context.node_id}) raised "
                f"{type(exc).__name__} in {what} (server round {server_round}): {exc}"
            ) from exc
        if not isinstance(reply, Message):
            raise ClientError(
                f"the Flower client of partition {client} returned {type(reply).__name__} "
                f"from {what} (server round {server_round}), not a flwr.app.Message"
            )
        return reply

    def _configure(
        self, strategy: Any, state: FlowerState, kind: str, server_round: int
    ) -> Instructions:
        """``strategy``'s instructions of a round, seeded by the round (the same every call)."""
        nodes = state.nodes
        config = self.train_config if kind == "train" else self.evaluate_config
        seed = _seed(nodes.streams, "flower/configure", _KIND[kind], server_round)
        with self._server(nodes, seed):
            found = self._protocol.configure(
                strategy, kind, server_round, state.arrays, list(map(int, nodes.node_ids)), config
            )
        if found is None:
            raise ValueError(
                f"the strategy {type(strategy).__name__} configured no client for {kind} in "
                f"server round {server_round} (its sample is empty: fraction and minimum "
                f"number of clients)"
            )
        return found

    def _instructions(self, state: FlowerState, kind: str, server_round: int) -> Instructions:
        """The instructions of a round, from a copy of the strategy (cached on the state)."""
        key = ("instructions", kind, server_round)
        found = state._cache.get(key)
        if found is None:
            found = self._configure(copy_strategy(state.strategy), state, kind, server_round)
            state._cache[key] = found
        return found

    def _train(
        self,
        state: FlowerState,
        clients: IntArray,
        server_round: int,
        keys: Sequence[int],
        streams: Streams,
    ) -> Updates:
        """The training replies of ``clients`` (job ``i`` seeded by ``keys[i]``) as updates."""
        nodes = state.nodes
        replies: list[Message] = []
        context_states: list[RecordDict] = []
        for c, key in zip(clients.tolist(), keys, strict=True):
            message = self.train_message(state, c, server_round)
            context = nodes.context(c, state.node_states.get(c), self.run_config)
            replies.append(
                self._call(message, context, self.job_seed(streams, c, key), c, server_round)
            )
            context_states.append(context.state)
        return self.updates_from(state, clients, replies, context_states)

    def train_message(self, state: FlowerState, client: int, server_round: int) -> Message:
        """The train message the strategy sends ``client`` in ``server_round``.

        What a deployment's server would push to the client's node; :mod:`simfl.twin` sends
        its content to a real SuperNode.
        """
        nodes = state.nodes
        instructions = self._instructions(state, "train", server_round)
        with identity(nodes.run_id, SERVER_NODE_ID):
            return self._protocol.message(instructions, "train", nodes.node(client), server_round)

    def job_seed(self, streams: Streams, client: int, key: int) -> int:
        """The seed of the global generators (torch, numpy, ``random``) around a job.

        ``key`` is the job's round index (for asynchronous runs, its job's key).
        """
        return _seed(streams, "flower/fit", client, key)

    def updates_from(
        self,
        state: FlowerState,
        clients: IntArray,
        replies: Sequence[Message],
        context_states: Sequence[RecordDict],
    ) -> Updates:
        """The updates of ``clients`` from their train replies.

        ``context_states`` are each client's ``Context.state`` after its job, kept for the
        jobs the aggregation applies.
        """
        nodes = state.nodes
        ids: list[int] = []
        rows: list[Arrays] = []
        weights: list[float] = []
        losses: list[float] = []
        for c, reply, kept in zip(clients.tolist(), replies, context_states, strict=True):
            ids.append(nodes.store(Reply(c, nodes.node(c), reply, kept)))
            arrays = self._protocol.reply_arrays(reply)
            rows.append(state.arrays if arrays is None else _matched(arrays, state.arrays, c))
            weights.append(self._protocol.reply_weight(reply))
            if self.loss_metric is not None:
                loss = self._protocol.reply_metrics(reply).get(self.loss_metric)
                if loss is not None:
                    losses.append(loss)
        params: dict[str, NDArray[Any]] = {
            name: np.stack([r[name] for r in rows]) for name in state.arrays
        }
        params[REPLY] = np.array(ids, dtype=np.int64)
        return Updates(
            np.asarray(clients, dtype=np.int64),
            params,
            loss=np.array(losses) if len(losses) == len(ids) and ids else None,
            weight=np.array(weights, dtype=np.float64),
        )

    def _evaluations(self, state: FlowerState) -> list[Message]:
        """Every client's evaluation reply for the model of ``state`` (cached on the state)."""
        found = state._cache.get("evaluations")
        if found is not None:
            return found  # type: ignore[no-any-return]
        nodes = state.nodes
        server_round = state.round
        instructions = self._instructions(state, "evaluate", server_round)
        replies = []
        for c in range(nodes.n):
            with identity(nodes.run_id, SERVER_NODE_ID):
                message = self._protocol.message(
                    instructions, "evaluate", nodes.node(c), server_round
                )
            context = nodes.context(c, state.node_states.get(c), self.run_config)
            seed = _seed(nodes.streams, "flower/evaluate", c, server_round)
            replies.append(self._call(message, context, seed, c, server_round))
        state._cache["evaluations"] = replies
        return replies


def _describe(value: Any) -> str:
    """``value`` for a repr: code by its qualified name, a strategy by its scalar settings."""
    if isinstance(value, ClientApp):
        funcs = sorted(getattr(value, "_registered_funcs", {}))
        return f"ClientApp({', '.join(funcs) or 'client_fn'})"
    if callable(value) and hasattr(value, "__qualname__"):
        return f"{getattr(value, '__module__', '?')}.{value.__qualname__}"
    if hasattr(value, "aggregate_fit") or hasattr(value, "aggregate_train"):  # a strategy
        settings = ", ".join(
            f"{k}={v!r}"
            for k, v in vars(value).items()
            if not k.startswith("_") and isinstance(v, (bool, int, float, str))
        )
        return f"{type(value).__name__}({settings})"
    if isinstance(value, dict) and all(
        isinstance(v, (bool, int, float, str)) for v in value.values()
    ):
        return repr(value)  # a config
    if isinstance(value, (ArrayRecord, Mapping, list, tuple)):
        return f"<{type(value).__name__} of {len(value)}>"
    return repr(value)


def _kept(states: Mapping[int, RecordDict], replies: Sequence[Reply]) -> dict[int, RecordDict]:
    """``states`` with each replying client's node state after its call."""
    out = dict(states)
    for r in replies:
        out[r.client] = r.context_state
    return out


def _matched(arrays: Arrays, model: Arrays, client: int) -> Arrays:
    """``arrays`` in the model's order if they have its names and shapes (else ``ValueError``)."""
    if arrays.keys() != model.keys() or any(arrays[k].shape != model[k].shape for k in model):
        got = {k: tuple(v.shape) for k, v in arrays.items()}
        want = {k: tuple(v.shape) for k, v in model.items()}
        raise ValueError(
            f"the Flower client of partition {client} replied arrays {got}; the global model "
            f"has {want}"
        )
    return {k: arrays[k] for k in model}


def _weighted_means(protocol: Protocol, replies: Sequence[Message]) -> dict[str, float]:
    """Each metric's mean over the clients that report it, weighted by their examples."""
    sums: dict[str, float] = {}
    totals: dict[str, float] = {}
    for reply in replies:
        weight, metrics = protocol.eval_metrics(reply)
        for name, value in metrics.items():
            sums[name] = sums.get(name, 0.0) + weight * value
            totals[name] = totals.get(name, 0.0) + weight
    return {name: sums[name] / totals[name] for name in sums if totals[name] > 0}


def _pick(found: Mapping[str, float], task: FlowerTask, source: str) -> dict[str, float]:
    """The task's metrics from ``found`` (``ValueError`` naming the missing ones)."""
    missing = [m for m in task.metrics if m not in found]
    if missing:
        raise ValueError(
            f"FlowerTask.metrics names {missing}, which {source} does not give (it gives "
            f"{sorted(found)})"
        )
    return {m: float(found[m]) for m in task.metrics}
