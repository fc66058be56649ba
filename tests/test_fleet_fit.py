"""Fleets fitted from measured jobs: maximum likelihood per family, the criterion, the report."""

from __future__ import annotations

import io
import math
import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import simfl
from simfl import Fleet, Profile, Scenario, algorithms, dists, policies
from simfl.fleet import FAMILIES, FitWarning, fit_dist, fit_fleet

N = 20_000  # samples per family in the recovery tests


def _scipy(family: str, params: dict[str, float]):
    """The scipy.stats frozen distribution of a fitted simfl family's parameters."""
    if family == "Exponential":
        return stats.expon(scale=params["mean"])
    if family == "ShiftedExponential":
        return stats.expon(loc=params["shift"], scale=params["scale"])
    if family == "LogNormal":
        return stats.lognorm(s=params["sigma"], scale=math.exp(params["mu"]))
    if family == "Pareto":
        return stats.pareto(b=params["shape"], scale=params["scale"])
    assert family == "Uniform"
    return stats.uniform(loc=params["low"], scale=params["high"] - params["low"])


# Each case: the true distribution, its parameters, and per parameter (SE, tolerance) at N.
# Smooth parameters: tol = 3.5 SE; the test also asserts tol + 3 SE <= 5% of the true value, so
# an estimator 5% off would fail with probability > 0.998. Support bounds (the minimum of N
# draws) are off by an Exp(mean b) amount with b = (scale or range)/N: tol = 20 b, exceeded
# with probability e^-20.
CASES = {
    # mean: SE = mean / sqrt(N) = 0.71%
    "Exponential": (dists.Exponential(2.0), {"mean": (2.0, 2.0 / math.sqrt(N))}),
    # shift: the sample minimum, b = scale / N; scale = mean - min: SE = scale / sqrt(N)
    "ShiftedExponential": (
        dists.ShiftedExponential(shift=1.0, scale=2.0),
        {"shift": (1.0, None), "scale": (2.0, 2.0 / math.sqrt(N))},
    ),
    # mu: SE = sigma / sqrt(N); sigma: SE = sigma / sqrt(2 N)
    "LogNormal": (
        dists.LogNormal(mu=1.0, sigma=0.5),
        {"mu": (1.0, 0.5 / math.sqrt(N)), "sigma": (0.5, 0.5 / math.sqrt(2 * N))},
    ),
    # scale: the sample minimum, b = scale / (shape N); shape: SE = shape / sqrt(N)
    "Pareto": (
        dists.Pareto(shape=3.0, scale=1.5),
        {"shape": (3.0, 3.0 / math.sqrt(N)), "scale": (1.5, None)},
    ),
    # low, high: the sample minimum and maximum, b = (high - low) / N
    "Uniform": (dists.Uniform(1.0, 5.0), {"low": (1.0, None), "high": (5.0, None)}),
}
_BOUND = {"ShiftedExponential": 2.0 / N, "Pareto": 1.5 / (3.0 * N), "Uniform": 4.0 / N}


@pytest.mark.parametrize("family", list(CASES))
def test_each_family_is_recovered_and_chosen(family):
    true, params = CASES[family]
    x = true.sample(np.random.default_rng(7), N)
    fit = fit_dist(x, criterion="bic")
    assert type(fit.dist).__name__ == family, fit.candidates[["family", "bic"]]
    got = fit.chosen["params"]
    for name, (value, se) in params.items():
        tol = 20 * _BOUND[family] if se is None else 3.5 * se
        assert tol + 3 * (se or _BOUND[family]) <= 0.05 * abs(value)  # sized to catch 5%
        assert abs(got[name] - value) <= tol, (name, got[name], value, tol)
    # the simfl distribution is exactly the scipy one its parameters name
    ref = _scipy(family, got)
    u = np.array([0.0, 1e-9, 0.01, 0.25, 0.5, 0.75, 0.99, 1 - 1e-9])
    np.testing.assert_allclose(fit.dist.mean, ref.mean(), rtol=1e-12)
    np.testing.assert_allclose(fit.dist.var, ref.var(), rtol=1e-10)
    np.testing.assert_allclose(fit.dist.ppf(u), ref.ppf(u), rtol=1e-12)
    grid = ref.ppf(np.linspace(0.001, 0.999, 50))
    np.testing.assert_allclose(fit.dist.cdf(grid), ref.cdf(grid), rtol=1e-10, atol=1e-15)
    # and the closed-form estimates are scipy's maximum-likelihood fits (location fixed at 0
    # for the families simfl gives none)
    scipy_fit = {
        "Exponential": lambda: {"mean": stats.expon.fit(x, floc=0)[1]},
        "ShiftedExponential": lambda: dict(
            zip(("shift", "scale"), stats.expon.fit(x), strict=True)
        ),
        "LogNormal": lambda: (lambda s, _, scale: {"mu": math.log(scale), "sigma": s})(
            *stats.lognorm.fit(x, floc=0)
        ),
        "Pareto": lambda: (lambda b, _, scale: {"shape": b, "scale": scale})(
            *stats.pareto.fit(x, floc=0)
        ),
        "Uniform": lambda: (lambda lo, w: {"low": lo, "high": lo + w})(*stats.uniform.fit(x)),
    }[family]()
    for name, value in scipy_fit.items():
        assert got[name] == pytest.approx(value, rel=1e-9), name
    # log-likelihood and criteria
    row = fit.chosen
    assert row["loglik"] == pytest.approx(ref.logpdf(x).sum(), rel=1e-12)
    assert row["aic"] == pytest.approx(2 * row["k"] - 2 * row["loglik"], rel=1e-12)
    assert row["bic"] == pytest.approx(row["k"] * math.log(N) - 2 * row["loglik"], rel=1e-12)
    ks = stats.kstest(x, ref.cdf)
    assert row["ks_stat"] == ks.statistic and row["ks_p"] == ks.pvalue
    assert row["ks_p"] > 1e-3  # the true family fits
    assert fit.candidates["chosen"].sum() == 1 and len(fit.candidates) == len(FAMILIES)


def test_the_criterion_tells_lognormal_from_exponential():
    rng = np.random.default_rng(3)
    lognormal = dists.LogNormal.from_mean_std(2.0, 2.0).sample(rng, 5000)  # same mean and std
    exponential = dists.Exponential(2.0).sample(rng, 5000)  # as an exponential of mean 2
    for criterion in ("aic", "bic"):
        assert isinstance(fit_dist(lognormal, criterion=criterion).dist, dists.LogNormal)
        fit = fit_dist(exponential, criterion=criterion)
        assert isinstance(fit.dist, (dists.Exponential, dists.ShiftedExponential))
        bad = fit.candidates.set_index("family").loc["LogNormal", criterion]
        assert bad > fit.chosen[criterion] + 100  # not a close call
    # restricted families: only those are tried
    fit = fit_dist(lognormal, families=[dists.Exponential, dists.Uniform])
    assert list(fit.candidates["family"]) == ["Exponential", "Uniform"]


def test_constant_and_zero_samples():
    fit = fit_dist([1.5] * 20)
    assert fit.dist == dists.Constant(1.5) and fit.chosen["note"] == "all values equal"
    zeros = np.r_[np.zeros(5), dists.Exponential(1.0).sample(np.random.default_rng(0), 200)]
    fit = fit_dist(zeros)
    notes = fit.candidates.set_index("family")["note"]
    assert notes["LogNormal"] == notes["Pareto"] == "skipped: needs positive values"
    assert fit.chosen["family"] in ("Exponential", "ShiftedExponential", "Uniform")
    # no family left: the constant at the mean, said in the candidates
    fit = fit_dist(zeros, families=[dists.LogNormal])
    assert fit.dist == dists.Constant(float(zeros.mean()))
    assert "no family fits" in fit.chosen["note"]
    with pytest.raises(ValueError, match="fit_dist samples"):
        fit_dist([1.0, -1.0])


def _jobs(rng: np.random.Generator, counts: dict[str, int], group: dict[str, str]) -> pd.DataFrame:
    rows = []
    for device, n in counts.items():
        mean = 1.0 if group[device] == "fast" else 5.0
        for c in dists.Exponential(mean).sample(rng, n):
            rows.append({"device": device, "compute": c, "group": group[device]})
    return pd.DataFrame(rows)


def test_too_few_jobs_fall_back_and_are_reported():
    rng = np.random.default_rng(1)
    group = {"a": "fast", "b": "fast", "c": "fast", "x": "slow", "y": "slow"}
    jobs = _jobs(rng, {"a": 40, "b": 40, "c": 3, "x": 40, "y": 2}, group)
    with pytest.warns(FitWarning, match=r"2 of 5 devices have fewer than min_jobs=10"):
        fit = fit_fleet(jobs)
    rep = fit.report.set_index("device")
    assert fit.devices == ("a", "b", "c", "x", "y")
    assert rep["too_few"].tolist() == [False, False, True, False, True]
    assert rep.loc[["c", "y"], "fallback"].tolist() == ["group", "group"]
    assert rep.loc[["c", "y"], "loglik"].isna().all()  # no fit of their own
    assert rep.loc[["a", "b", "x"], "fallback"].eq("").all()
    # the fallback is the fit pooled over the group's jobs (its few ones included)
    fast = jobs.loc[jobs["group"] == "fast", "compute"]
    assert fit.fleet.dists[2] == fit_dist(fast.to_numpy()).dist
    assert fit.fleet.dists[4] == fit_dist(jobs.loc[jobs["group"] == "slow", "compute"]).dist
    assert rep.loc["c", "family"] == type(fit.fleet.dists[2]).__name__
    # the fleet's groups are the log's
    assert fit.fleet.group_labels().tolist() == ["fast"] * 3 + ["slow"] * 2
    # without groups: the fit pooled over every job
    with pytest.warns(FitWarning, match="too few"):
        fit = fit_fleet(jobs.drop(columns="group"))
    assert fit.report["fallback"].tolist() == ["", "", "pooled", "", "pooled"]
    assert fit.fleet.dists[2] == fit_dist(jobs["compute"].to_numpy()).dist
    # too few everywhere: each device's constant mean, never a fit of a few points
    tiny = jobs.groupby("device").head(2)  # 10 jobs in all, 6 and 4 per group
    with pytest.warns(FitWarning, match="5 of 5 devices"):
        fit = fit_fleet(tiny, min_jobs=11)
    assert fit.report["fallback"].eq("constant").all() and fit.report["too_few"].all()
    means = tiny.groupby("device")["compute"].mean()
    assert [d.mean for d in fit.fleet.dists] == pytest.approx(means.tolist(), rel=1e-15)
    assert all(isinstance(d, dists.Constant) for d in fit.fleet.dists)
    assert fit.candidates.empty


def test_by_group_and_by_another_column():
    rng = np.random.default_rng(2)
    group = {"a": "fast", "b": "fast", "x": "slow", "y": "slow"}
    jobs = _jobs(rng, {"a": 300, "b": 300, "x": 300, "y": 300}, group)
    fit = fit_fleet(jobs, by="group", criterion="bic")
    assert fit.report["group"].tolist() == ["fast", "slow"]
    assert fit.fleet.size == 4 and fit.fleet.group.tolist() == [0, 0, 1, 1]
    assert fit.fleet.group_names == ("fast", "slow")
    # 600 exponential draws per group: SE of the mean 1/sqrt(600) = 4.1%; tol 3.5 SE
    assert fit.fleet.mean_compute.tolist() == pytest.approx([1, 1, 5, 5], rel=0.144)
    jobs["model"] = jobs["group"].map({"fast": "pixel", "slow": "galaxy"})
    fit = fit_fleet(jobs, by="model")
    assert fit.report["model"].tolist() == ["galaxy", "pixel"]  # sorted
    assert "model" in fit.candidates.columns


def test_bad_input_names_the_column():
    good = pd.DataFrame({"device": [0, 0, 1], "compute": [1.0, 2.0, 3.0]})

    def refuses(pattern, jobs, **kw):
        with pytest.raises(ValueError, match=pattern):
            fit_fleet(jobs, **kw)

    refuses(r"need a 'compute' column", good.drop(columns="compute"))
    refuses(r"need a 'device' column", good.drop(columns="device"))
    refuses(r"'download' column but no 'upload'", good.assign(download=1.0))
    refuses(r"'bytes_up' column but no 'bytes_down'", good.assign(bytes_up=1.0))
    refuses(r"'compute' must be finite and >= 0; row 1", good.assign(compute=[1.0, -1, 2]))
    refuses(r"'compute' must be finite", good.assign(compute=[1.0, np.nan, 2]))
    arrived = good.assign(status="arrived", compute=[1.0, np.nan, 2])
    refuses(r"'compute' must be finite and >= 0; row 1", arrived)  # NaN only where cut short
    refuses(r"'work' must hold numbers", good.assign(work=["a", "b", "c"]))
    refuses(r"'status' must hold .*row 2 has 'ok'", good.assign(status=["arrived"] * 2 + ["ok"]))
    refuses(r"by='group' needs a 'group' column", good, by="group")
    refuses(r"'group' must hold one value per device", good.assign(group=["a", "b", "c"]))
    refuses(r"'device' must hold ids that sort", good.assign(device=[0, "a", 1]))
    refuses(r"'device' has a missing id in row 1", good.assign(device=[0, None, 1]))
    refuses(r"fit_fleet criterion", good, criterion="aicc")
    refuses(r"fit_fleet families\[0\]", good, families=[dists.Constant])
    refuses(r"fit_fleet families must be a list", good, families=dists.Exponential)
    refuses(r"fit_fleet min_jobs", good, min_jobs=2)
    refuses(r"jobs must be a pandas DataFrame", good.to_dict())
    refuses(r"renames 'client', which the jobs do not have", good, columns={"client": "device"})
    refuses(r"empty table", good.iloc[:0])
    refuses(r"no arrived job with work > 0", good.assign(status="dropped"))


def test_a_users_csv_with_its_own_column_names():
    rng = np.random.default_rng(4)
    n = 60
    csv = pd.DataFrame(
        {
            "client_id": np.repeat(["phone-2", "phone-1"], n),
            "train_seconds": dists.LogNormal(0.0, 0.3).sample(rng, 2 * n) * 8,
            "batches": 8,
        }
    ).to_csv(index=False)
    jobs = pd.read_csv(io.StringIO(csv))
    fit = fit_fleet(
        jobs, columns={"client_id": "device", "train_seconds": "compute", "batches": "work"}
    )
    assert fit.devices == ("phone-1", "phone-2") and fit.fleet.group_names == fit.devices
    assert fit.report["n"].tolist() == [n, n]
    # per unit of work: 60 draws, SE of the log-mean 0.3/sqrt(60) = 0.039; tol 3.5 SE
    for d in fit.fleet.dists:
        assert isinstance(d, dists.LogNormal) and abs(d.mu) < 0.136
    assert fit.fleet.redraw == "round"  # a fresh draw every job


def test_links_latency_and_bandwidth():
    rng = np.random.default_rng(5)
    n = 200
    b_down = rng.integers(10_000, 1_000_000, n).astype(float)
    b_up = np.full(n, 50_000.0)
    latency, bw_down, bw_up = 0.05, 2e6, 5e5
    base = pd.DataFrame(
        {
            "device": 0,
            "compute": 1.0,
            "download": latency + b_down / bw_down,
            "upload": latency + b_up / bw_up,
            "bytes_down": b_down,
            "bytes_up": b_up,
        }
    )
    # noise-free: exact (the sizes vary downward, so latency and both bandwidths are told apart)
    link = fit_fleet(base).links.iloc[0]
    assert link["link_fit"] == "latency+bandwidth" and link["rmse"] < 1e-12
    assert link["latency"] == pytest.approx(latency, rel=1e-9)
    assert link["bandwidth_down"] == pytest.approx(bw_down, rel=1e-9)
    assert link["bandwidth_up"] == pytest.approx(bw_up, rel=1e-9)
    # with noise of sd 5 ms per transfer, least squares stays close: the slope's SE is
    # 0.005 / (sd(bytes) sqrt(n)) ~ 1.2e-9 s/byte (0.25% of 1/bw_down); tol 2%
    noisy = base.assign(
        download=base["download"] + rng.normal(0, 0.005, n),
        upload=base["upload"] + rng.normal(0, 0.005, n),
    )
    link = fit_fleet(noisy).links.iloc[0]
    assert link["bandwidth_down"] == pytest.approx(bw_down, rel=0.02)
    assert link["latency"] == pytest.approx(latency, abs=0.005)
    assert link["rmse"] == pytest.approx(0.005, rel=0.2)
    # one size per direction: latency 0, the times in the bandwidths, reproduced exactly
    fixed = base.assign(bytes_down=100_000.0, download=latency + 100_000 / bw_down)
    fleet_link = fit_fleet(fixed).links.iloc[0]
    assert fleet_link["link_fit"] == "bandwidth" and fleet_link["latency"] == 0.0
    assert 100_000 / fleet_link["bandwidth_down"] == pytest.approx(latency + 100_000 / bw_down)
    assert 50_000 / fleet_link["bandwidth_up"] == pytest.approx(latency + 50_000 / bw_up)
    # no bytes moved: latency alone
    zero = base.assign(bytes_down=0.0, bytes_up=0.0, download=0.2, upload=0.2)
    row = fit_fleet(zero).links.iloc[0]
    assert row["link_fit"] == "latency" and row["latency"] == pytest.approx(0.2)
    assert math.isinf(row["bandwidth_down"]) and math.isinf(row["bandwidth_up"])
    # no byte counts: the mean transfer time as latency
    row = fit_fleet(base.drop(columns=["bytes_down", "bytes_up"])).links.iloc[0]
    assert row["link_fit"] == "no bytes"
    assert row["latency"] == pytest.approx(np.r_[base["download"], base["upload"]].mean())
    # no transfers: free links
    row = fit_fleet(base[["device", "compute"]]).links.iloc[0]
    assert row["link_fit"] == "none" and row["latency"] == 0.0


def _run(fleet: Fleet, rounds: int, **algo) -> simfl.Results:
    sc = Scenario(
        task=None,
        algorithm=algorithms.TimingOnly(**algo),
        fleet=fleet,
        policy=policies.WaitAll(),
        rounds=rounds,
        seed=11,
    )
    return simfl.run(sc, progress=False)


def test_round_trip_through_a_simfl_run():
    fast = Profile(dists.LogNormal(0.0, 0.5), bandwidth_down=1e6, bandwidth_up=5e5, name="fast")
    slow = Profile(dists.Exponential(2.0), bandwidth_down=2e5, bandwidth_up=1e5, name="slow")
    res = _run(
        Fleet.tiers((20, fast), (20, slow)),
        700,
        work_units=3.0,
        bytes_down=100_000,
        bytes_up=50_000,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every job arrived, every device has enough
        fit = fit_fleet(res, by="group", criterion="bic")
    rep = fit.report.set_index("group")
    assert rep["n"].tolist() == [14_000, 14_000] and not rep["too_few"].any()
    assert rep["family"].tolist() == ["LogNormal", "Exponential"]
    # 14,000 jobs per tier. LogNormal: SE(mu) = 0.5/sqrt(n) = 0.0042, SE(sigma) =
    # 0.5/sqrt(2n) = 0.0030 (0.6%); Exponential: SE(mean) = 2/sqrt(n) = 0.017 (0.85%).
    # tol = 3.5 SE; a 5% error in sigma or the mean is >= 2 SE beyond it
    lognormal, exponential = fit.fleet.dists
    assert abs(lognormal.mu) <= 3.5 * 0.0042 and abs(lognormal.sigma - 0.5) <= 3.5 * 0.0030
    assert abs(exponential.mean - 2.0) <= 3.5 * 0.017
    # links: one payload size, latency 0: the bandwidths exactly
    assert fit.links["bandwidth_down"].tolist() == pytest.approx([1e6] * 20 + [2e5] * 20)
    assert fit.links["bandwidth_up"].tolist() == pytest.approx([5e5] * 20 + [1e5] * 20)
    assert (fit.links["latency"] == 0).all() and (fit.links["dropout_rate"] == 0).all()
    assert fit.devices == tuple(range(40)) and fit.fleet.redraw == "round"
    # per device: 700 jobs each; the family is right for most, the means close
    fit = fit_fleet(res, criterion="bic")
    families = fit.report["family"]
    assert (families[:20] == "LogNormal").all()
    assert (families[20:] == "Exponential").mean() >= 0.9
    # exponential means: SE 2/sqrt(700) = 3.8%, tol 3.5 SE = 13%
    assert fit.fleet.mean_compute[20:] == pytest.approx(np.full(20, 2.0), rel=0.133)
    assert fit.fleet.group_labels().tolist() == ["fast"] * 20 + ["slow"] * 20
    # the fitted fleet runs the same scenario: jobs of its devices draw afresh every round
    again = _run(fit.fleet, 50, work_units=3.0, bytes_down=100_000, bytes_up=50_000)
    per_device = again.clients.groupby("device")["compute"].nunique()
    assert (per_device == 50).all()
    np.testing.assert_allclose(
        again.clients["download"],
        0.1 * (again.clients["device"] < 20) + 0.5 * (again.clients["device"] >= 20),
        rtol=1e-12,
    )


def test_dropout_hazard_round_trip():
    fleet = Fleet.homogeneous(20, dists.Constant(1.0), dropout_rate=0.1)
    res = _run(fleet, 500)
    with pytest.warns(FitWarning, match="did not arrive"):
        fit = fit_fleet(res)
    # compute from the arrived jobs only: the constant, exactly
    assert all(d == dists.Constant(1.0) for d in fit.fleet.dists)
    assert (fit.report["family"] == "Constant").all() and (fit.report["n_excluded"] > 0).all()
    # the hazard: drops / busy seconds. 10,000 jobs of 1 s, P(drop) = 1 - e^-0.1 = 9.5%: about
    # 950 drops, SE of the pooled rate 0.1/sqrt(950) = 3.2%; the mean of the per-device rates
    # is about the pooled one. tol 3.5 SE = 11%
    links = fit.links
    assert links["dropout_rate"].mean() == pytest.approx(0.1, rel=0.11)
    pooled = links["n_dropped"].sum() / links["busy_seconds"].sum()
    assert pooled == pytest.approx(0.1, rel=0.11)
    assert (links["n_jobs"] == 500).all()


def test_fleets_page_example_runs():
    page = (Path(__file__).resolve().parents[1] / "docs" / "fleets.md").read_text()
    block = re.search(r"## Fleets from measurements\n.*?```python\n(.*?)```", page, re.S)
    assert block is not None
    namespace: dict[str, object] = {}
    exec(compile(block.group(1), "docs/fleets.md", "exec"), namespace)
    fit = namespace["fit"]
    assert fit.report["family"].tolist() == ["LogNormal", "Exponential"]
    assert isinstance(namespace["res"], simfl.Results)


def test_cut_short_jobs_may_have_unknown_durations():
    # the twin's rows: a late job's durations are NaN (the server never learnt them); they are
    # left out of the duration fits (as every cut-short job is) and of the hazard's seconds
    jobs = pd.DataFrame(
        {
            "device": [0, 0, 0, 1, 1, 1],
            "status": ["arrived", "late", "dropped", "arrived", "arrived", "dropped"],
            "compute": [2.0, np.nan, 1.0, 3.0, 5.0, np.nan],
            "download": [0.5, np.nan, 0.5, 0.5, 0.5, np.nan],
            "upload": [0.5, np.nan, 0.5, 0.5, 0.5, np.nan],
        }
    )
    with pytest.warns(FitWarning):
        fit = fit_fleet(jobs, min_jobs=3)
    # device 0: one failure in the known busy seconds 3 + 2 (the late job's are unknown);
    # device 1: its dropped job's seconds are unknown, so that job is left out whole (failure
    # and exposure, as missing data): no failure in 4 + 6 seconds
    assert fit.links["busy_seconds"].tolist() == [5.0, 10.0]
    assert fit.links["n_dropped"].tolist() == [1, 0]
