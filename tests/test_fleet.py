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
