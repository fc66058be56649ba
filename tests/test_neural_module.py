"""Any torch.nn.Module as a model: the generic trainer's two paths, buffers, FLOPs, the paper
networks as modules, FedBN, determinism on every executor, and the errors raised before a run."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

import simfl  # noqa: E402
from simfl import Fleet, Scenario, Streams, dists, policies, sweep  # noqa: E402
from simfl.neural import (  # noqa: E402
    CNN,
    MLP,
    SGD,
    Digits,
    FedAvgFT,
    FedPer,
    FedProx,
    ImageClassification,
    LGFedAvg,
    Model,
    ModelCheckError,
    ModuleNet,
    NeuralFedAvg,
    NeuralFedRep,
    NeuralLocalOnly,
    Objective,
    Phase,
    Shards,
)
from simfl.neural.base import GMAC  # noqa: E402
from simfl.neural.paper import to_module_params  # noqa: E402
from simfl.neural.partition import Partition  # noqa: E402
from simfl.neural.train import train_cohort  # noqa: E402
from simfl.sweeps.executors import Inline, Processes  # noqa: E402

pytestmark = pytest.mark.usefixtures("torch_one_thread")


class TinyBN(nn.Module):
    """A residual block with BatchNorm on 8x8 digits (no random layers)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x)
        return self.fc((torch.relu(self.bn(h)) + h).flatten(1))


class TinyDrop(TinyBN):
    """:class:`TinyBN` with dropout before the head."""

    def __init__(self) -> None:
        super().__init__()
        self.drop = nn.Dropout(0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x)
        return self.fc(self.drop((torch.relu(self.bn(h)) + h).flatten(1)))


class Branchy(TinyBN):
    """Data-dependent control flow: vmap cannot take it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = super().forward(x)
        if float(out.detach().sum()) > 1e30:
            return out * 0
        return out


def scenario(model: object, algorithm: object = None, rounds: int = 2, seed: int = 0, **kw):
    task = ImageClassification(Digits(), Shards(2), model, **kw)
    return Scenario(
        task=task,
        algorithm=algorithm or NeuralFedAvg(epochs=1),
        fleet=Fleet.homogeneous(8, compute=dists.Exponential(mean=1.0)),
        policy=policies.WaitAll(fraction=0.5),
        rounds=rounds,
        seed=seed,
    )


def digits_cohort(clients: int = 3) -> tuple[object, np.ndarray]:
    """Digits bound to a fleet of ``clients`` (the task's data) and their index."""
    data = ImageClassification(Digits(), Shards(2)).build(clients, Streams(0))
    return data, data.train_index(np.arange(clients))


# ------------------------------------------------------------------ work from the module
@pytest.mark.parametrize(
    ("spec", "shape"),
    [(MLP.fedrep(), (1, 28, 28)), (CNN.lenet5_classic(), (1, 28, 28)), (CNN.fedrep(), (3, 32, 32))],
)
def test_flop_counter_on_the_paper_modules_equals_the_paper_networks_count(spec, shape):
    # exact: the paper networks' formula (forward, weight gradients, input gradients above the
    # lowest trained layer) is what autograd computes, and FlopCounterMode counts 2 per MAC
    net = spec.build(shape, 10)
    x, y = torch.randn(2, *shape), torch.tensor([1, 2])
    module = ModuleNet(Model(spec.factory(shape, 10)), Objective(), (x, y), torch.device("cpu"))
    for trained in (net.layer_names, net.head, net.body, net.layer_names[2:]):
        assert module.train_macs(trained) == net.train_macs(trained)


def test_a_jobs_work_is_the_modules_flops_per_sample():
    sc = scenario(Model(TinyBN))
    data = sc.task.build(8, Streams(0))
    state = sc.algorithm.initial_state(data, Streams(0))
    clients = np.arange(4)
    per_sample = data.network.train_macs(data.network.layer_names)
    # conv forward 4*9*64, fc forward 256*10; weight grads the same; the input gradient of fc
    assert per_sample == 2 * (4 * 9 * 64 + 256 * 10) + 256 * 10
    expected = state.sizes[clients] * per_sample / GMAC
    np.testing.assert_array_equal(sc.algorithm.work(state, clients), expected)


# ------------------------------------------------------------------ the paper networks
@pytest.mark.parametrize(
    ("spec", "phases"),
    [
        (MLP((32, 16)), lambda net: (Phase(net.layer_names, 2),)),
        (MLP((32, 16)), lambda net: (Phase(net.head, 1), Phase(net.body, 1))),
        (CNN((4, 6), (16, 12), kernel=3, padding=(1, 1)), lambda net: (Phase(net.layer_names, 1),)),
    ],
)
def test_a_paper_network_as_a_module_trains_as_its_fast_path(spec, phases):
    # the same initial weights, batches and SGD: equal to float32 rounding (the fast path's
    # batched products and the module's per-client ones sum in other orders), 1e-5 relative
    data, index = digits_cohort()
    net = spec.build((1, 8, 8), 10)
    x, y = data.x_train, data.y_train
    module = ModuleNet(
        Model(spec.factory((1, 8, 8), 10)), Objective(), (x[:2], y[:2]), torch.device("cpu")
    )
    start = net.init(torch.Generator().manual_seed(3))
    sgd = SGD(lr=0.05, momentum=0.5, weight_decay=1e-3, batch_size=7)

    def rngs():
        return [np.random.default_rng(i) for i in range(index.shape[0])]

    fast, fast_loss = train_cohort(net, start, x, y, index, phases(net), sgd, rngs())
    generic, loss = train_cohort(
        module, to_module_params(net, start), x, y, index, phases(net), sgd, rngs()
    )
    np.testing.assert_allclose(loss, fast_loss, rtol=1e-5)
    for name, value in to_module_params(net, fast).items():
        np.testing.assert_allclose(generic[name].numpy(), value.numpy(), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------ the two trainer paths
@pytest.mark.parametrize(
    "algorithm",
    [
        NeuralFedAvg(epochs=1),
        NeuralFedRep(head_epochs=1, body_epochs=1),
        LGFedAvg(global_layers=("conv", "bn")),
        FedPer(epochs=1, finetune_epochs=1),
    ],
    ids=lambda a: a.name,
)
def test_the_loop_and_the_cohort_paths_agree(algorithm):
    # the same batches per client; vmap batches the clients' products, so the numbers agree to
    # float32 rounding over two rounds of training (1e-4 relative on metrics in [0, 3])
    loop = simfl.run(scenario(Model(TinyBN, trainer="loop"), algorithm), progress=False)
    cohort = simfl.run(scenario(Model(TinyBN, trainer="cohort"), algorithm), progress=False)
    assert loop.meta["training"]["trainer"] == "loop"
    assert cohort.meta["training"]["trainer"] == "cohort"
    for m in ("accuracy", "loss"):
        np.testing.assert_allclose(cohort.rounds[m], loop.rounds[m], rtol=1e-4, atol=1e-6)
    pd.testing.assert_frame_equal(loop.clients, cohort.clients)  # the clock is the same


def test_a_module_vmap_cannot_take_falls_back_to_the_loop_and_says_why():
    res = simfl.run(scenario(Model(Branchy, trainer="cohort")), progress=False)
    training = res.meta["training"]
    assert (
        training["trainer"] == "loop" and "vmap cannot take Branchy" in training["trainer_reason"]
    )
    assert res.meta["status"] == "ok"


def test_the_cpu_default_is_the_loop():
    res = simfl.run(scenario(TinyBN), progress=False)
    assert res.meta["training"] == {
        "model": "TinyBN",
        "parameters": 36 + 4 + 4 + 4 + 2560 + 10,
        "buffers": 3,
        "trainer": "loop",
        "trainer_reason": "auto: the loop on a CPU",
    }


# ------------------------------------------------------------------ buffers and FedBN
def test_buffers_are_averaged_by_size_and_integer_ones_stay_integer():
    sc = scenario(Model(TinyBN))
    data = sc.task.build(8, Streams(0))
    alg = sc.algorithm
    state = alg.initial_state(data, Streams(0))
    assert {"bn.running_mean", "bn.running_var", "bn.num_batches_tracked"} <= set(state.shared)
    clients = np.array([0, 3, 5])
    ups = alg.local_updates(state, data, clients, 0, Streams(0))
    steps = np.ceil(state.sizes[clients] / alg.optimizer.batch_size)
    np.testing.assert_array_equal(ups.params["bn.num_batches_tracked"], steps)
    new = alg.aggregate(state, ups, None)
    w = state.sizes[clients] / state.sizes[clients].sum()
    assert new.shared["bn.num_batches_tracked"].dtype == torch.int64
    assert int(new.shared["bn.num_batches_tracked"]) == int(np.rint(w @ steps))
    mean = np.tensordot(w, ups.params["bn.running_mean"].astype(np.float64), axes=1)
    np.testing.assert_array_equal(new.shared["bn.running_mean"].numpy(), mean.astype(np.float32))
    # the running statistics moved from their initial values: the forward passes updated them
    assert not np.allclose(ups.params["bn.running_var"], 1.0)


def test_fedbn_keeps_the_norm_layers_on_each_client_and_sends_the_rest():
    shared = scenario(Model(TinyBN), rounds=1)
    fedbn = scenario(Model(TinyBN, norm="local"), rounds=1)
    data = fedbn.task.build(8, Streams(0))
    state = fedbn.algorithm.initial_state(data, Streams(0))
    bn = {"bn.weight", "bn.bias", "bn.running_mean", "bn.running_var", "bn.num_batches_tracked"}
    assert set(state.local_default) == bn and not bn & set(state.shared)
    a, b = simfl.run(shared, progress=False), simfl.run(fedbn, progress=False)
    bn_bytes = 4 * (4 + 4 + 4 + 4) + 8
    sent = b.rounds["bytes_up"].iloc[0] / b.rounds["n_arrived"].iloc[0]
    assert a.rounds["bytes_up"].iloc[0] / a.rounds["n_arrived"].iloc[0] - sent == bn_bytes
    clients = np.array([1, 2])
    ups = fedbn.algorithm.local_updates(state, data, clients, 0, Streams(0))
    after = fedbn.algorithm.aggregate(state, ups, None)
    own = [after.local[int(c)]["bn.running_mean"] for c in clients]
    assert not torch.equal(own[0], own[1])  # each client its own statistics


# ------------------------------------------------------------------ determinism
def test_the_same_seed_gives_the_same_frames_on_every_executor(tmp_path):
    scenarios = [scenario(Model(TinyDrop), rounds=2, seed=s) for s in (0, 1)]
    direct = [simfl.run(sc, progress=False) for sc in scenarios]
    inline = sweep(scenarios, store=tmp_path / "i", executor=Inline(), progress=False)
    with Processes(2, threads=1) as pool:
        pooled = sweep(scenarios, store=tmp_path / "p", executor=pool, progress=False)
    assert not pooled.failed and len(pooled.ran) == 2
    for res, run_id in zip(direct, inline.run_ids, strict=True):
        for out in (inline.store.results(run_id), pooled.store.results(run_id)):
            pd.testing.assert_frame_equal(res.rounds, out.rounds, check_exact=True)
            pd.testing.assert_frame_equal(res.clients, out.clients, check_exact=True)
    # and dropout draws do depend on the seed
    assert not direct[0].rounds["loss"].equals(direct[1].rounds["loss"])


def test_dropout_draws_from_keyed_streams_not_the_process_generator():
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    a = simfl.run(scenario(Model(TinyDrop)), progress=False)
    assert torch.equal(torch.random.get_rng_state(), before)  # the process's stream untouched
    torch.manual_seed(999)
    b = simfl.run(scenario(Model(TinyDrop)), progress=False)
    pd.testing.assert_frame_equal(a.rounds, b.rounds, check_exact=True)


class FunctionalDrop(TinyBN):
    """Dropout called as a function in ``forward``: no ``nn.Dropout`` module announces it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x)
        out = (torch.relu(self.bn(h)) + h).flatten(1)
        return self.fc(nn.functional.dropout(out, 0.2, self.training))


class RecurrentDrop(nn.Module):
    """A two-layer GRU with dropout between its layers, over the 8 rows of a digit."""

    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(8, 8, num_layers=2, dropout=0.3, batch_first=True)
        self.fc = nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.gru(x.flatten(1, 2))[0][:, -1])


@pytest.mark.parametrize("factory", [FunctionalDrop, RecurrentDrop])
def test_randomness_no_dropout_module_announces_draws_from_keyed_streams(factory):
    sc = scenario(factory, rounds=1)
    net = sc.task.build(8, Streams(0)).network
    assert net.random and not ModuleNet(Model(TinyBN), Objective(), net._sample, net.device).random
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    a = simfl.run(sc, progress=False)
    assert torch.equal(torch.random.get_rng_state(), before)  # the process's stream untouched
    torch.manual_seed(999)
    b = simfl.run(sc, progress=False)
    pd.testing.assert_frame_equal(a.rounds, b.rounds, check_exact=True)


# ------------------------------------------------------------------ errors before the run
class WrongShape(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(28 * 28, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.flatten(1))


class _Empty(Partition):
    """Client 2 gets no sample."""

    def split(self, labels, n_clients, n_classes, rng, groups=None, *, kind="classification"):
        parts = np.array_split(np.arange(labels.size), n_clients - 1)
        return [*parts[:2], np.array([], dtype=np.int64), *parts[2:]]

    def split_test(self, train_parts, *args, **kwargs):
        return [p[:3] for p in train_parts]


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: scenario(WrongShape), r"forward pass of WrongShape fails on samples of the data"),
        (
            lambda: scenario(TinyBN, objective=Objective(loss=lambda o, y: (o - 1).mean(1))),
            r"Objective.loss must return a scalar tensor",
        ),
        (
            lambda: scenario(Model(TinyBN, head=("classifier*",)), NeuralFedRep()),
            r"Model.head pattern 'classifier\*' matches no layer of TinyBN; its layers are "
            r"\['conv', 'bn', 'fc'\]",
        ),
        (
            lambda: scenario(TinyBN, LGFedAvg(global_layers=("conv*", "nope"))),
            r"LGFedAvg.global_layers pattern 'nope' matches no layer",
        ),
        (
            lambda: Scenario(
                task=ImageClassification(Digits(), _Empty(), TinyBN),
                algorithm=NeuralFedAvg(),
                fleet=Fleet.homogeneous(6, compute=dists.Exponential(1.0)),
                policy=policies.WaitAll(),
                rounds=1,
            ),
            r"clients \[2\] have no training samples",
        ),
    ],
)
def test_bad_models_and_objectives_are_refused_before_the_run(make, match):
    with pytest.raises(ValueError, match=match):
        simfl.run(make(), progress=False, on_error="raise")


def test_a_module_instance_is_refused_naming_the_field():
    with pytest.raises(ValueError, match=r"ImageClassification.model must be a factory"):
        ImageClassification(Digits(), Shards(2), TinyBN())
    with pytest.raises(ValueError, match=r"Model.norm must be one of"):
        Model(TinyBN, norm="batch")
    with pytest.raises(ValueError, match=r"Model.trainer must be one of"):
        Model(TinyBN, trainer="gpu")


def test_a_model_too_large_for_memory_is_refused_in_cohort_mode(monkeypatch):
    import simfl.neural.module as module

    monkeypatch.setattr(module, "memory_budget", lambda device: 1000)
    net = ModuleNet(
        Model(TinyBN),
        Objective(),
        (torch.zeros(2, 1, 8, 8), torch.tensor([0, 1])),
        torch.device("cpu"),
    )
    with pytest.raises(ModelCheckError, match=r"one client's training of TinyBN needs about"):
        net.cohort_chunk(batch_size=10)


def test_a_nan_loss_mid_run_is_recorded_as_diverged_with_the_rows_kept():
    sc = scenario(TinyBN, NeuralFedAvg(epochs=1, optimizer=SGD(lr=1e12)), rounds=4)
    res = simfl.run(sc, progress=False)
    assert res.meta["status"] == "diverged"
    assert len(res.rounds) >= 1 and res.rounds["status"].iloc[-1] == "diverged"


def flip(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Flip each image left-right with probability 1/2 (drawn from ``generator``)."""
    coin = torch.rand(x.shape[0], generator=generator, device=x.device) < 0.5
    return torch.where(coin[:, None, None, None], x.flip(-1), x)


def test_augmentation_draws_from_the_clients_keyed_streams():
    seen: list[torch.Tensor] = []

    def spy(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        out = flip(x, generator)
        seen.append(out.sum())
        return out

    plain = simfl.run(scenario(TinyBN), progress=False)
    a = simfl.run(scenario(TinyBN, augment=flip), progress=False)
    b = simfl.run(scenario(TinyBN, augment=flip), progress=False)
    pd.testing.assert_frame_equal(a.rounds, b.rounds, check_exact=True)
    assert not a.rounds["loss"].equals(plain.rounds["loss"])
    simfl.run(scenario(TinyBN, augment=spy, rounds=1), progress=False)
    assert len(seen) > 0  # every training step of every client went through it
    # a paper network with augmentation trains its module twin
    res = simfl.run(scenario(MLP((16, 8)), augment=flip, rounds=1), progress=False)
    assert res.meta["training"]["model"] == "PaperModule"


def test_the_cohort_path_in_memory_sized_pieces_equals_it_whole(monkeypatch):
    # clients train independently: pieces of 2 give the whole cohort's numbers to float32
    # rounding (vmap over 2 or 4 clients may block the products differently)
    whole = simfl.run(scenario(Model(TinyBN, trainer="cohort")), progress=False)
    monkeypatch.setattr(ModuleNet, "cohort_chunk", lambda self, batch_size: 2)
    pieces = simfl.run(scenario(Model(TinyBN, trainer="cohort")), progress=False)
    np.testing.assert_allclose(pieces.rounds["loss"], whole.rounds["loss"], rtol=1e-5)


# ------------------------------------------------------------------ every algorithm, every family
PHASED = [
    NeuralFedAvg(epochs=1),
    FedProx(epochs=1, mu=0.1),
    FedAvgFT(epochs=1, finetune_epochs=1),
    NeuralLocalOnly(epochs=1),
    FedPer(epochs=1),
    NeuralFedRep(head_epochs=1, body_epochs=1),
    LGFedAvg(global_layers=("conv", "bn")),
]
FAMILIES = {
    "wait-all": policies.WaitAll(fraction=0.5),
    "deadline-partial": policies.Deadline(1.0, fraction=0.5, partial=True),
    "fedbuff": policies.FedBuff(buffer_size=2, concurrency=4),
    "fedat": policies.FedAT(tiers=2),
}


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("algorithm", PHASED, ids=lambda a: a.name)
def test_every_phased_algorithm_trains_a_module_under_every_policy_family(algorithm, family):
    sc = Scenario(
        task=ImageClassification(Digits(), Shards(2), TinyDrop),
        algorithm=algorithm,
        fleet=Fleet.homogeneous(8, compute=dists.Exponential(mean=1.0)),
        policy=FAMILIES[family],
        rounds=2,
        seed=1,
    )
    res = simfl.run(sc, progress=False)
    assert res.meta["status"] == "ok", res.meta.get("error")
    assert np.isfinite(res.rounds["accuracy"].iloc[-1]) and len(res.rounds) == 2
    if family == "deadline-partial":  # clients cut short send the prefix of their steps
        assert res.clients["status"].isin(["arrived", "late", "dropped"]).all()


def test_regression_on_your_own_tensors_with_natural_clients():
    from simfl.neural import Supervised, Tensors

    rng = np.random.default_rng(0)
    x = rng.normal(size=(240, 3)).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5]) + 0.01 * rng.normal(size=240)).astype(np.float32)
    clients = np.repeat(np.arange(6), 40)
    data = Tensors(x, y, clients_train=clients, kind="regression")
    task = Supervised(
        data, model=lambda: nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 1))
    )
    assert task.metrics == ("mse", "mae", "loss") and task.goals["mse"] == "min"
    sc = Scenario(
        task=task,
        algorithm=NeuralFedAvg(epochs=2, optimizer=SGD(lr=0.05, momentum=0.0, batch_size=8)),
        fleet=Fleet.homogeneous(6, compute=dists.Exponential(mean=1.0)),
        policy=policies.WaitAll(),
        rounds=8,
        seed=0,
    )
    res = simfl.run(sc, progress=False)
    # the linear teacher's outputs have variance 1 + 4 + 0.25: a model that learned is far below
    assert res.meta["initial_metrics"]["mse"] > 1.0 > res.rounds["mse"].iloc[-1]


class Tied(nn.Module):
    """An embedding whose output layer shares its weight (one tensor under two names)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 6)
        self.out = nn.Linear(6, 10, bias=False)
        self.out.weight = self.embed.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.embed(x))


def test_tied_weights_train_as_one_tensor():
    net = ModuleNet(
        Model(Tied), Objective(), (torch.tensor([1, 2]), torch.tensor([3, 4])), torch.device("cpu")
    )
    params = net.init(torch.Generator().manual_seed(0))
    assert net.param_names == ("embed.weight",)
    params["embed.weight"] = torch.zeros(10, 6)
    out = net.forward({n: p[None] for n, p in params.items()}, torch.tensor([[1, 2]]))
    assert torch.equal(out, torch.zeros(1, 2, 10))  # the output layer used the passed weight


def test_a_server_optimizer_steps_a_modules_parameters_and_averages_its_buffers():
    from simfl.neural import FedAdam

    sc = scenario(Model(TinyBN), NeuralFedAvg(epochs=1, server_optimizer=FedAdam(lr=0.01)))
    data = sc.task.build(8, Streams(0))
    alg = sc.algorithm
    state = alg.initial_state(data, Streams(0))
    clients = np.array([0, 3, 5])
    ups = alg.local_updates(state, data, clients, 0, Streams(0))
    new = alg.aggregate(state, ups, None)
    assert not any("running" in k or "num_batches" in k for k in new.server_state)
    assert new.shared["bn.num_batches_tracked"].dtype == torch.int64
    w = state.sizes[clients] / state.sizes[clients].sum()
    mean = np.tensordot(w, ups.params["bn.running_var"].astype(np.float64), axes=1)
    np.testing.assert_array_equal(new.shared["bn.running_var"].numpy(), mean.astype(np.float32))
    # Adam's first step moves every parameter by about lr (its update is m / sqrt(v) ~ sign)
    step = (new.shared["fc.weight"] - state.shared["fc.weight"]).abs().max()
    assert 0.005 < float(step) <= 0.01 + 1e-6
    res = simfl.run(sc, progress=False)
    assert res.meta["status"] == "ok"
