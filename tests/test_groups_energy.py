"""Who took part (participation per group, fairness, per-group metrics) and what it cost."""

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import simfl
from simfl import Fleet, Profile, Scenario, algorithms, compare, dists, policies, sweeps, tasks
from simfl.fleet import Energy
from simfl.outcome import STATUSES
from simfl.report import write_report
from simfl.results import Results
from simfl.results.groups import decode_groups, encode_groups, jain_index
from simfl.sweeps.fingerprint import canonical, fingerprint

TASK = tasks.LinearRepresentation(d=6, k=2, samples_per_client=5, test_samples=20)
FAST = Energy(per_work=2.0, per_byte_down=1e-6, per_byte_up=3e-6, idle_power=0.5)
SLOW = Energy(per_work=0.5, per_byte_down=2e-6, per_byte_up=4e-6, idle_power=0.25)


def tiered(energy=True, dropout=0.0):
    """9 fast devices (1 s per unit of work), then 3 slow ones (5 s per unit)."""
    return Fleet.tiers(
        (
            9,
            Profile(
                dists.Constant(1.0),
                name="fast",
                bandwidth_down=1e3,
                bandwidth_up=1e3,
                dropout_rate=dropout,
                energy=FAST if energy else None,
            ),
        ),
        (
            3,
            Profile(
                dists.Constant(5.0),
                name="slow",
                bandwidth_down=1e3,
                bandwidth_up=1e3,
                energy=SLOW if energy else None,
            ),
        ),
    )


def scenario(policy, fleet, rounds=10, algorithm=None, **kw):
    return Scenario(
        name="tiered",
        task=TASK,
        algorithm=algorithm or algorithms.FedRep(),
        fleet=fleet,
        policy=policy,
        rounds=rounds,
        seed=0,
        **kw,
    )


@pytest.fixture(scope="module")
def deadline_run():
    """A fixed deadline that the slow tier (5 s of compute per unit) always misses."""
    fleet = tiered(dropout=0.05)
    return simfl.run(scenario(policies.Deadline(3.0, count=8), fleet), progress=False)


# ------------------------------------------------------------------ per-group participation
def test_participation_of_a_deadline_run_equals_a_hand_count(deadline_run):
    res = deadline_run
    table = res.participation()
    assert list(table["group"]) == ["fast", "slow"]
    hand = {g: dict.fromkeys(("selected", *STATUSES), 0) for g in ("fast", "slow")}
    used = {"fast": set(), "slow": set()}
    for job in res.clients.itertuples():
        group = "fast" if job.device < 9 else "slow"
        hand[group]["selected"] += 1
        hand[group][job.status] += 1
        if job.status == "arrived":
            used[group].add(job.device)
    arrived = hand["fast"]["arrived"] + hand["slow"]["arrived"]
    for row in table.itertuples():
        counts = hand[row.group]
        for column in ("selected", *STATUSES):
            assert getattr(row, column) == counts[column], (row.group, column)
        assert row.devices == (9 if row.group == "fast" else 3)
        assert row.fleet_share == row.devices / 12
        assert row.devices_arrived == len(used[row.group])
        assert row.update_share == counts["arrived"] / arrived
        assert row.updates_per_device == counts["arrived"] / row.devices
    # the point of the table: the slow tier was selected but never aggregated
    slow = table.set_index("group").loc["slow"]
    assert slow["selected"] > 0 and slow["arrived"] == 0 and slow["update_share"] == 0.0
    assert table.set_index("group").loc["fast", "dropped"] > 0
    per_device = res.participation("device")
    assert len(per_device) == 12 and per_device["arrived"].sum() == arrived
    assert list(per_device["group"]) == ["fast"] * 9 + ["slow"] * 3
    assert np.isclose(per_device["energy"].sum(), res.clients["energy"].sum(), rtol=1e-12)


def test_jain_index_by_hand():
    assert jain_index([1, 2, 3]) == pytest.approx(36 / 42, rel=1e-15)
    assert jain_index([5, 5]) == 1.0 and jain_index([4, 0, 0, 0]) == 0.25
    assert math.isnan(jain_index([0, 0])) and math.isnan(jain_index([]))


def _hand_made_results():
    """4 devices in groups a, a, b, b; device 0 and 1 aggregated twice, 2 once, 3 never."""
    jobs = [(0, "arrived"), (0, "arrived"), (1, "arrived"), (1, "arrived"), (2, "arrived")]
    jobs += [(3, "late"), (3, "dropped"), (2, "cancelled")]
    clients = pd.DataFrame(
        {
            "round": np.zeros(len(jobs), dtype=np.int64),
            "device": np.array([d for d, _ in jobs], dtype=np.int64),
            "status": pd.Categorical([s for _, s in jobs], categories=list(STATUSES)),
        }
    )
    meta = {
        "n_devices": 4,
        "groups": encode_groups(("a", "b"), np.array([0, 0, 1, 1])),
        "goals": {"test_mse": "min", "accuracy": "max"},
        "client_metrics": {
            "clients": [0, 1, 2, 3],
            "metrics": {"test_mse": [1.0, 3.0, 5.0, 9.0], "accuracy": [0.9, 0.7, 0.2, 0.4]},
        },
    }
    return Results(pd.DataFrame(), clients, meta)


def test_fairness_by_hand():
    res = _hand_made_results()
    fair = res.fairness()
    # arrived per device 2, 2, 1, 0; per device of each group: a 4/2 = 2, b 1/2 = 0.5
    assert fair["jain_devices"] == pytest.approx(5**2 / (4 * 9), rel=1e-15)
    assert fair["jain_groups"] == pytest.approx(2.5**2 / (2 * (4 + 0.25)), rel=1e-15)
    # group means: test_mse a 2, b 7 (to minimise: worst 7); accuracy a .8, b .3 (worst .3)
    assert fair["worst_group_test_mse"] == 7.0
    assert fair["worst_group_accuracy"] == pytest.approx(0.3, rel=1e-15)
    metrics = res.group_metrics()
    assert list(metrics["group"]) == ["a", "b", "all"]
    assert list(metrics["evaluated"]) == [2, 2, 4]
    assert list(metrics["test_mse"]) == [2.0, 7.0, 4.5]
    table = res.participation()
    assert list(table["arrived"]) == [4, 1] and list(table["cancelled"]) == [0, 1]
    assert list(table["late"]) == [0, 1] and list(table["update_share"]) == [0.8, 0.2]


def test_results_without_groups_have_one_group():
    res = _hand_made_results()
    del res.meta["groups"]
    assert res.groups()[0] == ("all",)
    assert list(res.participation()["arrived"]) == [5]
    names, index = decode_groups(encode_groups(("x", "y"), np.array([0, 1, 1, 0, 0])), 5)
    assert names == ("x", "y") and list(index) == [0, 1, 1, 0, 0]
    with pytest.raises(ValueError, match="must describe 4 devices"):
        decode_groups(encode_groups(("x",), np.zeros(3, dtype=np.int64)), 4)


def test_per_group_metrics_of_a_linear_run(deadline_run):
    res = deadline_run
    entry = res.meta["client_metrics"]
    assert set(entry["metrics"]) == {"test_mse"} and len(entry["clients"]) == 12
    mse = np.array(entry["metrics"]["test_mse"])
    clients = np.array(entry["clients"])
    metrics = res.group_metrics().set_index("group")
    assert metrics.loc["fast", "test_mse"] == pytest.approx(mse[clients < 9].mean(), rel=1e-14)
    assert metrics.loc["slow", "test_mse"] == pytest.approx(mse[clients >= 9].mean(), rel=1e-14)
    # the final evaluation is the mean over the same clients
    assert metrics.loc["all", "test_mse"] == res.final()["test_mse"]
    worst = max(metrics.loc["fast", "test_mse"], metrics.loc["slow", "test_mse"])
    assert res.fairness()["worst_group_test_mse"] == worst
    text = res.summary()
    assert "groups     fast 75% of devices, 100% of updates  slow 25% of devices, 0% of" in text
    assert "fairness   Jain's index of updates:" in text and "energy     " in text


def test_labels_given_by_the_user():
    fleet = Fleet.homogeneous(6, dists.Constant(1.0)).with_groups(list("abbcca"))
    assert fleet.device_groups()[0] == ("a", "b", "c")
    res = simfl.run(scenario(policies.WaitAll(count=6), fleet, rounds=2), progress=False)
    assert list(res.participation()["arrived"]) == [4, 4, 4]
    runs = [[0, 1], [1, 2], [2, 2], [0, 1]]  # a, b b, c c, a
    assert res.meta["groups"] == {"names": ["a", "b", "c"], "runs": runs}
    assert fleet.with_groups(None).device_groups()[0] == ("g0",)


# ------------------------------------------------------------------ fleets
def test_fleet_groups_default_to_tiers_and_survive_joins():
    fleet = tiered()
    names, index = fleet.device_groups()
    assert names == ("fast", "slow") and list(index) == [0] * 9 + [1] * 3
    same = Fleet.tiers(
        (2, Profile(dists.Constant(1.0), name="x")), (2, Profile(dists.Constant(2.0), name="x"))
    )
    assert same.device_groups()[0] == ("x",)
    joined = Fleet.homogeneous(2, dists.Constant(1.0)).with_groups(["p", "q"]) + same
    assert list(joined.group_labels()) == ["p", "q", "x", "x", "x", "x"]
    assert joined.energy is None
    with_energy = fleet + Fleet.homogeneous(2, dists.Constant(1.0))
    assert with_energy.energy is not None
    assert with_energy.energy[-1].tolist() == [0.0] * 4
    assert with_energy.energy[0].tolist() == [2.0, 1e-6, 3e-6, 0.5]
    assert list(fleet.table()["group"]) == ["fast"] * 9 + ["slow"] * 3
    assert list(fleet.with_scale(2.0).group_labels()) == list(fleet.group_labels())
    assert np.array_equal(fleet.with_scale(2.0).energy, fleet.energy)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: Fleet.homogeneous(3, dists.Constant(1.0)).with_groups(["a"]), "one label per"),
        (
            lambda: Fleet.homogeneous(3, dists.Constant(1.0)).with_groups(["a", 2, "b"]),
            "non-empty strings, got 2 for device 1",
        ),
        (lambda: Fleet.homogeneous(3, dists.Constant(1.0)).with_groups("abc"), "sequence of 3"),
        (
            lambda: Fleet.homogeneous(3, dists.Constant(1.0)).with_groups(["a", "", "b"]),
            "non-empty strings",
        ),
        (lambda: Energy(per_work=-1.0), r"Energy.per_work must be in \[0, 1e\+07\], got -1"),
        (lambda: Energy(idle_power=math.nan), "Energy.idle_power"),
        (lambda: Energy(per_byte_up=math.inf), "Energy.per_byte_up must be finite"),
        (
            lambda: Fleet.homogeneous(3, dists.Constant(1.0)).with_energy([Energy()]),
            "sequence of 3 .one per device., got a sequence of 1",
        ),
        (
            lambda: Fleet.homogeneous(3, dists.Constant(1.0)).with_energy(np.zeros((3, 2))),
            r"shape \(3, 4\)",
        ),
        (lambda: Profile(dists.Constant(1.0), energy=3.0), "Profile.energy must be"),
    ],
)
def test_bad_groups_and_energy_are_refused(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_fingerprints_of_fleets_without_groups_or_energy_are_unchanged():
    # recorded before fleets had labels and energy: stores keep their run ids
    two = Fleet.tiers(
        (3, Profile(dists.Exponential(1.0), name="fast")),
        (2, Profile(dists.Exponential(5.0), name="slow")),
    )
    assert fingerprint(two) == "9b9131e9b29768cc3f232345edf51e5f601b94ced5194aedb5fc9c40510d841b"
    one = Fleet.homogeneous(100, dists.Exponential(1.0))
    assert fingerprint(one) == "b8f77e1a9cae26edd1e71abb658be984a34d41be273b0a38ef88379971d34206"
    assert '"labels"' not in canonical(one) and '"energy"' not in canonical(one)
    assert fingerprint(one.with_groups(["a"] * 100)) != fingerprint(one)
    assert fingerprint(one.with_energy(Energy())) != fingerprint(one)
    assert fingerprint(one.with_energy(Energy(per_work=1.0))) != fingerprint(
        one.with_energy(Energy(per_work=2.0))
    )


# ------------------------------------------------------------------ energy
def test_energy_of_every_job_by_hand(deadline_run):
    res = deadline_run
    jobs = res.clients
    fast = (jobs["device"] < 9).to_numpy()
    model = np.array([FAST.row() if f else SLOW.row() for f in fast])
    seconds_per_unit = np.where(fast, 1.0, 5.0)
    close = jobs["round"].map(res.rounds.set_index("round")["time"]).to_numpy()
    status = jobs["status"].to_numpy()
    work = jobs["work"].to_numpy()
    done = np.where(status == "arrived", work, jobs["compute"].to_numpy() / seconds_per_unit)
    idle = np.where(status == "dropped", 0.0, close - jobs["t_end"].to_numpy())
    compute = model[:, 0] * done
    transfer = model[:, 1] * jobs["bytes_down"] + model[:, 2] * jobs["bytes_up"]
    expected = compute + transfer + model[:, 3] * idle
    assert np.allclose(jobs["energy_compute"], compute, rtol=1e-12, atol=0)
    assert np.allclose(jobs["energy_transfer"], transfer, rtol=1e-12, atol=0)
    assert np.allclose(jobs["energy_idle"], model[:, 3] * idle, rtol=1e-12, atol=1e-15)
    assert np.allclose(jobs["energy"], expected, rtol=1e-12, atol=0)
    # every kind of job is there: arrived fast jobs idle, late slow ones stop at the deadline
    arrived = jobs[status == "arrived"]
    assert (arrived["energy_idle"] > 0).any()
    late = jobs[status == "late"]
    assert len(late) > 0 and (late["energy_idle"] == 0).all()
    assert (late["energy_compute"] < late["work"] * np.where(late["device"] < 9, 2.0, 0.5)).all()
    assert (status == "dropped").any()
    one = jobs[status == "arrived"].iloc[0]  # one job spelled out
    assert one["energy"] == pytest.approx(
        2.0 * one["work"]
        + 1e-6 * one["bytes_down"]
        + 3e-6 * one["bytes_up"]
        + 0.5 * (res.rounds["time"].iloc[int(one["round"])] - one["t_end"]),
        rel=1e-12,
    )


def test_asynchronous_jobs_do_not_idle():
    fleet = tiered()
    res = simfl.run(
        scenario(policies.FedBuff(buffer_size=2, concurrency=4), fleet, rounds=6), progress=False
    )
    jobs = res.clients
    assert (jobs["energy_idle"] == 0).all()
    assert np.array_equal(jobs["energy"], jobs["energy_compute"] + jobs["energy_transfer"])
    assert (jobs.loc[jobs["status"] == "arrived", "energy"] > 0).all()


def test_energy_to_target_by_hand():
    """Wait-all on identical devices: every round costs the same, cohort x one job."""
    fleet = Fleet.homogeneous(6, dists.Constant(2.0), bandwidth_down=1e3, bandwidth_up=1e3)
    fleet = fleet.with_energy(Energy(per_work=3.0, per_byte_down=1e-5, per_byte_up=2e-5))
    res = simfl.run(scenario(policies.WaitAll(count=3), fleet, rounds=8), progress=False)
    jobs = res.clients
    size = 6 * 2 * 8  # FedRep's representation, d x k float64, travels both ways
    assert (jobs["bytes_down"] == size).all() and (jobs["bytes_up"] == size).all()
    one = 3.0 * jobs["work"].iloc[0] + 1e-5 * size + 2e-5 * size
    assert np.allclose(jobs["energy"], one, rtol=1e-14)
    distance = res.rounds["distance"].to_numpy()
    value = float(distance[4])  # reached by round 4 at the latest
    hit = int(np.flatnonzero(distance <= value)[0])
    energy = compare.energy_to_target(res, "distance", below=value)
    assert energy == pytest.approx((hit + 1) * 3 * one, rel=1e-12)
    assert energy == pytest.approx(jobs.loc[jobs["round"] <= hit, "energy"].sum(), rel=1e-12)
    assert compare.energy_to_target(res, "distance", below=math.inf) == 0.0  # the initial model
    assert compare.energy_to_target(res, "distance", below=-1.0) == math.inf
    table = compare.energy_targets({"wait-all": [res]}, "distance", below=value)
    row = table.iloc[0]
    assert row["label"] == "wait-all" and row["energy_to_target"] == energy
    assert row["time_to_target"] == compare.time_to_target(res, "distance", below=value)
    assert row["energy"] == pytest.approx(8 * 3 * one, rel=1e-12)
    assert list(res.cumulative_energy()) == pytest.approx([(r + 1) * 3 * one for r in range(8)])


def test_a_fleet_without_energy_records_none():
    plain = scenario(policies.WaitAll(count=3), tiered(energy=False), rounds=2)
    res = simfl.run(plain, progress=False)
    assert not res.has_energy and "energy" not in res.clients.columns
    assert len(res.clients.columns) == 13
    with pytest.raises(ValueError, match="recorded no energy: give its fleet an energy model"):
        compare.energy_to_target(res, "distance", below=1.0)
    assert "energy" not in res.participation().columns
    assert "energy " not in res.summary()


def test_groups_energy_and_client_metrics_survive_save_and_load(deadline_run, tmp_path):
    deadline_run.save(tmp_path / "run")
    back = Results.load(tmp_path / "run")
    assert back.meta["groups"] == deadline_run.meta["groups"]
    assert back.meta["client_metrics"] == deadline_run.meta["client_metrics"]
    pd.testing.assert_frame_equal(back.clients, deadline_run.clients)
    pd.testing.assert_frame_equal(back.participation(), deadline_run.participation())
    pd.testing.assert_frame_equal(back.group_metrics(), deadline_run.group_metrics())
    assert back.fairness() == deadline_run.fairness()
    pd.testing.assert_series_equal(back.cumulative_energy(), deadline_run.cumulative_energy())


# ------------------------------------------------------------------ the report
def test_report_shows_participation_and_energy(tmp_path):
    cases = sweeps.grid(
        scenario(policies.WaitAll(count=4), tiered(), rounds=6),
        policy={
            "deadline": policies.Deadline(3.0, count=6),
            "wait-all": policies.WaitAll(count=6),
        },
        seed=[0, 1],
    )
    store = tmp_path / "store"
    simfl.sweep(cases, store=store, executor="inline", progress=False)
    index = write_report(store, target=("distance", "below", 10.0))
    text = index.read_text()
    assert "<h2>Who took part</h2>" in text and "<h2>Energy to distance ≤ 10</h2>" in text
    table = pd.read_csv(index.parent / "participation.csv")
    jobs = simfl.Store(store).clients()
    jobs["group"] = np.where(jobs["device"] < 9, "fast", "slow")
    counts = jobs.groupby(["policy", "group", "status"], observed=True).size()
    for row in table.itertuples():
        for status in STATUSES:
            assert getattr(row, status) == counts.get((row.policy, row.group, status), 0)
    deadline = table[table["policy"] == "deadline"].set_index("group")
    assert deadline.loc["slow", "arrived"] == 0 and deadline.loc["fast", "update_share"] == 1.0
    waitall = table[table["policy"] == "wait-all"].set_index("group")
    assert waitall.loc["slow", "arrived"] > 0
    energy = pd.read_csv(index.parent / "energy_to_target.csv").set_index("policy")
    runs = [simfl.Store(store).results(r) for r in simfl.Store(store).runs()["run_id"]]
    by_hand = {
        p: np.mean(
            [
                compare.energy_to_target(r, "distance", below=10.0)
                for r in runs
                if r.meta["scenario"].startswith(f"policy={p}")
            ]
        )
        for p in ("deadline", "wait-all")
    }
    for policy, value in by_hand.items():
        assert energy.loc[policy, "energy_to_target"] == pytest.approx(value, rel=1e-12)
    fairness = pd.read_csv(index.parent / "fairness.csv").set_index("policy")
    assert fairness.loc["deadline", "fewest"] == "slow"


# ------------------------------------------------------------------ neural per-client metrics
@pytest.mark.parametrize("finetune", [0, 1])
def test_neural_per_client_metrics_add_up_to_the_evaluation(finetune, request):
    pytest.importorskip("torch")
    request.getfixturevalue("torch_one_thread")
    from simfl import Streams
    from simfl.neural import MLP, SGD, Digits, FedAvgFT, ImageClassification, Shards

    task = ImageClassification(Digits(), Shards(2), MLP((16, 8)))
    algorithm = FedAvgFT(epochs=1, finetune_epochs=finetune, optimizer=SGD(lr=0.05, batch_size=8))
    streams = Streams(0)
    data = task.build(10, streams)
    state = algorithm.initial_state(data, streams)
    clients, metrics = algorithm.evaluate_clients(state, data)
    samples = (data.test_index(clients) >= 0).sum(axis=1)
    overall = algorithm.evaluate(state, data)
    assert list(clients) == list(data.eval_clients) and (samples > 0).all()
    hits = np.round(metrics["accuracy"] * samples)
    assert hits.sum() / samples.sum() == pytest.approx(overall["accuracy"], rel=1e-12)
    weighted = (metrics["loss"] * samples).sum() / samples.sum()
    assert weighted == pytest.approx(overall["loss"], rel=1e-9)


def test_docs_example_runs(capsys):
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "fleets.md").read_text()
    block = re.search(r"## Per-group results and energy\n.*?```python\n(.*?)```", page, re.S)
    assert block is not None
    namespace: dict[str, object] = {}
    exec(compile(block.group(1), "docs/fleets.md", "exec"), namespace)
    res = namespace["res"]
    table = res.participation().set_index("group")
    assert list(table.index) == ["fast", "slow"] and res.has_energy
    assert table.loc["slow", "update_share"] < table.loc["slow", "fleet_share"]
    assert "jain_devices" in capsys.readouterr().out
    assert (Path(__file__).resolve().parents[1] / "analysis/figures/groups_energy.png").is_file()


def test_docs_numbers_are_the_results_file():
    """The docs' paragraph on groups_energy.png is rendered from the script's results."""
    import json
    import re
    import sys

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "analysis"))
    import groups_energy

    results = json.loads((root / "analysis" / "results" / "groups_energy.json").read_text())
    assert not results["quick"] and results["seeds"] == 5
    page = (root / "docs" / "fleets.md").read_text()
    block = re.search(
        r"<!-- groups-energy:begin -->\n(.*?)\n<!-- groups-energy:end -->", page, re.S
    )
    assert block is not None
    assert block.group(1) == groups_energy.docs_text(results)
