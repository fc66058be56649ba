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
    pol = AdaptiveDeadline(quantile=0.7, window=10, count=20)
    res = run(timing_scenario(n=40, rounds=300, policy=pol), progress=False)
    r, jobs = res.rounds, res.clients
    assert r["n_late"].iloc[0] == 0  # no deadline in the first round
    # exact replay: every round's deadline is the policy's rule applied to the durations seen in
    # the last 10 rounds (late jobs as +inf); a round with late jobs closes at it, and no job
    # of a round without late jobs took longer
    history: list[np.ndarray] = []
    deadline = None
    deadlines = []
    for t, g in jobs.groupby("round"):
        took = (g["t_end"] - g["t_start"]).to_numpy()
        arrived = (g["status"] == "arrived").to_numpy()
        if deadline is not None and r["n_late"].iloc[t] > 0:
            assert r["duration"].iloc[t] == pytest.approx(deadline, rel=1e-12)
        elif deadline is not None:
            assert took[arrived].max() <= deadline
        deadlines.append(np.inf if deadline is None else deadline)
        history = [*history, np.where(arrived, took, np.inf)][-10:]
        deadline = pol.next_deadline(np.concatenate(history), deadline)
    # given its deadline d_t, a job of Exp(1) arrives with probability 1 - exp(-d_t): the
    # fraction that arrived in rounds 20..299 (5,600 jobs) has SE sqrt(sum p(1-p)) / N = 0.0061
    # (0.8% of 0.73); tolerance 0.020 = 3.29 SE. A 5% error (0.036) is 5.9 SE (checked by
    # scaling the expectation by 0.95 and 1.05: both fail)
    d = np.repeat(deadlines, 20)[20 * 20 :]
    arrived = (jobs["status"] == "arrived").iloc[20 * 20 :].mean()
    assert arrived == pytest.approx(np.mean(1 - np.exp(-d)), abs=0.020)
    # the deadline settles near the 0.7 quantile of Exp(1), -ln(0.3) = 1.204, a little above it
    # when a window's quantile is censored and the deadline backs off (this seed: median 1.25)
    assert np.median(d) == pytest.approx(-math.log(0.3), rel=0.1)
    assert 0.7 <= arrived <= 0.76


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
