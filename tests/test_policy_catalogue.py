"""The policy catalogue (analysis/policy_catalogue.py): its numbers checked by hand on a subset."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analysis"))
import policy_catalogue as cat

SUBSET = ("wait-all", "deadline", "partial-work", "fastest-k", "fedat")


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """Linear task, tiered fleet, one seed, a short budget, a few policies."""
    cases = [
        c
        for c in cat.cases_for("linear", seeds=1, max_time=400.0)
        if c.labels["fleet"] == "tiered" and c.labels["policy"] in SUBSET
    ]
    frame, stores = cat.run_catalogue(cases, tmp_path_factory.mktemp("cat"), 1, report=False)
    return cases, frame, stores[("linear", "tiered")], stores


def test_every_claimed_policy_is_in_the_catalogue():
    names = {c.labels["policy"] for c in cat.cases_for("linear", seeds=1, max_time=1.0)}
    assert names == set(cat.CLAIMS)
    neural = {c.labels["policy"] for c in cat.cases_for("neural", seeds=1, max_time=1.0)}
    assert neural == set(cat.CLAIMS)


def test_tiers_of_the_fleets():
    fleet = cat.tiered_fleet(1.0)
    np.testing.assert_array_equal(np.bincount(cat.tier_of("tiered", fleet)), [60, 30, 10])
    logn = cat.lognormal_fleet(1.0)
    tier = cat.tier_of("lognormal", logn)
    np.testing.assert_array_equal(np.bincount(tier), [60, 30, 10])
    # the slow tier holds the 10 largest persistent factors
    assert set(np.argsort(logn.scale)[-10:]) == set(np.flatnonzero(tier == 2))


def test_tier_shares_equal_a_count_by_hand(small):
    cases, frame, store, stores = small
    assert set(frame["policy"]) == set(SUBSET)
    shares = cat.tier_shares(stores, frame, cases)
    group = cat.tiered_fleet(1.0).group
    for run_id, policy in frame[["run_id", "policy"]].drop_duplicates().itertuples(index=False):
        jobs = store.clients(run_id)
        arrived = jobs[jobs["status"].astype(str) == "arrived"]["device"].to_numpy()
        n = [int(np.sum(group[arrived] == t)) for t in range(3)]
        row = shares[shares["policy"] == policy].iloc[0]
        for t, name in enumerate(cat.TIERS):
            assert row[f"share_{name}"] == n[t] / sum(n)
    # wait-all aggregates every selected job (no dropouts on this fleet): its shares are the
    # shares of its selections
    wa = frame[frame["policy"] == "wait-all"]["run_id"].iloc[0]
    jobs = store.clients(wa)
    assert set(jobs["status"].astype(str)) <= {"arrived", "cancelled"}


def test_speedups_are_ratios_of_the_times(small):
    _, frame, _, _ = small
    table = cat.summarize(frame, "linear", "tiered")
    times = dict(zip(table["policy"], table["mean_time"], strict=True))
    for row in table.itertuples(index=False):
        if np.isfinite(times["wait-all"]) and np.isfinite(row.mean_time):
            # one seed: the paired speedup is the ratio of the two times
            assert row.speedup == pytest.approx(times["wait-all"] / row.mean_time, rel=1e-12)
        text = cat.verdict(table[table["policy"] == row.policy].iloc[0])
        base = cat.PAPER_BASELINE.get(row.policy)
        if row.policy == "wait-all":
            assert text == "baseline"
        elif not row.reached:
            assert text == "not reached"
        elif np.isfinite(row.vs_paper):
            # one seed: the paired CI is the ratio itself, so the verdict is its direction
            assert row.vs_paper == pytest.approx(times[base] / row.mean_time, rel=1e-12)
            word = "faster" if row.vs_paper > 1 else "slower"
            assert text.startswith(f"{row.vs_paper if word == 'faster' else 1 / row.vs_paper:.2f}x")
            assert text.endswith(f"{word} than {base}")
        else:
            assert text == f"vs {base}: no finite speedup"


def test_partial_work_keeps_slow_updates_that_the_deadline_drops(small):
    cases, frame, _, stores = small
    shares = cat.tier_shares(stores, frame, cases).set_index("policy")
    # same deadline and cohorts: a plain deadline loses the slow tier's jobs (Exp(15 s) per
    # job: P(job <= 4 s) ~ 0.23); partial work keeps whoever fits one of 5 steps (~0.73)
    assert shares.loc["partial-work", "share_slow"] > shares.loc["deadline", "share_slow"]


def test_docs_tables_are_the_results_file():
    import json
    import re

    root = Path(__file__).resolve().parents[1]
    results = json.loads((root / "analysis" / "results" / "policy_catalogue.json").read_text())
    assert not results["quick"] and results["seeds"] == 5
    page = (root / "docs" / "policies.md").read_text()
    block = re.search(r"<!-- catalogue:begin -->\n(.*?)\n<!-- catalogue:end -->", page, re.S)
    assert block is not None
    assert block.group(1) == cat.docs_table(results)
    # every policy of the catalogue, on every task and fleet, is in the results
    panels = {(r["task"], r["fleet"]) for r in results["rows"]}
    assert len(panels) == 4
    for task, fleet in panels:
        names = {r["policy"] for r in results["rows"] if (r["task"], r["fleet"]) == (task, fleet)}
        assert names == set(cat.CLAIMS), (task, fleet)
