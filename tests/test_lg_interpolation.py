"""LG-FedAvg's alpha-interpolation on its synthetic data: the task, the federated OLS procedure,
the closed form, and the Fig. 2 reproduction at reduced size."""

import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simfl import Fleet, Scenario, Streams, dists, policies, run
from simfl.algorithms.lg_interpolation import LGInterpolation
from simfl.tasks.lg_synthetic import (
    LGSynthetic,
    alpha_metric,
    expected_test_mse,
    optimal_alpha,
    paper_error,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analysis"))

import lg_alpha

from tests.helpers import arrived

SMALL = LGSynthetic(d=3, train_samples=5, test_samples=4, sigma=0.7, rho=0.3, alphas=(0, 0.4, 1))


def scenario(policy, task=None, n=12, rounds=4, seed=0, **fleet_kw):
    return Scenario(
        task=task or LGSynthetic(d=3, train_samples=20, test_samples=10, rho=0.2),
        algorithm=LGInterpolation(),
        fleet=Fleet.homogeneous(n, compute=dists.Exponential(mean=1.0), **fleet_kw),
        policy=policy,
        rounds=rounds,
        seed=seed,
    )


def test_metric_names_and_noise_conventions():
    assert LGSynthetic().metrics[:3] == ("mse_a0.0", "mse_a0.1", "mse_a0.2")
    assert LGSynthetic().metrics[-3:] == ("alpha_best", "mse_best", "mse_oracle")
    assert [alpha_metric(a) for a in (0, 0.05, 1)] == ["mse_a0.0", "mse_a0.05", "mse_a1.0"]
    assert LGSynthetic(sigma=1.5).noise_std == 1.5  # the paper (default)
    assert LGSynthetic(sigma=1.5, convention="script").noise_std == 2.25  # plot_synthetic_data.py


def test_task_data_model():
    spec = LGSynthetic(d=4, train_samples=6, test_samples=3, sigma=0.5, rho=0.2)
    data = spec.build(5, Streams(3))
    assert ((data.v > 0) & (data.v < 1)).all() and data.v.shape == (4,)
    u = data.teachers(np.arange(5))
    r = Streams(3).normal("lg/r", np.arange(5)[:, None], np.arange(4)[None, :])
    np.testing.assert_array_equal(u, data.v + 0.2 * r)
    x, y = data.batch("train", np.array([1, 3]))
    assert x.shape == (2, 6, 4) and y.shape == (2, 6) and (np.abs(x) < 1).all()
    eps = Streams(3).normal("lg/train/noise", np.array([1, 3])[:, None], np.arange(6)[None, :])
    np.testing.assert_allclose(y, np.einsum("cnd,cd->cn", x, u[[1, 3]]) + 0.5 * eps, atol=1e-14)
    # a device's data ignore the rest of the cohort, train and test differ, the set is fixed
    x3, y3 = data.batch("train", np.array([3]))
    assert np.array_equal(x3[0], x[1]) and np.array_equal(y3[0], y[1])
    assert not np.array_equal(data.batch("test", np.array([3]))[0][0], x3[0, :3])
    # statistics by hand, and chunked generation equals one batch
    gram, xty, yty = data.stats("train", np.array([1, 3]))
    np.testing.assert_allclose(gram[1], x[1].T @ x[1], rtol=1e-13)
    np.testing.assert_allclose(xty[1], x[1].T @ y[1], rtol=1e-13)
    assert yty[1] == pytest.approx(y[1] @ y[1], rel=1e-13)
    assert np.array_equal(data.stats("train", np.array([3]))[0][0], gram[1])
    np.testing.assert_array_equal(data.client_sizes(), np.full(5, 6.0))


def hand_ols(x, y):
    """Normal equations from plain loops over samples."""
    d = x.shape[1]
    g, b = np.zeros((d, d)), np.zeros(d)
    for xi, yi in zip(x, y, strict=True):
        g += np.outer(xi, xi)
        b += xi * yi
    return g, b


def test_two_devices_by_hand():
    alg = LGInterpolation()
    s = Streams(7)
    data = SMALL.build(2, s)
    state = alg.initial_state(data, s)
    clients = np.array([0, 1])
    (x0, x1), (y0, y1) = data.batch("train", clients)
    (g0, b0), (g1, b1) = hand_ols(x0, y0), hand_ols(x1, y1)
    up = alg.local_updates(state, data, clients, 0, s)
    new = alg.aggregate(state, up, arrived(up))
    # pooled OLS = the solution of the summed normal equations (= lstsq on the stacked data)
    pooled = np.linalg.solve(g0 + g1, b0 + b1)
    np.testing.assert_allclose(new.global_model, pooled, rtol=1e-10)
    stacked = np.linalg.lstsq(np.vstack([x0, x1]), np.concatenate([y0, y1]), rcond=None)[0]
    np.testing.assert_allclose(new.global_model, stacked, rtol=1e-9)
    local = [np.linalg.solve(g0, b0), np.linalg.solve(g1, b1)]
    np.testing.assert_allclose(alg.local_models(data), local, rtol=1e-10)
    loss = [np.mean((x @ w - y) ** 2) for x, y, w in ((x0, y0, local[0]), (x1, y1, local[1]))]
    np.testing.assert_allclose(up.loss, loss, rtol=1e-9)
    # f_alpha by hand on each device's test points, mean over the two devices
    xt, yt = data.batch("test", clients)
    metrics = alg.evaluate(new, data)
    for a in SMALL.alphas:
        mse = [
            np.mean(
                [(xt[m, j] @ (a * local[m] + (1 - a) * pooled) - yt[m, j]) ** 2 for j in range(4)]
            )
            for m in range(2)
        ]
        assert metrics[alpha_metric(a)] == pytest.approx(np.mean(mse), rel=1e-10)
    u = data.teachers(clients)
    assert metrics["mse_oracle"] == pytest.approx(
        np.mean((np.einsum("cnd,cd->cn", xt, u) - yt) ** 2)
    )
    best = min(SMALL.alphas, key=lambda a: metrics[alpha_metric(a)])
    assert metrics["alpha_best"] == best and metrics["mse_best"] == metrics[alpha_metric(best)]


def test_each_device_counted_once_and_zero_global_before_arrivals():
    alg = LGInterpolation()
    s = Streams(1)
    data = SMALL.build(3, s)
    state = alg.initial_state(data, s)
    np.testing.assert_array_equal(state.global_model, np.zeros(3))
    # before any arrival f_alpha = alpha * u_local
    local = alg.local_models(data)
    assert alg.evaluate(state, data)["mse_a0.4"] == pytest.approx(
        float(data.test_mse(0.4 * local).mean()), rel=1e-12
    )
    twice = alg.local_updates(state, data, np.array([1]), 0, s)
    twice = twice.repeat(np.array([2]))  # drawn twice in one round
    one = alg.local_updates(state, data, np.array([1]), 0, s)
    once = alg.aggregate(state, one, arrived(one))
    first = alg.aggregate(state, twice, arrived(twice))
    np.testing.assert_array_equal(first.gram, once.gram)
    pair = alg.local_updates(first, data, np.array([1, 2]), 1, s)
    again = alg.aggregate(first, pair, arrived(pair, 1))
    g = data.stats("train", np.array([1, 2]))[0]
    np.testing.assert_allclose(again.gram, g.sum(axis=0), rtol=1e-13)
    assert again.n_counted == 2 and alg.aggregate(again, twice, arrived(twice, 2)) is again


def test_payload_and_work():
    alg = LGInterpolation()
    state = alg.initial_state(LGSynthetic(d=20).build(4, Streams(0)), Streams(0))
    assert alg.payload(state).down == 20 * 8 and alg.payload(state).up == (20 * 20 + 20) * 8
    np.testing.assert_array_equal(alg.work(state, np.arange(3)), np.ones(3))


def test_closed_form_is_the_papers_formula_mapped():
    d, n, m, s2, rho, c = 20, 2000, 100, 1.5**4, 0.1, 1 / 3
    a = np.linspace(0, 1, 11)
    ours = expected_test_mse(a, d=d, n=n, m=m, noise_var=s2, rho=rho)
    paper = paper_error(a, d=d, n=n, m=m, sigma=math.sqrt(s2), rho=math.sqrt(c * d) * rho)
    np.testing.assert_allclose(ours, s2 + paper, rtol=1e-14)
    b, av = (m - 1) / m * c * d * rho**2, d * s2 / n
    assert optimal_alpha(d=d, n=n, m=m, noise_var=s2, rho=rho) == pytest.approx(
        b / (av + b - av / m)
    )
    np.testing.assert_allclose(  # K = M is the default; K < M adds the out-of-pool devices
        expected_test_mse(a, d=d, n=n, m=m, noise_var=s2, rho=rho, arrived=m), ours
    )


def test_closed_form_matches_monte_carlo_of_the_estimator():
    """Brute force: the simfl estimator over many seeds, with 0, 2 or all 4 devices pooled; exact
    expected excess test MSE given the fitted models (||theta - u_m||^2 / 3, the test MSE less
    the label-noise variance s2 = 1) against the closed form less s2. At d=2, n=400 the
    neglected O(d/n) term is ~2e-5 at alpha=1, below half the Monte Carlo SE.

    Power (threshold from theory: the estimator's Monte Carlo SE): with 7500 seeds the standard
    error of each mean excess is at most ~0.85% of it (0.75-0.95% at 6000 seeds, 1.1-1.34% at
    2000; it falls as 1/sqrt(seeds)), and the test asserts it is below 0.88%, so a 5% error in
    the closed form's excess is >= 5.68 SE away at every point and the tolerance of 4 SE fails
    it with probability >= P(Z > 4 - 5.68) = 95.4% at each of the 15 points on its own (no
    independence assumed: the points share seeds); a correct closed form passes each with
    probability 1 - 6.3e-5, all 15 with >= 99.9% (checked: scaling the closed form's excess by
    1.05 or 0.95 fails)."""
    task = LGSynthetic(d=2, train_samples=400, test_samples=1, sigma=1.0, rho=0.3)
    alg, m, reps = LGInterpolation(), 4, 7500
    alphas = np.array([0.0, 0.25, 0.5, 0.75, 1.0])[:, None, None]
    pooled = (0, 2, 4)
    out = np.empty((len(pooled), reps, alphas.size))
    for seed in range(reps):
        s = Streams(seed)
        data = task.build(m, s)
        state = alg.initial_state(data, s)
        up = alg.local_updates(state, data, np.arange(m), 0, s)
        local, u = alg.solve(up.params["gram"], up.params["xty"]), data.teachers(np.arange(m))
        for i, k in enumerate(pooled):
            head = up.take(slice(0, k))
            glob = alg.aggregate(state, head, arrived(head)) if k else state
            theta = alphas * local + (1 - alphas) * glob.global_model
            out[i, seed] = ((theta - u) ** 2).sum(-1).mean(-1) / 3
    for i, k in enumerate(pooled):
        mean, se = out[i].mean(axis=0), out[i].std(axis=0, ddof=1) / math.sqrt(reps)
        closed = task.closed_form(m, alphas.ravel(), arrived=k) - 1.0  # the excess over s2
        # the power the docstring relies on: 0.05 / 0.0088 - 4 = 1.68 = the 95.4% quantile
        assert (se < 0.0088 * mean).all(), (k, se / mean)
        assert (np.abs(mean - closed) < 4 * se).all(), (k, (mean - closed) / se, se)


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: LGSynthetic(d=0), "LGSynthetic.d"),
        (lambda: LGSynthetic(train_samples=0), "LGSynthetic.train_samples"),
        (lambda: LGSynthetic(test_samples=0), "LGSynthetic.test_samples"),
        (lambda: LGSynthetic(sigma=-1.0), "LGSynthetic.sigma"),
        (lambda: LGSynthetic(rho=math.nan), "LGSynthetic.rho"),
        (lambda: LGSynthetic(convention="numpy"), "LGSynthetic.convention"),
        (lambda: LGSynthetic(alphas=()), "LGSynthetic.alphas"),
        (lambda: LGSynthetic(alphas=(0.0, 1.5)), "LGSynthetic.alphas[1]"),
        (lambda: LGSynthetic(alphas=(0.5, 0.2)), "LGSynthetic.alphas"),
        (lambda: LGSynthetic(alphas=3), "LGSynthetic.alphas"),
        (lambda: LGSynthetic(eval_clients=0), "LGSynthetic.eval_clients"),
        (lambda: LGInterpolation(ridge=-1.0), "LGInterpolation.ridge"),
        (
            lambda: scenario(policies.WaitAll(), LGSynthetic(d=5, train_samples=4)),
            "LGSynthetic.train_samples",
        ),
    ],
)
def test_validation_names_the_field(make, field):
    with pytest.raises(ValueError, match=field.replace("[", r"\[").replace("]", r"\]")):
        make()


def test_wrong_task_and_async_policy_are_refused():
    from simfl import tasks

    with pytest.raises(ValueError, match=r"Scenario\.task"):
        Scenario(
            task=tasks.LinearRepresentation(),
            algorithm=LGInterpolation(),
            fleet=Fleet.homogeneous(4, compute=dists.Exponential(mean=1.0)),
            policy=policies.WaitAll(),
            rounds=1,
        )
    with pytest.raises(ValueError, match="asynchronous"):
        scenario(policies.FedBuff(buffer_size=2, concurrency=4))
    # with a ridge, fewer samples than dimensions are fine
    sc = scenario(policies.WaitAll())
    few = LGSynthetic(d=5, train_samples=3, test_samples=3)
    ridge = Scenario(
        task=few, algorithm=LGInterpolation(ridge=0.1), fleet=sc.fleet, policy=sc.policy, rounds=1
    )
    assert run(ridge, progress=False, on_error="raise").ok


@pytest.mark.parametrize(
    "policy",
    [
        policies.WaitAll(fraction=0.5),
        policies.WaitAll(count=6, weights="size", replace=True),
        policies.Deadline(0.8, count=6),
        policies.FastestK(k=4, overcommit=0.5),
        policies.AdaptiveDeadline(quantile=0.7, count=6),
        policies.SRPFL(n0=2, rounds_per_stage=1),
    ],
    ids=lambda p: p.name,
)
def test_runs_under_every_sync_policy(policy):
    sc = scenario(policy, dropout_rate=0.2)
    res = run(sc, progress=False, on_error="raise")
    assert res.ok and len(res.rounds) == 4
    assert np.isfinite(res.rounds[list(sc.task.metrics)].iloc[-1]).all()
    # the global model pools exactly the devices that arrived, each once
    arrived = np.unique(res.clients.loc[res.clients["status"] == "arrived", "device"])
    np.testing.assert_array_equal(np.flatnonzero(res.state.counted), arrived)
    if arrived.size:
        data = sc.task.build(sc.fleet.size, Streams(sc.seed))
        gram, xty, _ = data.stats("train", arrived)
        np.testing.assert_allclose(
            res.state.global_model, np.linalg.solve(gram.sum(0), xty.sum(0)), rtol=1e-9
        )


def test_lazy_equals_eager():
    sc = scenario(
        policies.Deadline(0.7, count=8),
        n=16,
        rounds=6,
        dropout_rate=0.4,
        latency=0.01,
        bandwidth_up=4e4,
    )
    lazy = run(sc, progress=False)
    eager = run(sc, progress=False, lazy=False)
    pd.testing.assert_frame_equal(lazy.rounds, eager.rounds, check_exact=True)
    pd.testing.assert_frame_equal(lazy.clients, eager.clients, check_exact=True)
    assert (lazy.clients["status"] != "arrived").sum() > 5  # discarded work is exercised


def test_reproduction_fig2_reduced():
    """Fig. 2 at full d, M and sample sizes, 6 seeds: U-shaped curves whose interior minimum
    beats both extremes at alpha* near 0.6 (rho=0.1) and 0.3 (rho=0.06), within 4 SE of the
    closed form at every alpha: the test MSE against the [derived] formula, and the far less
    noisy excess over the test-set noise against it with its O(d/n) term (finite_n), which that
    comparison resolves (+5e-4 at alpha=1, about 0.6 SE here)."""
    frame = lg_alpha.alpha_curves(lg_alpha.FIG2, seeds=6)
    table = lg_alpha.summarize(frame)
    # A consistency check at the paper's size, not the powered one: with 6 seeds the SE of the
    # excess is 1.9-4.3% of it (1.3-3.1% even at 12 seeds), so this cannot see a 5% error; the
    # closed form is held to 5% with >= 95% power by test_closed_form_matches_monte_carlo_...
    # (6000 seeds at d=2), at the paper's size by the full-size run of analysis/lg_alpha.py
    # (160 seeds, SE <= 1%: test_full_size_closed_form_check_is_powered), and the U's shape
    # below by paired differences.
    assert (table["z"].abs() < 4).all() and (table["z excess (finite n)"].abs() < 4).all(), table
    opt = lg_alpha.optimum(table).set_index("rho")
    # the closed form has its minimum where the [sim] reference has it
    assert (opt["alpha* closed form (grid)"] == opt["alpha* reference"]).all(), opt
    assert opt["interior beats both ends"].all()
    # the closed form's real minimiser rounds to the reference's grid point (0.568 -> 0.6 and
    # 0.322 -> 0.3), a derived check independent of the grid
    assert opt.loc[0.1, "alpha* closed form"] == pytest.approx(0.568, abs=0.005)
    assert opt.loc[0.06, "alpha* closed form"] == pytest.approx(0.322, abs=0.005)
    # ours, paired by seed (the same data at every alpha): no alpha beats the reference's alpha*
    # by more than 3.29 SE of the paired difference, and both ends are worse than it by more
    # than 3.29 SE (instead of accepting the neighbouring grid point as alpha*)
    for (_, rho), g in frame.groupby(["sigma", "rho"]):
        best = g[lg_alpha.alpha_metric(lg_alpha.REFERENCE_ALPHA[(1.5, rho)])].to_numpy()
        for a in lg_alpha.ALPHA_GRID:
            diff = g[lg_alpha.alpha_metric(a)].to_numpy() - best
            se = diff.std(ddof=1) / np.sqrt(diff.size) if diff.any() else 0.0
            assert diff.mean() >= -3.29 * se, (rho, a, diff.mean(), se)
            if a in (0.0, 1.0):
                assert diff.mean() > 3.29 * se, (rho, a, diff.mean(), se)
    # one WaitAll round lasts as long as the slowest of the M jobs
    assert (frame["time"] == frame["duration"]).all()


def test_full_size_closed_form_check_is_powered():
    """The full-size results file of analysis/lg_alpha.py holds the powered paper-size check:
    recomputed from its table, every Fig. 2 point's SE of the excess is <= 0.88% of it (a 5%
    error is >= 5.68 SE: it fails a point with probability >= 95.4%) and within 4 SE of the
    closed form with its O(d/n) term, and the claim says "reproduced" only then."""
    import json

    import _common

    body = json.loads((_common.RESULTS / "lg_alpha.json").read_text())
    assert body["size"] == "full"
    table = pd.DataFrame(body["numbers"]["table"])
    fig2 = table[
        [(s, r) in lg_alpha.FIG2 for s, r in zip(table["sigma"], table["rho"], strict=True)]
    ]
    assert len(fig2) == 2 * len(lg_alpha.ALPHA_GRID)
    assert (fig2["rel se excess"] <= lg_alpha.POWER_SE).all(), fig2["rel se excess"].max()
    assert (fig2["z excess (finite n)"].abs() < lg_alpha.TOLERANCE_Z).all()
    check = lg_alpha.closed_form_check(table)
    assert check == body["numbers"]["closed_form_check"]
    closed = next(c for c in body["claims"] if c["claim"].startswith("Appendix C.1"))
    assert closed["status"] == check["status"] == "reproduced"
