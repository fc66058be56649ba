import math

import numpy as np
import pytest

from simfl import Fleet, Profile, dists
from simfl.rng import Streams


def test_homogeneous_columns():
    f = Fleet.homogeneous(
        5, compute=dists.Exponential(2.0), bandwidth_up=100.0, latency=0.1, dropout_rate=0.5
    )
    assert f.size == len(f) == 5
    assert np.array_equal(f.mean_compute, np.full(5, 2.0))
    assert np.array_equal(f.bandwidth_up, np.full(5, 100.0))
    assert np.isinf(f.bandwidth_down).all()
    table = f.table()
    assert list(table["device"]) == [0, 1, 2, 3, 4]
    assert set(table.columns) >= {"compute", "bandwidth_down", "latency", "dropout_rate"}
    with pytest.raises(ValueError):
        f.latency[0] = 3.0  # read-only columns


def test_tiers_and_concatenation():
    fast = Profile(dists.Exponential(1.0), name="fast")
    slow = Profile(dists.Constant(10.0), bandwidth_up=1e3, name="slow")
    f = Fleet.tiers((3, fast), (2, slow))
    assert list(f.table()["group"]) == ["fast"] * 3 + ["slow"] * 2
    assert np.array_equal(f.mean_compute, [1, 1, 1, 10, 10])
    assert np.array_equal(f.bandwidth_up, [math.inf] * 3 + [1e3] * 2)
    g = Fleet.homogeneous(2, dists.Constant(1.0)) + Fleet.homogeneous(1, dists.Constant(4.0))
    assert np.array_equal(g.mean_compute, [1, 1, 4])


def test_mixture_proportions_and_determinism():
    a = Profile(dists.Constant(1.0))
    b = Profile(dists.Constant(2.0))
    f = Fleet.mixture(20_000, [(0.25, a), (0.75, b)], seed=3)
    share = float((f.group == 0).mean())
    assert abs(share - 0.25) < 4 * math.sqrt(0.25 * 0.75 / 20_000)
    assert np.array_equal(f.group, Fleet.mixture(20_000, [(0.25, a), (0.75, b)], seed=3).group)
    # a larger fleet keeps the types of the devices already there
    assert np.array_equal(
        Fleet.mixture(20_010, [(0.25, a), (0.75, b)], seed=3).group[:20_000], f.group
    )


def test_per_device_scale_from_a_distribution():
    f = Fleet.homogeneous(1000, compute=dists.Exponential(1.0), scale=dists.Uniform(1.0, 100.0))
    assert f.scale.min() >= 1.0 and f.scale.max() <= 100.0
    np.testing.assert_array_equal(f.mean_compute, f.scale)


def test_redraw_modes():
    s = Streams(0)
    dev = np.arange(50)

    def draws(fleet, round, stage):
        return fleet.compute_draws(dev, round=round, stage=stage, streams=s)

    base = Fleet.homogeneous(50, compute=dists.Exponential(1.0))
    per_round = base.with_redraw("round")
    assert not np.array_equal(draws(per_round, 0, 0), draws(per_round, 1, 0))
    per_stage = base.with_redraw("stage")
    assert np.array_equal(draws(per_stage, 0, 2), draws(per_stage, 9, 2))
    assert not np.array_equal(draws(per_stage, 0, 2), draws(per_stage, 0, 3))
    per_run = base.with_redraw("run")
    assert np.array_equal(draws(per_run, 0, 0), draws(per_run, 7, 4))


def test_adding_a_device_keeps_the_draws_of_the_others():
    s = Streams(4)
    small = Fleet.homogeneous(30, compute=dists.LogNormal(0.0, 1.0))
    big = Fleet.homogeneous(31, compute=dists.LogNormal(0.0, 1.0))
    a = small.compute_draws(np.arange(30), round=5, stage=0, streams=s)
    b = big.compute_draws(np.arange(31), round=5, stage=0, streams=s)
    assert np.array_equal(a, b[:30])


def test_mixed_groups_draw_from_their_own_distribution():
    f = Fleet.tiers((2, Profile(dists.Constant(1.0))), (2, Profile(dists.Constant(7.0))))
    d = f.compute_draws(np.arange(4), round=0, stage=0, streams=Streams(0))
    assert np.array_equal(d, [1.0, 1.0, 7.0, 7.0])


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: Fleet.homogeneous(0, dists.Constant(1.0)), "number of devices"),
        (lambda: Fleet.homogeneous(3, dists.Constant(1.0), bandwidth_down=0.0), "bandwidth_down"),
        (lambda: Fleet.homogeneous(3, dists.Constant(1.0), bandwidth_up=-5.0), "bandwidth_up"),
        (lambda: Fleet.homogeneous(3, dists.Constant(1.0), latency=-1.0), "latency"),
        (lambda: Fleet.homogeneous(3, dists.Constant(1.0), latency=math.inf), "latency"),
        (lambda: Fleet.homogeneous(3, dists.Constant(1.0), dropout_rate=math.nan), "dropout_rate"),
        (lambda: Fleet.homogeneous(3, dists.Constant(1.0), redraw="epoch"), "Fleet.redraw"),
        (lambda: Fleet.homogeneous(3, dists.Constant(1.0), scale=[1.0, 0.0, 1.0]), "Fleet.scale"),
        (lambda: Fleet.homogeneous(3, compute=1.0), r"Fleet.compute\[0\]"),  # type: ignore[arg-type]
        (lambda: Fleet([dists.Constant(1.0)], np.array([], dtype=int)), "Fleet size"),
        (lambda: Fleet([dists.Constant(1.0)], np.array([0, 1])), "Fleet.group"),
        (lambda: Fleet.tiers(), "Fleet.tiers"),
        (lambda: Fleet.tiers((2, Profile(dists.Constant(1.0), latency=-1.0))), "Profile.latency"),
        (lambda: Fleet.mixture(3, [(0.0, Profile(dists.Constant(1.0)))]), "weights"),
    ],
)
def test_invalid_fleets_name_the_field(build, field):
    with pytest.raises(ValueError, match=field):
        build()


def test_fleet_is_immutable():
    f = Fleet.homogeneous(2, dists.Constant(1.0))
    with pytest.raises(AttributeError):
        f.redraw = "run"  # type: ignore[misc]


# ---------------------------------------------------------------- finite draws (MAX_DRAW rule)
# A device's largest compute draw (Dist.max_draw) times its scale must be <= MAX_DRAW = 1e300.
EXP1 = dists.Exponential(1.0)  # largest draw 53 ln 2 = 36.7, so scale <= 2.72e298


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: Fleet.homogeneous(3, EXP1, scale=1e308), "Fleet.scale"),
        (lambda: Fleet.homogeneous(3, EXP1, scale=[1.0, 1e299, 1.0]), "Fleet.scale"),
        (lambda: Fleet.homogeneous(3, EXP1, scale=dists.Constant(1e299)), "Fleet.scale"),
        (lambda: Fleet.homogeneous(3, dists.Constant(1e300), scale=1.5), "Fleet.scale"),
        (lambda: Fleet.homogeneous(3, dists.LogNormal(0.0, 30.0), scale=1e200), "Fleet.scale"),
        (lambda: Fleet.homogeneous(3, EXP1).with_scale(1e300), "Fleet.scale"),
        (
            lambda: Fleet.tiers((2, Profile(EXP1)), (1, Profile(EXP1))).with_scale(1e300),
            "Fleet.scale",
        ),
        (lambda: Fleet.mixture(4, [(1.0, Profile(EXP1))]).with_scale(1e300), "Fleet.scale"),
        (
            lambda: Fleet.homogeneous(2, EXP1) + Fleet.homogeneous(1, EXP1, scale=1e300),
            "Fleet.scale",
        ),
        (lambda: Fleet.tiers((2, Profile(dists.Exponential(1e308)))), r"Exponential\.mean"),
        (lambda: Fleet.mixture(2, [(1.0, Profile(dists.Pareto(0.001, 1.0)))]), r"Pareto\.shape"),
        (lambda: Fleet.homogeneous(2, dists.LogNormal(1000.0, 1.0)), r"LogNormal\.mu"),
    ],
)
def test_scales_that_overflow_the_draws_are_refused(build, field):
    with pytest.raises(ValueError, match=field) as err:
        build()
    assert "MAX_DRAW = 1e+300" in str(err.value)


def test_scale_message_names_the_limit_and_the_device():
    with pytest.raises(ValueError, match=r"scale <= 2\.72\d*e\+298; device 1 has 1e\+299"):
        Fleet.homogeneous(3, EXP1, scale=[1.0, 1e299, 1.0])


def test_huge_but_finite_scales_construct_and_draw_finite_times():
    f = Fleet.homogeneous(3, EXP1, scale=2.7e298) + Fleet.homogeneous(2, dists.Constant(1e200))
    f = f.with_scale([2.7e298, 1.0, 1.0, 1e100, 1e100])
    assert (f.mean_compute <= dists.MAX_DRAW).all()
    d = f.compute_draws(np.arange(5), round=0, stage=0, streams=Streams(0))
    assert np.isfinite(d).all() and (d <= dists.MAX_DRAW).all()
    # a zero largest draw takes any finite scale
    assert Fleet.homogeneous(2, dists.Constant(0.0), scale=1e308).size == 2


def test_compute_draws_of_a_fleet_with_a_distribution_per_device():
    # more distributions than jobs: only those of the jobs are visited, with the same draws
    means = np.linspace(1.0, 3.0, 30)
    fleet = Fleet([dists.Exponential(float(m)) for m in means], np.arange(30), scale=2.0)
    streams = Streams(4)
    for devices in (np.array([29, 3, 3, 17, 0]), np.arange(30)):
        got = fleet.compute_draws(devices, round=7, stage=0, streams=streams)
        u = streams.uniform("compute/round", devices, 7)
        want = np.array([fleet.dists[d].ppf(x) for d, x in zip(devices, u, strict=True)]) * 2.0
        np.testing.assert_array_equal(got, want)
    one = fleet.compute_draws(5, round=7, stage=0, streams=streams)
    assert one == fleet.dists[5].ppf(streams.uniform("compute/round", 5, 7)) * 2.0
