import numpy as np
import pytest
from scipy import stats

from simfl.rng import Streams


def test_same_keys_same_values_and_broadcasting():
    s = Streams(7)
    u = s.uniform("p", np.arange(5)[:, None], 3, np.arange(4)[None, :])
    assert u.shape == (5, 4)
    assert float(s.uniform("p", 2, 3, 1)) == u[2, 1]
    assert np.array_equal(Streams(7).uniform("p", np.arange(5)[:, None], 3, np.arange(4)), u)


def test_draws_do_not_depend_on_which_other_keys_are_drawn():
    s = Streams(1)
    many = s.uniform("compute/round", np.arange(1000), 4)
    few = s.uniform("compute/round", np.array([3, 999, 17]), 4)
    assert np.array_equal(few, many[[3, 999, 17]])


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ((0, "x", 1, 2), (1, "x", 1, 2)),  # seed
        ((0, "x", 1, 2), (0, "y", 1, 2)),  # purpose
        ((0, "x", 1, 2), (0, "x", 2, 1)),  # key order
        ((0, "x", 1, 2), (0, "x", 1, 3)),  # key value
        ((0, "x", 1), (0, "x", 1, 0)),  # key arity
    ],
)
def test_different_keys_give_different_streams(a, b):
    ua = Streams(a[0]).uniform(a[1], *a[2:])
    ub = Streams(b[0]).uniform(b[1], *b[2:])
    assert ua != ub


def test_uniform_and_normal_distributions():
    s = Streams(3)
    u = s.uniform("u", np.arange(100_000))
    assert ((u > 0) & (u < 1)).all()
    assert stats.kstest(u, "uniform").pvalue > 1e-3
    z = s.normal("z", np.arange(100_000))
    assert stats.kstest(z, "norm").pvalue > 1e-3
    # neighbouring keys are uncorrelated
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 0.02


def test_generator_is_keyed_and_reproducible():
    s = Streams(5)
    a = s.generator("select", 3).random(4)
    assert np.array_equal(a, Streams(5).generator("select", 3).random(4))
    assert not np.array_equal(a, s.generator("select", 4).random(4))


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True])
def test_bad_seed(bad):
    with pytest.raises(ValueError, match="seed"):
        Streams(bad)


def test_bad_keys():
    with pytest.raises(ValueError, match="non-negative"):
        Streams(0).uniform("p", np.array([1, -2]))
    with pytest.raises(TypeError, match="integers"):
        Streams(0).uniform("p", np.array([0.5]))
