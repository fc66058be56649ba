"""One rule for seeds (a case's own seed axis, or ``seeds=`` / ``--seeds``), ``simfl run`` on a
file of several cases, ``help(simfl.sweep)``, and the small traps of ``Target`` and ``--target``."""

import dataclasses
import inspect
import pydoc
import textwrap

import pandas as pd
import pytest

import simfl
from simfl import Results, Store, Target, policies, sweeps
from simfl.cli import main, parse_target
from tests.helpers import tiny_linear

SEEDED = textwrap.dedent(
    """
    from simfl import Fleet, Scenario, algorithms, dists, policies, sweeps, tasks

    B = Scenario(
        task=tasks.LinearRepresentation(d=6, k=2, samples_per_client=5, test_samples=20),
        algorithm=algorithms.FedRep(),
        fleet=Fleet.homogeneous(10, compute=dists.Exponential(mean=1.0)),
        policy=policies.WaitAll(count=4),
        rounds=3,
    )
    CASES = sweeps.grid(B, {axes})
    """
)


def _file(tmp_path, axes):
    path = tmp_path / "x.py"
    path.write_text(SEEDED.format(axes=axes))
    return path


def _seeds(store):
    return sorted(Store(store).runs()["seed"].tolist())


def test_a_file_with_a_seed_axis_runs_its_own_seeds(tmp_path, capsys):
    file = _file(tmp_path, "seed=range(3)")
    store = tmp_path / "s"
    assert main(["sweep", str(file), "--store", str(store), "--executor", "inline", "--quiet"]) == 0
    assert "3 runs (3 cases with the file's own seeds 0-2)" in capsys.readouterr().out
    assert _seeds(store) == [0, 1, 2]


def test_seeds_option_is_refused_for_a_file_with_a_seed_axis(tmp_path, capsys):
    file = _file(tmp_path, "seed=range(3)")
    store = tmp_path / "s"
    assert main(["sweep", str(file), "--seeds", "0-4", "--store", str(store), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{file} defines CASES: cases 0-2 set their own seeds 0-2" in err
    assert "drop --seeds" in err
    assert not store.exists()  # refused before anything ran


def test_seeds_option_and_its_default_apply_to_a_file_without_a_seed_axis(tmp_path, capsys):
    file = _file(tmp_path, "policy={'w': policies.WaitAll(count=4), 'f': policies.FastestK(k=2)}")
    args = ["sweep", str(file), "--executor", "inline", "--quiet", "--store"]
    assert main([*args, str(tmp_path / "a"), "--seeds", "3,5"]) == 0
    assert "4 runs (2 scenarios x 2 seeds)" in capsys.readouterr().out
    assert _seeds(tmp_path / "a") == [3, 3, 5, 5]
    assert main([*args, str(tmp_path / "b")]) == 0  # default 0-4
    assert "10 runs (2 scenarios x 5 seeds)" in capsys.readouterr().out
    assert _seeds(tmp_path / "b") == sorted([0, 1, 2, 3, 4] * 2)


def test_sweep_seeds_parameter_is_the_same_rule():
    base = tiny_linear(rounds=3)
    by_axis = simfl.sweep(sweeps.grid(base, seed=range(3)), executor="inline", progress=False)
    by_option = simfl.sweep(base, seeds=range(3), executor="inline", progress=False)
    assert by_option.run_ids == by_axis.run_ids  # the very same three runs
    pd.testing.assert_frame_equal(by_option.frame, by_axis.frame, check_exact=True)
    assert sorted(by_option.frame["seed"].unique()) == [0, 1, 2]

    grid = sweeps.grid(base, policy={"w": policies.WaitAll(count=4), "f": policies.FastestK(k=2)})
    out = simfl.sweep(grid, seeds=[7, 2], executor="inline", progress=False)
    labels = [
        (r["policy"], r["seed"]) for r in (out.store.record(i)["labels"] for i in out.run_ids)
    ]
    assert labels == [("w", 7), ("w", 2), ("f", 7), ("f", 2)]

    with pytest.raises(ValueError, match=r"cases 0-2 set their own seeds 0-2 .* drop seeds="):
        simfl.sweep(sweeps.grid(base, seed=range(3)), seeds=[0], progress=False)


@pytest.mark.parametrize(
    ("seeds", "message"),
    [
        ([], "at least one seed"),
        ([1, 2, 1], "lists a seed twice: 1-2"),
        ([-1], r"integer in \[0, "),
        ([0.5], r"integer in \[0, "),
        ("0-4", "integers such as range"),
    ],
)
def test_bad_seeds_are_refused(seeds, message):
    with pytest.raises(ValueError, match=message):
        simfl.sweep(tiny_linear(), seeds=seeds, progress=False)


def test_run_refuses_a_file_of_several_cases_and_lists_them(tmp_path, capsys):
    file = _file(tmp_path, "seed=range(3)")
    assert main(["run", str(file), "--quiet", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "defines 3 scenarios and simfl run runs one" in err
    assert "--pick NAME (seed=0, seed=1, seed=2)" in err and f"simfl sweep {file}" in err
    assert not (tmp_path / "r").exists()

    assert (
        main(["run", str(file), "--quiet", "--pick", "seed=2", "--out", str(tmp_path / "r")]) == 0
    )
    saved = Results.load(tmp_path / "r")
    assert saved.meta["seed"] == 2
    assert main(["run", str(file), "--quiet", "--pick", "seed=9"]) == 2
    assert "--pick must be one of seed=0, seed=1, seed=2" in capsys.readouterr().err


def test_help_of_sweep_shows_the_function():
    params = list(inspect.signature(simfl.sweep).parameters)
    assert params == [
        "cases",
        "seeds",
        "store",
        "executor",
        "workers",
        "scheduler",
        "retry_failed",
        "reuse_stale",
        "rerun_unknown",
        "progress",
        "threads",
    ]
    text = pydoc.render_doc(simfl.sweep, renderer=pydoc.plaintext)
    assert "Run every case into a results store" in text and "seeds" in text
    assert "**options" not in text and "Sweeps: cases" not in text  # not the module's docstring
    assert simfl.sweep is simfl.sweeps.sweep


def test_target_below_and_above_are_keyword_only():
    with pytest.raises(TypeError, match=r"keyword-only.*Target\('accuracy', above=0.6\)"):
        Target("accuracy", 0.6)
    assert Target("accuracy", above=0.6).above == 0.6
    signature = inspect.signature(Target)
    assert signature.parameters["below"].kind is inspect.Parameter.KEYWORD_ONLY
    assert dataclasses.replace(Target("distance", below=1e-3), below=1e-4).below == 1e-4


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("distance<1e-3", ("distance", "below", 1e-3)),
        ("distance<=1e-3", ("distance", "below", 1e-3)),
        ("accuracy>0.9", ("accuracy", "above", 0.9)),
        ("accuracy>=0.6", ("accuracy", "above", 0.6)),
        (" test_mse <= 0.25 ", ("test_mse", "below", 0.25)),
    ],
)
def test_target_text_takes_both_comparisons(text, parsed):
    assert parse_target(text) == parsed


@pytest.mark.parametrize("text", ["accuracy=0.6", "accuracy=>0.6", "<0.6", "a>=b", "a<nan", "a>"])
def test_target_text_refuses_the_rest(text):
    with pytest.raises(ValueError, match="--target must look like metric<=value"):
        parse_target(text)


def test_sweep_target_with_greater_or_equal(tmp_path, capsys):
    file = _file(tmp_path, "seed=range(2)")
    args = ["sweep", str(file), "--store", str(tmp_path / "s"), "--executor", "inline"]
    assert main([*args, "--quiet", "--target", "test_mse<=10"]) == 0
    assert "time to test_mse <= 10" in capsys.readouterr().out
    assert main([*args, "--quiet", "--target", "distance>=0"]) == 0
    assert "time to distance >= 0" in capsys.readouterr().out
