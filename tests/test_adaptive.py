import math

import numpy as np
import pytest

from simfl import dists, run
from simfl.policies import AdaptiveDeadline
from tests.helpers import timing_scenario


def test_next_deadline_rule():
    pol = AdaptiveDeadline(quantile=0.5, backoff=2.0)
    assert pol.next_deadline(np.array([1.0, 2.0, 3.0, 4.0]), None) == 2.0
    # more than half censored: the median is unknown, back off
    assert pol.next_deadline(np.array([1.0, np.inf, np.inf]), 3.0) == 6.0
    assert pol.next_deadline(np.array([np.inf]), None) is None
    assert pol.next_deadline(np.array([]), 4.0) == 4.0


def test_adaptive_deadline_tracks_the_quantile():
    sc = timing_scenario(
        n=40, rounds=300, policy=AdaptiveDeadline(quantile=0.7, window=10, count=20)
    )
    res = run(sc, progress=False)
    r = res.rounds
    assert r["n_late"].iloc[0] == 0  # no deadline in the first round
    # the rounds that hit their deadline close at it; about 70% of jobs make it
    arrived = (res.clients["status"] == "arrived").iloc[20 * 20 :].mean()
    assert arrived == pytest.approx(0.7, abs=0.05)
    # the deadline settles near the 0.7 quantile of Exp(1), -ln(0.3) = 1.204
    late = r[r["n_late"] > 0]
    assert late["duration"].iloc[20:].median() == pytest.approx(-math.log(0.3), rel=0.15)


def test_adaptive_deadline_follows_a_slower_fleet():
    fast = run(
        timing_scenario(n=20, rounds=60, policy=AdaptiveDeadline(initial=1.0)), progress=False
    ).rounds
    slow = run(
        timing_scenario(
            n=20, rounds=60, compute=dists.Exponential(10.0), policy=AdaptiveDeadline(initial=1.0)
        ),
        progress=False,
    ).rounds
    assert slow["duration"].iloc[30:].mean() > 5 * fast["duration"].iloc[30:].mean()


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"quantile": 0.0}, "quantile"),
        ({"window": 0}, "window"),
        ({"initial": -1.0}, "initial"),
        ({"backoff": 1.0}, "backoff"),
    ],
)
def test_invalid(kw, field):
    with pytest.raises(ValueError, match=f"AdaptiveDeadline.{field}"):
        AdaptiveDeadline(**kw)
