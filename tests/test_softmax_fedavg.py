"""Softmax FedAvg on client arrays: plain-loop and torch references, batch independence,
weighted aggregation, validation, lazy == eager, determinism; W1's data equal the peers'."""

import importlib.util
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simfl import Fleet, Payload, Scenario, Streams, dists, policies, run
from simfl.algorithms.base import Updates
from simfl.algorithms.softmax_fedavg import SoftmaxFedAvg, epoch_rows, init_softmax
from simfl.tasks.classification import ClassificationData, ClientArrays, SyntheticSoftmax
from simfl.tasks.linear import LinearRepresentation
from simfl.tasks.w1_data import make_w1
from tests.helpers import arrived, rows


def peers_generator() -> Path:
    """The peers' W1 generator: ``$SIMFL_PEERS/w1_data.py``, else ``../shared/peers`` beside the
    repository (the workspace layout; a plain clone has neither)."""
    env = os.environ.get("SIMFL_PEERS")
    folder = Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "peers"
    return folder / "w1_data.py"


PEERS = peers_generator()


def small_task(sizes=(23, 23, 7, 23, 12), d=5, k=3, seed=1):
    """Random client arrays of the given sizes (unequal, with partial last batches)."""
    rng = np.random.default_rng(seed)
    clients = [
        (rng.normal(size=(n, d)).astype(np.float32), rng.integers(0, k, size=n)) for n in sizes
    ]
    test = (rng.normal(size=(30, d)).astype(np.float32), rng.integers(0, k, size=30))
    return ClientArrays(clients, test, n_classes=k)


def reference_update(w, b, x, y, orders, lr, batch):
    """One client's local epochs with plain loops in float64: per-sample softmax gradients."""
    w, b = w.astype(np.float64).copy(), b.astype(np.float64).copy()
    losses = []
    for order in orders:
        for lo in range(0, len(order), batch):
            idx = order[lo : lo + batch]
            gw, gb, loss = np.zeros_like(w), np.zeros_like(b), 0.0
            for i in idx:
                z = x[i].astype(np.float64) @ w + b
                p = np.exp(z - z.max())
                p /= p.sum()
                loss -= math.log(p[y[i]])
                p[y[i]] -= 1.0
                gw += np.outer(x[i], p)
                gb += p
            w -= lr * gw / len(idx)
            b -= lr * gb / len(idx)
            losses.append(loss / len(idx))
    return w, b, float(np.mean(losses))


def torch_update(w, b, x, y, orders, lr, batch):
    """The same epochs with torch.nn.Linear + SGD + cross_entropy (the peers' local loop)."""
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(w.shape[0], w.shape[1])
    with torch.no_grad():
        model.weight.copy_(torch.from_numpy(w.T.copy()))
        model.bias.copy_(torch.from_numpy(b.copy()))
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    xt, yt = torch.from_numpy(x.copy()), torch.from_numpy(y.copy())
    losses = []
    for order in orders:
        for lo in range(0, len(order), batch):
            idx = torch.from_numpy(order[lo : lo + batch])
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(xt[idx]), yt[idx])
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return model.weight.detach().numpy().T, model.bias.detach().numpy(), float(np.mean(losses))


@pytest.mark.parametrize("reference", [reference_update, torch_update], ids=["loops", "torch"])
@pytest.mark.parametrize("client", [0, 2, 4])
def test_local_update_matches_reference(reference, client):
    task = small_task()
    streams = Streams(7)
    data = task.build(5, streams)
    alg = SoftmaxFedAvg(lr=0.3, batch_size=5, epochs=2)
    state = alg.initial_state(data, streams)
    upd = alg.local_updates(state, data, np.array([client]), 4, streams)
    x, y = data.client(client)
    n = y.size
    orders = [epoch_rows(streams, np.array([client]), 4, e, n)[0] for e in range(2)]
    w, b, loss = reference(state.weight, state.bias, x, y, orders, 0.3, 5)
    np.testing.assert_allclose(upd.params["weight"][0], w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(upd.params["bias"][0], b, rtol=1e-5, atol=1e-6)
    assert upd.loss[0] == pytest.approx(loss, rel=1e-5)
    assert upd.weight[0] == n
    # work counts SGD steps: 2 epochs x ceil(n / 5)
    assert alg.work(state, np.array([client]))[0] == 2 * math.ceil(n / 5)


def test_epoch_rows_are_keyed_permutations():
    s = Streams(0)
    rows = epoch_rows(s, np.array([3, 8, 1]), 5, 0, 17)
    assert all(sorted(r) == list(range(17)) for r in rows.tolist())
    np.testing.assert_array_equal(epoch_rows(s, np.array([8]), 5, 0, 17)[0], rows[1])
    assert not np.array_equal(epoch_rows(s, np.array([8]), 6, 0, 17)[0], rows[1])
    assert not np.array_equal(epoch_rows(s, np.array([8]), 5, 1, 17)[0], rows[1])


def test_init_mirrors_torch_linear_bounds():
    w, b = init_softmax(Streams(0), 60, 10)
    assert w.shape == (60, 10) and b.shape == (10,) and w.dtype == np.float32
    bound = 1 / math.sqrt(60)
    assert np.abs(w).max() < bound and np.abs(b).max() < bound
    assert np.abs(w).max() > 0.9 * bound  # spread over the whole interval


def test_a_clients_update_does_not_depend_on_its_batch():
    task = small_task(sizes=(23, 23, 7, 23, 12, 7, 23))
    streams = Streams(2)
    data = task.build(7, streams)
    alg = SoftmaxFedAvg(lr=0.2, batch_size=4, epochs=2)
    state = alg.initial_state(data, streams)
    everyone = alg.local_updates(state, data, np.arange(7), 9, streams)
    for some in ([3], [5, 1], [6, 0, 4], [2, 3]):
        part = alg.local_updates(state, data, np.array(some), 9, streams)
        for name, value in rows(part).items():
            np.testing.assert_array_equal(rows(everyone)[name][some], value)  # bit for bit


def test_aggregate_is_the_sample_weighted_average():
    alg = SoftmaxFedAvg()
    w = np.arange(2 * 3 * 2, dtype=np.float32).reshape(2, 3, 2)
    b = np.array([[1.0, 2.0], [5.0, 6.0]], dtype=np.float32)
    state = alg.initial_state(small_task(d=3, k=2).build(5, Streams(0)), Streams(0))
    # params["weight"] is W; Updates.weight the sample counts
    upd = Updates(
        np.array([0, 1]), {"weight": w, "bias": b}, loss=np.zeros(2), weight=np.array([1.0, 3.0])
    )
    new = alg.aggregate(state, upd, arrived(upd))
    np.testing.assert_allclose(new.weight, 0.25 * w[0] + 0.75 * w[1], rtol=1e-7)
    np.testing.assert_allclose(new.bias, [4.0, 5.0], rtol=1e-7)
    assert new.weight.dtype == np.float32 and new.steps is state.steps
    assert alg.payload(new) == Payload(3 * 2 * 4 + 2 * 4, 3 * 2 * 4 + 2 * 4)
    shared = alg.shared(new)
    again = alg.with_shared(new, shared)
    np.testing.assert_array_equal(again.weight, new.weight)


def test_data_pooling_gather_and_metrics():
    task = small_task(sizes=(4, 6), d=3, k=3)
    data = task.build(2, Streams(0))
    np.testing.assert_array_equal(data.client_sizes(), [4.0, 6.0])
    x1, y1 = data.client(1)
    xa, ya = data.gather(np.array([1]), np.array([[5, 0]]), ones=True)
    np.testing.assert_array_equal(xa[0, :, :3], x1[[5, 0]])
    np.testing.assert_array_equal(xa[0, :, 3], [1.0, 1.0])
    np.testing.assert_array_equal(ya[0], y1[[5, 0]])
    w = np.zeros((3, 3), dtype=np.float32)
    b = np.array([0.0, 0.0, 1.0], dtype=np.float32)
    m = data.evaluate(w, b)
    assert m["accuracy"] == pytest.approx(np.mean(data.test_y == 2))
    expected = math.log(2 + math.e) - np.where(data.test_y == 2, 1.0, 0.0).mean()
    assert m["loss"] == pytest.approx(expected, rel=1e-12)


def test_w1_generator_defaults_and_shapes():
    clients, (xt, yt) = make_w1(3, 5, 7, seed=0)
    assert len(clients) == 3 and clients[0][0].shape == (5, 60) and xt.shape == (7, 60)
    assert clients[0][0].dtype == np.float32 and yt.dtype == np.int64
    data = SyntheticSoftmax(samples_per_client=5, test_samples=7).build(3, Streams(0))
    np.testing.assert_array_equal(data.client(2)[0], clients[2][0])
    np.testing.assert_array_equal(data.test_x, xt)
    other = SyntheticSoftmax(samples_per_client=5, test_samples=7, data_seed=1).build(3, Streams(0))
    assert not np.array_equal(other.test_x, xt)


@pytest.mark.skipif(
    not PEERS.exists(),
    reason=f"the peers' W1 generator is not at {PEERS}: set SIMFL_PEERS to the folder holding "
    "w1_data.py (shared/peers of the workspace) to check W1's data against it",
)
def test_w1_data_identical_to_the_peers_generator():
    spec = importlib.util.spec_from_file_location("peers_w1_data", PEERS)
    peers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(peers)
    for args in [(4, 9, 11, 0), (3, 5, 6, 3)]:
        ours, theirs = make_w1(*args), peers.make_w1(*args)
        for (xo, yo), (xp, yp) in zip([*ours[0], ours[1]], [*theirs[0], theirs[1]], strict=True):
            assert xo.dtype == xp.dtype and yo.dtype == yp.dtype
            np.testing.assert_array_equal(xo, xp)
            np.testing.assert_array_equal(yo, yp)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: SoftmaxFedAvg(lr=0.0), r"SoftmaxFedAvg\.lr must be in \(0, inf\)"),
        (lambda: SoftmaxFedAvg(lr=math.nan), r"SoftmaxFedAvg\.lr"),
        (lambda: SoftmaxFedAvg(batch_size=0), r"SoftmaxFedAvg\.batch_size .*\[1, inf\]"),
        (lambda: SoftmaxFedAvg(epochs=1.5), r"SoftmaxFedAvg\.epochs must be an integer"),
        (lambda: SyntheticSoftmax(k=1), r"SyntheticSoftmax\.k .*\[2, inf\]"),
        (lambda: SyntheticSoftmax(samples_per_client=0), r"SyntheticSoftmax\.samples_per_client"),
        (lambda: SyntheticSoftmax(test_samples=0), r"SyntheticSoftmax\.test_samples"),
        (lambda: SyntheticSoftmax(d=0), r"SyntheticSoftmax\.d "),
        (lambda: SyntheticSoftmax(data_seed=-1), r"SyntheticSoftmax\.data_seed"),
        (lambda: ClientArrays([], (np.zeros((1, 2)), [0])), r"ClientArrays\.clients must hold"),
        (
            lambda: ClientArrays([(np.zeros((2, 3)), [0])], (np.zeros((1, 3)), [0])),
            r"ClientArrays\.clients\[0\] y must have shape \(2,\)",
        ),
        (
            lambda: ClientArrays([(np.zeros((2, 3)), [0, 1])], (np.zeros((1, 4)), [0])),
            r"ClientArrays\.test x must have d = 3",
        ),
        (
            lambda: ClientArrays([(np.zeros((2, 3)), [0, -1])], (np.zeros((1, 3)), [0])),
            r"ClientArrays\.clients\[0\] y must hold non-negative integer labels",
        ),
        (
            lambda: ClientArrays([(np.zeros((2, 3)), [0, 4])], (np.zeros((1, 3)), [0]), 3),
            r"ClientArrays\.n_classes must be >= 2 and exceed every label \(max label 4\)",
        ),
        (
            lambda: ClientArrays([(np.full((1, 3), np.inf), [0])], (np.zeros((1, 3)), [1])),
            r"ClientArrays\.clients\[0\] x must be finite",
        ),
        (lambda: ClientArrays([(np.zeros(3), [0])], (np.zeros((1, 3)), [1])), r"2-d array"),
        (lambda: ClientArrays([np.zeros(3)], (np.zeros((1, 3)), [1])), r"\(x, y\) pair"),
    ],
)
def test_validation_errors_name_the_field(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_task_checks():
    with pytest.raises(ValueError, match=r"classification task .* for SoftmaxFedAvg"):
        SoftmaxFedAvg().check(LinearRepresentation())
    with pytest.raises(ValueError, match="holds 5 clients but the fleet has 6 devices"):
        small_task().build(6, Streams(0))
    assert repr(small_task()).startswith("ClientArrays(5 clients, 88 samples, d=5, 3 classes")
    assert isinstance(ClassificationData([(np.zeros((1, 2)), [1])], (np.zeros((1, 2)), [0])).d, int)


def w1_like(seed=0, policy=None, rounds=12, **fleet_kw):
    return Scenario(
        task=SyntheticSoftmax(samples_per_client=30, test_samples=200, d=8, k=4),
        algorithm=SoftmaxFedAvg(lr=0.2, batch_size=7),
        fleet=Fleet.homogeneous(30, compute=dists.Exponential(mean=0.2), **fleet_kw),
        policy=policy or policies.WaitAll(count=8),
        rounds=rounds,
        eval_every=3,
        seed=seed,
    )


def test_lazy_equals_eager_with_deadline_and_dropouts():
    sc = w1_like(policy=policies.Deadline(1.5, count=10), rounds=15, dropout_rate=0.3)
    lazy = run(sc, progress=False)
    eager = run(sc, progress=False, lazy=False)
    pd.testing.assert_frame_equal(lazy.rounds, eager.rounds, check_exact=True)
    pd.testing.assert_frame_equal(lazy.clients, eager.clients, check_exact=True)
    status = lazy.clients["status"]
    assert (status == "late").sum() > 5 and (status == "dropped").sum() > 5
    assert lazy.rounds["accuracy"].notna().sum() >= 5


def test_runs_are_deterministic_and_learn():
    a = run(w1_like(seed=3), progress=False)
    b = run(w1_like(seed=3), progress=False)
    pd.testing.assert_frame_equal(a.rounds, b.rounds, check_exact=True)
    pd.testing.assert_frame_equal(a.clients, b.clients, check_exact=True)
    np.testing.assert_array_equal(a.state.weight, b.state.weight)
    c = run(w1_like(seed=4), progress=False)
    assert not a.rounds["accuracy"].equals(c.rounds["accuracy"])
    acc = a.rounds["accuracy"].dropna()
    assert acc.iloc[-1] > a.meta["initial_metrics"]["accuracy"] + 0.1
    # work: ceil(30 / 7) = 5 SGD steps per job, a job's compute time is 5 draws of the fleet's
    assert (a.clients["work"] == 5).all()
