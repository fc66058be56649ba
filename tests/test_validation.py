"""Bad scenarios fail at construction with a message naming the field."""

import dataclasses
import math

import networkx as nx
import numpy as np
import pytest

from simfl import Fleet, Profile, Scenario, Target, algorithms, dists, policies, run, tasks
from simfl.dists import MAX_BYTES, MAX_DRAW, MIN_BANDWIDTH
from simfl.fleet import Availability
from simfl.fleet.energy import MAX_RATE, Energy
from simfl.network import Network, transfer_seconds

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


# ---------------------------------------------------------------- checks that need the scenario
TIMING = Scenario(
    task=None,
    algorithm=algorithms.TimingOnly(),
    fleet=Fleet.homogeneous(10, compute=dists.Exponential(mean=1.0)),
    policy=policies.WaitAll(),
    rounds=5,
)


def timing(**changes):
    return lambda: dataclasses.replace(TIMING, **changes)


def exp_availability(horizon):
    return Availability.exponential(10, mean_on=5.0, mean_off=1.0, horizon=horizon, seed=1)


WHOLE_SCENARIO = [
    (
        replace(policy=policies.SRPFL(n0=5, stage_rule=policies.Plateau(metric="nope"))),
        r"Plateau\.metric\) must be 'train_loss' or one of the task's metrics with a goal "
        r"\['distance', 'test_mse'\], got 'nope'",
    ),
    (
        timing(policy=policies.SRPFL(n0=5, stage_rule=policies.Plateau(metric="distance"))),
        r"Plateau\.metric.*\[\], got 'distance'",
    ),
    (
        timing(policy=policies.WaitAll(count=3, weights="size")),
        r"WaitAll\.weights='size' needs a task .*Scenario\.task is None",
    ),
    (
        replace(policy=policies.EdgeAggregation(count=5), network=Network.star()),
        r"Scenario\.network must have edge servers for EdgeAggregation.*a star has none",
    ),
    (
        timing(fleet=TIMING.fleet.with_availability(exp_availability(100.0)), max_time=1e4),
        r"Scenario\.max_time \(10000 s\) must be <= the horizon the fleet's availability was "
        r"generated up to \(100 s, its known_until\)",
    ),
]


@pytest.mark.parametrize(("build", "message"), WHOLE_SCENARIO, ids=range(len(WHOLE_SCENARIO)))
def test_what_needs_the_whole_scenario_is_checked_when_it_is_built(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_scenario_checks_accept_what_can_run():
    plateau = policies.SRPFL(n0=5, stage_rule=policies.Plateau(metric="test_mse"))
    assert replace(policy=plateau)().policy is plateau
    assert timing(policy=policies.SRPFL(n0=5, stage_rule=policies.Plateau()))().task is None
    av = exp_availability(100.0)
    fleet = TIMING.fleet.with_availability(av)
    assert timing(fleet=fleet, max_time=100.0)().max_time == 100.0  # up to the horizon
    assert timing(fleet=fleet, rounds=10**6)().max_time is None  # no budget to fall short of
    # complete intervals are known for ever: the devices of a churn really leave
    churn = Availability.churn(10, lifetime=dists.Exponential(5.0))
    assert churn.known_until == math.inf and churn.horizon < 100.0
    assert timing(fleet=TIMING.fleet.with_availability(churn), max_time=1e4)().max_time == 1e4


def test_known_until_follows_the_availability_through_its_combinators():
    av = exp_availability(100.0)
    assert av.known_until == 100.0 and av.horizon >= 100.0
    assert av.take([0, 1]).known_until == 100.0
    assert (av + Availability.always(2)).known_until == 100.0
    assert av.intersect(exp_availability(50.0)).known_until == 50.0
    assert Availability.correlated(np.zeros(3, int), av.take([0])).known_until == 100.0
    with pytest.raises(ValueError, match=r"Availability\.known_until"):
        Availability([[(0.0, 1.0)]], known_until=0.0)


def test_fastest_k_with_a_huge_overcommit_is_refused_at_construction():
    with pytest.raises(ValueError, match=r"FastestK\.k \* \(1 \+ FastestK\.overcommit\)"):
        policies.FastestK(k=2, overcommit=1e308)
    with pytest.raises(ValueError, match=r"FastestK\.k must be an integer in \[1, inf\] that fits"):
        policies.FastestK(k=2**63)


def test_srpfl_whose_growth_overflows_takes_the_whole_pool():
    pol = policies.SRPFL(n0=2, growth=1e308)
    assert [pol.participants(level, 10) for level in range(4)] == [2, 10, 10, 10]
    res = run(timing(policy=pol)(), progress=False)
    assert res.ok and res.meta["stop_reason"] == "rounds"


# ---------------------------------------------------------------- one type rule
@pytest.mark.parametrize("value", ["5", b"5", True, np.bool_(True), None, [1.0], {}, 1 + 1j])
def test_a_scalar_number_is_never_a_string_a_bool_or_a_container(value):
    with pytest.raises(ValueError, match=r"Exponential\.mean must be a real number"):
        dists.Exponential(value)
    with pytest.raises(ValueError, match=r"Scenario\.eval_every must be an integer"):
        timing(eval_every=value)()


@pytest.mark.parametrize(
    "value",
    [["5"] * 3, "5", [True, False, True], np.bool_(True), [None] * 3, [1.0, "x", 2.0], 1 + 1j],
)
def test_fleet_arrays_follow_the_same_rule(value):
    for field in ("scale", "bandwidth_down", "latency", "dropout_rate"):
        with pytest.raises(ValueError, match=rf"Fleet\.{field} must be a number or an array"):
            Fleet([dists.Exponential(1.0)], [0, 0, 0], **{field: value})
    with pytest.raises(ValueError, match=r"Empirical\.samples must be a number or an array"):
        dists.Empirical(value)


def test_numpy_numbers_count_as_numbers_and_numpy_bools_as_flags():
    assert dists.Exponential(np.float32(2.0)).mean == 2.0
    assert timing(rounds=np.int64(7), seed=np.uint8(3))().rounds == 7
    fleet = Fleet(
        [dists.Exponential(1.0)], np.zeros(3, np.int8), latency=np.arange(3, dtype=np.int16)
    )
    assert fleet.latency.tolist() == [0.0, 1.0, 2.0]
    pol = policies.WaitAll(count=3, weights="size", replace=np.bool_(True))
    assert pol.replace is True and type(pol.replace) is bool
    assert type(algorithms.FedRep(orthonormalize=np.bool_(False)).orthonormalize) is bool
    with pytest.raises(ValueError, match=r"FedRep\.orthonormalize must be True or False"):
        algorithms.FedRep(orthonormalize=0)


@pytest.mark.parametrize("flag", ["lazy", "batched", "progress"])
@pytest.mark.parametrize("value", ["no", 0, 1, None, "False"])
def test_run_flags_must_be_bools(flag, value):
    with pytest.raises(ValueError, match=rf"simfl\.run {flag} must be True or False"):
        run(TIMING, **{flag: value})


def test_run_flags_take_numpy_bools():
    res = run(TIMING, progress=np.bool_(False), lazy=np.bool_(True), batched=np.bool_(False))
    assert res.meta["lazy"] is True and res.meta["batched"] is False


def test_integers_fit_in_64_bits_and_huge_ones_are_not_floats():
    with pytest.raises(ValueError, match=r"Scenario\.seed"):
        timing(seed=2**64)()
    with pytest.raises(ValueError, match=r"Exponential\.mean must be finite"):
        dists.Exponential(10**400)
    with pytest.raises(
        ValueError, match=r"Fleet\.homogeneous n .* must be an integer in \[1, 100000000\]"
    ):
        Fleet.homogeneous(10**9, dists.Exponential(1.0))


# ---------------------------------------------------------------- bounded generators
@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (
            lambda: Availability.exponential(3, mean_on=1e-6, mean_off=1e-6, horizon=86_400.0),
            r"about 8\.64e\+10 on/off periods per device \(2\.59e\+11 for the 3 devices\); the "
            r"generators stop at 1e\+06 per device and 1e\+07 in all",
        ),
        (
            lambda: Availability.exponential(10**5, mean_on=1.0, mean_off=1.0, horizon=200.0),
            r"\(2\.01e\+07 for the 100000 devices\)",
        ),
        (
            lambda: Availability.diurnal(
                3, mean_on=60.0, low=0.1, high=1 - 1e-12, horizon=86_400.0
            ),
            r"Availability\.diurnal with horizon=86400, mean_on=60, high=1 would draw about "
            r"1\.44e\+15 on/off periods per device",
        ),
        (lambda: Availability.always(2 * 10**7), r"Availability\.always with n=20000000"),
    ],
    ids=["tiny-means", "many-devices", "high-near-1", "always"],
)
def test_availability_generators_refuse_more_periods_than_the_cap(build, expected):
    with pytest.raises(ValueError, match=expected):
        build()


def test_availability_generators_below_the_cap_still_work():
    av = Availability.diurnal(3, mean_on=60.0, low=0.1, high=0.99, horizon=600.0, period=600.0)
    assert av.size == 3 and av.horizon >= 600.0
    assert Availability.exponential(2, mean_on=1.0, mean_off=1.0, horizon=100.0).size == 2


@pytest.mark.parametrize(
    ("intervals", "message"),
    [
        ("abc", "one entry per device"),
        ([[("a", "b")]], "device 0 must be .start, end. pairs of numbers"),
        ([[(0.0, 1.0, 2.0)]], "device 0 must be .start, end. pairs of numbers"),
        ([[(True, False)]], "device 0 must be .start, end. pairs of numbers"),
    ],
)
def test_availability_intervals_are_numbers(intervals, message):
    with pytest.raises(ValueError, match=message):
        Availability(intervals)


# ---------------------------------------------------------------- links and energy, before the run
def graph_network(**attrs):
    """``Network.from_graph`` of a star: devices 0 and 1 on ``attrs`` links to the server."""
    graph = nx.Graph()
    graph.add_edge("server", 0, **attrs)
    graph.add_edge("server", 1, bandwidth=1e6, latency=0.01)
    return Network.from_graph(graph)


@pytest.mark.parametrize(
    ("attrs", "message"),
    [
        (
            {"bandwidth": 0},
            r"network link server-0 bandwidth must be in \[9\.2.*e-282, inf\], got 0",
        ),
        ({"bandwidth": math.nan}, r"network link server-0 bandwidth .*got NaN"),
        ({"bandwidth": "fast"}, r"network link server-0 bandwidth .*got 'fast'"),
        ({"up": 0.0}, r"network link server-0 up bandwidth must be in"),
        ({"down": -5.0}, r"network link server-0 down bandwidth must be in"),
        ({"latency": -1}, r"network link server-0 latency must be in \[0, 1e\+300\], got -1"),
        ({"latency": math.nan}, r"network link server-0 latency .*got NaN"),
        ({"latency": math.inf}, r"network link server-0 latency must be finite"),
        ({"up": 1e-307}, r"network link server-0 up bandwidth .*got 1e-307"),
    ],
    ids=lambda x: repr(x) if isinstance(x, dict) else "",
)
def test_graph_link_attributes_are_checked_when_the_network_is_built(attrs, message):
    # before: Scenario() accepted them and simfl.run failed
    with pytest.raises(ValueError, match=message):
        graph_network(**attrs)


def test_a_multigraph_is_refused_naming_its_parallel_links():
    # before: "not enough values to unpack" in simfl.run
    graph = nx.MultiGraph()
    graph.add_edge("server", 0, bandwidth=1e6)
    graph.add_edge("server", 0, bandwidth=2e6)
    graph.add_edge("server", 1, bandwidth=1e6)
    with pytest.raises(ValueError, match=r"MultiGraph: nodes 'server' and 0 have 2 links"):
        Network.from_graph(graph)


def test_a_directed_graph_is_refused():
    graph = nx.DiGraph()
    graph.add_edge("server", 0)
    with pytest.raises(ValueError, match="undirected networkx Graph"):
        Network.from_graph(graph)


def test_a_valid_graph_network_still_runs():
    sc = timing(fleet=Fleet.homogeneous(2, dists.Exponential(1.0)), network=graph_network(up=1e3))()
    res = run(sc, progress=False)
    assert res.ok and len(res.rounds) == sc.rounds


@pytest.mark.parametrize(
    ("build", "message"),
    [
        # a 48-byte upload over 1e-307 bytes/s would take 4.8e308 s (before: the run ended
        # "error" with 0 rows)
        (
            lambda: Fleet.homogeneous(3, dists.Exponential(1.0), bandwidth_up=1e-307),
            r"Fleet\.bandwidth_up must be >= 9\.2.*e-282",
        ),
        (
            lambda: Fleet.homogeneous(3, dists.Exponential(1.0), bandwidth_down=1e-300),
            r"Fleet\.bandwidth_down must be >= .*device 0 has",
        ),
        (
            lambda: Fleet.homogeneous(3, dists.Exponential(1.0), latency=1e301),
            r"Fleet\.latency must be >= 0 and <= 1e\+300",
        ),
        (lambda: Profile(dists.Exponential(1.0), bandwidth_up=1e-300), r"Profile\.bandwidth_up"),
        (lambda: Profile(dists.Exponential(1.0), latency=1e305), r"Profile\.latency"),
        (lambda: Network.star(server_up=1e-290), r"Network\.server_up"),
        (lambda: Network.star(server_latency=1e305), r"Network\.server_latency"),
        (lambda: Network.hierarchical([0, 0], edge_down=1e-290), r"Network\.edge_down"),
    ],
    ids=[
        "fleet-up",
        "fleet-down",
        "fleet-latency",
        "profile-up",
        "profile-latency",
        "star-up",
        "star-latency",
        "edge-down",
    ],
)
def test_transfers_that_would_overflow_are_refused_at_construction(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_the_slowest_accepted_link_moves_the_largest_payload_in_finite_time():
    seconds = transfer_seconds(MAX_BYTES, MIN_BANDWIDTH, MAX_DRAW)
    assert math.isfinite(float(seconds)) and float(seconds) <= 2.0 * MAX_DRAW
    Fleet.homogeneous(2, dists.Exponential(1.0), bandwidth_up=MIN_BANDWIDTH)  # accepted


@pytest.mark.parametrize(
    ("energy", "message"),
    [
        (lambda: Energy(per_work=1e308), r"Energy\.per_work must be in \[0, 1e\+07\], got 1e\+308"),
        (lambda: Energy(idle_power=1e300), r"Energy\.idle_power must be in \[0, 1e\+07\]"),
        (lambda: Energy(per_byte_up=math.inf), r"Energy\.per_byte_up must be finite"),
        (
            lambda: np.array([[0.0, 0.0, 0.0, 1.0], [1e200, 0.0, 0.0, 0.0]]),
            r"Fleet\.energy values must be in \[0, 1e\+07\].*device 1 has per_work = 1e\+200",
        ),
    ],
    ids=["per-work", "idle-power", "inf", "table"],
)
def test_energy_that_would_overflow_is_refused_before_the_run(energy, message):
    # before: Energy(per_work=1e308) ran with status ok and recorded inf joules
    with pytest.raises(ValueError, match=message):
        Fleet.homogeneous(2, dists.Exponential(1.0)).with_energy(energy())


def test_the_largest_energy_rates_give_finite_joules():
    top = Energy(
        per_work=MAX_RATE, per_byte_down=MAX_RATE, per_byte_up=MAX_RATE, idle_power=MAX_RATE
    )
    fleet = Fleet.homogeneous(3, dists.Exponential(1e3)).with_energy(top)
    res = run(timing(fleet=fleet, rounds=3)(), progress=False)
    assert res.ok and np.isfinite(res.clients["energy"]).all()
    assert (res.clients["energy"] > 0).all()
