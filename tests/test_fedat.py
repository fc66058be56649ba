"""FedAT: synchronous rounds within tiers, asynchronous across tiers (the semi-async loop)."""

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pytest

from simfl import Fleet, Profile, Scenario, algorithms, dists, policies, run, tasks
from simfl.algorithms.base import Algorithm, Updates
from simfl.algorithms.mixing import GroupMix
from simfl.fleet import Availability
from simfl.network import Payload


@dataclass(frozen=True)
class Toy(Algorithm[float]):
    """A scalar model: client ``i`` returns ``x + gain[i]``; the server averages."""

    gain: tuple[float, ...] = ()
    name: ClassVar[str] = "toy"

    def check(self, task: Any) -> None:
        return None

    def initial_state(self, data: Any, streams: Any) -> float:
        return 0.0

    def payload(self, state: float) -> Payload:
        return Payload(0, 0)

    def local_updates(self, state, data, clients, round, streams) -> Updates:
        x = np.array([state + self.gain[c] for c in clients])
        return Updates(clients.astype(np.int64), {"x": x})

    def aggregate(self, state, updates, outcome) -> float:
        return float(np.mean(updates.params["x"]))

    def evaluate(self, state, data) -> dict[str, float]:
        return {}

    def shared(self, state: float) -> dict[str, Any]:
        return {"x": np.array(state)}

    def with_shared(self, state: float, shared: dict[str, Any]) -> float:
        return float(shared["x"])


def two_tier_fleet(fast=1.0, slow=2.4):
    return Fleet.tiers(
        (2, Profile(compute=dists.Constant(fast))), (2, Profile(compute=dists.Constant(slow)))
    )


def toy_scenario(rounds, **kw):
    return Scenario(
        task=None,
        algorithm=Toy(gain=(1.0, 1.0, 10.0, 10.0)),
        fleet=two_tier_fleet(),
        policy=policies.FedAT(tiers=2, **kw),
        rounds=rounds,
        seed=0,
    )


def test_tiers_from_reported_times_fastest_first():
    fleet = Fleet.tiers(
        (3, Profile(compute=dists.Exponential(4.0))),
        (3, Profile(compute=dists.Exponential(0.5))),
        (3, Profile(compute=dists.Exponential(1.0))),
    )
    sc = Scenario(
        task=None,
        algorithm=algorithms.TimingOnly(),
        fleet=fleet,
        policy=policies.FedAT(tiers=3),
        rounds=3,
        seed=0,
    )
    res = run(sc, progress=False)
    # tier 0 (stage 0) = devices 3-5 (mean 0.5 s), tier 1 = 6-8 (1 s), tier 2 = 0-2 (4 s)
    by_stage = res.clients.groupby("stage")["device"].apply(lambda d: sorted(set(d)))
    assert by_stage.to_dict() == {0: [3, 4, 5], 1: [6, 7, 8], 2: [0, 1, 2]}


def test_the_mix_by_hand():
    # fast tier (devices 0, 1: +1, 1 s rounds), slow tier (devices 2, 3: +10, 2.4 s rounds).
    # Until a tier completes a round it weighs nothing (it has sent no model yet):
    # t=1: fast model 0+1 = 1, counts (1, 0): only the fast tier has reported -> x = 1
    # t=2: fast from 1 -> 2, counts (2, 0) -> x = 2
    # t=2.4: slow from version 0 (x=0) -> 10, counts (2, 1): weights reversed (1/3, 2/3)
    #        -> 2/3 + 20/3 = 22/3
    # t=3: fast from x=2 (its round started at t=2) -> 3, counts (3, 1): (1/4, 3/4) -> 8.25
    # t=4: fast from 8.25 -> 9.25, counts (4, 1): (1/5, 4/5) -> 1.85 + 8 = 9.85
    expected = [1.0, 2.0, 22 / 3, 8.25, 9.85]
    for n, x in enumerate(expected, start=1):
        res = run(toy_scenario(n), progress=False)
        assert res.state == pytest.approx(x, rel=1e-15), n
    rounds = res.rounds
    np.testing.assert_array_equal(rounds["stage"], [0, 0, 1, 0, 0])
    np.testing.assert_allclose(rounds["time"], [1.0, 2.0, 2.4, 3.0, 4.0])
    np.testing.assert_allclose(rounds["t_start"], [0.0, 1.0, 0.0, 2.0, 3.0])
    # the slow round started at version 0 and was applied as version 2: staleness 2
    np.testing.assert_allclose(rounds["staleness_mean"], [0.0, 0.0, 2.0, 1.0, 0.0])
    slow = res.clients[res.clients["stage"] == 1]
    # its jobs carry the version they started from; the second slow round (started at
    # version 3) is in flight when the run ends and is recorded cancelled
    np.testing.assert_array_equal(slow["round"], [0, 0, 3, 3])
    np.testing.assert_array_equal(slow["staleness"], [2.0, 2.0, np.nan, np.nan])
    np.testing.assert_array_equal(
        slow["status"].astype(str), ["arrived", "arrived", "cancelled", "cancelled"]
    )


def test_weightings():
    pol = policies.FedAT(tiers=3)
    state = policies.FedATState(tiers=(np.array([0]),) * 3, counts=(4, 2, 1), started=(4, 2, 1))
    # tier 2 completes one more round: counts (4, 2, 2), total 8
    np.testing.assert_allclose(pol.mixer(state, 2).weights, [2 / 8, 2 / 8, 4 / 8])
    upd = policies.FedAT(tiers=3, weighting="updates").mixer(state, 2).weights
    np.testing.assert_allclose(upd, [4 / 8, 2 / 8, 2 / 8])
    eq = policies.FedAT(tiers=3, weighting="equal").mixer(state, 0).weights
    np.testing.assert_allclose(eq, [1 / 3] * 3)
    mix = GroupMix(np.array([0.25, 0.75])).apply([{"x": np.array([4.0])}, {"x": np.array([8.0])}])
    np.testing.assert_array_equal(mix["x"], [7.0])


def test_tiers_that_have_not_reported_weigh_nothing():
    # tiers 1 and 3 have completed no round: the paper's reversed counts run over tiers 0 and 2
    state = policies.FedATState(tiers=(np.array([0]),) * 4, counts=(5, 0, 2, 0), started=(5,) * 4)
    np.testing.assert_allclose(
        policies.FedAT(tiers=4).mixer(state, 0).weights, [2 / 8, 0, 6 / 8, 0]
    )
    upd = policies.FedAT(tiers=4, weighting="updates").mixer(state, 0).weights
    np.testing.assert_allclose(upd, [6 / 8, 0, 2 / 8, 0])
    eq = policies.FedAT(tiers=4, weighting="equal").mixer(state, 3).weights
    np.testing.assert_allclose(eq, [1 / 3, 0, 1 / 3, 1 / 3])
    # the first round of the run: the tier that completed it takes all the weight
    first = policies.FedATState(tiers=(np.array([0]),) * 3, counts=(0, 0, 0), started=(1, 0, 0))
    for weighting in ("fedat", "updates", "equal"):
        weights = policies.FedAT(tiers=3, weighting=weighting).mixer(first, 0).weights
        np.testing.assert_array_equal(weights, [1.0, 0.0, 0.0])


def silent_slow_tier(how: str, n: int, work: float) -> tuple[Fleet, policies.FedAT]:
    """Two tiers of ``n`` devices (jobs of ``work`` units: 1 s and 2.4 s a unit) and FedAT.

    The slow tier never completes a round: ``how="late"``, its jobs miss the tiers' deadline
    (2 s a unit); ``"offline"``, its devices are never online.
    """
    slow = Profile(compute=dists.Constant(2.4))
    fleet = Fleet.tiers((n, Profile(compute=dists.Constant(1.0))), (n, slow))
    if how == "offline":
        always: list[tuple[float, float]] = [(0.0, math.inf)]
        fleet = fleet.with_availability(Availability([always] * n + [[]] * n), "pause")
    deadline = 2.0 * work if how == "late" else None
    return fleet, policies.FedAT(tiers=2, deadline=deadline)


@pytest.mark.parametrize("how", ["late", "offline"])
def test_a_tier_that_never_reports_does_not_freeze_the_model(how):
    # before: the silent tier took all the weight (reversed counts (k, 0) -> (0, 1)), so the
    # global model stayed at its initial value while the fast tier's updates arrived
    fleet, policy = silent_slow_tier(how, 2, 1.0)
    sc = Scenario(
        task=None,
        algorithm=Toy(gain=(1.0, 1.0, 10.0, 10.0)),
        fleet=fleet,
        policy=policy,
        rounds=15 if how == "late" else 10,  # late: the slow tier closes a round every 2 s
        seed=0,
    )
    res = run(sc, progress=False)
    ok = res.rounds[res.rounds["status"] == "ok"]
    assert (ok["stage"] == 0).all() and len(ok) == 10  # only the fast tier reports
    assert res.state == pytest.approx(10.0)  # each fast round adds 1 to the model it started from


@pytest.mark.parametrize("how", ["late", "offline"])
def test_fedat_learns_with_a_tier_that_never_reports(how):
    fleet, policy = silent_slow_tier(how, 5, 5.0)
    sc = Scenario(
        task=tasks.LinearRepresentation(d=8, k=2, samples_per_client=20, noise_std=0.1),
        algorithm=algorithms.FedAvg(step_size=0.1, local_steps=5),  # 5 units of work a job
        fleet=fleet,
        policy=policy,
        rounds=30,
        seed=0,
    )
    res = run(sc, progress=False)
    assert res.ok and res.rounds["n_arrived"].sum() > 0
    # before: every evaluated distance equal to the initial one (0.99983)
    initial = res.meta["initial_metrics"]["distance"]
    distance = res.rounds.loc[res.rounds["n_arrived"] > 0, "distance"].to_numpy()
    assert (distance != initial).all()
    assert distance[-1] < 0.6 * initial


def test_one_tier_is_wait_all():
    task = tasks.LinearRepresentation(d=8, k=2, samples_per_client=10, noise_std=0.1)
    fleet = Fleet.homogeneous(12, compute=dists.Exponential(1.0), dropout_rate=0.05)
    alg = algorithms.FedAvg(step_size=0.1, local_steps=2)
    base = dict(task=task, algorithm=alg, fleet=fleet, rounds=15, seed=4)
    a = run(Scenario(policy=policies.FedAT(tiers=1), **base), progress=False)
    b = run(Scenario(policy=policies.WaitAll(), **base), progress=False)
    pd.testing.assert_frame_equal(a.rounds, b.rounds)
    pd.testing.assert_frame_equal(a.clients, b.clients)


@pytest.mark.parametrize("batched", [True, False])
def test_fedat_deterministic_and_event_free_equals_processes(batched):
    task = tasks.LinearRepresentation(d=8, k=2, samples_per_client=10, noise_std=0.1)
    fleet = Fleet.tiers(
        (10, Profile(compute=dists.Exponential(0.5), dropout_rate=0.02)),
        (10, Profile(compute=dists.Exponential(3.0), dropout_rate=0.02)),
    )
    sc = Scenario(
        task=task,
        algorithm=algorithms.FedRep(),
        fleet=fleet,
        policy=policies.FedAT(tiers=2, count=4, deadline=6.0),
        max_time=60.0,
        seed=2,
    )
    a = run(sc, progress=False)
    b = run(sc, progress=False, batched=batched)
    pd.testing.assert_frame_equal(a.rounds, b.rounds)
    pd.testing.assert_frame_equal(a.clients, b.clients)
    assert a.meta["stop_reason"] == "max_time"
    # every tier round draws from one tier only
    tier_of = np.repeat([0, 1], 10)
    jobs = a.clients
    assert (tier_of[jobs["device"].to_numpy()] == jobs["stage"].to_numpy()).all()
    # every job is recorded once: each tier round's jobs (cancelled at the end included)
    assert len(jobs) == jobs.groupby(["stage", "round", "device"]).ngroups


def test_fedat_refuses_what_it_cannot_run():
    with pytest.raises(ValueError, match=r"FedAT\.tiers"):
        Scenario(
            task=None,
            algorithm=algorithms.TimingOnly(),
            fleet=two_tier_fleet(),
            policy=policies.FedAT(tiers=5),
            rounds=1,
        )
    with pytest.raises(ValueError, match=r"FedAT\.weighting"):
        policies.FedAT(weighting="fast")
    with pytest.raises(ValueError, match="shared"):
        Scenario(
            task=tasks.LinearRepresentation(d=8, k=2, samples_per_client=10),
            algorithm=algorithms.GDGD(),
            fleet=two_tier_fleet(),
            policy=policies.FedAT(tiers=2),
            rounds=1,
        )
