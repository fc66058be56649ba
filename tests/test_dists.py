import math

import numpy as np
import pytest
from scipy import special, stats

from simfl import dists
from simfl.rng import UNIFORM_MAX, Streams

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


# ---------------------------------------------------------------- finite draws (MAX_DRAW rule)
# Every distribution's largest draw -- its ppf at UNIFORM_MAX, the largest uniform simfl's
# streams produce -- and its mean must be <= MAX_DRAW = 1e300; otherwise construction fails.


@pytest.mark.parametrize(
    ("build", "field", "value"),
    [
        (lambda: dists.Exponential(1e308), "Exponential.mean", "1e+308"),
        (lambda: dists.LogNormal(1000.0, 1.0), "LogNormal.mu", "1000"),
        (lambda: dists.LogNormal(0.0, 50.0), "LogNormal.sigma", "50"),  # the mean overflows
        (lambda: dists.Pareto(shape=0.001, scale=1.0), "Pareto.shape", "0.001"),
        (lambda: dists.Pareto(shape=2.0, scale=1e300), "Pareto.scale", "1e+300"),
        (lambda: dists.ShiftedExponential(0.0, 1e308), "ShiftedExponential.scale", "1e+308"),
        (lambda: dists.ShiftedExponential(1e301, 1.0), "ShiftedExponential.shift", "1e+301"),
        (lambda: dists.Constant(1e301), "Constant.value", "1e+301"),
        (lambda: dists.Uniform(0.0, 1e301), "Uniform.high", "1e+301"),
        (lambda: dists.Empirical([1.0, 1e305]), "Empirical.samples", "1e+305"),
    ],
)
def test_overflowing_draws_are_refused_naming_field_value_and_range(build, field, value):
    with pytest.raises(ValueError, match=field.replace(".", r"\.")) as err:
        build()
    msg = str(err.value)
    assert f"got {value}" in msg
    assert "MAX_DRAW = 1e+300" in msg and "draws stay finite" in msg


def test_the_bounds_come_from_the_ppf_at_the_largest_uniform():
    assert np.nextafter(1.0, 0.0) == UNIFORM_MAX
    # Exponential: the largest draw is mean * -log(1 - UNIFORM_MAX) = mean * 53 ln 2
    bound = dists.MAX_DRAW / (53 * math.log(2.0))
    assert dists.Exponential(bound * (1 - 1e-12)).max_draw <= dists.MAX_DRAW
    with pytest.raises(ValueError, match=r"Exponential\.mean must be a positive number <= 2\.72"):
        dists.Exponential(bound * (1 + 1e-12))
    # Pareto: scale * exp(53 ln 2 / shape) <= 1e300
    low = 53 * math.log(2.0) / math.log(dists.MAX_DRAW)
    assert dists.Pareto(low * (1 + 1e-12), 1.0).max_draw <= dists.MAX_DRAW
    with pytest.raises(ValueError, match=r"Pareto\.shape must be >= 0\.0531"):
        dists.Pareto(low * (1 - 1e-12), 1.0)
    # LogNormal: mu + sigma * ndtri(UNIFORM_MAX) <= log(1e300)
    top = float(special.ndtri(UNIFORM_MAX))
    mu = math.log(dists.MAX_DRAW) - top
    assert dists.LogNormal(mu - 1e-9, 1.0).max_draw <= dists.MAX_DRAW
    with pytest.raises(ValueError, match=r"LogNormal\.mu"):
        dists.LogNormal(mu + 1e-9, 1.0)


HUGE_BUT_FINITE = [
    dists.Exponential(1e200),
    dists.Exponential(1e298),
    dists.ShiftedExponential(1e200, 1e200),
    dists.LogNormal(600.0, 5.0),
    dists.LogNormal(-1000.0, 30.0),
    dists.LogNormal.from_mean_std(1e-300, 1e100),
    dists.Pareto(shape=0.06, scale=1.0),
    dists.Pareto(shape=3.0, scale=1e200),
    dists.Uniform(0.0, 1e300),
    dists.Constant(1e300),
    dists.Empirical([1e299, 1e300]),
]


@pytest.mark.parametrize("dist", HUGE_BUT_FINITE, ids=repr)
def test_huge_but_finite_distributions_construct_and_never_overflow(dist):
    with np.errstate(over="raise", invalid="raise"):  # (underflow to 0 is fine)
        top = dist.max_draw
        x = dist.ppf(Streams(0).uniform("t", np.arange(1000)))
    assert 0.0 <= top <= dists.MAX_DRAW
    assert np.isfinite(x).all() and x.max() <= top
    mean, var, std = dist.mean, dist.var, dist.std  # none raises OverflowError
    assert mean <= dists.MAX_DRAW or (isinstance(dist, dists.Pareto) and dist.shape <= 1.0)
    assert var >= 0.0 and std >= 0.0  # var may be inf: exact value beyond the float range
    if math.isfinite(var):
        assert std == pytest.approx(math.sqrt(var), rel=1e-12)


def test_moments_beyond_the_float_range_are_inf_and_std_stays_exact():
    assert dists.Exponential(1e200).var == math.inf  # exactly 1e400
    assert dists.Exponential(1e200).std == 1e200
    assert dists.Uniform(0.0, 1e200).std == pytest.approx(1e200 / math.sqrt(12.0), rel=1e-15)
    assert dists.Pareto(3.0, 1e200).std == pytest.approx(1e200 / 2.0 * math.sqrt(3.0), rel=1e-15)
    ln = dists.LogNormal(600.0, 5.0)  # std = mean * sqrt(expm1(25))
    assert ln.std == pytest.approx(ln.mean * math.sqrt(math.expm1(25.0)), rel=1e-12)
    # a variance that the old formula overflowed on (expm1(900)) although it is representable
    tiny = dists.LogNormal(-1000.0, 30.0)
    assert tiny.var == pytest.approx(math.exp(900.0 - 2000.0 + 900.0), rel=1e-12)


def test_streams_never_return_one():
    # the top 53-bit integer used to round to exactly 1.0 (an infinite exponential draw)
    class Top(Streams):
        def _hash(self, purpose, keys):
            return np.full(3, np.iinfo(np.uint64).max, dtype=np.uint64)

    u = Top(0).uniform("t", np.arange(3))
    assert (u == UNIFORM_MAX).all() and (u < 1.0).all()
    assert np.isfinite(dists.Exponential(1.0).ppf(u)).all()
