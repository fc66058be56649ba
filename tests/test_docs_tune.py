"""docs/policy-search.md: its numbers are rendered from the studies' results files, the files hold
what the page claims, its code runs (at reduced size), and the errors it quotes are simfl's."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import simfl
from simfl import Fleet, dists, tuning
from simfl.fleet import Availability, load_pickle, sample_trace
from simfl.sweeps.fingerprint import fingerprint
from simfl.tuning.space import check_knobs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "analysis"))

import tune_capacity  # noqa: E402
import tune_deadline  # noqa: E402
import tune_docs  # noqa: E402

PAGE = (ROOT / "docs" / "policy-search.md").read_text()
POLICIES = (ROOT / "docs" / "policies.md").read_text()
#: The page's code shrunk for the tests: fewer trials and seeds, the same code otherwise.
REDUCE = {
    "trials=20": "trials=6",
    "seeds=range(4)": "seeds=range(2)",
    'store="runs/deadline"': 'store="runs/deadline", executor="inline"',
}


def _blocks(text: str, lang: str = "python") -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, re.S)


def _reduced(code: str) -> str:
    for big, small in REDUCE.items():
        code = code.replace(big, small)
    return code


@pytest.fixture(scope="module")
def deadline() -> dict[str, Any]:
    return tune_docs._load(tune_docs.DEADLINE)


@pytest.fixture(scope="module")
def capacity() -> dict[str, Any]:
    return tune_docs._load(tune_docs.CAPACITY)


# ------------------------------------------------------------------ rendered from the files


def test_the_pages_blocks_equal_their_rendering_from_the_results_files():
    assert tune_docs.rendered_page(PAGE) == PAGE, (
        "docs/policy-search.md's blocks differ from analysis/results/tune_*.json: run "
        "python analysis/tune_docs.py"
    )


def test_the_blocks_are_rendered_from_the_files_not_copied(deadline, capacity):
    changed = copy.deepcopy(deadline)
    changed["numbers"]["ratio"] = 1.2346
    assert "1.235x" in tune_docs.deadline_block(changed)
    assert "1.235x" not in tune_docs.deadline_block(deadline)
    changed = copy.deepcopy(capacity)
    changed["numbers"]["best"]["fresh"]["mean"] = 987.65
    assert "987.6" in tune_docs.capacity_block(changed)
    assert "987.6" not in tune_docs.capacity_block(capacity)


def test_a_quick_results_file_is_refused_by_the_page(tmp_path):
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"size": "quick", "numbers": {}}))
    with pytest.raises(ValueError, match="full"):
        tune_docs._load(path)


# ------------------------------------------------------------------ what the files hold


def _inf(value: float | None) -> float:
    """A value of a results file, where JSON holds ``inf`` as ``null``."""
    return math.inf if value is None else value


def test_the_deadline_study_meets_the_searchs_goals(deadline):
    # the acceptance goals: the search's best within 5% of the exhaustive grid's best, for at
    # most a quarter of the grid's runs (every run of every trial counted, pruned ones too)
    n = deadline["numbers"]
    g, s = n["grid"], n["search"]
    assert deadline["script"] == "analysis/tune_deadline.py" and "digest_workaround" not in n
    assert n["near"] == tune_deadline.NEAR == 0.05
    assert s["max_runs"] == g["runs"] // 4 == tune_deadline.BUDGET
    assert n["ratio"] <= 1.05
    assert s["used"] <= s["max_runs"]
    assert n["runs_fraction"] == s["used"] / g["runs"]
    assert n["ratio"] == pytest.approx(s["best_value"] / g["best_value"], rel=1e-12)
    # the search ran inline: the runs it used are exactly the seeds its trials ran, and it
    # executed those and the fresh seeds' runs
    assert s["used"] == sum(t["seeds_run"] for t in s["trials_table"])
    assert s["executed"] == s["used"] + s["fresh_runs"]
    # the budget stopped it: one more trial's seeds would not have fitted
    assert s["used"] + len(n["seeds"]) > s["max_runs"]
    assert s["trials"] == len(s["trials_table"]) == s["complete"] + s["pruned"]
    for t in s["trials_table"]:
        if t["state"] == "complete" and t["value"] is not None:
            assert t["seeds_run"] == t["reached"] == len(n["seeds"])
        elif t["state"] == "complete":  # a missed target stops the trial at that seed
            assert t["reached"] == t["seeds_run"] - 1 and t["value"] is None
        else:
            assert t["reached"] == t["seeds_run"] < len(n["seeds"])
    assert s["missed"] == sum(t["reached"] < t["seeds_run"] for t in s["trials_table"])
    assert s["fresh_runs"] == len(n["fresh_seeds"]) and not set(n["fresh_seeds"]) & set(n["seeds"])


def test_the_deadline_searches_over_search_seeds_are_counted_as_the_page_says(deadline):
    n = deadline["numbers"]
    g, s, runs = n["grid"], n["search"], n["search_seeds"]
    assert [r["search_seed"] for r in runs] == list(range(tune_deadline.SEARCH_SEEDS))
    first = runs[0]
    for key in ("trials", "complete", "pruned", "missed", "used", "best_seconds", "best_value"):
        assert first[key] == s[key], key
    met = 0
    for r in runs:
        assert r["used"] <= s["max_runs"] and r["trials"] == r["complete"] + r["pruned"]
        ratio = _inf(r["ratio"])
        if r["best_seconds"] is not None:
            assert ratio == pytest.approx(r["best_value"] / g["best_value"], rel=1e-12)
        met += ratio <= 1 + n["near"] and r["used"] <= g["runs"] / 4
    assert n["goal_met"] == met


def test_the_deadline_grid_is_what_the_page_says(deadline):
    n = deadline["numbers"]
    g = n["grid"]
    seconds = [r["seconds"] for r in g["rows"]]
    assert seconds == pytest.approx(list(np.geomspace(0.8, 8.0, g["points"])), rel=1e-12)
    assert g["runs"] == g["points"] * len(n["seeds"])
    values = [_inf(r["value"]) for r in g["rows"]]
    best = min(values)
    assert g["best_value"] == best and g["best_seconds"] == seconds[values.index(best)]
    assert g["near_fraction"] == sum(v <= 1.05 * best for v in values) / len(values)
    # infinite below about 1.1 s (a seed missed the target), growing above about 2 s
    never = [x for x, v in zip(seconds, values, strict=True) if math.isinf(v)]
    assert never == g["never_reached"] and never == seconds[: len(never)]
    assert 1.0 < max(never) < 1.3
    above = [v for x, v in zip(seconds, values, strict=True) if x >= 2.0]
    assert above == sorted(above) and g["best_seconds"] < 2.0
    # the search's best lies where the grid is within 5% of its best
    near = [x for x, v in zip(seconds, values, strict=True) if v <= 1.05 * best]
    assert min(near) <= n["search"]["best_seconds"] <= max(near)
    f = n["search"]["fresh"]
    assert f["reached"] == len(n["fresh_seeds"]) and f["ci_low"] <= f["mean"] <= f["ci_high"]
    assert f["mean"] == pytest.approx(np.mean(n["search"]["fresh_per_seed"]), rel=1e-12)


def test_the_capacity_study_holds_what_the_page_says(capacity):
    from simfl.tuning import search

    n = capacity["numbers"]
    b, table = n["best"], n["trials_table"]
    assert capacity["script"] == "analysis/tune_capacity.py" and "digest_workaround" not in n
    assert n["trials"] == len(table) == n["complete"] + n["pruned"]
    complete = [t for t in table if t["state"] == "complete"]
    feasible = [t for t in table if t["feasible"]]
    assert len(complete) == n["complete"] and len(feasible) == n["feasible_trials"]
    assert n["feasible_trials"] + n["infeasible_trials"] == n["complete"]
    # a complete trial is feasible exactly when it met the constraint; a pruned one never is
    assert all((t["round_time"] <= 60) == t["feasible"] for t in complete)
    assert not any(t["feasible"] for t in table if t["state"] == "pruned")
    # the best is the feasible trial with the most updates per hour, and the top five follow
    ranked = sorted(feasible, key=lambda t: -t["value"])
    assert (b["trial"], b["count"], b["seconds"]) == tuple(
        ranked[0][k] for k in ("trial", "count", "seconds")
    )
    assert [t["trial"] for t in n["top"]] == [t["trial"] for t in ranked[:5]]
    assert b["search"]["mean"] == ranked[0]["value"] and b["constraint_search"] <= 60
    assert b["constraint_fresh"] <= 60 and b["constraint_fresh_met"]
    for s in (b["search"], b["fresh"]):
        assert s["reached"] == 4 and s["ci_low"] <= s["mean"] <= s["ci_high"]
    # UpdatesPerHour has no bound: every pruned trial was stopped by paired evidence, which
    # looks from PAIRED_MIN_SEEDS seeds on; complete trials ran every seed
    assert tuning.UpdatesPerHour().bound([1.0], 4) is None
    for t in table:
        if t["state"] == "pruned":
            assert search.PAIRED_MIN_SEEDS <= t["seeds_run"] < len(n["seeds"])
        else:
            assert t["seeds_run"] == len(n["seeds"])
    assert n["used"] == sum(t["seeds_run"] for t in table)
    assert n["runs"] == n["used"] + n["fresh_runs"]
    # the best deadline sits at the constraint's edge: a longer one gave more, and broke it
    over = [t for t in complete if not t["feasible"]]
    assert max(t["value"] for t in over) > b["search"]["mean"]
    # the cohort is capped at the devices online, and the search says so
    assert n["largest_cohort"] <= n["most_online"] < n["devices"] and b["count"] > n["most_online"]
    capped = [w for w in n["warnings"] if w.startswith("knob policy.count:")]
    assert len(capped) == 1 and "the cohort is capped (at the devices online)" in capped[0]
    assert f"no round of theirs selected more than {n['largest_cohort']}:" in capped[0]
    over_cap = [t for t in complete if t["count"] > n["largest_cohort"]]
    counts = sorted(t["count"] for t in over_cap)
    assert f"{len(over_cap)} trials asked for cohorts of {counts[0]}-{counts[-1]} " in capped[0]
    assert n["summary"].count("warning    ") == len(n["warnings"])
    assert f"using {n['used']} runs; {n['runs']} runs executed" in n["summary"]


def test_the_capacity_studys_fleet_is_the_one_described():
    fleet = tune_capacity.fleet()
    assert fleet.size == 40 and fleet.availability is not None
    assert tune_capacity.most_online(fleet.availability, tune_capacity.HORIZON) == 21
    # about a minute of compute per job for the median client, over four for the slowest
    comp = np.array([v["computation"] for v in load_pickle(sample_trace()[0]).values()])
    seconds = 3 * comp / 1000 * 200
    assert 50 < np.median(seconds) < 70 and seconds.max() > 240
    assert sorted(fleet.scale) == pytest.approx(sorted(seconds), rel=1e-12)


def test_most_online_counts_overlapping_intervals_exactly():
    av = Availability([[(0.0, 10.0), (20.0, 30.0)], [(5.0, 25.0)], [(10.0, 20.0)]], 40.0)
    # [5, 10): devices 0 and 1; at 10 device 0 leaves as device 2 arrives (an end first)
    assert tune_capacity.most_online(av, 40.0) == 2
    assert tune_capacity.most_online(av, 4.0) == 1


# ------------------------------------------------------------------ the page's code runs


def _run_page(tmp_path, monkeypatch) -> dict[str, Any]:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {}
    for code in _blocks(PAGE):
        if code.startswith("# analysis/"):
            continue  # an excerpt of a script (checked below)
        exec(compile(_reduced(code), "docs/policy-search.md", "exec"), namespace)
    return namespace


def test_the_pages_code_runs_reduced(tmp_path, monkeypatch, capsys):
    ns = _run_page(tmp_path, monkeypatch)
    out, base = ns["out"], ns["base"]
    assert len(out.trials) == 6 and out.seeds == (0, 1) and out.fresh_seeds == (2, 3)
    assert out.best and set(out.best[0].params) == {"policy.seconds"}
    assert out.best[0].fresh["time_to_distance<=0.001"]["n"] == 2
    assert "study      deadline: 6 trials" in capsys.readouterr().out
    assert (tmp_path / "runs" / "deadline" / "tuning" / "deadline.journal").is_file()
    assert (tmp_path / "runs" / "deadline" / "tuning" / "deadline.json").is_file()
    # the knobs and constraints it shows are accepted by its scenario
    for knobs in (ns["knobs"], ns["whole"], ns["flags"], ns["TUNE"]["knobs"]):
        check_knobs(base, knobs)
    for c in ns["constraints"]:
        c.measure.check(base)
    inspect.signature(simfl.tune).bind(base, **ns["TUNE"])
    # the page's scenario is the one analysis/tune_deadline.py searches (its worked example)
    assert fingerprint(base) == fingerprint(tune_deadline.base())
    # resuming: the same call again finds its trials and runs in the store and runs nothing
    first = _blocks(PAGE)[0]
    exec(compile(_reduced(first), "docs/policy-search.md", "exec"), ns)
    assert ns["out"].runs == 0 and ns["out"].trials.equals(out.trials)


def test_the_policies_page_example_runs_reduced(tmp_path, monkeypatch):
    block = re.search(r"## Tuning a policy's numbers\n\n.*?```python\n(.*?)```", POLICIES, re.S)
    assert block is not None and len(block.group(1).splitlines()) <= 5
    monkeypatch.chdir(tmp_path)
    ns = {"simfl": simfl, "tuning": tuning, "base": tune_deadline.base()}
    exec(compile(_reduced(block.group(1)), "docs/policies.md", "exec"), ns)
    assert len(ns["out"].trials) == 6 and ns["out"].best


def test_the_pages_excerpts_are_the_scripts_code():
    excerpts = [b for b in _blocks(PAGE) if b.startswith("# analysis/")]
    assert excerpts
    for code in excerpts:
        path, body = code.split("\n", 1)
        assert body in (ROOT / path.removeprefix("# ")).read_text(), path


def test_the_errors_the_page_quotes_are_simfls():
    quoted = re.findall(r"^(\{.*\})\nValueError: (.*)$", _blocks(PAGE, "text")[0], re.M)
    assert len(quoted) == 4
    base = dataclasses.replace(
        tune_deadline.base(), fleet=Fleet.homogeneous(20, compute=dists.Exponential(1.0))
    )
    for knobs, message in quoted:
        with pytest.raises(ValueError) as err:
            check_knobs(base, eval(knobs, {"tuning": tuning}))
        assert str(err.value) == message


def test_the_page_documents_every_measure():
    table = PAGE.split("| measure | per run |", 1)[1].split("\n\n", 1)[0]
    for name in (
        "TimeToTarget",
        "EnergyToTarget",
        "UpdatesPerHour",
        "Final",
        "RoundTime",
        "Jain",
        "UpdateShare",
        "SimTime",
    ):
        assert f"`{name}(" in table, name
        assert hasattr(tuning, name)


# ------------------------------------------------------------------ the scripts at quick size


def test_the_scripts_run_quick(tmp_path, monkeypatch, capsys):
    for script in (tune_deadline, tune_capacity):
        monkeypatch.setattr(sys, "argv", ["x", "--quick", "--out", str(tmp_path)])
        script.main()
    assert "results: " in capsys.readouterr().out
    d = json.loads((tmp_path / "tune_deadline.json").read_text())
    assert d["size"] == "quick" and d["numbers"]["grid"]["points"] == 4
    assert d["numbers"]["search"]["used"] <= d["numbers"]["search"]["max_runs"] == 6
    assert len(d["numbers"]["search_seeds"]) == 2
    c = json.loads((tmp_path / "tune_capacity.json").read_text())
    assert c["size"] == "quick" and c["numbers"]["trials"] == 4


def test_the_pages_command_line_runs_reduced(tmp_path, monkeypatch, capsys):
    import shlex

    from simfl.cli import main

    # deadline.py holds the scenario at the top of the page (its first block, up to the search)
    # as SCENARIO
    scenario = _blocks(PAGE)[0].split("out = simfl.tune(", 1)[0]
    (tmp_path / "deadline.py").write_text(scenario + "SCENARIO = base\n")
    console = _blocks(PAGE, "console")[0].replace("\\\n", " ").removeprefix("$ ")
    reduced = console.replace("--seeds 0-3 --trials 30", "--seeds 0-1 --trials 4")
    assert reduced != console
    words = shlex.split(reduced)
    assert words[:3] == ["simfl", "tune", "deadline.py"]
    monkeypatch.chdir(tmp_path)
    assert main([*words[1:], "--executor", "inline", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "study      deadline: 4 trials" in out
    assert (tmp_path / "runs" / "deadline" / "tuning" / "deadline.json").is_file()


def test_the_pages_account_of_the_search_is_the_codes():
    from simfl.cli import TUNE_KEYS
    from simfl.tuning import search

    assert f"`PAIRED_MIN_SEEDS` ({search.PAIRED_MIN_SEEDS})" in PAGE
    assert f"`PAIRED_LEVEL` ({search.PAIRED_LEVEL:g})" in PAGE
    # "two per knob plus two, at most ten and at most half of `trials`, at least two"
    assert "two\nper knob plus two, at most ten and at most half of `trials`, at least two" in PAGE
    for knobs in range(1, 8):
        for trials in range(1, 60):
            expected = max(2, min(10, 2 * knobs + 2, trials // 2))
            assert search.startup_trials(knobs, trials) == expected
    # the TUNE entries the page lists are the command's
    listed = re.search(r"\(`knobs`, .*?`prune`\)", PAGE, re.S)
    assert listed is not None
    assert re.findall(r"`(\w+)`", listed.group(0)) == list(TUNE_KEYS)
    assert "max_runs" in TUNE_KEYS and "`--max-runs N`" in PAGE
