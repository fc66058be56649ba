"""Neural FedAvg, FedAvg+FT, FedProx, Local-only, FedPer, FedRep and LG-FedAvg: a two-client round
against per-client torch.optim loops and a hand-written aggregate, bytes and work by hand,
validation, every synchronous policy, lazy == eager, determinism, persistent local state."""

import dataclasses

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from simfl import Fleet, Scenario, Streams, dists, policies, run, tasks  # noqa: E402
from simfl.neural import (  # noqa: E402
    MLP,
    SGD,
    Digits,
    FedAvgFT,
    FedPer,
    FedProx,
    ImageClassification,
    LGFedAvg,
    LogNormalSizes,
    NeuralFedAvg,
    NeuralFedRep,
    NeuralLocalOnly,
    Shards,
)
from tests.helpers import arrived, rows  # noqa: E402
from tests.test_neural_train import train_alone  # noqa: E402

pytestmark = pytest.mark.usefixtures("torch_one_thread")


TASK = ImageClassification(Digits(), Shards(2), MLP((32, 16)))
SMALL_SGD = SGD(lr=0.05, batch_size=8)
ALGORITHMS = [
    NeuralFedAvg(epochs=1, optimizer=SMALL_SGD),
    FedAvgFT(epochs=1, finetune_epochs=2, optimizer=SMALL_SGD),
    FedProx(epochs=1, mu=0.5, optimizer=SMALL_SGD),
    NeuralLocalOnly(epochs=1, optimizer=SMALL_SGD),
    FedPer(epochs=1, optimizer=SMALL_SGD),
    NeuralFedRep(head_epochs=2, body_epochs=1, optimizer=SMALL_SGD),
    LGFedAvg(epochs=1, optimizer=SMALL_SGD),
]


def scenario(algorithm, policy=None, n=20, rounds=4, seed=0, task=TASK, **fleet_kw):
    # work is in GMAC: 2000 s/GMAC makes these tiny models take about a second per round
    fleet = Fleet.homogeneous(n, compute=dists.Exponential(mean=2000.0), **fleet_kw)
    return Scenario(
        task=task,
        algorithm=algorithm,
        fleet=fleet,
        policy=policy or policies.WaitAll(fraction=0.25),
        rounds=rounds,
        seed=seed,
    )


def bound(algorithm, n=20, seed=0, task=TASK):
    streams = Streams(seed)
    data = task.build(n, streams)
    return data, algorithm.initial_state(data, streams), streams


# ------------------------------------------------------------------ a round by hand
@pytest.mark.parametrize(
    "algorithm",
    [
        NeuralFedRep(head_epochs=2, body_epochs=2, optimizer=SMALL_SGD),
        FedPer(epochs=2, optimizer=SMALL_SGD),
        LGFedAvg(global_layers="code", epochs=2, optimizer=SMALL_SGD),
        FedProx(epochs=2, mu=0.5, optimizer=SGD(lr=0.05, weight_decay=0.0, batch_size=8)),
    ],
    ids=lambda a: a.name,
)
def test_two_clients_match_per_client_torch_loops(algorithm):
    task = ImageClassification(Digits(), LogNormalSizes(1.0), MLP((32, 16)))
    data, state, streams = bound(algorithm, n=10, task=task)
    net = state.network
    pair = np.array([2, 7])
    # client 7 already holds its own local layers from an earlier round
    mine = {n: p + 0.01 for n, p in state.local_default.items()}
    state = dataclasses.replace(state, local={7: mine})
    updates = algorithm.local_updates(state, data, pair, 3, streams)
    new = algorithm.aggregate(state, updates, arrived(updates, 3))
    prox = algorithm.mu if isinstance(algorithm, FedProx) else None
    hand = []
    for c in pair:
        start = {**state.shared, **state.local.get(int(c), state.local_default)}
        hand.append(
            train_alone(
                net,
                start,
                data.x_train,
                data.y_train,
                data.train_parts[c],
                algorithm.phases(net),
                algorithm.optimizer,
                streams.generator("neural/batches", int(c), 3),
                prox,
            )
        )
    sizes = np.array([data.train_parts[c].size for c in pair], dtype=float)
    assert sizes[0] != sizes[1]
    w = sizes / sizes.sum()
    for name in state.shared:
        expected = w[0] * hand[0][name].double() + w[1] * hand[1][name].double()
        torch.testing.assert_close(new.shared[name].double(), expected, rtol=1e-4, atol=2e-5)
    for row, c in enumerate(pair):
        for name in state.local_default:
            torch.testing.assert_close(
                new.local[int(c)][name], hand[row][name], rtol=1e-4, atol=2e-5
            )
    assert set(new.local) == {2, 7} and new.round == state.round + 1
    np.testing.assert_array_equal(updates.weight, sizes)
    np.testing.assert_array_equal(updates.clients, pair)
    # the old state is untouched (states are values)
    assert state.local == {7: mine} and state.round == 0


def test_local_only_keeps_every_layer_and_sends_nothing():
    alg = NeuralLocalOnly(epochs=1, optimizer=SMALL_SGD)
    data, state, streams = bound(alg)
    assert state.shared == {} and alg.payload(state).down == alg.payload(state).up == 0
    upd = alg.local_updates(state, data, np.array([1, 4]), 0, streams)
    new = alg.aggregate(state, upd, arrived(upd))
    assert set(new.local) == {1, 4}
    assert not torch.equal(new.local[1]["layer_input.weight"], new.local[4]["layer_input.weight"])


# ------------------------------------------------------------------ bytes and work by hand
def test_payload_is_the_bytes_of_the_exchanged_parameters():
    task = ImageClassification(Digits(), Shards(2), MLP.lg())
    sizes = {
        "layer_input": 64 * 512 + 512,
        "layer_hidden1": 512 * 256 + 256,
        "layer_hidden2": 256 * 256 + 256,
        "layer_hidden3": 256 * 128 + 128,
        "layer_out": 128 * 10 + 10,
    }
    total = sum(sizes.values())
    expect = {
        "FedAvg": total,
        "FedRep": total - sizes["layer_out"],
        "FedPer": total - sizes["layer_out"],
        "LG-FedAvg": sizes["layer_hidden2"] + sizes["layer_hidden3"] + sizes["layer_out"],
        "Local": 0,
    }
    for alg in (NeuralFedAvg(), NeuralFedRep(), FedPer(), LGFedAvg(), NeuralLocalOnly()):
        _, state, _ = bound(alg, task=task)
        payload = alg.payload(state)
        assert payload.down == payload.up == 4 * expect[alg.name], alg.name
    code = LGFedAvg(global_layers="code")
    _, state, _ = bound(code, task=task)
    assert code.payload(state).up == 4 * (sizes["layer_hidden3"] + sizes["layer_out"])


def test_work_is_samples_times_epochs_times_macs():
    data, state, _ = bound(NeuralFedRep())
    f = {"layer_input": 64 * 32, "layer_hidden1": 32 * 16, "layer_out": 16 * 10}
    forward = sum(f.values())
    head = forward + f["layer_out"]
    body = forward + f["layer_input"] + f["layer_hidden1"] + f["layer_hidden1"] + f["layer_out"]
    full = 3 * forward - f["layer_input"]
    clients = np.array([0, 5])
    n = data.client_sizes()[clients]
    cases = [
        (NeuralFedRep(head_epochs=10, body_epochs=5), 10 * head + 5 * body),
        (NeuralFedRep(head_epochs=3, body_epochs=2, interleave=True), 2 * (3 * head + body)),
        (NeuralFedAvg(epochs=4), 4 * full),
        (NeuralLocalOnly(epochs=2), 2 * full),
    ]
    for alg, per_sample in cases:
        np.testing.assert_allclose(alg.work(state, clients), n * per_sample / 1e9, rtol=1e-12)


# ------------------------------------------------------------------ validation
@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: NeuralFedAvg(epochs=0), r"NeuralFedAvg\.epochs must be an integer in \[1, inf\]"),
        (lambda: FedAvgFT(finetune_epochs=-1), r"FedAvgFT.finetune_epochs"),
        (lambda: FedProx(mu=-0.1), r"FedProx.mu must be in \[0, inf\)"),
        (lambda: NeuralFedRep(head_epochs=-1), r"NeuralFedRep\.head_epochs"),
        (lambda: NeuralFedRep(body_epochs=0), r"NeuralFedRep\.body_epochs"),
        (lambda: NeuralFedRep(interleave=1), r"NeuralFedRep\.interleave must be True or False"),
        (lambda: FedPer(optimizer=0.1), r"FedPer.optimizer must be a simfl.neural.SGD"),
        (lambda: NeuralLocalOnly(epochs=0), r"NeuralLocalOnly\.epochs"),
        (lambda: LGFedAvg(global_layers="top"), r"LGFedAvg.global_layers must be 'paper', 'code'"),
        (lambda: LGFedAvg(global_layers=()), r"LGFedAvg.global_layers"),
        (lambda: LGFedAvg(pretrain_rounds=-2), r"LGFedAvg.pretrain_rounds"),
        (lambda: ImageClassification(dataset="mnist"), r"ImageClassification.dataset"),
        (lambda: ImageClassification(partition=2), r"ImageClassification.partition"),
        (lambda: ImageClassification(model="mlp"), r"ImageClassification.model"),
        (lambda: ImageClassification(eval_clients=0), r"ImageClassification.eval_clients"),
        (lambda: scenario(LGFedAvg(global_layers=("fc9",))), r"LGFedAvg.global_layers \['fc9'\]"),
        (
            lambda: scenario(LGFedAvg(global_layers=("layer_input", "layer_hidden1", "layer_out"))),
            r"at least one local layer",
        ),
        (
            lambda: scenario(NeuralFedRep(), task=tasks.LinearRepresentation()),
            r"Scenario.task must be a simfl.neural.ImageClassification",
        ),
    ],
)
def test_validation_names_the_field(make, match):
    with pytest.raises(ValueError, match=match):
        make()


# ------------------------------------------------------------------ the engine
POLICIES = [
    policies.WaitAll(fraction=0.25),
    policies.Deadline(1.0, fraction=0.3),
    policies.FastestK(k=4, overcommit=0.5),
    policies.AdaptiveDeadline(quantile=0.7, fraction=0.3),
    policies.SRPFL(n0=2, rounds_per_stage=2),
]


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.name)
@pytest.mark.parametrize("algorithm", ALGORITHMS, ids=lambda a: a.name)
def test_runs_under_every_synchronous_policy(algorithm, policy):
    res = run(scenario(algorithm, policy, rounds=4), progress=False, on_error="raise")
    assert res.ok and len(res.rounds) == 4
    acc = res.rounds["accuracy"].to_numpy()
    assert np.isfinite(acc).all() and ((acc >= 0) & (acc <= 1)).all()
    arrived = res.clients[res.clients["status"] == "arrived"]
    if algorithm.name != "Local":
        assert (arrived["bytes_up"] > 0).all()
    assert (arrived["work"] > 0).all()


@pytest.mark.parametrize("algorithm", [ALGORITHMS[1], ALGORITHMS[5], ALGORITHMS[6]], ids=str)
def test_lazy_equals_eager_with_deadline_and_dropouts(algorithm):
    sc = scenario(
        algorithm,
        policies.Deadline(1.2, fraction=0.4),
        rounds=6,
        dropout_rate=0.3,
        latency=0.05,
        bandwidth_up=2e5,
    )
    lazy = run(sc, progress=False)
    eager = run(sc, progress=False, lazy=False)
    pd.testing.assert_frame_equal(lazy.rounds, eager.rounds, check_exact=True)
    pd.testing.assert_frame_equal(lazy.clients, eager.clients, check_exact=True)
    assert (lazy.clients["status"] != "arrived").sum() >= 5


def test_same_seed_same_frames_and_seed_matters():
    sc = scenario(NeuralFedRep(head_epochs=2, body_epochs=1), rounds=3)
    a, b = run(sc, progress=False), run(sc, progress=False)
    pd.testing.assert_frame_equal(a.rounds, b.rounds, check_exact=True)
    pd.testing.assert_frame_equal(a.clients, b.clients, check_exact=True)
    c = run(dataclasses.replace(sc, seed=1), progress=False)
    assert not a.rounds["accuracy"].equals(c.rounds["accuracy"])


def test_a_clients_update_does_not_depend_on_its_batch():
    for alg in ALGORITHMS:
        data, state, streams = bound(alg)
        full = alg.local_updates(state, data, np.arange(12), 5, streams)
        part = alg.local_updates(state, data, np.array([3, 8]), 5, streams)
        for name, value in rows(part).items():
            np.testing.assert_allclose(rows(full)[name][[3, 8]], value, rtol=1e-5, atol=1e-6)


def test_only_aggregated_clients_keep_local_state():
    sc = scenario(NeuralFedRep(head_epochs=2, body_epochs=1), policies.Deadline(1.0, fraction=0.5))
    res = run(sc, progress=False)
    arrived = set(res.clients.loc[res.clients["status"] == "arrived", "device"])
    others = set(res.clients["device"]) - arrived
    assert others, "the scenario must discard some updates"
    assert set(res.state.local) == arrived


def test_lg_pretraining_runs_fedavg_first():
    alg = LGFedAvg(global_layers="code", pretrain_rounds=2, optimizer=SMALL_SGD)
    res = run(scenario(alg, rounds=4), progress=False)
    full = 4 * (64 * 32 + 32 + 32 * 16 + 16 + 16 * 10 + 10)
    glob = 4 * (32 * 16 + 16 + 16 * 10 + 10)
    assert res.clients.groupby("round")["bytes_up"].max().tolist() == [full, full, glob, glob]
    _, start, _ = bound(alg)
    assert not torch.equal(
        res.state.local_default["layer_input.weight"], start.local_default["layer_input.weight"]
    )
    lg_rounds = res.clients[(res.clients["round"] >= 2) & (res.clients["status"] == "arrived")]
    assert set(res.state.local) == set(lg_rounds["device"])  # pre-training kept no local state


@pytest.mark.parametrize(
    ("algorithm", "exchanged"),
    [
        (
            NeuralFedRep(head_epochs=1, body_epochs=1, optimizer=SMALL_SGD),
            ("conv1", "conv2", "fc1", "fc2"),
        ),
        (LGFedAvg(epochs=1, optimizer=SMALL_SGD), ("conv1", "conv2")),  # the paper's split
        (LGFedAvg(global_layers="code", epochs=1, optimizer=SMALL_SGD), ("fc2", "fc3")),
    ],
    ids=["FedRep", "LG-paper", "LG-code"],
)
def test_lenet5_on_mnist_through_the_engine(algorithm, exchanged):
    from simfl.neural import CNN, MNIST

    task = ImageClassification(MNIST(limit=600), Shards(2), CNN.lenet5())
    res = run(scenario(algorithm, rounds=2, n=10, task=task), progress=False, on_error="raise")
    net = CNN.lenet5().build((1, 28, 28), 10)
    assert res.ok and res.rounds["accuracy"].notna().all()
    assert (res.clients["bytes_up"] == 4 * net.n_params(exchanged)).all()


def test_neural_algorithms_run_asynchronously():
    """shared()/with_shared() round-trip the server parameters; FedBuff and FedAT train."""
    alg = NeuralFedAvg(epochs=1)
    data = TASK.build(10, Streams(0))
    state = alg.initial_state(data, Streams(0))
    back = alg.with_shared(state, alg.shared(state))
    for name, p in state.shared.items():
        assert torch.equal(back.shared[name], p)
    for policy in (policies.FedBuff(buffer_size=2, concurrency=4), policies.FedAT(tiers=2)):
        sc = Scenario(
            task=TASK,
            algorithm=alg,
            fleet=Fleet.homogeneous(10, compute=dists.Exponential(1.0)),
            policy=policy,
            rounds=6,
            seed=1,
        )
        res = run(sc, progress=False, on_error="raise")
        assert res.ok and len(res.rounds) == 6
        final = res.state.shared
        assert any(not torch.equal(final[n], state.shared[n]) for n in final)


@pytest.mark.parametrize(
    "policy",
    [policies.FedBuff(buffer_size=2, concurrency=4), policies.FedAT(tiers=2)],
    ids=["FedBuff", "FedAT"],
)
def test_heads_survive_asynchronous_and_tiered_mixing(policy):
    """FedRep's per-client heads are kept when the policy mixes only the shared body.

    Every client whose update was applied keeps the head it trained (the same rule as a
    synchronous aggregation), so the final state holds exactly the applied clients' heads.
    """
    alg = NeuralFedRep(head_epochs=1, body_epochs=1)
    sc = Scenario(
        task=TASK,
        algorithm=alg,
        fleet=Fleet.homogeneous(10, compute=dists.Exponential(1.0)),
        policy=policy,
        rounds=6,
        seed=2,
    )
    res = run(sc, progress=False, on_error="raise")
    applied = set(res.clients.loc[res.clients["status"] == "arrived", "device"].astype(int))
    assert applied and set(res.state.local) == applied
    init = alg.initial_state(TASK.build(10, Streams(2)), Streams(2)).local_default
    for c in applied:
        own = res.state.local[c]
        assert any(not torch.equal(own[n], init[n]) for n in init), c
