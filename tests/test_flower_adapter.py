"""simfl.flower: unmodified Flower apps under simfl's clock, both Flower APIs, both policy families.

Two kinds of app: the digits app of ``docs/examples/flower_digits`` (PyTorch, written as
Flower's quickstart-pytorch; it never imports simfl) for runs that learn, and a least-squares
app in numpy defined here (deterministic: no generator at all) for the checks against hand
computations, which are exact (the same float operations in the same order as Flower's).
"""

from __future__ import annotations

import ast
import math
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("flwr", reason="Flower is not installed: pip install 'simfl[flower]'")
torch = pytest.importorskip("torch", reason="torch is not installed: pip install 'simfl[neural]'")

from flwr.app import (  # noqa: E402
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    MetricRecord,
    RecordDict,
)
from flwr.client import NumPyClient  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402
from flwr.common import ndarrays_to_parameters  # noqa: E402
from flwr.common.config import get_project_config, validate_config  # noqa: E402
from flwr.common.constant import ErrorCode  # noqa: E402
from flwr.server import strategy as legacy  # noqa: E402
from flwr.serverapp import Grid  # noqa: E402
from flwr.serverapp import strategy as msgapi  # noqa: E402

import simfl  # noqa: E402
from simfl import Fleet, Scenario, Target, dists, policies  # noqa: E402
from simfl.flower import (  # noqa: E402
    ClientError,
    FlowerApp,
    FlowerTask,
    JobFailure,
    run_config,
)
from simfl.flower._runtime import SERVER_NODE_ID, calling  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
APP_DIR = ROOT / "docs" / "examples" / "flower_digits"
if str(APP_DIR) not in sys.path:
    sys.path.insert(0, str(APP_DIR))

from flower_digits import client_app, numpy_client  # noqa: E402
from flower_digits.task import Net  # noqa: E402

N = 4  # clients of the least-squares app
TRUE_W = np.array([1.0, -2.0, 0.5])


# ---------------------------------------------------------------- a least-squares app in numpy
def _data(pid: int) -> tuple[np.ndarray, np.ndarray]:
    """Partition ``pid``'s samples: 8 + 4 * pid points of a noisy linear model."""
    rng = np.random.default_rng(100 + pid)
    x = rng.normal(size=(8 + 4 * pid, 3))
    return x, x @ TRUE_W + 0.1 * rng.normal(size=x.shape[0])


def _step(pid: int, w: np.ndarray, b: np.ndarray, lr: float) -> tuple[np.ndarray, ...]:
    """One full-batch gradient step of the squared error; the new model and the mean loss."""
    x, y = _data(pid)
    r = x @ w + b - y
    return w - lr * (x.T @ r) / len(y), b - lr * r.mean(keepdims=True), float((r**2).mean())


def _mse(pid: int, w: np.ndarray, b: np.ndarray) -> float:
    x, y = _data(pid)
    return float(((x @ w + b - y) ** 2).mean())


class LSClient(NumPyClient):
    """A NumPyClient fitting a linear model by one gradient step."""

    def __init__(self, pid: int, n: int, lr: float) -> None:
        self.pid, self.n, self.lr = pid, n, lr

    def get_parameters(self, config):
        return [np.zeros(3), np.zeros(1)]

    def fit(self, parameters, config):
        w, b, loss = _step(self.pid, *parameters, self.lr)
        metrics = {
            "train_loss": loss,
            "partition": self.pid,
            "partitions": self.n,
            "round": config.get("server_round", -1),
            "mu": config.get("proximal_mu", -1.0),
        }
        return [w, b], len(_data(self.pid)[1]), metrics

    def evaluate(self, parameters, config):
        mse = _mse(self.pid, *parameters)
        return mse, len(_data(self.pid)[1]), {"mse": mse}


def ls_client_fn(context: Context):
    return LSClient(
        context.node_config["partition-id"],
        context.node_config["num-partitions"],
        context.run_config["lr"],
    ).to_client()


ls_app = ClientApp()


@ls_app.train()
def _ls_train(msg: Message, context: Context) -> Message:
    arrays = msg.content["arrays"]
    pid = context.node_config["partition-id"]
    w, b, loss = _step(pid, arrays["w"].numpy(), arrays["b"].numpy(), context.run_config["lr"])
    jobs = context.state["jobs"]["n"] + 1 if "jobs" in context.state else 1
    context.state["jobs"] = MetricRecord({"n": jobs})
    metrics = {
        "train_loss": loss,
        "num-examples": len(_data(pid)[1]),
        "server-round": msg.content["config"]["server-round"],
    }
    content = RecordDict(
        {"arrays": ArrayRecord({"w": Array(w), "b": Array(b)}), "metrics": MetricRecord(metrics)}
    )
    return Message(content=content, reply_to=msg)


@ls_app.evaluate()
def _ls_evaluate(msg: Message, context: Context) -> Message:
    arrays = msg.content["arrays"]
    pid = context.node_config["partition-id"]
    mse = _mse(pid, arrays["w"].numpy(), arrays["b"].numpy())
    metrics = {"mse": mse, "num-examples": len(_data(pid)[1])}
    return Message(content=RecordDict({"metrics": MetricRecord(metrics)}), reply_to=msg)


LS_INITIAL = {"w": np.zeros(3), "b": np.zeros(1)}


class RecordingFedAvg(legacy.FedAvg):
    """Legacy FedAvg that keeps what ``aggregate_fit`` was given (the run's copy keeps it)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.seen: list[tuple[int, list[tuple[int, int, dict]], list[Any]]] = []

    def aggregate_fit(self, server_round, results, failures):
        self.seen.append(
            (
                server_round,
                [(int(p.cid), r.num_examples, dict(r.metrics)) for p, r in results],
                list(failures),
            )
        )
        return super().aggregate_fit(server_round, results, failures)


class RecordingMsgFedAvg(msgapi.FedAvg):
    """Message-API FedAvg that keeps what ``aggregate_train`` was given."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.seen: list[tuple[int, list[tuple[int, int | None]]]] = []

    def aggregate_train(self, server_round, replies):
        replies = list(replies)
        self.seen.append(
            (
                server_round,
                [
                    (m.metadata.src_node_id, m.error.code if m.has_error() else None)
                    for m in replies
                ],
            )
        )
        return super().aggregate_train(server_round, replies)


def _fleet(n: int = N, slow: int | None = None, mean: float = 1.0) -> Fleet:
    scale = np.ones(n)
    if slow is not None:
        scale[slow] = 10.0
    return Fleet.homogeneous(n, compute=dists.Constant(mean), scale=scale)


def _ls_legacy(strategy: Any, policy: Any, rounds: int = 1, fleet: Fleet | None = None, **kw):
    app = FlowerApp(client=ls_client_fn, strategy=strategy, run_config={"lr": 0.1}, **kw)
    return Scenario(
        task=FlowerTask(metrics=("loss", "mse")),
        algorithm=app,
        fleet=fleet or _fleet(),
        policy=policy,
        rounds=rounds,
    )


def _ls_message(strategy: Any, policy: Any, rounds: int = 1, fleet: Fleet | None = None, **kw):
    app = FlowerApp(
        client=ls_app, strategy=strategy, initial=LS_INITIAL, run_config={"lr": 0.1}, **kw
    )
    return Scenario(
        task=FlowerTask(metrics=("mse",)),
        algorithm=app,
        fleet=fleet or _fleet(),
        policy=policy,
        rounds=rounds,
    )


def _partition_of(res: simfl.Results) -> dict[int, int]:
    """Each Flower node id of the run's clients, mapped to its partition."""
    return {int(node): pid for pid, node in enumerate(res.state.nodes.node_ids)}


# ---------------------------------------------------------------- the app and the package
def test_the_example_app_is_a_flower_app_that_never_imports_simfl():
    for path in (APP_DIR / "flower_digits").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            assert not any(n.split(".")[0] == "simfl" for n in names), path
    config = get_project_config(APP_DIR)
    assert validate_config(config, check_module=True, project_dir=APP_DIR) == (True, [], [])
    assert run_config(APP_DIR) == {
        "num-server-rounds": 3,
        "fraction-train": 1.0,
        "local-epochs": 1,
        "lr": 0.1,
    }
    assert run_config(APP_DIR, {"lr": 0.05})["lr"] == 0.05
    with pytest.raises(ValueError, match="not present"):
        run_config(APP_DIR, {"no-such-key": 1})
    with pytest.raises(ValueError, match=r"no pyproject\.toml"):
        run_config(ROOT / "docs")


def test_the_docs_page_runs(monkeypatch, capsys):
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "flower.md").read_text(), re.S)
    assert len(blocks) == 2
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the page puts the app on the path
    namespace: dict[str, Any] = {}
    exec(compile(blocks[0], "docs/flower.md", "exec"), namespace)
    res = namespace["res"]
    assert res.ok and len(res.rounds) == 3 and res.rounds["n_late"].sum() > 0
    assert res.final()["eval_acc"] > res.meta["initial_metrics"]["eval_acc"]
    assert "eval_acc" in capsys.readouterr().out
    exec(compile(blocks[1], "docs/flower.md", "exec"), namespace)
    res = namespace["res"]
    assert res.ok and res.meta["policy"] == "fedbuff" and len(res.rounds) == 3
    assert res.final()["accuracy"] > res.meta["initial_metrics"]["accuracy"]


# ---------------------------------------------------------------- exact against hand computations
def test_legacy_fedavg_is_the_weighted_mean_of_the_clients_fit_results():
    strategy = RecordingFedAvg(on_fit_config_fn=lambda r: {"server_round": r})
    res = simfl.run(_ls_legacy(strategy, policies.WaitAll()), progress=False)
    assert res.ok, res.meta["error"]
    assert strategy.seen == []  # the run worked on its own copy
    ((server_round, results, failures),) = res.state.strategy.seen
    assert server_round == 1 and failures == []
    part = _partition_of(res)
    order = [part[cid] for cid, _, _ in results]
    assert sorted(order) == list(range(N))
    for cid, examples, metrics in results:
        pid = part[cid]
        assert examples == len(_data(pid)[1])
        # the Context a SuperNode gives: partition-id, num-partitions; the round's config
        assert metrics["partition"] == pid and metrics["partitions"] == N
        assert metrics["round"] == 1 and metrics["mu"] == -1.0
    # Flower's FedAvg: sum of (n_i / n) * x_i in the order of the results, in float64
    total = sum(len(_data(p)[1]) for p in order)
    fits = {p: _step(p, np.zeros(3), np.zeros(1), 0.1) for p in order}
    for k, name in enumerate(("0", "1")):
        expected = np.float64(len(_data(order[0])[1]) / total) * fits[order[0]][k]
        for p in order[1:]:
            expected = expected + np.float64(len(_data(p)[1]) / total) * fits[p][k]
        np.testing.assert_array_equal(res.state.arrays[name], expected)
    # the train loss is the arrived clients' mean; the metrics the examples-weighted means
    assert res.rounds["train_loss"].iloc[0] == pytest.approx(np.mean([f[2] for f in fits.values()]))
    w, b = res.state.arrays["0"], res.state.arrays["1"]
    sizes = np.array([len(_data(p)[1]) for p in range(N)])
    mses = np.array([_mse(p, w, b) for p in range(N)])
    assert res.final()["mse"] == pytest.approx(float(sizes @ mses / sizes.sum()), rel=1e-12)
    assert res.final()["loss"] == pytest.approx(float(sizes @ mses / sizes.sum()), rel=1e-12)
    # payload: the serialised arrays each way
    assert res.clients["bytes_down"].iloc[0] == sum(
        len(t) for t in ndarrays_to_parameters([np.zeros(3), np.zeros(1)]).tensors
    )


def test_message_api_fedavg_is_the_weighted_mean_of_the_replies():
    strategy = RecordingMsgFedAvg()
    res = simfl.run(_ls_message(strategy, policies.WaitAll()), progress=False)
    assert res.ok, res.meta["error"]
    ((server_round, seen),) = res.state.strategy.seen
    part = _partition_of(res)
    order = [part[node] for node, code in seen]
    assert server_round == 1 and sorted(order) == list(range(N))
    assert all(code is None for _, code in seen)
    # Flower's aggregate_arrayrecords: x_0 * w_0, then += x_i * w_i, in reply order
    sizes = {p: len(_data(p)[1]) for p in order}
    total = sum(sizes.values())
    for k, name in enumerate(("w", "b")):
        expected = _step(order[0], np.zeros(3), np.zeros(1), 0.1)[k] * (sizes[order[0]] / total)
        for p in order[1:]:
            expected += _step(p, np.zeros(3), np.zeros(1), 0.1)[k] * (sizes[p] / total)
        np.testing.assert_array_equal(res.state.arrays[name], expected)
    assert res.state.train_metrics[0][0] == 1
    assert res.state.train_metrics[0][1]["server-round"] == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("policy", "status"),
    [
        (policies.Deadline(seconds=5.0), "late"),
        (policies.FastestK(k=N - 1, overcommit=1 / (N - 1)), "cancelled"),
    ],
)
def test_failed_jobs_reach_the_legacy_strategy_as_failures(policy, status):
    strategy = RecordingFedAvg()
    res = simfl.run(
        _ls_legacy(strategy, policy, rounds=2, fleet=_fleet(slow=N - 1)), progress=False
    )
    assert res.ok, res.meta["error"]
    seen = res.state.strategy.seen
    assert [s[0] for s in seen] == [1, 2]
    part = _partition_of(res)
    for server_round, results, failures in seen:
        assert sorted(part[cid] for cid, _, _ in results) == list(range(N - 1))
        (failure,) = failures
        assert isinstance(failure, JobFailure)
        assert (failure.partition_id, failure.status, failure.server_round) == (
            N - 1,
            status,
            server_round,
        )
        assert failure.node_id == int(res.state.nodes.node_ids[N - 1])
    assert (res.rounds[f"n_{status}"] == 1).all()


def test_failed_jobs_reach_the_message_strategy_as_error_replies():
    strategy = RecordingMsgFedAvg()
    sc = _ls_message(strategy, policies.Deadline(seconds=5.0), rounds=3, fleet=_fleet(slow=0))
    res = simfl.run(sc, progress=False)
    assert res.ok, res.meta["error"]
    part = _partition_of(res)
    for server_round, (_, seen) in enumerate(res.state.strategy.seen, start=1):
        late = [part[node] for node, code in seen if code is not None]
        assert late == [0], server_round
        assert [code for _, code in seen if code is not None] == [
            ErrorCode.REPLY_MESSAGE_UNAVAILABLE
        ]
    # only aggregated jobs leave their mark in a node's Context.state
    jobs = {pid: s["jobs"]["n"] for pid, s in res.state.node_states.items()}
    assert jobs == {1: 3, 2: 3, 3: 3}
    # the late client's update is never computed: lazy and eager runs agree
    eager = simfl.run(sc, progress=False, lazy=False)
    pd.testing.assert_frame_equal(
        res.rounds.drop(columns="host_seconds", errors="ignore"),
        eager.rounds.drop(columns="host_seconds", errors="ignore"),
    )
    for name in ("w", "b"):
        np.testing.assert_array_equal(res.state.arrays[name], eager.state.arrays[name])


def test_fedasync_with_full_mixing_replays_the_chain_of_fits():
    """One job at a time and mixing 1: every arrival replaces the model by its fit."""
    sc = _ls_legacy(
        legacy.FedAvg(),
        policies.FedAsync(mixing=1.0, concurrency=1),
        rounds=6,
        fleet=Fleet.homogeneous(N, compute=dists.Exponential(mean=1.0)),
    )
    res = simfl.run(sc, progress=False)
    assert res.ok, res.meta["error"]
    jobs = res.clients[res.clients["status"] == "arrived"].sort_values("t_end")
    assert len(jobs) == 6
    w, b = np.zeros(3), np.zeros(1)
    for device in jobs["device"]:
        w, b, _ = _step(int(device), w, b, 0.1)
    np.testing.assert_array_equal(res.state.arrays["0"], w)
    np.testing.assert_array_equal(res.state.arrays["1"], b)
    assert res.state.round == 6  # the server round moved on with every mix


def test_server_side_evaluation_and_fedprox_config():
    def evaluate_fn(server_round, parameters, config):
        return 0.5 * server_round, {"seen": float(server_round)}

    strategy = legacy.FedProx(proximal_mu=0.25, evaluate_fn=evaluate_fn)
    app = FlowerApp(client=ls_client_fn, strategy=strategy, run_config={"lr": 0.1})
    sc = Scenario(
        task=FlowerTask(metrics=("loss", "seen"), evaluation="server"),
        algorithm=app,
        fleet=_fleet(),
        policy=policies.WaitAll(),
        rounds=2,
    )
    res = simfl.run(sc, progress=False)
    assert res.ok, res.meta["error"]
    assert res.meta["initial_metrics"] == {"loss": 0.0, "seen": 0.0}
    assert res.rounds["loss"].tolist() == [0.5, 1.0]
    assert res.rounds["seen"].tolist() == [1.0, 2.0]
    assert res.meta["goals"] == {"loss": "min", "seen": "max"}


def test_work_units_and_a_readable_repr():
    work = {"client_work": lambda pid: 2.0 * (pid + 1)}
    for policy in (policies.WaitAll(), policies.FedBuff(buffer_size=2, concurrency=3)):
        res = simfl.run(_ls_legacy(legacy.FedAvg(), policy, rounds=3, **work), progress=False)
        assert res.ok, res.meta["error"]
        jobs = res.clients
        assert (jobs["work"] == 2.0 * (jobs["device"] + 1)).all()
        done = jobs["status"] == "arrived"  # 1 s per unit: Constant(1)
        np.testing.assert_allclose(jobs["compute"][done], jobs["work"][done])
    assert "0x" not in res.meta["scenario_repr"]  # no object addresses: stable across processes
    assert "test_flower_adapter.ls_client_fn, strategy=FedAvg(" in res.meta["scenario_repr"]
    with pytest.raises(ValueError, match=r"client_work must give a finite number > 0"):
        simfl.run(
            _ls_legacy(legacy.FedAvg(), policies.WaitAll(), client_work=lambda pid: 0.0),
            progress=False,
        )


# ---------------------------------------------------------------- the digits app (PyTorch)
def _digits(api: str, name: str, policy: Any, rounds: int = 3, seed: int = 0) -> Scenario:
    config = run_config(APP_DIR)

    def initial() -> ArrayRecord:
        return ArrayRecord(Net().state_dict())

    if api == "legacy":
        if name == "FedAdam":  # FedOpt steps from its own initial parameters
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                params = ndarrays_to_parameters([v.numpy() for v in Net().state_dict().values()])
            strategy = legacy.FedAdam(initial_parameters=params, eta=0.03, eta_l=0.1)
            init = None
        else:
            strategy = legacy.FedProx(proximal_mu=0.1) if name == "FedProx" else legacy.FedAvg()
            init = initial
        app = FlowerApp(
            client=numpy_client.client_fn, strategy=strategy, initial=init, run_config=config
        )
        metrics = ("loss", "accuracy")
    else:
        strategy = {
            "FedAvg": msgapi.FedAvg(),
            "FedProx": msgapi.FedProx(proximal_mu=0.1),
            "FedAdam": msgapi.FedAdam(eta=0.03, eta_l=0.1),
        }[name]
        app = FlowerApp(
            client=client_app.app,
            strategy=strategy,
            initial=initial,
            run_config=config,
            train_config={"lr": config["lr"]},
        )
        metrics = ("eval_loss", "eval_acc")
    return Scenario(
        task=FlowerTask(metrics=metrics),
        algorithm=app,
        fleet=Fleet.homogeneous(5, compute=dists.Exponential(mean=1.0)),
        policy=policy,
        rounds=rounds,
        seed=seed,
    )


SYNC = policies.Deadline(seconds=2.0)
ASYNC = policies.FedBuff(buffer_size=2, concurrency=3)


@pytest.mark.parametrize("api", ["legacy", "message"])
@pytest.mark.parametrize("name", ["FedAvg", "FedProx", "FedAdam"])
@pytest.mark.parametrize("family", ["sync", "async"])
def test_the_digits_app_learns_under_each_strategy_and_policy_family(api, name, family):
    policy = SYNC if family == "sync" else ASYNC
    if family == "async" and name == "FedAdam":
        with pytest.raises(ValueError, match="FedAdam aggregates by its own rule"):
            _digits(api, name, policy)
        return
    res = simfl.run(_digits(api, name, policy), progress=False)
    assert res.ok, res.meta["error"]
    accuracy = "accuracy" if api == "legacy" else "eval_acc"
    before = res.meta["initial_metrics"][accuracy]
    assert res.final()[accuracy] > before + 0.1, (before, res.rounds[accuracy].tolist())
    assert res.rounds["train_loss"].notna().all()
    if family == "sync":  # the deadline left some stragglers out, and they were failures
        assert res.rounds["n_late"].sum() > 0


class InProcessGrid(Grid):
    """Flower's grid played in this process, for Flower's own server loop (``Strategy.start``).

    Each message is one call of the ClientApp with its node's Context, the global generators
    seeded as simfl seeds the same call (``("flower/fit", partition, round index)``,
    ``("flower/evaluate", partition, server round)``); replies come back in partition order,
    the order in which simfl hands a wait-all round's replies to the strategy.
    """

    def __init__(self, app: ClientApp, nodes: Any, config: dict[str, Any], seed: int) -> None:
        self.app, self.nodes, self.config, self.streams = app, nodes, config, simfl.Streams(seed)
        self.partition = {int(node): pid for pid, node in enumerate(nodes.node_ids)}

    def set_run(self, run):
        pass

    @property
    def run(self):
        raise NotImplementedError

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
        return Message(content, dst_node_id, message_type, group_id=group_id, ttl=ttl)

    def get_node_ids(self):
        return [int(n) for n in self.nodes.node_ids]

    def push_messages(self, messages):
        raise NotImplementedError

    def pull_messages(self, message_ids):
        raise NotImplementedError

    def send_and_receive(self, messages, *, timeout=None):
        replies = []
        for msg in sorted(messages, key=lambda m: self.partition[m.metadata.dst_node_id]):
            pid = self.partition[msg.metadata.dst_node_id]
            server_round = msg.content["config"]["server-round"]
            if msg.metadata.message_type == "train":
                key = ("flower/fit", pid, server_round - 1)
            else:
                key = ("flower/evaluate", pid, server_round)
            seed = int(self.streams.generator(*key).integers(2**63))
            context = self.nodes.context(pid, None, self.config)
            with calling(True, seed, self.nodes.run_id, context.node_id):
                replies.append(self.app(msg, context))
        return replies


@pytest.mark.parametrize("name", ["FedAvg", "FedAdam"])
def test_wait_all_equals_flowers_own_server_loop(name):
    """simfl's wait-all rounds are Flower's ``Strategy.start`` rounds, to the last bit."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        initial = ArrayRecord(Net().state_dict())
    config = run_config(APP_DIR)
    make = {"FedAvg": msgapi.FedAvg, "FedAdam": lambda: msgapi.FedAdam(eta=0.03, eta_l=0.1)}
    app = FlowerApp(
        client=client_app.app,
        strategy=make[name](),
        initial=initial,
        run_config=config,
        train_config={"lr": config["lr"]},
    )
    sc = Scenario(
        task=FlowerTask(metrics=("eval_loss", "eval_acc")),
        algorithm=app,
        fleet=Fleet.homogeneous(5, compute=dists.Exponential(mean=1.0)),
        policy=policies.WaitAll(),
        rounds=3,
        seed=4,
    )
    res = simfl.run(sc, progress=False)
    assert res.ok, res.meta["error"]
    grid = InProcessGrid(client_app.app, res.state.nodes, config, sc.seed)
    with sc.task.session(), calling(True, 0, res.state.nodes.run_id, SERVER_NODE_ID):
        flower = make[name]().start(
            grid=grid,
            initial_arrays=initial,
            num_rounds=3,
            train_config=ConfigRecord({"lr": config["lr"]}),
        )
    for key, value in flower.arrays.items():
        np.testing.assert_array_equal(res.state.arrays[key], value.numpy())
    for r in (1, 2, 3):
        row = res.rounds.iloc[r - 1]
        assert dict(flower.evaluate_metrics_clientapp[r]) == {
            "eval_loss": row["eval_loss"],
            "eval_acc": row["eval_acc"],
        }
        assert dict(flower.train_metrics_clientapp[r]) == res.state.train_metrics[r - 1][1]


def test_runs_are_deterministic_and_independent():
    sc = _digits("message", "FedAdam", SYNC)
    strategy = sc.algorithm.strategy
    a = simfl.run(sc, progress=False)
    b = simfl.run(sc, progress=False)
    for part in ("rounds", "clients"):
        x, y = getattr(a, part), getattr(b, part)
        pd.testing.assert_frame_equal(x, y)
    for name, value in a.state.arrays.items():
        np.testing.assert_array_equal(value, b.state.arrays[name])
    assert strategy.m_t is None and a.state.strategy.m_t is not None  # the user's is untouched
    # another seed: another initial model (initial is a callable, seeded by the run)
    c = simfl.run(_digits("message", "FedAdam", SYNC, seed=1), progress=False)
    assert not a.rounds["eval_loss"].equals(c.rounds["eval_loss"])
    # torch's global generator is where it was
    state = torch.random.get_rng_state()
    simfl.run(_digits("legacy", "FedAvg", ASYNC, rounds=1), progress=False)
    assert torch.equal(state, torch.random.get_rng_state())


@pytest.mark.parametrize("api", ["legacy", "message"])
def test_a_clients_update_does_not_depend_on_its_cohort(api):
    """Lazy exactness: client 3's update alone equals its row in a cohort, to the last bit."""
    sc = _digits(api, "FedProx", SYNC)
    alg, streams = sc.algorithm, simfl.Streams(sc.seed)
    data = sc.task.build(5, streams)
    with sc.task.session():
        state = alg.initial_state(data, streams)
        cohort = alg.local_updates(state, data, np.array([0, 3, 4]), 0, streams)
        alone = alg.local_updates(state, data, np.array([3]), 0, streams)
    for name in state.arrays:
        np.testing.assert_array_equal(cohort.params[name][1], alone.params[name][0])
    assert cohort.weight[1] == alone.weight[0] and cohort.loss[1] == alone.loss[0]


def test_a_target_on_the_apps_metric_stops_the_run():
    sc = _digits("legacy", "FedAvg", policies.WaitAll(), rounds=6)
    res = simfl.run(replace(sc, target=Target("accuracy", above=0.6)), progress=False)
    assert res.ok and res.meta["stop_reason"] == "target"
    assert res.final()["accuracy"] >= 0.6 and len(res.rounds) < 6


# ---------------------------------------------------------------- errors
def _raising_client_fn(context: Context):
    pid = context.node_config["partition-id"]

    class Crashing(LSClient):
        def fit(self, parameters, config):
            if self.pid == 2 and config["server_round"] == 2:
                raise RuntimeError("out of memory on the phone")
            return super().fit(parameters, config)

    return Crashing(pid, context.node_config["num-partitions"], 0.1).to_client()


def test_a_client_that_raises_fails_the_run_naming_the_client_and_round():
    strategy = legacy.FedAvg(on_fit_config_fn=lambda r: {"server_round": r})
    app = FlowerApp(client=_raising_client_fn, strategy=strategy, run_config={"lr": 0.1})
    sc = Scenario(
        task=FlowerTask(metrics=("loss",)),
        algorithm=app,
        fleet=_fleet(),
        policy=policies.WaitAll(),
        rounds=3,
    )
    res = simfl.run(sc, progress=False)
    assert res.meta["status"] == "error" and len(res.rounds) == 2
    assert res.rounds["status"].tolist() == ["ok", "error"]
    assert "partition 2" in res.meta["error"] and "server round 2" in res.meta["error"]
    assert "out of memory on the phone" in res.meta["error"]
    with pytest.raises(ClientError, match=r"partition 2 \(node \d+\) raised RuntimeError in train"):
        simfl.run(sc, progress=False, on_error="raise")


def test_bad_apps_are_refused_before_anything_runs():
    with pytest.raises(ValueError, match=r"FlowerApp\.client is a Message-API ClientApp"):
        FlowerApp(client=ls_app, strategy=legacy.FedAvg(), initial=LS_INITIAL)
    with pytest.raises(ValueError, match=r"FlowerApp\.client is a client_fn"):
        FlowerApp(client=ls_client_fn, strategy=msgapi.FedAvg(), initial=LS_INITIAL)
    with pytest.raises(ValueError, match=r"FlowerApp\.strategy must be a Flower strategy"):
        FlowerApp(client=ls_client_fn, strategy="FedAvg")
    with pytest.raises(ValueError, match=r"FlowerApp\.client must be"):
        FlowerApp(client=3, strategy=legacy.FedAvg())
    with pytest.raises(ValueError, match=r"FlowerApp\.train_config is for a Message-API"):
        FlowerApp(client=ls_client_fn, strategy=legacy.FedAvg(), train_config={"lr": 0.1})
    with pytest.raises(ValueError, match=r"FlowerApp.run_config\['lr'\] must be"):
        FlowerApp(client=ls_client_fn, strategy=legacy.FedAvg(), run_config={"lr": [0.1]})
    with pytest.raises(ValueError, match=r"FlowerApp\.initial must be"):
        FlowerApp(client=ls_app, strategy=msgapi.FedAvg(), initial="weights.pt")
    with pytest.raises(ValueError, match=r"FlowerTask\.metrics must be"):
        FlowerTask(metrics=())
    with pytest.raises(ValueError, match=r"FlowerTask\.evaluation"):
        FlowerTask(evaluation="central")
    with pytest.raises(ValueError, match=r"FlowerTask\.minimize"):
        FlowerTask(metrics=("loss",), minimize=("accuracy",))
    with pytest.raises(ValueError, match="needs the strategy's evaluate_fn"):
        Scenario(
            task=FlowerTask(metrics=("loss",), evaluation="server"),
            algorithm=FlowerApp(client=ls_client_fn, strategy=legacy.FedAvg()),
            fleet=_fleet(),
            policy=policies.WaitAll(),
            rounds=1,
        )
    with pytest.raises(ValueError, match=r"needs FlowerApp\.evaluate_fn"):
        Scenario(
            task=FlowerTask(metrics=("mse",), evaluation="server"),
            algorithm=FlowerApp(client=ls_app, strategy=msgapi.FedAvg(), initial=LS_INITIAL),
            fleet=_fleet(),
            policy=policies.WaitAll(),
            rounds=1,
        )
    with pytest.raises(ValueError, match="fraction_evaluate is 0"):
        _ls_legacy(legacy.FedAvg(fraction_evaluate=0.0), policies.WaitAll())
    with pytest.raises(ValueError, match=r"Scenario\.task must be a simfl\.flower\.FlowerTask"):
        Scenario(
            task=None,
            algorithm=FlowerApp(client=ls_client_fn, strategy=legacy.FedAvg()),
            fleet=_fleet(),
            policy=policies.WaitAll(),
            rounds=1,
        )
    no_initial = replace(
        _ls_message(msgapi.FedAvg(), policies.WaitAll()),
        algorithm=FlowerApp(client=ls_app, strategy=msgapi.FedAvg(), run_config={"lr": 0.1}),
    )
    with pytest.raises(ValueError, match="initial is required with a Message-API strategy"):
        simfl.run(no_initial, progress=False)
    # a strategy that would wait for more nodes than the fleet has: refused, never a hang
    with pytest.raises(ValueError, match=r"min_available_clients \(9\) is more than the fleet"):
        simfl.run(
            _ls_legacy(legacy.FedAvg(min_available_clients=9), policies.WaitAll()), progress=False
        )
    with pytest.raises(ValueError, match=r"min_train_nodes \(9\) is more than the fleet"):
        simfl.run(_ls_message(msgapi.FedAvg(min_train_nodes=9), policies.WaitAll()), progress=False)
    # metrics the app's evaluation does not give
    sc = _ls_legacy(legacy.FedAvg(), policies.WaitAll())
    with pytest.raises(ValueError, match=r"FlowerTask.metrics names \['accuracy'\]"):
        simfl.run(replace(sc, task=FlowerTask(metrics=("loss", "accuracy"))), progress=False)
    assert math.isfinite(simfl.run(sc, progress=False).final()["mse"])
