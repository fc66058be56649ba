"""The typed Updates of the Algorithm contract: rows, finiteness, selection, repeats, concat."""

import numpy as np
import pytest

from simfl.algorithms import Updates


def sample() -> Updates:
    return Updates(
        np.array([4, 1, 7]),
        {"w": np.arange(6.0).reshape(3, 2), "h": np.arange(3.0)},
        loss=np.array([0.5, 1.5, 2.5]),
        weight=np.array([1.0, 2.0, 3.0]),
    )


def test_rows_take_and_repeat():
    u = sample()
    assert len(u) == 3
    picked = u.take(np.array([2, 0]))
    np.testing.assert_array_equal(picked.clients, [7, 4])
    np.testing.assert_array_equal(picked.params["w"], [[4.0, 5.0], [0.0, 1.0]])
    np.testing.assert_array_equal(picked.loss, [2.5, 0.5])
    np.testing.assert_array_equal(picked.weight, [3.0, 1.0])
    masked = u.take(np.array([False, True, True]))
    np.testing.assert_array_equal(masked.clients, [1, 7])
    np.testing.assert_array_equal(masked.params["h"], [1.0, 2.0])
    twice = u.repeat(np.array([1, 2, 0]))
    np.testing.assert_array_equal(twice.clients, [4, 1, 1])
    np.testing.assert_array_equal(twice.params["w"], [[0.0, 1.0], [2.0, 3.0], [2.0, 3.0]])
    np.testing.assert_array_equal(twice.loss, [0.5, 1.5, 1.5])
    np.testing.assert_array_equal(twice.weight, [1.0, 2.0, 2.0])
    bare = Updates(np.array([0, 1]), {})
    assert bare.take(np.array([1])).loss is None and bare.repeat(np.array([2, 0])).weight is None


def test_concat_keeps_row_order_and_optional_arrays():
    u = sample()
    joined = Updates.concat([u.take(np.array([2])), u.take(np.array([0, 1]))])
    np.testing.assert_array_equal(joined.clients, [7, 4, 1])
    np.testing.assert_array_equal(joined.params["w"], [[4.0, 5.0], [0.0, 1.0], [2.0, 3.0]])
    np.testing.assert_array_equal(joined.loss, [2.5, 0.5, 1.5])
    np.testing.assert_array_equal(joined.weight, [3.0, 1.0, 2.0])
    no_loss = Updates.concat([Updates(np.array([0]), {}), Updates(np.array([3]), {})])
    assert no_loss.loss is None and no_loss.clients.tolist() == [0, 3]
    with pytest.raises(ValueError, match="at least one"):
        Updates.concat([])
    with pytest.raises(ValueError, match="same optional arrays"):
        Updates.concat([u, Updates(np.array([0]), {"w": np.zeros((1, 2)), "h": np.zeros(1)})])


@pytest.mark.parametrize("where", ["w", "loss", "weight"])
def test_finite_checks_params_loss_and_weight(where):
    assert sample().finite()
    u = sample()
    target = u.params["w"] if where == "w" else getattr(u, where)
    target[1] = np.inf if where == "w" else np.nan
    assert not u.finite()


def test_every_array_has_one_row_per_client():
    with pytest.raises(ValueError, match="first axis of 2 rows"):
        Updates(np.array([0, 1]), {"w": np.zeros((3, 2))})
    with pytest.raises(ValueError, match="first axis of 2 rows"):
        Updates(np.array([0, 1]), {}, loss=np.zeros(1))
