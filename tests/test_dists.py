import math

import numpy as np
import pytest
from scipy import stats

from simfl import dists
from simfl.rng import Streams

# (distribution, the same law in scipy.stats) -- an independent source of exact moments
CASES = [
    (dists.Constant(2.5), None),
    (dists.Exponential(mean=2.0), stats.expon(scale=2.0)),
    (dists.ShiftedExponential(shift=0.5, scale=1.5), stats.expon(loc=0.5, scale=1.5)),
    (dists.LogNormal(mu=0.3, sigma=0.6), stats.lognorm(s=0.6, scale=math.exp(0.3))),
    (dists.Pareto(shape=3.5, scale=2.0), stats.pareto(b=3.5, scale=2.0)),
    (dists.Uniform(1.0, 100.0), stats.uniform(loc=1.0, scale=99.0)),
]


@pytest.mark.parametrize(("dist", "ref"), CASES)
def test_exact_moments_match_scipy(dist, ref):
    if ref is None:
        assert (dist.mean, dist.var) == (2.5, 0.0)
        return
    assert dist.mean == pytest.approx(ref.mean(), rel=1e-12)
    assert dist.var == pytest.approx(ref.var(), rel=1e-12)
    x = np.array([0.1, 1.0, 2.5, 7.0])
    np.testing.assert_allclose(dist.cdf(x), ref.cdf(x), rtol=1e-12, atol=1e-15)
    u = np.array([0.01, 0.3, 0.5, 0.9, 0.999])
    np.testing.assert_allclose(dist.ppf(u), ref.ppf(u), rtol=1e-10)


def test_hand_computed_moments():
    assert dists.Exponential(mean=3.0).var == 9.0
    assert dists.ShiftedExponential(1.0, 2.0).mean == 3.0
    assert dists.Pareto(shape=3.0, scale=2.0).mean == 3.0  # 3 * 2 / 2
    assert dists.Pareto(shape=3.0, scale=2.0).var == 3.0  # 4 * 3 / (4 * 1)
    assert dists.Pareto(shape=1.0, scale=1.0).mean == math.inf
    assert dists.Pareto(shape=2.0, scale=1.0).var == math.inf
    ln = dists.LogNormal.from_mean_std(mean=5.0, std=3.0)
    assert ln.mean == pytest.approx(5.0, rel=1e-13) and ln.std == pytest.approx(3.0, rel=1e-13)
    emp = dists.Empirical([1.0, 2.0, 2.0, 5.0])
    assert (emp.mean, emp.var) == (2.5, 2.25)


@pytest.mark.parametrize(("dist", "ref"), [c for c in CASES if c[1] is not None])
def test_keyed_sampling_has_the_right_law(dist, ref):
    u = Streams(11).uniform("t", np.arange(50_000))
    x = dist.ppf(u)
    assert (x >= 0).all()
    assert stats.kstest(x, ref.cdf).pvalue > 1e-3
    se = dist.std / math.sqrt(x.size)
    assert abs(x.mean() - dist.mean) < 5 * se


def test_empirical_resamples_its_values_uniformly():
    emp = dists.Empirical([3.0, 1.0, 2.0])
    x = emp.sample(np.random.default_rng(0), 30_000)
    assert set(np.unique(x)) == {1.0, 2.0, 3.0}
    counts = np.unique(x, return_counts=True)[1]
    assert stats.chisquare(counts).pvalue > 1e-3
    np.testing.assert_array_equal(emp.cdf([0.5, 1.0, 2.5, 3.0]), [0, 1 / 3, 2 / 3, 1])


def test_distributions_are_immutable_and_comparable():
    e = dists.Exponential(mean=1.0)
    assert e == dists.Exponential(1.0) and hash(e) == hash(dists.Exponential(1.0))
    with pytest.raises(AttributeError):
        e.mean = 2.0  # type: ignore[misc]
    assert dists.Empirical([1, 2]) == dists.Empirical([2, 1])
    assert repr(e) == "Exponential(mean=1.0)"


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: dists.Exponential(mean=-1.0), "Exponential.mean"),
        (lambda: dists.Exponential(mean=0.0), "Exponential.mean"),
        (lambda: dists.Exponential(mean=math.nan), "Exponential.mean"),
        (lambda: dists.Exponential(mean=math.inf), "Exponential.mean"),
        (lambda: dists.Constant(-0.1), "Constant.value"),
        (lambda: dists.ShiftedExponential(shift=-1.0, scale=1.0), "ShiftedExponential.shift"),
        (lambda: dists.ShiftedExponential(shift=1.0, scale=0.0), "ShiftedExponential.scale"),
        (lambda: dists.LogNormal(mu=math.nan, sigma=1.0), "LogNormal.mu"),
        (lambda: dists.LogNormal(mu=0.0, sigma=-1.0), "LogNormal.sigma"),
        (lambda: dists.LogNormal.from_mean_std(mean=0.0, std=1.0), "LogNormal.mean"),
        (lambda: dists.Pareto(shape=0.0, scale=1.0), "Pareto.shape"),
        (lambda: dists.Pareto(shape=2.0, scale=-1.0), "Pareto.scale"),
        (lambda: dists.Uniform(5.0, 1.0), "Uniform.high"),
        (lambda: dists.Empirical([]), "Empirical.samples"),
        (lambda: dists.Empirical([1.0, -2.0]), "Empirical.samples"),
        (lambda: dists.Empirical([1.0, math.nan]), "Empirical.samples"),
        (lambda: dists.Exponential(mean="1"), "Exponential.mean"),  # type: ignore[arg-type]
    ],
)
def test_invalid_parameters_name_the_field(build, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        build()
