"""Neural models and cohort-batched training: shapes, costs, the init law, and batched training
against a plain per-client torch.optim.SGD loop on torch.nn modules (the issue's acceptance:
batched training equals training each client alone, to floating-point tolerance)."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from simfl import Streams  # noqa: E402
from simfl.neural import (  # noqa: E402
    CNN,
    MLP,
    MNIST,
    SGD,
    Digits,
    ImageClassification,
    LogNormalSizes,
    Phase,
)
from simfl.neural.train import epoch_order, evaluate_cohort, train_cohort  # noqa: E402

pytestmark = pytest.mark.usefixtures("torch_one_thread")


# ------------------------------------------------------------------ models
def test_fedrep_mlp_sizes_and_costs():
    net = MLP.fedrep().build((1, 28, 28), 10)
    assert net.layer_names == ("layer_input", "layer_hidden1", "layer_hidden2", "layer_out")
    assert net.head == ("layer_out",) and net.body == net.layer_names[:-1]
    assert net.n_params() == 550346 and net.n_params(net.head) == 650
    f = 784 * 512 + 512 * 256 + 256 * 64 + 64 * 10
    assert sum(net.macs.values()) == f
    assert net.train_macs(net.head) == f + 640  # forward, head weight gradient
    weights = 784 * 512 + 512 * 256 + 256 * 64
    assert net.train_macs(net.body) == f + weights + (512 * 256 + 256 * 64 + 640)
    assert net.train_macs(net.layer_names) == 3 * f - 784 * 512
    assert net.lg_global["code"] == ("layer_hidden2", "layer_out")


def test_lg_mlp_paper_split_is_15_79_percent():
    net = MLP.lg().build((1, 28, 28), 10)
    glob = net.lg_global["paper"]
    assert glob == ("layer_hidden2", "layer_hidden3", "layer_out")
    assert (net.n_params(glob), net.n_params()) == (99978, 633226)  # algorithms.md 2.1


@pytest.mark.parametrize(
    ("spec", "shape", "params"),
    [
        (CNN.lenet5(), (3, 32, 32), 64102),  # LG-FedAvg's LeNet-5, algorithms.md 2.1
        (
            CNN.fedrep(),
            (3, 32, 32),
            3 * 64 * 25 + 64 + 64 * 64 * 25 + 64 + 1600 * 120 + 120 + 120 * 64 + 64 + 64 * 10 + 10,
        ),
    ],
)
def test_cnn_sizes(spec, shape, params):
    net = spec.build(shape, 10)
    assert net.n_params() == params
    assert net.lg_global == {"paper": ("conv1", "conv2"), "code": ("fc2", "fc3")}
    assert net.macs["conv1"] == spec.channels[0] * 3 * 25 * 28 * 28
    x = torch.zeros(2, 3, *shape)
    p = net.init(torch.Generator().manual_seed(0))
    assert net.forward(p, x).shape == (2, 3, 10)
    with pytest.raises(ValueError, match=r"Scenario.task: the CNN needs images"):
        spec.build((1, 8, 8), 10)


def test_lenet5_global_convolutions_are_4_48_percent_on_cifar():
    net = CNN.lenet5().build((3, 32, 32), 10)
    glob = net.lg_global["paper"]
    assert (net.n_params(glob), net.n_params()) == (2872, 64102)  # algorithms.md 2.1


def test_init_follows_pytorch_default_bounds():
    net = MLP((64, 32)).build((1, 8, 8), 10)
    p = net.init(torch.Generator().manual_seed(3))
    for name, t in p.items():
        layer = next(layer for layer in net.layers if name.startswith(layer.name + "."))
        bound = 1 / math.sqrt(layer.fan_in)
        assert t.abs().max() <= bound
        assert t.abs().max() > 0.5 * bound
    q = net.init(torch.Generator().manual_seed(3))
    assert all(torch.equal(p[n], q[n]) for n in p)


def test_shared_and_stacked_layers_agree():
    net = MLP((16, 8)).build((1, 8, 8), 10)
    p = net.init(torch.Generator().manual_seed(0))
    x = torch.randn(3, 5, 1, 8, 8)
    stacked = {n: v.expand(3, *v.shape) for n, v in p.items()}
    mixed = {
        **p,
        "layer_out.weight": stacked["layer_out.weight"],
        "layer_out.bias": stacked["layer_out.bias"],
    }
    torch.testing.assert_close(net.forward(p, x), net.forward(stacked, x))
    torch.testing.assert_close(net.forward(p, x), net.forward(mixed, x))


def test_lenet5_classic_is_the_peers_lenet():
    """61,706 parameters, and the forward pass of torch.nn's LeNet-5 with conv1 padded by 2."""
    net = CNN.lenet5_classic().build((1, 28, 28), 10)
    assert net.n_params() == 61706
    assert net.macs["conv1"] == 6 * 25 * 28 * 28 and net.macs["fc1"] == 400 * 120
    p = net.init(torch.Generator().manual_seed(3))
    ref = nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10),
    )  # fmt: skip
    mods = [m for m in ref if isinstance(m, (nn.Conv2d, nn.Linear))]
    for layer, m in zip(net.layers, mods, strict=True):
        w = p[f"{layer.name}.weight"]
        m.weight.data = w.T.clone() if layer.kind == "linear" else w.clone()
        m.bias.data = p[f"{layer.name}.bias"].clone()
    x = torch.randn(2, 5, 1, 28, 28, generator=torch.Generator().manual_seed(4))
    stacked = {n: v.expand(2, *v.shape) for n, v in p.items()}
    with torch.no_grad():
        want = ref(x.reshape(10, 1, 28, 28)).reshape(2, 5, 10)
        torch.testing.assert_close(net.forward(p, x), want, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(net.forward(stacked, x), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("padding", "match"),
    [((-1, 0), r"CNN.padding\[i\]"), ((2,), r"CNN.padding must be a pair"), ([2, 0], "pair")],
)
def test_cnn_padding_is_checked(padding, match):
    with pytest.raises(ValueError, match=match):
        CNN(padding=padding)


# ------------------------------------------------------------------ the reference
def torch_module(net, params):
    """The same network as torch.nn modules, with the same parameters."""
    mods = []
    for layer in net.layers:
        w, b = params[f"{layer.name}.weight"], params[f"{layer.name}.bias"]
        if layer.kind == "linear":
            mods.append(nn.Flatten())
            m = nn.Linear(layer.fan_in, layer.out)
            m.weight.data = w.T.clone()
        else:
            m = nn.Conv2d(layer.fan_in, layer.out, layer.kernel, padding=layer.padding)
            m.weight.data = w.clone()
        m.bias.data = b.clone()
        mods.append(m)
        if layer.relu:
            mods.append(nn.ReLU())
        if layer.pool:
            mods.append(nn.MaxPool2d(2))
    return nn.Sequential(*mods), [m for m in mods if isinstance(m, (nn.Linear, nn.Conv2d))]


def train_alone(net, params, x, y, samples, phases, sgd, rng, prox=None):
    """One client, torch.optim.SGD (weight decay on weights only), shuffled minibatches."""
    model, layers = torch_module(net, params)
    named = dict(zip(net.layer_names, layers, strict=True))
    weights = [m.weight for m in layers]
    biases = [m.bias for m in layers]
    opt = torch.optim.SGD(
        [
            {"params": weights, "weight_decay": sgd.weight_decay},
            {"params": biases, "weight_decay": 0},
        ],
        lr=sgd.lr,
        momentum=sgd.momentum,
    )
    start = [t.detach().clone() for t in weights + biases]
    for phase in phases:
        for name, m in named.items():
            m.requires_grad_(name in phase.layers)
        for _ in range(phase.epochs):
            for row in epoch_order(rng, samples.size, sgd.batch_size):
                ids = samples[row[row >= 0]]
                opt.zero_grad()
                loss = nn.functional.cross_entropy(model(x[ids]), y[ids])
                if prox is not None:
                    loss = loss + prox / 2 * sum(
                        ((t - s) ** 2).sum() for t, s in zip(weights + biases, start, strict=True)
                    )
                loss.backward()
                opt.step()
    out = {}
    for name, m in named.items():
        out[f"{name}.weight"] = (
            m.weight.detach().T if isinstance(m, nn.Linear) else m.weight.detach()
        )
        out[f"{name}.bias"] = m.bias.detach()
    return out


def cohort(task, n_clients, clients):
    streams = Streams(5)
    data = task.build(n_clients, streams)
    net = data.network
    params = net.init(torch.Generator().manual_seed(1))
    return data, net, params, streams, np.asarray(clients)


CASES = {
    "mlp-fedrep": (
        ImageClassification(Digits(), LogNormalSizes(1.0), MLP((32, 16))),
        lambda net: (Phase(net.head, 3), Phase(net.body, 2)),
        SGD(lr=0.05, momentum=0.5, weight_decay=1e-3, batch_size=7),
        None,
    ),
    "mlp-all-prox": (
        ImageClassification(Digits(), LogNormalSizes(1.0), MLP((32, 16))),
        lambda net: (Phase(net.layer_names, 2),),
        SGD(lr=0.05, momentum=0.9, weight_decay=0.0, batch_size=5),
        0.3,
    ),
    "cnn-interleaved": (
        ImageClassification(MNIST(limit=1200), LogNormalSizes(1.0), CNN((3, 4), (12, 8))),
        lambda net: (Phase(net.head, 1), Phase(net.body, 1)) * 2,
        SGD(lr=0.05, batch_size=10),
        None,
    ),
    # W2's network and optimiser (conv1 padded, plain SGD); its convolutions run client by
    # client, so the same tolerance holds as for the batched matrix products
    "lenet5-classic-fedavg": (
        ImageClassification(MNIST(limit=1200), LogNormalSizes(1.0), CNN.lenet5_classic()),
        lambda net: (Phase(net.layer_names, 2),),
        SGD(lr=0.05, momentum=0.0, weight_decay=0.0, batch_size=10),
        None,
    ),
    "lenet5-classic-fedrep": (
        ImageClassification(MNIST(limit=1200), LogNormalSizes(1.0), CNN.lenet5_classic()),
        lambda net: (Phase(net.head, 2), Phase(net.body, 1)),
        SGD(lr=0.05, batch_size=10),
        None,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_batched_training_equals_each_client_trained_alone(case):
    task, make_phases, sgd, mu = CASES[case]
    data, net, params, streams, clients = cohort(task, 12, [0, 3, 4, 9])
    sizes = [data.train_parts[c].size for c in clients]
    assert len(set(sizes)) == len(sizes)  # heterogeneous sizes: padded and masked steps
    assert any(s % sgd.batch_size for s in sizes)  # partial last batches
    phases = make_phases(net)
    prox = None if mu is None else (mu, params)
    rngs = [streams.generator("t", int(c)) for c in clients]
    got, loss = train_cohort(
        net, params, data.x_train, data.y_train, data.train_index(clients), phases, sgd, rngs, prox
    )
    trained = net.params_of({layer for p in phases for layer in p.layers})
    for row, c in enumerate(clients):
        alone = train_alone(
            net,
            params,
            data.x_train,
            data.y_train,
            data.train_parts[c],
            phases,
            sgd,
            streams.generator("t", int(c)),
            mu,
        )
        for name in trained:
            torch.testing.assert_close(got[name][row], alone[name], rtol=1e-4, atol=2e-5)
        assert not torch.equal(got[trained[0]][row], params[trained[0]])
    assert np.isfinite(loss).all()
    # a cohort of one is the same computation as the batch, to rounding
    single, _ = train_cohort(
        net,
        params,
        data.x_train,
        data.y_train,
        data.train_index(clients[2:3]),
        phases,
        sgd,
        [streams.generator("t", int(clients[2]))],
        prox,
    )
    for name in trained:
        torch.testing.assert_close(single[name][0], got[name][2], rtol=1e-5, atol=1e-6)


@pytest.fixture
def computed(monkeypatch):
    """The number of clients each training step computes (the rows of ``_Cohort.loss``)."""
    from simfl.neural import train

    rows = []
    loss = train._Cohort.loss

    def counted(self, params, idx, *args):
        rows.append(idx.shape[0])
        return loss(self, params, idx, *args)

    monkeypatch.setattr(train._Cohort, "loss", counted)
    return rows


def train_sitting_out(
    monkeypatch, sit_out, data, net, params, streams, clients, phases, sgd, prox=None, limit=None
):
    """``train_cohort`` of ``clients`` with ``train.SIT_OUT = sit_out``."""
    from simfl.neural import train

    monkeypatch.setattr(train, "SIT_OUT", sit_out)
    clients = np.asarray(clients)
    return train_cohort(
        net,
        params,
        data.x_train,
        data.y_train,
        data.train_index(clients),
        phases,
        sgd,
        [streams.generator("t", int(c)) for c in clients],
        prox,
        None if limit is None else np.asarray(limit, dtype=float),
    )


@pytest.mark.parametrize("limit", [None, (5, 9, 2, 7)])
@pytest.mark.parametrize("case", list(CASES))
def test_clients_sitting_a_step_out_is_masking_them(case, limit, monkeypatch, computed):
    """Clients without a sample in a step sit it out (``train.SIT_OUT``) rather than being
    computed and masked. With the cohort in order of steps per epoch, most first, the clients
    that step are a leading block and nothing moves: the same numbers bit for bit. In any
    other order the cohort is put in that order first, which moves clients in memory; MKL's
    small batched products round differently at another alignment (as a cohort of one does,
    above), so there: equal to the same rounding tolerance as that check."""
    task, make_phases, sgd, mu = CASES[case]
    data, net, params, streams, _ = cohort(task, 12, [])
    sizes = {c: data.train_parts[c].size for c in (0, 3, 4, 9)}
    phases = make_phases(net)
    prox = None if mu is None else (mu, params)

    def run(clients, sit_out):
        return train_sitting_out(
            monkeypatch, sit_out, data, net, params, streams, clients, phases, sgd, prox, limit
        )

    in_order = sorted(sizes, key=lambda c: -sizes[c])
    masked, masked_loss = run(in_order, False)
    assert set(computed) == {len(sizes)}
    computed.clear()
    got, loss = run(in_order, True)
    assert min(computed) < len(sizes)  # some steps left clients out
    for name in params:
        assert torch.equal(got[name], masked[name]), name
    np.testing.assert_array_equal(loss, masked_loss)

    shuffled = [0, 3, 4, 9]  # not in that order: reordered inside, and back
    assert shuffled != in_order
    masked, masked_loss = run(shuffled, False)
    got, loss = run(shuffled, True)
    for name in params:
        torch.testing.assert_close(got[name], masked[name], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(loss, masked_loss, rtol=1e-5)


def test_sitting_out_computes_only_the_clients_that_step(monkeypatch):
    """The work sitting out saves, exactly: the products (torch's flop counter) of a cohort
    whose clients sit out are those of its clients' own steps; masking computes every client
    in every step, as many as the longest client's."""
    from torch.utils.flop_counter import FlopCounterMode

    task, make_phases, sgd, mu = CASES["mlp-all-prox"]
    data, net, params, streams, clients = cohort(task, 12, [0, 3, 4, 9])
    phases = make_phases(net)
    steps = np.array([-(-data.train_parts[c].size // sgd.batch_size) for c in clients])
    assert len(set(steps)) == len(steps)

    def products(sit_out):
        counter = FlopCounterMode(display=False)
        with counter:
            train_sitting_out(
                monkeypatch,
                sit_out,
                data,
                net,
                params,
                streams,
                clients,
                phases,
                sgd,
                (mu, params),
            )
        return counter.get_total_flops()

    masked = products(False)
    # every client-step is a whole minibatch (padding masked out of the loss) of one network:
    # the same products each, so the counts are in the ratio of the client-steps
    assert products(True) * len(steps) * steps.max() == masked * steps.sum()


def test_no_client_sits_out_a_step_through_a_shared_layer(monkeypatch, computed):
    """A shared layer above the trained ones (here the body learns under a shared, frozen
    head) is one product over all the clients' rows, whose rounding may follow their number:
    such steps compute every client (masked), so the numbers stay the masked ones."""
    task, _, sgd, _ = CASES["mlp-fedrep"]
    data, net, params, streams, _ = cohort(task, 12, [])
    clients = sorted((0, 3, 4, 9), key=lambda c: -data.train_parts[c].size)
    assert params["layer_out.weight"].dim() == 2  # shared
    phases = (Phase(net.body, 2),)
    args = (data, net, params, streams, clients, phases, sgd)
    masked, masked_loss = train_sitting_out(monkeypatch, False, *args)
    got, loss = train_sitting_out(monkeypatch, True, *args)
    assert set(computed) == {len(clients)}
    for name in params:
        assert torch.equal(got[name], masked[name]), name
    np.testing.assert_array_equal(loss, masked_loss)


def test_frozen_layers_do_not_move_and_loss_is_the_mean_minibatch_loss():
    data, net, params, streams, clients = cohort(
        ImageClassification(Digits(), LogNormalSizes(0.0), MLP((16, 8))), 10, [1, 2]
    )
    sgd = SGD(lr=0.1, batch_size=1000)  # one full batch per epoch
    got, loss = train_cohort(
        net,
        params,
        data.x_train,
        data.y_train,
        data.train_index(clients),
        (Phase(net.head, 1),),
        sgd,
        [streams.generator("t", int(c)) for c in clients],
    )
    for name in net.params_of(net.body):
        assert got[name] is params[name] or torch.equal(got[name], params[name])
    for row, c in enumerate(clients):
        ids = data.train_parts[c]
        logits = net.forward(params, data.x_train[ids][None])[0]
        expected = nn.functional.cross_entropy(logits, data.y_train[ids])
        assert loss[row] == pytest.approx(float(expected), rel=1e-5)


def test_evaluate_cohort_by_hand():
    data, net, params, _, clients = cohort(
        ImageClassification(Digits(), LogNormalSizes(1.0), MLP((16, 8))), 10, [0, 5, 6]
    )
    index = data.test_index(clients)
    hits, losses = evaluate_cohort(net, params, data.x_test, data.y_test, index)
    for row, c in enumerate(clients):
        ids = data.test_parts[c]
        logits = net.forward(params, data.x_test[ids][None])[0]
        assert hits[row] == int((logits.argmax(1) == data.y_test[ids]).sum())
        ce = nn.functional.cross_entropy(logits, data.y_test[ids], reduction="sum")
        assert losses[row] == pytest.approx(float(ce), rel=1e-5)


def test_epoch_order_is_a_padded_permutation():
    order = epoch_order(np.random.default_rng(0), 23, 10)
    assert order.shape == (3, 10)
    assert sorted(order[order >= 0].tolist()) == list(range(23))
    assert (order[2, 3:] == -1).all()
    assert epoch_order(np.random.default_rng(0), 0, 10).shape == (0, 10)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"lr": 0.0}, r"SGD.lr must be in \(0, inf\)"),
        ({"momentum": 1.0}, r"SGD.momentum must be in \[0, 1\)"),
        ({"weight_decay": -1.0}, r"SGD.weight_decay"),
        ({"batch_size": 0}, r"SGD.batch_size must be an integer in \[1, inf\]"),
    ],
)
def test_sgd_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SGD(**kwargs)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: MLP((5,)), r"MLP.hidden must be a tuple of >= 2"),
        (lambda: MLP((5, 0)), r"MLP.hidden\[i\] must be an integer in \[1, inf\]"),
        (lambda: CNN((6,), (1, 2)), r"CNN.channels must be a pair"),
        (lambda: CNN(kernel=0), r"CNN.kernel"),
    ],
)
def test_model_validation(make, match):
    with pytest.raises(ValueError, match=match):
        make()
