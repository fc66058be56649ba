"""GD-GD / 10GD-GD, Local-only, FedSGD's refit evaluation and new clients (FedRep Figs 1, 3, 4)."""

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simfl import Fleet, Streams, algorithms, dists, policies, run, tasks
from simfl.tasks.linear import principal_angle_distance
from tests.helpers import arrived, linear_scenario

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analysis"))
import fedrep_fig1_fig4
import fedrep_fig3

ALL_SYNC = [
    policies.WaitAll(fraction=0.2),
    policies.Deadline(1.0, fraction=0.2),
    policies.FastestK(k=10, overcommit=1.0),
    policies.AdaptiveDeadline(count=20),
    policies.SRPFL(n0=5, rounds_per_stage=5),
]


def small_data(m=6, fresh=True):
    spec = tasks.LinearRepresentation(
        d=5, k=2, samples_per_client=m, noise_std=0.1, fresh_samples=fresh
    )
    return spec.build(4, Streams(3))


def test_gdgd_update_by_hand():
    data = small_data()
    alg = algorithms.GDGD(head_steps=3, head_step_size=0.2, step_size=0.3)
    state = alg.initial_state(data, Streams(3))
    clients = np.array([1, 3])
    x, y = data.train_batch(clients, 2)
    upd = alg.local_updates(state, data, clients, 2, Streams(3))
    for i, c in enumerate(clients):
        b, w = state.representation, state.heads[c].copy()
        for _ in range(3):
            w = w - 0.2 * (x[i] @ b).T @ (x[i] @ b @ w - y[i]) / 6
        grad = np.outer(x[i].T @ (x[i] @ b @ w - y[i]), w) / 6
        np.testing.assert_allclose(upd.params["head"][i], w, rtol=1e-10)
        np.testing.assert_allclose(upd.params["representation"][i], b - 0.3 * grad, rtol=1e-10)
    new = alg.aggregate(state, upd, arrived(upd, 2))
    np.testing.assert_allclose(new.representation, upd.params["representation"].mean(axis=0))
    np.testing.assert_array_equal(new.heads[[0, 2]], state.heads[[0, 2]])  # untouched
    np.testing.assert_array_equal(new.heads[clients], upd.params["head"])


def test_gdgd_initial_heads_are_least_squares_on_the_init_batch():
    data = small_data()
    state = algorithms.GDGD().initial_state(data, Streams(3))
    x, y = data.init_batch(np.arange(4))
    for c in range(4):
        xb = x[c] @ state.representation
        np.testing.assert_allclose(
            state.heads[c], np.linalg.lstsq(xb, y[c], rcond=None)[0], rtol=1e-8
        )
    zero = algorithms.GDGD(head_init="zero").initial_state(data, Streams(3))
    assert not zero.heads.any()


def test_local_only_by_hand():
    data = small_data(m=8, fresh=True)
    alg = algorithms.LocalOnly(ridge=0.01)
    state = alg.initial_state(data, Streams(3))
    upd = alg.local_updates(state, data, np.array([0, 2]), 5, Streams(3))
    state = alg.aggregate(state, upd, arrived(upd, 5))
    metrics = alg.evaluate(state, data)
    assert set(metrics) == {"test_mse"}  # no shared representation, no distance
    xf, yf = data.fit_batch()
    xr, yr = data.train_batch(np.array([0, 2]), 5)
    xt, yt = data.test_batch()
    errs = []
    for c in range(4):
        xs = np.vstack([xf[c]] + ([xr[[0, 2].index(c)]] if c in (0, 2) else []))
        ys = np.concatenate([yf[c]] + ([yr[[0, 2].index(c)]] if c in (0, 2) else []))
        u = np.linalg.solve(xs.T @ xs + 0.01 * np.eye(5), xs.T @ ys)
        errs.append(np.mean((xt[c] @ u - yt[c]) ** 2))
    assert metrics["test_mse"] == pytest.approx(np.mean(errs), rel=1e-10)
    assert alg.payload(state).down == alg.payload(state).up == 0


def test_fedavg_refit_evaluation_fits_heads_on_the_learned_representation():
    data = small_data(m=8)
    alg = algorithms.FedAvg(evaluate_heads="refit")
    state = alg.initial_state(data, Streams(3))
    x, y = data.fit_batch()
    heads = np.stack(
        [
            np.linalg.solve(
                (x[c] @ state.representation).T @ x[c] @ state.representation + 1e-5 * np.eye(2),
                (x[c] @ state.representation).T @ y[c],
            )
            for c in range(4)
        ]
    )
    expected = data.evaluate(tasks.LinearModel(state.representation, heads))
    assert alg.evaluate(state, data) == pytest.approx(expected, rel=1e-9)


def test_new_clients_fit_only_a_head():
    spec = tasks.LinearRepresentation(d=20, k=2, noise_std=0.0)
    data = spec.build(10, Streams(1))
    # the true representation: exact once m_new >= k (without the ridge's shrinkage);
    # Local-only needs m_new >= d
    assert data.new_client_mse(data.b_star, 2, ridge=0.0) < 1e-20
    assert data.new_client_mse(data.b_star, 5) < 1e-8
    assert data.new_client_mse(data.b_star, 1) > 1e-2
    assert data.new_client_mse(None, 10) > 0.1
    assert data.new_client_mse(None, 20, ridge=0.0) < 1e-20
    wrong = np.linalg.qr(np.random.default_rng(0).normal(size=(20, 2)))[0]
    assert principal_angle_distance(wrong, data.b_star) > 0.5
    assert data.new_client_mse(wrong, 10) > 0.1


@pytest.mark.parametrize("policy", ALL_SYNC, ids=lambda p: p.name)
@pytest.mark.parametrize(
    "alg", [algorithms.GDGD(head_steps=2), algorithms.LocalOnly()], ids=lambda a: a.name
)
def test_baselines_under_every_sync_policy_lazy_equals_eager(policy, alg):
    sc = linear_scenario(alg, policy, rounds=12, dropout_rate=0.3)
    lazy, eager = run(sc, progress=False), run(sc, progress=False, lazy=False)
    pd.testing.assert_frame_equal(lazy.rounds, eager.rounds, check_exact=True)
    pd.testing.assert_frame_equal(lazy.clients, eager.clients, check_exact=True)
    assert lazy.ok and np.isfinite(lazy.rounds["test_mse"].iloc[-1])


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: algorithms.GDGD(head_steps=0), "GDGD.head_steps"),
        (lambda: algorithms.GDGD(head_step_size=-1.0), "GDGD.head_step_size"),
        (lambda: algorithms.GDGD(head_init="svd"), "GDGD.head_init"),
        (lambda: algorithms.LocalOnly(ridge=-1.0), "LocalOnly.ridge"),
        (lambda: algorithms.FedAvg(evaluate_heads="best"), "FedAvg.evaluate_heads"),
    ],
)
def test_invalid(build, field):
    with pytest.raises(ValueError, match=field):
        build()


def test_fig3_reduced_fedrep_faster_with_n_and_beats_gd_gd():
    rounds = 100
    frame, _ = fedrep_fig3.experiment((10, 100), seeds=2, rounds=rounds, fixed=False)
    table = fedrep_fig3.summary(frame, rounds).set_index(["n", "method"])
    d = table["distance at T (mean)"]
    assert d[(100, "FedRep")] < d[(10, "FedRep")] / 2  # faster with more clients
    rate = table["mean log10 distance"]  # area under the log-distance curve
    assert rate[(100, "FedRep")] < rate[(10, "FedRep")] - 1.0
    for n in (10, 100):
        assert rate[(n, "FedRep")] < rate[(n, "GD-GD")]
        assert rate[(n, "FedRep")] < rate[(n, "10GD-GD")]


def test_fig1_fig4_reduced():
    f1 = fedrep_fig1_fig4.figure1((5,), seeds=1, rounds=150)
    last = f1.dropna(subset=["test_mse"]).groupby("method").tail(1).set_index("method")
    mse = last["test_mse"]
    assert mse["FedRep"] < mse["FedSGD"] / 1000 and mse["FedRep"] < mse["Local-only"] / 1000
    f4 = fedrep_fig1_fig4.figure4(seeds=1, rounds=150)
    t = f4.groupby(["m_new", "method"])["new client MSE"].mean().unstack()
    assert (t.loc[[2, 5, 10, 20], "FedRep"] < 1e-2).all()  # m_new >= k
    assert (t.loc[[1, 2, 5, 10], "Local-only"] > 0.1).all()  # needs about d samples
    assert t.loc[20, "Local-only"] < 0.1
    assert (t["FedSGD"] > 1.0).all()


def test_fleet_default_fixture_is_not_shared_state():
    # each call builds its own fleet, and a replaced fleet is the one that is simulated: on a
    # Constant(2.0) s/unit fleet every job computes for exactly 2 s per unit of work
    a, b = linear_scenario(n=3), linear_scenario(n=3)
    assert a.fleet is not b.fleet
    f = Fleet.homogeneous(3, dists.Constant(2.0))
    sc = dataclasses.replace(linear_scenario(n=3, policy=policies.WaitAll(), rounds=2), fleet=f)
    jobs = run(sc, progress=False).clients
    assert len(jobs) == 6
    np.testing.assert_array_equal(jobs["compute"], 2.0 * jobs["work"])
    default = run(dataclasses.replace(sc, fleet=a.fleet), progress=False).clients
    assert not np.array_equal(default["compute"], 2.0 * default["work"])  # Exp(1), not constant


def test_gdgd_costs_one_work_unit_per_gradient_step():
    # FedAvg(local_steps=10) costs 10 units: 10GD-GD's ten head steps and one step on B cost 11,
    # GD-GD's two steps 2, on the same seeded fleet (so compute times scale by 11/2 exactly)
    def jobs(alg):
        return run(linear_scenario(alg, rounds=3), progress=False).clients

    fedavg = jobs(algorithms.FedAvg(local_steps=10))
    gd, gd10 = jobs(algorithms.GDGD()), jobs(algorithms.GDGD(head_steps=10))
    assert (fedavg["work"] == 10.0).all()
    assert (gd["work"] == 2.0).all() and (gd10["work"] == 11.0).all()
    np.testing.assert_array_equal(gd10["device"], gd["device"])
    np.testing.assert_allclose(gd10["compute"], gd["compute"] * 11 / 2, rtol=1e-12)
    assert (gd10["t_end"] > gd["t_end"]).all()
