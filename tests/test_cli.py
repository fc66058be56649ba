import dataclasses
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from simfl import Results, run
from simfl.cli import load_scenarios, main

ROOT = Path(__file__).resolve().parents[1]

SMALL = textwrap.dedent(
    """
    from simfl import Fleet, Scenario, algorithms, dists, policies, tasks

    SCENARIO = Scenario(
        name="tiny",
        task=tasks.LinearRepresentation(d=8, k=2, samples_per_client=6),
        algorithm=algorithms.FedRep(),
        fleet=Fleet.homogeneous(20, compute=dists.Exponential(mean=1.0), dropout_rate=0.1),
        policy=policies.Deadline(2.0, fraction=0.25),
        rounds=8,
    )
    """
)


def test_run_writes_results_and_prints_a_summary(tmp_path, capsys):
    path = tmp_path / "tiny.py"
    path.write_text(SMALL)
    out = tmp_path / "out"
    assert main(["run", str(path), "--seed", "1", "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "tiny" in printed and "sim time" in printed and "final" in printed
    saved = Results.load(out)
    direct = run(dataclasses.replace(load_scenarios(path)["tiny"], seed=1), progress=False)
    pd.testing.assert_frame_equal(saved.rounds, direct.rounds, check_exact=True)
    pd.testing.assert_frame_equal(saved.clients, direct.clients, check_exact=True)
    assert main(["show", str(out)]) == 0
    assert "seed 1" in capsys.readouterr().out


def test_shipped_scenarios_load_and_the_main_one_runs(tmp_path, capsys):
    main_file = ROOT / "scenarios" / "fedrep_linear.py"
    assert (
        main(["run", str(main_file), "--seed", "1", "--out", str(tmp_path / "m"), "--quiet"]) == 0
    )
    assert "fedrep_linear" in capsys.readouterr().out
    for file in sorted((ROOT / "scenarios").glob("*.py")):
        assert load_scenarios(file)


def test_edge_diurnal_scenario_runs(tmp_path, capsys):
    import dataclasses

    for name, sc in load_scenarios(ROOT / "scenarios" / "edge_diurnal.py").items():
        res = run(dataclasses.replace(sc, rounds=8), progress=False)
        assert res.ok and len(res.rounds) == 8, name
        jobs = res.clients
        av = sc.fleet.availability
        assert all(
            av.is_on(int(d), float(t)) for d, t in zip(jobs["device"], jobs["t_start"], strict=True)
        )


def test_errors_are_reported_not_raised(tmp_path, capsys):
    assert main(["run", str(tmp_path / "missing.py")]) == 2
    assert "does not exist" in capsys.readouterr().err
    many = ROOT / "scenarios" / "linear_policies.py"
    assert main(["run", str(many), "--quiet"]) == 2
    assert "--pick" in capsys.readouterr().err
    assert main(["run", str(many), "--pick", "nope", "--quiet"]) == 2
    empty = tmp_path / "empty.py"
    empty.write_text("X = 1\n")
    assert main(["run", str(empty)]) == 2
    assert "must define SCENARIO" in capsys.readouterr().err


def test_usage_error_exits():
    with pytest.raises(SystemExit):
        main([])


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        ([], "docs/cli.md"),
        (["run"], "--pick"),
        (["sweep"], "Runs already in the store are skipped"),
        (["tune"], "Knobs are dataclass paths"),
        (["report"], "index.html"),
        (["show"], "summary of a saved results directory"),
        (["store"], "prune: Set aside"),
        (["store", "check"], "--repair moves them"),
        (["store", "prune"], "never deleted"),
    ],
)
def test_help_says_what_each_command_does(argv, said, capsys):
    with pytest.raises(SystemExit) as stop:
        main([*argv, "--help"])
    assert stop.value.code == 0
    assert said in " ".join(capsys.readouterr().out.split())
