"""Grouping-safe comparisons: ``by=`` takes a list, and no grouping merges several runs.

The store is a tiny sweep: 2 policies x 2 fleets of the same size (8 fast or 8 slow devices)
x 2 seeds of FedRep on a small linear task. Grouped ``by="policy"`` each (policy, seed) holds
two runs (one per fleet); every function refuses that and names ``fleet``. Grouped
``by=["policy", "fleet"]`` the numbers are checked against a hand computation from each run's
own ``rounds`` frame, and so is the report of the store (a panel and a table row per fleet).
"""

from __future__ import annotations

import itertools
import math

import matplotlib
import numpy as np
import pandas as pd
import pytest

import simfl
from simfl import Fleet, compare, dists, plots, policies, sweeps
from simfl.report import write_report
from tests.helpers import tiny_linear

matplotlib.use("Agg")

TARGET = 0.3
SEEDS = (1, 5)


@pytest.fixture(scope="module")
def out():
    fleets = {
        "fast": Fleet.homogeneous(8, dists.Exponential(0.5)),
        "slow": Fleet.homogeneous(8, dists.Exponential(2.0)),
    }
    cases = sweeps.grid(
        tiny_linear(rounds=20),
        policy={"wait-all": policies.WaitAll(count=6), "deadline": policies.Deadline(0.8, count=6)},
        fleet=fleets,
        seed=list(SEEDS),
    )
    return simfl.sweep(cases, executor="inline", progress=False)


def _by_hand(out):
    """Time to TARGET of every run, from its own Results: {(policy, fleet, seed): time}."""
    times = {}
    for run_id in out.run_ids:
        record = out.store.record(run_id)
        res = out.store.results(run_id)
        labels = record["labels"]
        start = res.meta["initial_metrics"]["distance"]
        hit = math.inf if start > TARGET else 0.0
        if hit > 0:
            for t, d in zip(res.rounds["time"], res.rounds["distance"], strict=True):
                if d <= TARGET:  # NaN (not evaluated) is never <=
                    hit = float(t)
                    break
        times[(labels["policy"], labels["fleet"], labels["seed"])] = hit
    return times


def test_by_one_column_refuses_to_merge_the_fleets(out):
    frame = out.frame
    calls = [
        lambda: compare.targets(frame, "distance", below=TARGET, by="policy"),
        lambda: compare.summarize_targets(frame, "distance", below=TARGET, by="policy"),
        lambda: compare.speedup(frame, "distance", below=TARGET, baseline="wait-all", by="policy"),
        lambda: plots.metric_vs_time(frame, "distance", by="policy"),
        lambda: plots.metric_vs_rounds(frame, "distance", by="policy"),
    ]
    for call in calls:
        with pytest.raises(ValueError, match=r"runs differ in 'fleet'.*by=\['policy', 'fleet'\]"):
            call()
    # the scenario name also tells the runs apart, and is named after the grid label
    with pytest.raises(ValueError, match=r"'fleet' \(and in their scenario name, 'label'\)"):
        compare.targets(frame, "distance", below=TARGET, by="policy")


def test_frames_without_run_ids_are_checked_too(out):
    by_fleet: dict[str, list[simfl.Results]] = {"fast": [], "slow": []}
    for run_id in out.run_ids:
        labels = out.store.record(run_id)["labels"]
        if labels["policy"] == "wait-all":
            by_fleet[labels["fleet"]].append(out.store.results(run_id))
    frame = pd.concat(
        [compare.collect({"w": by_fleet[f]}, speed=f) for f in ("fast", "slow")],
        ignore_index=True,
    )
    assert "run_id" not in frame.columns
    with pytest.raises(ValueError, match=r"runs differ in 'speed'; add it to by="):
        compare.summarize_targets(frame, "distance", below=TARGET)
    # the same runs with nothing telling them apart: the message says so
    same = compare.collect({"w": [*by_fleet["fast"], *by_fleet["slow"]]})
    with pytest.raises(ValueError, match="no label column tells them apart"):
        compare.targets(same, "distance", below=TARGET)
    # grouped by what tells them apart, it is fine: one row per (label, speed)
    table = compare.summarize_targets(frame, "distance", below=TARGET, by=["label", "speed"])
    assert table["speed"].tolist() == ["fast", "slow"] and table["runs"].tolist() == [2, 2]


def test_two_columns_give_one_row_per_group_with_the_hand_numbers(out):
    hand = _by_hand(out)
    assert len(hand) == 8 and all(np.isfinite(v) for v in hand.values())
    assert all(v > 0 for v in hand.values())  # reached during training, not at the start
    frame = out.frame
    per_run = compare.targets(frame, "distance", below=TARGET, by=["policy", "fleet"])
    assert len(per_run) == 8
    for row in per_run.itertuples():
        assert row.time_to_target == hand[(row.policy, row.fleet, row.seed)]

    summary = compare.summarize_targets(frame, "distance", below=TARGET, by=["policy", "fleet"])
    assert len(summary) == 4 and (summary["runs"] == 2).all()
    for row in summary.itertuples():
        mean = np.mean([hand[(row.policy, row.fleet, s)] for s in SEEDS])
        assert row.mean_time == mean

    sp = compare.speedup(
        frame, "distance", below=TARGET, baseline="wait-all", by=["policy", "fleet"]
    )
    assert len(sp) == 4 and set(zip(sp["policy"], sp["fleet"], strict=True)) == {
        (p, f) for p in ("wait-all", "deadline") for f in ("fast", "slow")
    }
    for row in sp.itertuples():
        base = np.mean([hand[("wait-all", row.fleet, s)] for s in SEEDS])
        mine = np.mean([hand[(row.policy, row.fleet, s)] for s in SEEDS])
        assert row.baseline_time == base and row.mean_time == mine
        assert row.speedup == pytest.approx(base / mine, rel=1e-15)
        if row.policy == "wait-all":
            assert row.speedup == row.ci_low == row.ci_high == 1.0


def test_plots_take_a_list_of_columns(out):
    ax = plots.metric_vs_time(out.frame, "distance", by=["policy", "fleet"])
    labels = {t.get_text() for t in ax.get_legend().get_texts()}
    assert {"wait-all, fast", "deadline, slow"} <= labels
    assert ax.get_legend().get_title().get_text() == "policy, fleet"
    ax = plots.metric_vs_rounds(out.frame, "distance", by=["policy", "fleet"])
    assert len(ax.get_lines()) >= 4
    sp = compare.speedup(
        out.frame, "distance", below=TARGET, baseline="wait-all", by=["policy", "fleet"]
    )
    sp["n"] = sp["fleet"].map({"fast": 8, "slow": 16})
    ax = plots.speedup_vs(sp, "n", by="policy")
    assert {t.get_text() for t in ax.get_legend().get_texts()} == {"wait-all", "deadline"}
    # a speedup table with two rows per (policy, n) would draw a zigzag: refused
    twice = pd.concat([sp.assign(task="a"), sp.assign(task="b")], ignore_index=True)
    with pytest.raises(ValueError, match="differ in 'task'"):
        plots.speedup_vs(twice, "n", by="policy")


def test_bad_by_is_named(out):
    with pytest.raises(TypeError, match="by= must be a column name or a list"):
        compare.targets(out.frame, "distance", below=TARGET, by=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"by= names \['nope'\]"):
        compare.speedup(out.frame, "distance", below=TARGET, baseline="x", by=["policy", "nope"])
    with pytest.raises(ValueError, match="baseline 'x' is not a value of column 'policy'"):
        compare.speedup(out.frame, "distance", below=TARGET, baseline="x", by=["policy", "fleet"])


def test_the_report_gives_each_fleet_of_one_size_its_own_panel(out, tmp_path):
    hand = _by_hand(out)
    index = write_report(out.store, tmp_path / "r", target=("distance", "below", TARGET))
    table = pd.read_csv(tmp_path / "r" / "time_to_target.csv")
    assert len(table) == 4 and (table["runs"] == 2).all() and (table["n_devices"] == 8).all()
    for row in table.itertuples():
        mine = np.mean([hand[(row.policy, row.fleet, s)] for s in SEEDS])
        base = np.mean([hand[("wait-all", row.fleet, s)] for s in SEEDS])
        assert row.mean_time == pytest.approx(mine, rel=1e-12)
        assert row.speedup == pytest.approx(base / mine, rel=1e-12)
    text = index.read_text()
    assert "one panel per fleet and fleet size" in text
    assert "2 values of fleet" in text


@pytest.mark.parametrize("sizes", [[25, 50, 100, 200, 400, 800], [200, 400, 800]])
def test_speedup_vs_log_axis_labels_do_not_overlap(sizes):
    table = pd.DataFrame(
        {"n": sizes, "speedup": 2.0, "ci_low": 1.5, "ci_high": 2.5, "policy": "srpfl"}
    )
    ax = plots.speedup_vs(table, "n", by="policy")
    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    labels = [t for t in ax.get_xticklabels() + ax.get_xticklabels(minor=True) if t.get_text()]
    assert [t.get_text() for t in labels] == [str(n) for n in sizes]
    boxes = sorted((t.get_window_extent(renderer) for t in labels), key=lambda b: b.x0)
    assert all(a.x1 < b.x0 for a, b in itertools.pairwise(boxes))  # no two labels overlap
