"""The seed papers' neural baselines (simfl.neural.baselines) and FLANP.

Each algorithm's round on two clients of unequal size is checked against a plain,
hand-written torch loop of the paper's update rule: one client at a time, a functional MLP
written here (not simfl's Net), torch.optim.SGD for the momentum / weight-decay steps and
autograd for every gradient. Tolerance: the batched computation multiplies stacked matrices
(torch.baddbmm) where the loop multiplies one client's, so results agree to float32 rounding
accumulated over a few dozen steps (rtol 1e-4, atol 2e-5, as tests/test_neural_algorithms.py);
the Hessian-free step divides a difference of two gradients by 2 delta = 2e-3, which
magnifies that rounding by alpha / (2 delta) = 5, hence atol 1e-4 there.
Also: validation names the field, work counts every pass, every policy family runs or is
refused naming Scenario.algorithm, FedNova reads partial work from the outcome, and FLANP's
schedule is SRPFL's with FedAvg.
"""

import dataclasses
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from simfl import Fleet, Scenario, Streams, dists, policies, run  # noqa: E402
from simfl.network import Network  # noqa: E402
from simfl.neural import (  # noqa: E402
    APFL,
    HFMAML,
    L2GD,
    MLP,
    SCAFFOLD,
    SCAFFOLDFT,
    SGD,
    Digits,
    Ditto,
    ImageClassification,
    LogNormalSizes,
    NeuralFedAvg,
    NeuralFedNova,
    PerFedAvg,
    PFedMe,
    Shards,
)
from simfl.neural.train import epoch_order  # noqa: E402
from tests.helpers import arrived  # noqa: E402

pytestmark = pytest.mark.usefixtures("torch_one_thread")

TASK = ImageClassification(Digits(), Shards(2), MLP((32, 16)))
UNEQUAL = ImageClassification(Digits(), LogNormalSizes(1.0), MLP((32, 16)))
MOM = SGD(lr=0.05, momentum=0.5, weight_decay=1e-3, batch_size=8)
PLAIN = SGD(lr=0.05, momentum=0.0, weight_decay=0.0, batch_size=8)
PAIR = np.array([2, 7])
ROUND = 3
CLOSE = {"rtol": 1e-4, "atol": 2e-5}


# ------------------------------------------------------------------ the plain loop's pieces
def forward(p, x):
    """The MLP, written out: simfl stores a linear weight as (in, out)."""
    names = sorted({n.rsplit(".", 1)[0] for n in p}, key=lambda n: LAYERS.index(n))
    h = x.flatten(1)
    for i, name in enumerate(names):
        h = h @ p[f"{name}.weight"] + p[f"{name}.bias"]
        if i < len(names) - 1:
            h = torch.relu(h)
    return h


LAYERS = ["layer_input", "layer_hidden1", "layer_out"]


def loss_grad(p, data, ids):
    """Mean cross-entropy of ``p`` on samples ``ids`` and its gradient (a dict)."""
    leaves = {n: t.detach().clone().requires_grad_(True) for n, t in p.items()}
    loss = torch.nn.functional.cross_entropy(forward(leaves, data.x_train[ids]), data.y_train[ids])
    g = torch.autograd.grad(loss, list(leaves.values()))
    return loss.item(), dict(zip(leaves, g, strict=True))


def batches(data, client, key="neural/batches", epochs=1, roles=1, batch=8, streams=None):
    """The client's minibatches, drawn as the module docstring says: roles permutations/epoch."""
    rng = streams.generator(key, int(client), ROUND)
    ids = data.train_parts[client]
    for _ in range(epochs):
        orders = [epoch_order(rng, ids.size, batch) for _ in range(roles)]
        for s in range(orders[0].shape[0]):
            yield [ids[o[s][o[s] >= 0]] for o in orders]


class TorchSGD:
    """torch.optim.SGD over a dict of tensors (weight decay on weights only)."""

    def __init__(self, params, sgd):
        self.p = {n: t.detach().clone().requires_grad_(True) for n, t in params.items()}
        groups = [
            {"params": [t for n, t in self.p.items() if n.endswith(".weight")]},
            {"params": [t for n, t in self.p.items() if n.endswith(".bias")], "weight_decay": 0},
        ]
        self.opt = torch.optim.SGD(
            groups, lr=sgd.lr, momentum=sgd.momentum, weight_decay=sgd.weight_decay
        )

    def step(self, grad):
        for n, t in self.p.items():
            t.grad = grad[n].clone()
        self.opt.step()

    def values(self):
        return {n: t.detach().clone() for n, t in self.p.items()}


def bound(algorithm, task=UNEQUAL, n=10):
    streams = Streams(0)
    data = task.build(n, streams)
    return data, algorithm.initial_state(data, streams), streams


def weighted(data, hand, names):
    sizes = np.array([data.train_parts[c].size for c in PAIR], dtype=float)
    assert sizes[0] != sizes[1]
    w = sizes / sizes.sum()
    return {n: w[0] * hand[0][n].double() + w[1] * hand[1][n].double() for n in names}


def near(a, b, **tol):
    torch.testing.assert_close(a.double(), b.double(), **(tol or CLOSE))


def nudged(params, by):
    return {n: p + by for n, p in params.items()}


def one_round(algorithm, state, data, streams):
    updates = algorithm.local_updates(state, data, PAIR, ROUND, streams)
    return algorithm.aggregate(state, updates, arrived(updates, ROUND))


# ------------------------------------------------------------------ each paper's rule by hand
def test_scaffold_matches_option_ii_by_hand():
    alg = SCAFFOLD(epochs=2, server_lr=0.8, optimizer=MOM)
    data, state, streams = bound(alg)
    c = {n: torch.full_like(p, 0.01) for n, p in state.shared.items()}
    c7 = {n: torch.full_like(p, -0.02) for n, p in state.shared.items()}
    state = dataclasses.replace(state, extra=c, personal={7: c7})
    new = one_round(alg, state, data, streams)
    x = state.shared
    hand, controls = [], []
    for client in PAIR:
        ci = c7 if client == 7 else {n: torch.zeros_like(p) for n, p in x.items()}
        opt, k = TorchSGD(x, MOM), 0
        for (ids,) in batches(data, client, epochs=2, streams=streams):
            _, g = loss_grad(opt.values(), data, ids)
            opt.step({n: g[n] - ci[n] + c[n] for n in g})
            k += 1
        y = opt.values()
        hand.append(y)
        controls.append({n: ci[n] - c[n] + (x[n] - y[n]) / (k * MOM.lr) for n in x})
    avg = weighted(data, hand, x)
    for n in x:
        near(new.shared[n], x[n].double() + 0.8 * (avg[n] - x[n].double()))
        zero_or_c7 = [torch.zeros_like(x[n]), c7[n]]
        moved = sum(controls[i][n] - zero_or_c7[i] for i in range(2)) / 10  # N = 10 clients
        # (x - y) / (K lr) scales the rounding of y by 1 / (K lr) ~ 2: atol 1e-4 below
        near(new.extra[n], c[n] + moved, rtol=1e-4, atol=1e-4)
        for i, client in enumerate(PAIR):
            near(new.personal[int(client)][n], controls[i][n], rtol=1e-4, atol=1e-4)


def test_ditto_matches_personal_then_global_steps_by_hand():
    alg = Ditto(epochs=1, personal_epochs=2, lam=0.5, optimizer=MOM)
    data, state, streams = bound(alg)
    mine = nudged(state.start, 0.01)
    state = dataclasses.replace(state, personal={7: mine})
    new = one_round(alg, state, data, streams)
    w0 = state.shared
    hand = []
    for client in PAIR:
        opt = TorchSGD(mine if client == 7 else state.start, MOM)
        for (ids,) in batches(data, client, "neural/personal", epochs=2, streams=streams):
            v = opt.values()
            _, g = loss_grad(v, data, ids)
            opt.step({n: g[n] + 0.5 * (v[n] - w0[n]) for n in g})
        near_all = opt.values()
        for n in w0:
            near(new.personal[int(client)][n], near_all[n])
        glob = TorchSGD(w0, MOM)
        for (ids,) in batches(data, client, epochs=1, streams=streams):
            glob.step(loss_grad(glob.values(), data, ids)[1])
        hand.append(glob.values())
    for n, v in weighted(data, hand, w0).items():
        near(new.shared[n], v)
    # evaluation uses each client's personal model: a client never trained uses the initial one
    params = alg.eval_params(new, data, np.array([7, 0]))
    near(params["layer_out.bias"][0], new.personal[7]["layer_out.bias"])
    near(params["layer_out.bias"][1], state.start["layer_out.bias"])


def test_apfl_matches_mixed_steps_by_hand():
    alg = APFL(epochs=1, alpha=0.3, optimizer=MOM)
    data, state, streams = bound(alg)
    mine = {**nudged(state.start, 0.01), "alpha": torch.tensor(0.6)}
    state = dataclasses.replace(state, personal={7: mine})
    new = one_round(alg, state, data, streams)
    w0 = state.shared
    hand = []
    for client in PAIR:
        own = mine if client == 7 else {**state.start, "alpha": torch.tensor(0.3)}
        w_opt = TorchSGD(w0, MOM)
        v_opt = TorchSGD({n: own[n] for n in w0}, MOM)
        a = own["alpha"].clone()
        for (ids,) in batches(data, client, streams=streams):
            w, v = w_opt.values(), v_opt.values()
            gw = loss_grad(w, data, ids)[1]
            v_leaf = {n: t.requires_grad_(True) for n, t in v.items()}
            a_leaf = a.clone().requires_grad_(True)
            mixed = {n: a_leaf * v_leaf[n] + (1 - a_leaf) * w[n] for n in w}
            loss = torch.nn.functional.cross_entropy(
                forward(mixed, data.x_train[ids]), data.y_train[ids]
            )
            g = torch.autograd.grad(loss, [*v_leaf.values(), a_leaf])
            w_opt.step(gw)
            v_opt.step(dict(zip(v_leaf, g[:-1], strict=True)))
            a = (a - MOM.lr * g[-1]).clamp(0, 1)
        hand.append(w_opt.values())
        for n, t in v_opt.values().items():
            near(new.personal[int(client)][n], t)
        near(new.personal[int(client)]["alpha"], a)
    for n, v in weighted(data, hand, w0).items():
        near(new.shared[n], v)
    assert float(new.personal[7]["alpha"]) != 0.6  # alpha learns


@pytest.mark.parametrize("hessian", ["fo", "hf"])
def test_per_fedavg_matches_the_maml_step_by_hand(hessian):
    alg = PerFedAvg(epochs=1, alpha=0.02, hessian=hessian, delta=1e-3, optimizer=MOM)
    data, state, streams = bound(alg)
    new = one_round(alg, state, data, streams)
    w0, hand = state.shared, []
    roles = 3 if hessian == "hf" else 2
    for client in PAIR:
        opt = TorchSGD(w0, MOM)
        for ids in batches(data, client, roles=roles, streams=streams):
            w = opt.values()
            g = loss_grad(w, data, ids[0])[1]
            d = loss_grad({n: w[n] - 0.02 * g[n] for n in w}, data, ids[1])[1]
            if hessian == "hf":
                hp = loss_grad({n: w[n] + 1e-3 * d[n] for n in w}, data, ids[2])[1]
                hm = loss_grad({n: w[n] - 1e-3 * d[n] for n in w}, data, ids[2])[1]
                d = {n: d[n] - 0.02 * (hp[n] - hm[n]) / 2e-3 for n in d}
            opt.step(d)
        hand.append(opt.values())
    tol = {"rtol": 1e-4, "atol": 1e-4} if hessian == "hf" else CLOSE
    for n, v in weighted(data, hand, w0).items():
        near(new.shared[n], v, **tol)
    # evaluated after one step w - alpha grad f_i(w) on the client's whole training set
    g = loss_grad(new.shared, data, data.train_parts[4])[1]
    params = alg.eval_params(new, data, np.array([4]))
    for n, p in new.shared.items():
        near(params[n][0], p - 0.02 * g[n])


def test_pfedme_matches_moreau_steps_by_hand():
    alg = PFedMe(
        epochs=1,
        lam=5.0,
        inner_steps=3,
        personal_lr=0.05,
        beta=0.7,
        optimizer=SGD(lr=0.02, momentum=0.0, weight_decay=0.0, batch_size=8),
    )
    data, state, streams = bound(alg)
    new = one_round(alg, state, data, streams)
    w0, hand = state.shared, []
    for client in PAIR:
        w = {n: p.clone() for n, p in w0.items()}
        theta = {n: p.clone() for n, p in w0.items()}
        for (ids,) in batches(data, client, streams=streams):
            for _ in range(3):
                g = loss_grad(theta, data, ids)[1]
                theta = {n: theta[n] - 0.05 * (g[n] + 5.0 * (theta[n] - w[n])) for n in w}
            w = {n: w[n] - 0.02 * 5.0 * (w[n] - theta[n]) for n in w}
        hand.append(w)
        for n in w0:
            near(new.personal[int(client)][n], theta[n])
    for n, v in weighted(data, hand, w0).items():
        near(new.shared[n], 0.3 * w0[n].double() + 0.7 * v)


def test_l2gd_matches_local_steps_then_averaging_by_hand():
    alg = L2GD(epochs=2, mix=0.4, optimizer=MOM)
    data, state, streams = bound(alg)
    mine = nudged(state.start, 0.01)
    state = dataclasses.replace(state, personal={7: mine})
    new = one_round(alg, state, data, streams)
    hand = []
    for client in PAIR:
        opt = TorchSGD(mine if client == 7 else state.start, MOM)
        for (ids,) in batches(data, client, epochs=2, streams=streams):
            opt.step(loss_grad(opt.values(), data, ids)[1])
        hand.append(opt.values())
    avg = weighted(data, hand, state.shared)
    for n in state.shared:
        near(new.shared[n], avg[n])
        for i, client in enumerate(PAIR):
            x = hand[i][n].double()
            near(new.personal[int(client)][n], x - 0.4 * (x - avg[n]))


def a_norm(tau, rho):
    """||a||_1 written as FedNova's sum: a_k = (1 - rho^(k+1)) / (1 - rho), k < tau."""
    return sum((1 - rho ** (k + 1)) / (1 - rho) for k in range(int(tau)))


@pytest.mark.parametrize("steps", [None, (3.0, 5.0)], ids=["full", "partial"])
def test_fednova_normalises_by_each_clients_momentum_steps(steps):
    alg = NeuralFedNova(epochs=2, optimizer=MOM)
    data, state, streams = bound(alg)
    updates = alg.local_updates(state, data, PAIR, ROUND, streams)
    outcome = arrived(updates, ROUND)
    full = [2 * math.ceil(data.train_parts[c].size / 8) for c in PAIR]
    if steps is not None:
        outcome = dataclasses.replace(outcome, steps=np.array(steps))
    tau = full if steps is None else list(steps)
    new = alg.aggregate(state, updates, outcome)
    sizes = np.array([data.train_parts[c].size for c in PAIR], dtype=float)
    p = sizes / sizes.sum()
    a = [a_norm(t, 0.5) for t in tau]
    eff = p[0] * a[0] + p[1] * a[1]
    for n, x in state.shared.items():
        x = x.double()
        y = [torch.from_numpy(np.asarray(updates.params[n][i])).double() for i in range(2)]
        move = p[0] * (x - y[0]) / a[0] + p[1] * (x - y[1]) / a[1]
        near(new.shared[n], x - eff * move)
    assert full[0] != full[1]


# ------------------------------------------------------------------ work, validation
def test_work_counts_every_pass():
    _, state, _ = bound(NeuralFedAvg(epochs=2), task=TASK)
    clients = np.arange(4)
    fedavg = NeuralFedAvg(epochs=2).work(state, clients)
    assert np.allclose(PerFedAvg(epochs=2).work(state, clients), 2 * fedavg)
    assert np.allclose(HFMAML(epochs=2).work(state, clients), 4 * fedavg)
    assert np.allclose(Ditto(epochs=2, personal_epochs=1).work(state, clients), 1.5 * fedavg)
    assert np.allclose(PFedMe(epochs=2, inner_steps=3).work(state, clients), 3 * fedavg)
    assert np.allclose(APFL(epochs=2).work(state, clients), 2 * fedavg)
    assert np.allclose(SCAFFOLD(epochs=2).work(state, clients), fedavg)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: SCAFFOLD(epochs=0), r"SCAFFOLD\.epochs"),
        (lambda: SCAFFOLD(server_lr=0.0), r"SCAFFOLD\.server_lr"),
        (lambda: SCAFFOLDFT(finetune_epochs=-1), r"SCAFFOLDFT\.finetune_epochs"),
        (lambda: Ditto(personal_epochs=0), r"Ditto\.personal_epochs"),
        (lambda: Ditto(lam=-1.0), r"Ditto\.lam"),
        (lambda: APFL(alpha=1.5), r"APFL\.alpha"),
        (lambda: APFL(alpha_lr=0.0), r"APFL\.alpha_lr"),
        (lambda: PerFedAvg(hessian="exact"), r"PerFedAvg\.hessian"),
        (lambda: HFMAML(delta=0.0), r"HFMAML\.delta"),
        (lambda: PerFedAvg(alpha=-0.1), r"PerFedAvg\.alpha"),
        (lambda: PFedMe(inner_steps=0), r"PFedMe\.inner_steps"),
        (lambda: PFedMe(optimizer=SGD(momentum=0.5)), r"PFedMe\.optimizer\.momentum"),
        (lambda: L2GD(mix=0.0), r"L2GD\.mix"),
        (lambda: L2GD(optimizer="sgd"), r"L2GD\.optimizer"),
    ],
)
def test_validation_names_the_field(make, match):
    with pytest.raises(ValueError, match=match):
        make()


# ------------------------------------------------------------------ policy families
FAST = SGD(lr=0.05, batch_size=16)
EVERY = [
    SCAFFOLD(epochs=1, optimizer=FAST),
    SCAFFOLDFT(epochs=1, finetune_epochs=1, optimizer=FAST),
    Ditto(epochs=1, personal_epochs=1, optimizer=FAST),
    APFL(epochs=1, optimizer=FAST),
    PerFedAvg(epochs=1),
    HFMAML(epochs=1),
    PFedMe(epochs=1, inner_steps=2),
    L2GD(epochs=1, optimizer=FAST),
    NeuralFedNova(epochs=1, optimizer=FAST),
]


def scenario(algorithm, policy, n=8, rounds=3, **kw):
    fleet = Fleet.homogeneous(n, compute=dists.Exponential(mean=2000.0))
    return Scenario(
        task=TASK, algorithm=algorithm, fleet=fleet, policy=policy, rounds=rounds, seed=1, **kw
    )


@pytest.mark.parametrize("algorithm", EVERY, ids=lambda a: a.name)
def test_synchronous_edge_and_partial_work_runs(algorithm):
    sync = run(
        scenario(algorithm, policies.Deadline(1.5, fraction=0.5, partial=True)),
        progress=False,
        on_error="raise",
    )
    assert sync.ok and len(sync.rounds) == 3 and sync.rounds["accuracy"].notna().all()
    net = Network.hierarchical(np.array([0, 0, 0, 0, 1, 1, 1, 1]), edge_up=1e9, edge_down=1e9)
    edge = run(
        scenario(algorithm, policies.EdgeAggregation(fraction=0.5), network=net),
        progress=False,
        on_error="raise",
    )
    assert edge.ok and (edge.rounds["n_arrived"] == 4).all()
    assert edge.rounds["accuracy"].notna().all() and (edge.rounds["train_loss"] > 0).all()


STATEFUL = [a for a in EVERY if type(a).synchronous_only is not None]


@pytest.mark.parametrize("algorithm", STATEFUL, ids=lambda a: a.name)
@pytest.mark.parametrize(
    "policy",
    [policies.FedBuff(buffer_size=2, concurrency=4), policies.FedAT(tiers=2)],
    ids=lambda p: type(p).__name__,
)
def test_stateful_clients_refuse_asynchronous_and_tiered_policies(algorithm, policy):
    with pytest.raises(
        ValueError,
        match=rf"Scenario\.algorithm {type(algorithm).__name__} "
        rf"cannot run under {type(policy).__name__}",
    ):
        scenario(algorithm, policy)
    assert {type(a).__name__ for a in STATEFUL} == {
        "SCAFFOLD",
        "SCAFFOLDFT",
        "Ditto",
        "APFL",
        "PFedMe",
        "L2GD",
    }


@pytest.mark.parametrize(
    "algorithm",
    [PerFedAvg(epochs=1), HFMAML(epochs=1), NeuralFedNova(epochs=1, optimizer=FAST)],
    ids=lambda a: a.name,
)
def test_global_model_methods_run_asynchronously_and_tiered(algorithm):
    for policy in (policies.FedBuff(buffer_size=2, concurrency=4), policies.FedAT(tiers=2)):
        res = run(scenario(algorithm, policy, rounds=4), progress=False, on_error="raise")
        assert res.ok and len(res.rounds) == 4 and res.rounds["accuracy"].notna().all()


def test_a_clients_update_does_not_depend_on_its_cohort():
    for alg in (SCAFFOLD(epochs=1, optimizer=MOM), APFL(epochs=1, optimizer=MOM), HFMAML(epochs=1)):
        data, state, streams = bound(alg)
        both = alg.local_updates(state, data, PAIR, ROUND, streams)
        alone = alg.local_updates(state, data, PAIR[1:], ROUND, streams)
        for n, v in alone.params.items():
            np.testing.assert_allclose(both.params[n][1], v[0], rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------ FLANP
def test_flanp_is_srpfl_with_fedavg_doubling_from_the_fastest():
    alg = NeuralFedAvg(epochs=1, optimizer=FAST)
    flanp = run(
        scenario(alg, policies.flanp(n0=2, rounds_per_stage=2), n=10, rounds=8),
        progress=False,
        on_error="raise",
    )
    srpfl = run(
        scenario(alg, policies.SRPFL(n0=2, rounds_per_stage=2, resample="round"), n=10, rounds=8),
        progress=False,
        on_error="raise",
    )
    assert flanp.rounds["n_selected"].tolist() == [2, 2, 4, 4, 8, 8, 10, 10]
    np.testing.assert_array_equal(flanp.rounds["accuracy"], srpfl.rounds["accuracy"])
    np.testing.assert_array_equal(flanp.rounds["time"], srpfl.rounds["time"])
    assert flanp.rounds["stage"].tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    with pytest.raises(ValueError, match=r"SRPFL\.n0"):
        policies.flanp(n0=0)
