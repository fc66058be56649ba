import math

import numpy as np
import pandas as pd
import pytest

from simfl import Results, compare, policies, run
from tests.helpers import linear_scenario


def fake(times, values, seed=0, name="x", initial=None):
    rounds = pd.DataFrame({"round": np.arange(len(times)), "time": times, "distance": values})
    meta = {"seed": seed, "scenario": name, "initial_metrics": initial or {}}
    return Results(rounds, pd.DataFrame(), meta)


def test_time_to_target_by_hand():
    r = fake([1.0, 2.0, 3.0, 4.0], [0.5, np.nan, 0.09, 0.01])
    assert compare.time_to_target(r, "distance", below=0.1) == 3.0
    assert compare.time_to_target(r, "distance", below=0.1, column="round") == 2
    assert compare.time_to_target(r, "distance", below=1e-3) == math.inf
    assert compare.time_to_target(r, "distance", above=0.4) == 1.0
    # a target met by the initial model is met at time 0
    r0 = fake([1.0], [0.5], initial={"distance": 0.05})
    assert compare.time_to_target(r0, "distance", below=0.1) == 0.0
    with pytest.raises(ValueError, match="exactly one"):
        compare.time_to_target(r, "distance")
    with pytest.raises(ValueError, match="not a column"):
        compare.time_to_target(r, "accuracy", above=0.5)


def test_collect_targets_and_summary():
    a = [fake([1, 2, 3], [0.5, 0.2, 0.05], seed=s) for s in range(3)]
    b = [fake([2, 4, 6], [0.5, 0.2, 0.05], seed=s) for s in range(3)]
    frame = compare.collect({"a": a, "b": b}, n_devices=10)
    assert set(frame["label"]) == {"a", "b"} and (frame["n_devices"] == 10).all()
    per_run = compare.targets(frame, "distance", below=0.1)
    assert per_run.loc[per_run["label"] == "a", "time_to_target"].tolist() == [3, 3, 3]
    summary = compare.summarize_targets(frame, "distance", below=0.1)
    assert summary.set_index("label").loc["b", "mean_time"] == 6.0
    assert summary.set_index("label").loc["b", "ci_low"] == 6.0  # no spread, no width
    sp = compare.speedup(frame, "distance", below=0.1, baseline="b").set_index("label")
    assert sp.loc["a", "speedup"] == 2.0 and sp.loc["b", "speedup"] == 1.0
    assert sp.loc["a", "ci_low"] == sp.loc["a", "ci_high"] == 2.0


def test_runs_that_never_reach_give_inf_not_a_flattering_mean():
    frame = compare.collect(
        {"a": [fake([1, 2], [0.5, 0.05], seed=0), fake([1, 2], [0.5, 0.5], seed=1)]}
    )
    s = compare.summarize_targets(frame, "distance", below=0.1).iloc[0]
    assert s["reached"] == 1 and s["mean_time"] == math.inf and s["median_time"] == math.inf


def test_bootstrap_ci_covers_the_mean_and_is_reproducible():
    x = np.random.default_rng(0).exponential(size=200)
    lo, hi = compare.bootstrap_ci(x)
    assert lo < x.mean() < hi
    assert (lo, hi) == compare.bootstrap_ci(x)
    se = x.std() / np.sqrt(x.size)
    assert hi - lo == pytest.approx(2 * 1.96 * se, rel=0.2)
    # powered (theory: the percentile interval of a mean of n = 200 is 2 z_0.975 se up to
    # O(1/n), ~0.1% here): with 50,000 resamples the width's Monte Carlo sd is 0.39% of it
    # (measured over 10 bootstrap seeds; 1.9% at the default 2,000, where rel=0.2 above cannot
    # see a 5% error); tolerance 1.5% >= 3.6 SE, and a 5% error is 9 SE beyond it (checked:
    # 1.05 and 0.95 times 2 * 1.96 * se fail)
    lo, hi = compare.bootstrap_ci(x, n_boot=50_000)
    assert hi - lo == pytest.approx(2 * 1.96 * se, rel=0.015)


def test_speedup_on_real_runs_pairs_by_seed():
    runs = {
        "wait-all": [
            run(
                linear_scenario(rounds=60, seed=s, policy=policies.WaitAll(count=20)),
                progress=False,
            )
            for s in range(3)
        ],
        "fastest": [
            run(
                linear_scenario(rounds=60, seed=s, policy=policies.FastestK(k=10, overcommit=1.0)),
                progress=False,
            )
            for s in range(3)
        ],
    }
    frame = compare.collect(runs)
    sp = compare.speedup(frame, "distance", below=1e-3, baseline="wait-all").set_index("label")
    assert sp.loc["fastest", "speedup"] > 1.5
    assert (
        sp.loc["fastest", "ci_low"] <= sp.loc["fastest", "speedup"] <= sp.loc["fastest", "ci_high"]
    )


def _reached_and_missed():
    """``a`` reaches distance 0.1 in both seeds, ``b`` in none, ``c`` in one of two."""
    return compare.collect(
        {
            "a": [fake([1, 2], [0.5, 0.05], seed=s) for s in (0, 1)],
            "b": [fake([1, 2], [0.5, 0.5], seed=s) for s in (0, 1)],
            "c": [fake([1, 2], [0.5, 0.05], seed=0), fake([1, 2], [0.5, 0.5], seed=1)],
        }
    )


def test_never_reached_is_nan_speedup_with_a_note_never_0x():
    frame = _reached_and_missed()
    sp = compare.speedup(frame, "distance", below=0.1, baseline="a").set_index("label")
    for label, note in (("b", "not reached in 2 of 2 seeds"), ("c", "not reached in 1 of 2 seeds")):
        row = sp.loc[label]
        assert math.isnan(row["speedup"]) and math.isnan(row["ci_low"]), row
        assert math.isnan(row["ci_high"]) and row["note"] == note
    assert sp.loc["a", "speedup"] == 1.0 and sp.loc["a", "note"] == ""
    assert (sp.loc["c", "reached"], sp.loc["c", "runs"]) == (1, 2)
    # the baseline missed: not an infinite speedup either, and the note says whose seeds
    sp = compare.speedup(frame, "distance", below=0.1, baseline="b").set_index("label")
    assert math.isnan(sp.loc["a", "speedup"])
    assert sp.loc["a", "note"] == "baseline b: not reached in 2 of 2 seeds"
    assert sp.loc["c", "note"] == (
        "not reached in 1 of 2 seeds; baseline b: not reached in 2 of 2 seeds"
    )
    summary = compare.summarize_targets(frame, "distance", below=0.1).set_index("label")
    assert summary.loc["b", "mean_time"] == math.inf and math.isnan(summary.loc["b", "ci_high"])
    assert summary.loc["c", "note"] == "not reached in 1 of 2 seeds"
    assert summary.loc["a", "note"] == "" and summary.loc["a", "ci_low"] == 2.0


def test_speedup_vs_names_a_missing_speedup_instead_of_a_0x_point():
    import matplotlib

    matplotlib.use("Agg")
    from simfl import plots

    frame = _reached_and_missed().assign(n=10)
    sp = compare.speedup(frame, "distance", below=0.1, baseline="a", by=["label", "n"])
    ax = plots.speedup_vs(sp, "n", by="label")
    drawn = [y for line in ax.get_lines() for y in line.get_ydata() if line.get_marker() == "o"]
    assert drawn == [1.0]  # the baseline's own point; no 0x point for b or c
    notes = " ".join(" ".join(t.get_text().split()) for t in ax.texts)  # wrapped lines
    assert "b, n=10: not reached in 2 of 2 seeds" in notes
    assert "c, n=10: not reached in 1 of 2 seeds" in notes
