"""Partial work under a deadline (FedProx's gamma-inexact solutions) and FedNova's average."""

import dataclasses

import numpy as np
import pytest

from simfl import Fleet, Profile, Scenario, Streams, algorithms, dists, policies, run, tasks
from simfl.algorithms.fednova import fednova, local_steps_done
from simfl.engine.jobs import fit_work, plan_jobs
from simfl.network import Payload
from simfl.outcome import ARRIVED, LATE, Outcome


def two_speed_fleet(slow=1.0, fast=0.5, latency=0.5):
    """Device 0: 1 s per step; device 1: 0.5 s per step; 0.5 s each way on the links."""
    return Fleet.tiers(
        (1, Profile(compute=dists.Constant(slow), latency=latency)),
        (1, Profile(compute=dists.Constant(fast), latency=latency)),
    )


def linear_task():
    return tasks.LinearRepresentation(d=6, k=2, samples_per_client=8, noise_std=0.1)


def test_fit_work_by_hand():
    # 5 steps of 1 s, 0.5 s down and up, deadline 4: floor((4 - 1) / 1) = 3 steps, ends at 4
    fleet = Fleet.tiers(
        (1, Profile(compute=dists.Constant(1.0), latency=0.5)),
        (1, Profile(compute=dists.Constant(0.25), latency=0.5)),
        (1, Profile(compute=dists.Constant(4.0), latency=0.5)),
    )
    plan = plan_jobs(
        fleet,
        np.arange(3),
        round=0,
        stage=0,
        t_start=10.0,
        work=np.full(3, 5.0),
        payload=Payload(0, 0),
        streams=Streams(0),
    )
    fitted = fit_work(plan, 10.0, 4.0, np.full(3, 5.0))
    # device 0 fits 3 of 5; device 1 fits all 5 (1.25 s); device 2 cannot fit one (4 s): full job
    np.testing.assert_array_equal(fitted.steps, [3.0, 5.0, 5.0])
    np.testing.assert_array_equal(fitted.work, [3.0, 5.0, 5.0])
    np.testing.assert_array_equal(fitted.compute, [3.0, 1.25, 20.0])
    np.testing.assert_array_equal(fitted.duration, [4.0, 2.25, 21.0])
    np.testing.assert_array_equal(fitted.download, plan.download)


def test_fit_work_never_passes_the_deadline_in_floating_point():
    # awkward per-step times: every fitted job must end no later than the deadline on the clock
    rng = np.random.default_rng(1)
    n = 2000
    fleet = Fleet.homogeneous(n, compute=dists.Constant(1.0)).with_scale(rng.uniform(0.01, 0.3, n))
    t0 = 123.456789
    plan = plan_jobs(
        fleet,
        np.arange(n),
        round=0,
        stage=0,
        t_start=t0,
        work=np.full(n, 7.0),
        payload=Payload(0, 0),
        streams=Streams(0),
    )
    for deadline in (0.1, 0.7, 1.0 / 3.0, 1.1):
        fitted = fit_work(plan, t0, deadline, np.full(n, 7.0))
        fits = fitted.steps < 7.0
        assert (t0 + fitted.duration[fits] <= t0 + deadline).all()
        # and one more step would not have fitted (the most steps that fit)
        unit = plan.compute / 7.0
        more = t0 + fitted.duration[fits] + unit[fits] <= t0 + deadline
        assert not (more & (fitted.steps[fits] + 1 <= 7.0)).any()
    # steps and work differ when a job's work is not counted in steps: work scales with them
    halved = fit_work(plan, t0, 0.7, np.full(n, 14.0))
    np.testing.assert_allclose(halved.work, 7.0 * halved.steps / 14.0, rtol=1e-15)


def partial_scenario(alg, seconds=4.0, rounds=1, **kw):
    return Scenario(
        task=linear_task(),
        algorithm=alg,
        fleet=two_speed_fleet(),
        policy=policies.Deadline(seconds, partial=True),
        rounds=rounds,
        seed=5,
        **kw,
    )


@pytest.mark.parametrize("family", ["fedavg", "fedrep"])
def test_a_device_fitting_3_of_5_steps_contributes_its_3_step_update(family):
    if family == "fedavg":
        alg = algorithms.FedAvg(step_size=0.05, local_steps=5)
    else:
        alg = algorithms.FedRep(step_size=0.1, local_steps=5, init="random")
    sc = partial_scenario(alg)
    res = run(sc, progress=False)
    jobs = res.clients.sort_values("device")
    # device 0: 0.5 + 3 x 1 + 0.5 = 4 s (in time at the deadline); device 1: 0.5 + 2.5 + 0.5
    np.testing.assert_array_equal(jobs["work"], [3.0, 5.0])
    np.testing.assert_array_equal(jobs["status"].astype(str), ["arrived", "arrived"])
    np.testing.assert_array_equal(jobs["t_end"], [4.0, 3.5])
    # by hand: the same algorithm with 3 and with 5 local steps, on the round's keyed data
    streams = Streams(sc.seed)
    data = sc.task.build(2, streams)
    state = alg.initial_state(data, Streams(sc.seed))
    three = dataclasses.replace(alg, local_steps=3).local_updates(
        state, data, np.array([0]), 0, streams
    )
    five = alg.local_updates(state, data, np.array([1]), 0, streams)
    reps = np.concatenate([three.params["representation"], five.params["representation"]])
    expected = reps.mean(axis=0)
    if family == "fedrep":
        expected = np.linalg.qr(expected)[0]
    np.testing.assert_allclose(res.state.representation, expected, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("family", ["fedavg", "fedrep"])
def test_partial_updates_with_full_work_equal_local_updates(family):
    alg = (
        algorithms.FedAvg(local_steps=4)
        if family == "fedavg"
        else algorithms.FedRep(local_steps=4, init="random")
    )
    data = linear_task().build(6, Streams(2))
    state = alg.initial_state(data, Streams(2))
    clients = np.arange(6)
    full = alg.local_updates(state, data, clients, 3, Streams(2))
    same = alg.partial_updates(state, data, clients, 3, Streams(2), np.full(6, 4.0))
    for name in full.params:
        np.testing.assert_array_equal(full.params[name], same.params[name])
    np.testing.assert_array_equal(full.loss, same.loss)
    # and a client's partial update does not depend on the other clients' work (to rounding:
    # batched BLAS products of different batch sizes may differ in the last bit, as for
    # local_updates itself)
    mixed = alg.partial_updates(state, data, clients, 3, Streams(2), np.array([1, 2, 3, 4, 1, 2.0]))
    alone = alg.partial_updates(state, data, clients[2:3], 3, Streams(2), np.array([3.0]))
    for name in full.params:
        np.testing.assert_allclose(mixed.params[name][2], alone.params[name][0], rtol=1e-13)


def test_fednova_by_hand():
    x = np.array([1.0, 2.0])
    clients = np.array([[0.0, 2.0], [1.0, -1.0], [4.0, 2.0]])
    tau = np.array([1.0, 3.0, 2.0])
    # normalised moves (x - x_i) / tau_i: (1, 0), (0, 1), (-1.5, 0); mean (-1/6, 1/3)
    # tau_eff = 2: x - 2 * (-1/6, 1/3) = (4/3, 4/3)
    np.testing.assert_allclose(fednova(x, clients, tau), [4.0 / 3.0, 4.0 / 3.0], rtol=1e-15)
    # equal steps: the plain average
    np.testing.assert_allclose(fednova(x, clients, np.full(3, 2.0)), clients.mean(axis=0))
    # weights p_i (normalised): p = (1/2, 1/4, 1/4): moves mean (1/8, 1/4); tau_eff = 7/4
    got = fednova(x, clients, tau, weights=np.array([2.0, 1.0, 1.0]))
    np.testing.assert_allclose(got, [1.0 - 7.0 / 32.0, 2.0 - 7.0 / 16.0], rtol=1e-15)


def test_local_steps_done_reads_the_outcome():
    outcome = Outcome(
        round=0,
        stage=0,
        t_start=0.0,
        time=1.0,
        devices=np.array([0, 1, 2]),
        status=np.array([ARRIVED, LATE, ARRIVED], dtype=np.int8),
        job_start=np.zeros(3),
        job_end=np.ones(3),
        staleness=np.array([0.0, np.nan, 0.0]),
        repeats=np.array([2, 1, 1]),
        steps=np.array([3.0, 5.0, 4.0]),
    )
    np.testing.assert_array_equal(local_steps_done(outcome, 5), [3.0, 3.0, 4.0])
    bare = dataclasses.replace(outcome, steps=None, repeats=None)
    np.testing.assert_array_equal(local_steps_done(bare, 5), [5.0, 5.0])


def test_fednova_aggregation_in_a_partial_round():
    alg = algorithms.FedAvg(step_size=0.05, local_steps=5, aggregation="fednova")
    sc = partial_scenario(alg)
    res = run(sc, progress=False)
    streams = Streams(sc.seed)
    data = sc.task.build(2, streams)
    state = alg.initial_state(data, Streams(sc.seed))
    three = dataclasses.replace(alg, local_steps=3).local_updates(
        state, data, np.array([0]), 0, streams
    )
    five = alg.local_updates(state, data, np.array([1]), 0, streams)
    for name, field in (("representation", "representation"), ("head", "head")):
        cl = np.concatenate([three.params[name], five.params[name]])
        expected = fednova(getattr(state, field), cl, np.array([3.0, 5.0]))
        np.testing.assert_allclose(getattr(res.state, field), expected, rtol=1e-12)


def test_partial_work_needs_an_algorithm_that_supports_it():
    with pytest.raises(ValueError, match=r"Deadline\.partial"):
        Scenario(
            task=linear_task(),
            algorithm=algorithms.GDGD(),
            fleet=two_speed_fleet(),
            policy=policies.Deadline(4.0, partial=True),
            rounds=1,
        )
    with pytest.raises(ValueError, match=r"Deadline\.partial"):
        policies.Deadline(4.0, partial="yes")


def test_a_device_that_cannot_fit_one_step_is_late():
    # deadline 1.6 with 1 s of transfers: device 0 (1 s per step) cannot fit one step and is
    # late with its full work; device 1 (0.5 s per step) fits one and arrives at 1.5 s
    sc = partial_scenario(algorithms.TimingOnly(work_units=5), seconds=1.6)
    sc = dataclasses.replace(sc, task=None)
    res = run(sc, progress=False)
    jobs = res.clients.sort_values("device")
    np.testing.assert_array_equal(jobs["status"].astype(str), ["late", "arrived"])
    np.testing.assert_array_equal(jobs["work"], [5.0, 1.0])
    np.testing.assert_array_equal(jobs["t_end"], [1.6, 1.5])


def test_neural_partial_work_is_a_prefix_of_the_full_schedule():
    pytest.importorskip("torch")
    from simfl.neural import MLP, SGD, Digits, ImageClassification, NeuralFedAvg, Shards

    task = ImageClassification(Digits(), Shards(2), MLP((16, 8)))
    data = task.build(12, Streams(1))
    two = NeuralFedAvg(epochs=2, optimizer=SGD(lr=0.05, batch_size=5))
    one = dataclasses.replace(two, epochs=1)
    state = two.initial_state(data, Streams(1))
    clients = np.array([2, 5, 7])
    steps = two.job_steps(state, clients)
    per_epoch = np.ceil(state.sizes[clients] / 5)
    np.testing.assert_array_equal(steps, 2 * per_epoch)
    # every step: exactly local_updates
    full = two.local_updates(state, data, clients, 3, Streams(1))
    same = two.partial_updates(state, data, clients, 3, Streams(1), steps)
    for name in full.params:
        np.testing.assert_array_equal(full.params[name], same.params[name])
    # one epoch's steps of a 2-epoch job: exactly the 1-epoch update (same batches, in order),
    # while the other clients of the batch keep training (compared within a cohort of the same
    # size: torch's batched kernels may differ in the last bit across cohort sizes)
    limit = np.array([per_epoch[0], steps[1], steps[2]])
    mixed = two.partial_updates(state, data, clients, 3, Streams(1), limit)
    first = one.local_updates(state, data, clients, 3, Streams(1))
    for name in full.params:
        np.testing.assert_array_equal(mixed.params[name][0], first.params[name][0])
        np.testing.assert_array_equal(mixed.params[name][1:], full.params[name][1:])
