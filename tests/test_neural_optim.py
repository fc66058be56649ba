"""Client optimisers (SGD, Adam, AdamW; optimiser state reset or kept) and server optimisers
(FedAvgM, FedAdam, FedYogi, FedAdagrad): torch.optim step for step, masking, the kept state,
two rounds of server steps by hand, validation, which algorithms take which optimiser."""

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from simfl import Fleet, Scenario, Streams, dists, policies, run  # noqa: E402
from simfl.neural import (  # noqa: E402
    APFL,
    L2GD,
    MLP,
    SCAFFOLD,
    SGD,
    Adam,
    AdamW,
    Digits,
    Ditto,
    FedAdagrad,
    FedAdam,
    FedAvgM,
    FedPer,
    FedProx,
    FedYogi,
    ImageClassification,
    LGFedAvg,
    LogNormalSizes,
    NeuralFedAvg,
    NeuralFedNova,
    NeuralFedRep,
    NeuralLocalOnly,
    PerFedAvg,
    PFedMe,
    Phase,
    Shards,
)
from simfl.neural import train as train_module  # noqa: E402
from simfl.neural.base import OPTIM  # noqa: E402
from simfl.neural.server import server_step  # noqa: E402
from simfl.neural.train import train_cohort  # noqa: E402
from simfl.sweeps.fingerprint import canonical, fingerprint  # noqa: E402
from tests.helpers import arrived  # noqa: E402

pytestmark = pytest.mark.usefixtures("torch_one_thread")

TASK = ImageClassification(Digits(), LogNormalSizes(1.0), MLP((16, 8)))
ADAMS = {
    "adam": Adam(lr=0.01, batch_size=7),
    "adam-l2": Adam(lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=1e-2, batch_size=7),
    "adamw": AdamW(lr=0.01, weight_decay=0.1, batch_size=7),
}


def bound(algorithm, n=8, seed=0, task=TASK):
    streams = Streams(seed)
    data = task.build(n, streams)
    return data, algorithm.initial_state(data, streams), streams


# ------------------------------------------------------------------ Adam is torch.optim's
class Recorder:
    """Wraps an optimiser's step: records what each call got (grads before it changes them)."""

    def __init__(self, opt):
        self.opt, self.calls = opt, []

    def __getattr__(self, name):
        return getattr(self.opt, name)

    def step(self, params, state, names, grads, active, prox=None):
        self.calls.append(([*names], [g.clone() for g in grads], active.clone()))
        self.opt.step(params, state, names, grads, active, prox)


def torch_optimizer(opt, weights, biases):
    """torch.optim's Adam or AdamW with weight decay on the weights only (single tensor)."""
    make = torch.optim.AdamW if isinstance(opt, AdamW) else torch.optim.Adam
    return make(
        [{"params": weights, "weight_decay": opt.weight_decay}, {"params": biases}],
        lr=opt.lr,
        betas=opt.betas,
        eps=opt.eps,
        weight_decay=0.0,
        foreach=False,
    )


@pytest.mark.parametrize("case", list(ADAMS))
def test_adam_steps_are_torch_optims_on_each_client(case):
    """The trainer's own steps (FedRep's head then body phase, clients of unequal sizes that
    sit steps out, so masked steps) replayed per client through torch.optim.Adam/AdamW with
    the same gradients give the same parameters. The operations are torch's single-tensor
    Adam's one for one; the per-client bias corrections are float64 tensors (torch.pow)
    where torch uses Python floats, so a step size can differ in its last float32 bit:
    over these ~60 steps that stays below 1e-6 on parameters of size ~0.5 (measured:
    identical here)."""
    data, net = TASK.build(12, Streams(5)), None
    net = data.network
    params = net.init(torch.Generator().manual_seed(1))
    clients = np.array([0, 3, 4, 9])
    opt = Recorder(ADAMS[case])
    phases = (Phase(net.head, 2), Phase(net.body, 1))
    rngs = [Streams(5).generator("t", int(c)) for c in clients]
    got, _ = train_cohort(
        net, params, data.x_train, data.y_train, data.train_index(clients), phases, opt, rngs
    )
    sizes = [data.train_parts[c].size for c in clients]
    assert len(set(sizes)) == len(sizes)
    assert any(not bool(a.all()) or a.numel() < len(clients) for _, _, a in opt.calls)
    # the cohort ran in order of steps per epoch, most first: row r of a call is that client
    order = np.argsort(-np.ceil(np.array(sizes) / opt.batch_size), kind="stable")
    for row, client in enumerate(order):
        own = {n: p.detach().clone().requires_grad_(True) for n, p in params.items()}
        weights = [p for n, p in own.items() if n.endswith(".weight")]
        biases = [p for n, p in own.items() if n.endswith(".bias")]
        reference = torch_optimizer(opt.opt, weights, biases)
        for names, grads, active in opt.calls:
            if row >= active.numel() or not active[row]:
                continue
            for p in own.values():
                p.grad = None  # parameters outside the phase: no step, no step count
            for n, g in zip(names, grads, strict=True):
                own[n].grad = g[row].clone()
            reference.step()
        for n in net.params_of(net.layer_names):
            torch.testing.assert_close(got[n][client], own[n].detach(), rtol=0, atol=1e-6)


@pytest.mark.parametrize("opt", [SGD(lr=0.1, momentum=0.9), *ADAMS.values()], ids=repr)
def test_clients_outside_the_step_keep_their_parameters_and_state(opt):
    gen = torch.Generator().manual_seed(0)
    params = {"l.weight": torch.randn(3, 4, 2, generator=gen), "l.bias": torch.randn(3, 2)}
    grads = [torch.randn(3, 4, 2, generator=gen), torch.randn(3, 2, generator=gen)]
    active = torch.tensor([True, False, True])
    state: dict = {}
    before = {n: p.clone() for n, p in params.items()}
    opt.step(params, state, list(params), [g.clone() for g in grads], active)
    for n, p in params.items():
        assert torch.equal(p[1], before[n][1])
        assert not torch.equal(p[0], before[n][0])
    for key, value in state.items():  # a client's state before its first step: zeros
        assert not value[1].any(), key
    kept = {k: v.clone() for k, v in state.items()}
    mid = {n: p.clone() for n, p in params.items()}
    opt.step(params, state, list(params), [g.clone() for g in grads], ~active)
    for n, p in params.items():
        assert torch.equal(p[0], mid[n][0]) and torch.equal(p[2], mid[n][2])
    for key, value in state.items():
        assert torch.equal(value[0], kept[key][0]) and torch.equal(value[2], kept[key][2])
    if isinstance(opt, Adam):
        assert state["step/l.weight"].tolist() == [1.0, 1.0, 1.0]


def test_adam_sitting_out_is_masking(monkeypatch):
    """Clients in order of their steps sit steps out: the same numbers bit for bit as every
    client computed every step and masked (as for SGD, tests/test_neural_train.py)."""
    data = TASK.build(12, Streams(5))
    net = data.network
    params = net.init(torch.Generator().manual_seed(1))
    sizes = {c: data.train_parts[c].size for c in (0, 3, 4, 9)}
    clients = np.array(sorted(sizes, key=lambda c: -sizes[c]))
    opt = ADAMS["adamw"]
    out = []
    for sit_out in (False, True):
        monkeypatch.setattr(train_module, "SIT_OUT", sit_out)
        rngs = [Streams(5).generator("t", int(c)) for c in clients]
        state: dict = {}
        got, loss = train_cohort(
            net,
            params,
            data.x_train,
            data.y_train,
            data.train_index(clients),
            (Phase(net.layer_names, 2),),
            opt,
            rngs,
            opt_state=state,
        )
        out.append((got, loss, state))
    (a, la, sa), (b, lb, sb) = out
    for n in a:
        assert torch.equal(a[n], b[n]), n
    assert set(sa) == set(sb) and all(torch.equal(sa[k], sb[k]) for k in sa)
    np.testing.assert_array_equal(la, lb)


# ------------------------------------------------------------------ optimiser state
@pytest.mark.parametrize(
    "algorithm",
    [
        NeuralFedRep(head_epochs=1, body_epochs=1, optimizer=Adam(lr=0.01, state="keep")),
        FedProx(epochs=1, optimizer=SGD(lr=0.05, momentum=0.9, state="keep")),
    ],
    ids=lambda a: a.name,
)
def test_kept_state_is_where_the_next_update_starts(algorithm, monkeypatch):
    data, state, streams = bound(algorithm)
    net = state.network
    pair = np.array([5, 2])  # fewer steps first: trained in the other order, and back
    assert data.train_parts[5].size < data.train_parts[2].size
    first = algorithm.local_updates(state, data, pair, 0, streams)
    rows = {n for n in first.params if n.startswith(OPTIM)}
    assert rows and all(first.params[n].shape[0] == 2 for n in rows)
    new = algorithm.aggregate(state, first, arrived(first, 0))
    # the optimiser rows are neither averaged into the model nor sent
    assert set(new.shared) == set(state.shared)
    assert algorithm.payload(new) == algorithm.payload(state)
    # each client stored the state its update ended with
    assert set(new.opt_state) == {2, 5}
    for j, c in enumerate(pair):
        stored = new.opt_state[int(c)]
        assert set(stored) == {n[len(OPTIM) :] for n in rows}
        for key, value in stored.items():
            np.testing.assert_array_equal(value.numpy(), first.params[OPTIM + key][j])
    if isinstance(algorithm.optimizer, Adam):  # every parameter's steps: its phase's batches
        for c in pair:
            batches = np.ceil(data.train_parts[c].size / algorithm.optimizer.batch_size)
            for n in net.param_names:
                assert float(new.opt_state[int(c)][f"step/{n}"]) == batches
    # the next update starts from the stored state (a client new to it from zeros)
    seen = []
    real = train_cohort

    def spy(*args, opt_state=None, **kw):
        seen.append({k: v.clone() for k, v in opt_state.items()})
        return real(*args, opt_state=opt_state, **kw)

    monkeypatch.setattr("simfl.neural.base.train_cohort", spy)
    trio = np.array([5, 7, 2])
    second = algorithm.local_updates(new, data, trio, 1, streams)
    monkeypatch.undo()
    (start,) = seen
    for key, value in start.items():
        torch.testing.assert_close(value[0], new.opt_state[5][key], rtol=0, atol=0)
        assert not value[1].any()
        torch.testing.assert_close(value[2], new.opt_state[2][key], rtol=0, atol=0)
    # and so differs from a fresh start
    reset = dataclasses.replace(
        algorithm, optimizer=dataclasses.replace(algorithm.optimizer, state="reset")
    )
    fresh = reset.local_updates(new, data, trio, 1, streams)
    assert not any(n.startswith(OPTIM) for n in fresh.params)
    name = net.param_names[0]
    assert np.array_equal(second.params[name][1], fresh.params[name][1])  # client 7: zeros
    assert not np.array_equal(second.params[name][0], fresh.params[name][0])


def test_reset_state_stores_nothing():
    alg = NeuralFedAvg(epochs=1, optimizer=Adam(lr=0.01))
    data, state, streams = bound(alg)
    updates = alg.local_updates(state, data, np.array([1, 3]), 0, streams)
    assert not any(n.startswith(OPTIM) for n in updates.params)
    assert alg.aggregate(state, updates, arrived(updates)).opt_state == {}


# ------------------------------------------------------------------ server optimisers
def by_hand(opt, x, mean, m, v):
    """Reddi et al.'s Algorithm 2 (and FedAvgM) in numpy float64."""
    d = mean - x
    if isinstance(opt, FedAvgM):
        m = opt.momentum * m + d
        return x + opt.lr * m, m, v
    b1 = opt.beta1 if isinstance(opt, FedAdagrad) else opt.betas[0]
    m = b1 * m + (1 - b1) * d
    if isinstance(opt, FedAdagrad):
        v = v + d * d
    elif isinstance(opt, FedYogi):
        v = v - (1 - opt.betas[1]) * (d * d) * np.sign(v - d * d)
    else:
        v = opt.betas[1] * v + (1 - opt.betas[1]) * (d * d)
    return x + opt.lr * m / (np.sqrt(v) + opt.tau), m, v


@pytest.mark.parametrize(
    "server",
    [
        FedAvgM(lr=0.7, momentum=0.9),
        FedAdam(lr=0.05, betas=(0.8, 0.9), tau=1e-2),
        FedYogi(lr=0.05, tau=1e-2),
        FedAdagrad(lr=0.05, tau=1e-2, beta1=0.5),
    ],
    ids=repr,
)
def test_two_rounds_of_server_steps_by_hand(server):
    """x, m, v in float64 from the updates' rows, the same operations in the same order:
    the algorithm's new model is the same float32 numbers and its state the same float64
    ones (exactly: IEEE operations, the mean by the same np.tensordot)."""
    alg = FedPer(epochs=1, optimizer=SGD(lr=0.05, batch_size=8), server_optimizer=server)
    data, state, streams = bound(alg)
    x = {n: p.double().numpy() for n, p in state.shared.items()}
    m = {n: np.zeros_like(v) for n, v in x.items()}
    tau2 = 0.0 if isinstance(server, FedAvgM) else server.tau**2
    v = {n: np.full_like(p, tau2) for n, p in x.items()}
    for rnd, cohort in enumerate(([1, 4, 6], [0, 4, 7])):
        updates = alg.local_updates(state, data, np.array(cohort), rnd, streams)
        state = alg.aggregate(state, updates, arrived(updates, rnd))
        w = updates.weight / updates.weight.sum()
        for n in x:
            mean = np.tensordot(w, updates.params[n].astype(np.float64), axes=1)
            x[n], m[n], v[n] = by_hand(server, x[n], mean, m[n], v[n])
            np.testing.assert_array_equal(state.shared[n].numpy(), x[n].astype(np.float32))
            x[n] = x[n].astype(np.float32).astype(np.float64)  # the server keeps float32
            first = "momentum" if isinstance(server, FedAvgM) else "m"
            np.testing.assert_array_equal(state.server_state[f"{first}/{n}"].numpy(), m[n])
            if not isinstance(server, FedAvgM):
                np.testing.assert_array_equal(state.server_state[f"v/{n}"].numpy(), v[n])
        assert set(state.local) == set(cohort) | ({1, 6} if rnd else set())  # heads stay local
    assert "layer_out.weight" not in state.shared  # FedPer's head is not stepped


@pytest.mark.parametrize(
    "make",
    [
        lambda s: NeuralFedAvg(epochs=1, optimizer=SGD(lr=0.05, batch_size=8), server_optimizer=s),
        lambda s: LGFedAvg(epochs=1, pretrain_rounds=1, server_optimizer=s),
        lambda s: Ditto(epochs=1, personal_epochs=1, server_optimizer=s),
        lambda s: APFL(epochs=1, server_optimizer=s),
    ],
    ids=["FedAvg", "LG-pretrain", "Ditto", "APFL"],
)
def test_fedavgm_without_momentum_at_lr_1_is_the_average(make):
    """``x + 1 * (avg - x)`` in float64, cast to float32, is the float32 average: one rounding
    of ``avg - x`` and one of the sum, both at float64 precision, can move the float32 result
    only where the average lies within 2^-52 of a float32 rounding boundary (the bound: one float32
    ulp; measured: identical)."""
    plain = make(None)
    momentum = make(FedAvgM(lr=1.0, momentum=0.0))
    data, state, streams = bound(plain)
    a, b = state, momentum.initial_state(data, streams)
    for rnd, cohort in enumerate(([1, 4, 6], [0, 4, 7])):
        ua = plain.local_updates(a, data, np.array(cohort), rnd, streams)
        ub = momentum.local_updates(b, data, np.array(cohort), rnd, streams)
        a, b = plain.aggregate(a, ua, arrived(ua, rnd)), momentum.aggregate(b, ub, arrived(ub, rnd))
        for n in a.shared:
            np.testing.assert_array_max_ulp(a.shared[n].numpy(), b.shared[n].numpy(), maxulp=1)
        for n in a.local_default:  # LG-FedAvg's pre-training steps the local layers too
            np.testing.assert_array_max_ulp(
                a.local_default[n].numpy(), b.local_default[n].numpy(), maxulp=1
            )


def test_buffers_take_the_average():
    current = {"bn.running_mean": torch.zeros(3), "bn.weight": torch.zeros(3)}
    means = {"bn.running_mean": np.array([1.0, 2.0, 3.0]), "bn.weight": np.array([1.0, 2.0, 3.0])}
    new, state = server_step(FedAvgM(lr=0.5, momentum=0.5), current, means, {})
    assert new["bn.running_mean"].tolist() == [1.0, 2.0, 3.0]
    assert new["bn.weight"].tolist() == [0.5, 1.0, 1.5]
    assert set(state) == {"momentum/bn.weight"}


# ------------------------------------------------------------------ who takes what
@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: Adam(lr=-1), r"Adam.lr must be in \(0, inf\)"),
        (lambda: Adam(betas=(1.0, 0.5)), r"Adam.betas\[0\] must be in \[0, 1\)"),
        (lambda: AdamW(betas=0.9), r"AdamW.betas must be a tuple"),
        (lambda: Adam(eps=0.0), r"Adam.eps"),
        (lambda: AdamW(weight_decay=-1.0), r"AdamW.weight_decay"),
        (lambda: Adam(batch_size=0), r"Adam.batch_size"),
        (lambda: SGD(state="always"), r"SGD.state must be one of \['reset', 'keep'\]"),
        (lambda: FedAvgM(lr=0.0), r"FedAvgM.lr"),
        (lambda: FedAvgM(momentum=1.0), r"FedAvgM.momentum must be in \[0, 1\)"),
        (lambda: FedAdam(tau=0.0), r"FedAdam.tau"),
        (lambda: FedYogi(betas=(0.9, 1.0)), r"FedYogi.betas\[1\]"),
        (lambda: FedAdagrad(beta1=-0.1), r"FedAdagrad.beta1"),
        (
            lambda: NeuralFedAvg(server_optimizer=SGD()),
            r"NeuralFedAvg.server_optimizer must be None or a simfl.neural FedAvgM",
        ),
        (
            lambda: SCAFFOLD(optimizer=Adam()),
            r"SCAFFOLD.optimizer must be a simfl.neural.SGD \(SCAFFOLD's control variates "
            r"correct SGD steps\), got Adam\(",
        ),
        (lambda: SCAFFOLD(server_optimizer=FedAvgM()), r"SCAFFOLD.server_optimizer must be None"),
        (lambda: NeuralFedNova(optimizer=AdamW()), r"NeuralFedNova.optimizer must be a simfl"),
        (
            lambda: NeuralFedNova(optimizer=SGD(state="keep")),
            r"NeuralFedNova.optimizer.state must be 'reset'",
        ),
        (lambda: NeuralFedNova(server_optimizer=FedAdam()), r"NeuralFedNova.server_optimizer"),
        (lambda: PFedMe(optimizer=Adam()), r"PFedMe.optimizer must be a simfl.neural.SGD"),
        (lambda: PFedMe(server_optimizer=FedYogi()), r"PFedMe.server_optimizer must be None"),
        (lambda: L2GD(server_optimizer=FedAdagrad()), r"L2GD.server_optimizer must be None"),
        (
            lambda: NeuralLocalOnly(server_optimizer=FedAvgM()),
            r"NeuralLocalOnly.server_optimizer must be None: Local-only has no server model",
        ),
        (
            lambda: Scenario(
                task=TASK,
                algorithm=NeuralFedAvg(server_optimizer=FedAvgM()),
                fleet=Fleet.homogeneous(4, compute=dists.Exponential(1.0)),
                policy=policies.FedBuff(buffer_size=2, concurrency=2),
                rounds=1,
            ),
            r"cannot run under FedBuff .*server optimizer \(FedAvgM\) steps only in a synchro",
        ),
    ],
)
def test_validation_names_the_field(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_fields_keep_positions_repr_and_fingerprints():
    # positional construction as before; server_optimizer is keyword only
    assert NeuralFedAvg(3).epochs == 3 and FedProx(2, SGD(), 0, 0.5).mu == 0.5
    assert SGD(0.1, 0.9, 0.0, 5) == SGD(lr=0.1, momentum=0.9, weight_decay=0.0, batch_size=5)
    assert repr(NeuralFedRep()).startswith("NeuralFedRep(head_epochs=10, body_epochs=5,")
    assert "server_optimizer" not in repr(NeuralFedRep())
    assert repr(FedProx(server_optimizer=FedAvgM())).endswith(
        "mu=0.1, server_optimizer=FedAvgM(lr=1.0, momentum=0.9))"
    )
    assert NeuralFedAvg(server_optimizer=FedAvgM()) != NeuralFedAvg()
    assert NeuralFedAvg(server_optimizer=FedAvgM()) == NeuralFedAvg(server_optimizer=FedAvgM())
    # fingerprints recorded before the optimisers existed
    assert (
        fingerprint(NeuralFedRep())
        == "522ca50e5be88c64e820c9680785fbb552fc8f6597f56168830ca0731ffbf07b"
    )
    assert (
        fingerprint(SCAFFOLD(optimizer=SGD(lr=0.1, momentum=0.0)))
        == "fd769d288fb8255eedd180870f112242d715051b32bcf1ddfa44b8a8317c1c26"
    )
    assert (
        fingerprint(PerFedAvg())
        == "ffd3493d6096a4a4b34057acab6624993d2697df208bc7a13ca98a7d9f06dc98"
    )
    assert '"simfl.neural.train.SGD"' in canonical(SGD())
    assert fingerprint(SGD(state="keep")) != fingerprint(SGD())
    assert fingerprint(NeuralFedRep(server_optimizer=FedAvgM())) != fingerprint(NeuralFedRep())


KEEP_ADAM = Adam(lr=0.005, batch_size=8, state="keep")


@pytest.mark.parametrize(
    "algorithm",
    [
        NeuralFedRep(head_epochs=1, body_epochs=1, optimizer=KEEP_ADAM, server_optimizer=FedAdam()),
        LGFedAvg(pretrain_rounds=1, optimizer=KEEP_ADAM, server_optimizer=FedYogi()),
        Ditto(epochs=1, personal_epochs=1, optimizer=KEEP_ADAM, server_optimizer=FedAvgM()),
        APFL(epochs=1, optimizer=AdamW(lr=0.005, state="keep"), server_optimizer=FedAdagrad()),
        PerFedAvg(epochs=1, optimizer=KEEP_ADAM, server_optimizer=FedAdam()),
        SCAFFOLD(epochs=1, optimizer=SGD(lr=0.05, momentum=0.9, state="keep")),
        L2GD(epochs=1, optimizer=KEEP_ADAM),
    ],
    ids=lambda a: a.name,
)
def test_the_algorithms_run_with_their_optimisers(algorithm):
    sc = Scenario(
        task=ImageClassification(Digits(), Shards(2), MLP((16, 8))),
        algorithm=algorithm,
        fleet=Fleet.homogeneous(6, compute=dists.Exponential(2000.0)),
        policy=policies.WaitAll(fraction=0.5),
        rounds=2,
        seed=0,
    )
    res = run(sc, progress=False, on_error="raise")
    assert res.ok and np.isfinite(res.rounds["accuracy"]).all()
    took_part = set(res.clients.loc[res.clients["status"] == "arrived", "device"])
    assert set(res.state.opt_state) == took_part
    spaces = {k.split("/")[0] for own in res.state.opt_state.values() for k in own}
    if isinstance(algorithm, (Ditto, APFL)):  # the personal model's optimiser apart
        assert "personal" in spaces
    if algorithm.server_optimizer is not None:
        assert res.state.server_state
