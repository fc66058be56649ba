"""Bad scenarios fail at construction with a message naming the field."""

import dataclasses
import math

import pytest

from simfl import Fleet, Scenario, Target, algorithms, dists, policies, tasks

TASK = tasks.LinearRepresentation(d=20, k=2, samples_per_client=10)
FLEET = Fleet.homogeneous(100, compute=dists.Exponential(mean=1.0))
GOOD = Scenario(
    task=TASK,
    algorithm=algorithms.FedRep(),
    fleet=FLEET,
    policy=policies.WaitAll(fraction=0.1),
    rounds=10,
)


def replace(**changes):
    return lambda: dataclasses.replace(GOOD, **changes)


BAD = [
    # distributions, fleets
    (lambda: dists.Exponential(mean=-1.0), "Exponential.mean"),
    (lambda: Fleet.homogeneous(0, dists.Exponential(1.0)), "number of devices"),
    (lambda: Fleet.homogeneous(5, dists.Exponential(1.0), bandwidth_up=0.0), "Fleet.bandwidth_up"),
    (lambda: Fleet.homogeneous(5, dists.Exponential(1.0), dropout_rate=-0.1), "Fleet.dropout_rate"),
    # the task
    (lambda: tasks.LinearRepresentation(d=5, k=6), r"LinearRepresentation.k \(<= d = 5\)"),
    (lambda: tasks.LinearRepresentation(k=0), "LinearRepresentation.k"),
    (
        lambda: tasks.LinearRepresentation(samples_per_client=0),
        "LinearRepresentation.samples_per_client",
    ),
    (lambda: tasks.LinearRepresentation(noise_std=-1e-3), "LinearRepresentation.noise_std"),
    (lambda: tasks.LinearRepresentation(noise_std=math.nan), "LinearRepresentation.noise_std"),
    # algorithms
    (lambda: algorithms.FedRep(step_size=0.0), "FedRep.step_size"),
    (lambda: algorithms.FedRep(init="svd"), "FedRep.init"),
    (lambda: algorithms.FedAvg(local_steps=0), "FedAvg.local_steps"),
    (lambda: algorithms.TimingOnly(bytes_up=-1), "TimingOnly.bytes_up"),
    # policies
    (lambda: policies.WaitAll(fraction=0.0), "WaitAll.fraction"),
    (lambda: policies.WaitAll(fraction=1.5), "WaitAll.fraction"),
    (lambda: policies.WaitAll(count=0), "WaitAll.count"),
    (lambda: policies.WaitAll(fraction=0.5, count=3), "fraction or count"),
    (lambda: policies.Deadline(seconds=0.0), "Deadline.seconds"),
    (lambda: policies.Deadline(seconds=math.inf), "Deadline.seconds"),
    (lambda: policies.FastestK(k=0), "FastestK.k"),
    (lambda: policies.FastestK(k=3, overcommit=-0.5), "FastestK.overcommit"),
    # the scenario as a whole
    (replace(policy=policies.WaitAll(count=200)), "WaitAll.count must be <= the fleet size 100"),
    (replace(policy=policies.FastestK(k=60, overcommit=1.0)), "FastestK.k"),
    (replace(rounds=0), "Scenario.rounds"),
    (replace(rounds=None), "stop rule"),
    (replace(max_time=-5.0), "Scenario.max_time"),
    (replace(seed=-1), "Scenario.seed"),
    (replace(eval_every=0), "Scenario.eval_every"),
    (replace(task=None), "Scenario.task must be a linear task"),
    (replace(target=Target("accuracy", above=0.9)), "Scenario.target.metric"),
    (lambda: Target("distance"), "exactly one of below= or above="),
    (replace(fleet="100 phones"), "Scenario.fleet"),
    (replace(policy=None), "Scenario.policy"),
    (replace(algorithm=algorithms.FedRep), "Scenario.algorithm"),
]


@pytest.mark.parametrize(("build", "message"), BAD, ids=[m for _, m in BAD])
def test_bad_scenario_fails_at_construction_naming_the_field(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_the_good_scenario_is_fine():
    assert GOOD.fleet.size == 100
