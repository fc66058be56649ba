"""``simfl tune``: a search from the command line, resumed, refused, interrupted, reported."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("optuna")

import simfl
from simfl import cli, tuning
from simfl.cli import main
from simfl.cli.commands.tune import resume_command

ROOT = Path(__file__).resolve().parents[1]

#: A linear task on a fleet of fast and slow devices: with 30 rounds, a deadline of 2-5 s and
#: a cohort of about 5 reach a distance of 0.3; a cohort of 2 does not (its time is inf).
FILE = textwrap.dedent(
    """
    from simfl import Fleet, Profile, Scenario, algorithms, dists, policies, tasks


    def fleet(fast, slow):
        return Fleet.tiers(
            (fast, Profile(compute=dists.Exponential(mean=1.0), latency=0.5, name="fast")),
            (slow, Profile(compute=dists.Exponential(mean=8.0), latency=0.5, name="slow")),
        )


    FLEETS = {"small": fleet(8, 2), "big": fleet(16, 4)}
    SCENARIO = Scenario(
        name="deadline",
        task=tasks.LinearRepresentation(d=10, k=2, samples_per_client=5, noise_std=1e-3),
        algorithm=algorithms.FedRep(),
        fleet=fleet(16, 4),
        policy=policies.Deadline(2.0, count=5),
        rounds=30,
    )
    """
)
#: The flags of the search the tests run, by flag (each value given once per item).
FLAGS = {
    "--knob": ["policy.seconds=1.5:5:log", "policy.count=2..10"],
    "--objective": ["time:distance<=0.3"],
    "--constraint": ["round_time:0.95<=4.5"],
    "--trials": ["4"],
    "--seeds": ["0-1"],
    "--executor": ["inline"],
}


def _search(**changes: list[str]) -> list[str]:
    """The flags of :data:`FLAGS`, with ``changes`` (``knob=[...]``) replacing some."""
    flags = {**FLAGS, **{f"--{k.replace('_', '-')}": v for k, v in changes.items()}}
    return [word for flag, values in flags.items() for v in values for word in (flag, v)]


SEARCH = [*_search(), "--quiet"]


def _file(folder: Path, text: str = FILE, name: str = "lin.py") -> Path:
    path = folder / name
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """A search run by ``simfl tune``, then the same command again: their outputs."""
    folder = tmp_path_factory.mktemp("tune")
    path = _file(folder)
    store = folder / "store"
    argv = ["tune", str(path), *SEARCH, "--store", str(store)]
    first = _run(argv)
    second = _run(argv)
    return store, first, second


def _run(argv: list[str]) -> tuple[int, str, str]:
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def test_tune_prints_the_best_setting_and_saves_the_study(searched):
    store, (code, out, err), _ = searched
    assert code == 0, err
    assert out.splitlines()[0] == f"tune deadline: 4 trials x 2 seeds, 2 knobs -> {store}/"
    assert "study      deadline: 4 trials" in out
    assert "8 runs" in out or "runs," in out
    assert "best       trial " in out and "policy.seconds=" in out and "policy.count=" in out
    assert "on fresh seeds 2-3" in out and "round_time_q0.95<=4.5" in out
    assert f"study      {store / 'tuning' / 'deadline.json'}" in out
    assert f"figures    simfl report {store}" in out
    saved = json.loads((store / "tuning" / "deadline.json").read_text())
    assert saved["objectives"] == ["time_to_distance<=0.3"]
    assert saved["seeds"] == [0, 1] and saved["fresh_seeds"] == [2, 3]
    assert len(saved["trials"]) == 4 and len(saved["best"]) == 1
    assert (store / "tuning" / "deadline.journal").is_file()
    # the objective's target is recorded for simfl report, as sweep --target records its own
    assert json.loads((store / "report.json").read_text()) == {"target": "distance<=0.3"}


def test_the_same_command_resumes_and_runs_nothing(searched):
    _, (_, first, _), (code, out, err) = searched
    assert code == 0, err
    assert "study      deadline: 4 trials" in out
    assert (
        "; 0 runs executed, " in out
    )  # every trial was finished, the fresh seeds' runs are stored
    best = [line for line in first.splitlines() if line.startswith(("best", "  "))]
    assert best == [line for line in out.splitlines() if line.startswith(("best", "  "))]


def test_the_search_is_what_simfl_tune_gives(searched, tmp_path):
    """The command line runs :func:`simfl.tune` with the objects its text forms name."""
    store, _, _ = searched
    base = cli.load_scenarios(_file(tmp_path))["deadline"]
    out = simfl.tune(
        base,
        {"policy.seconds": tuning.Float(1.5, 5.0, log=True), "policy.count": tuning.Int(2, 10)},
        tuning.TimeToTarget("distance", below=0.3),
        constraints=[tuning.Constraint(tuning.RoundTime(0.95), at_most=4.5)],
        seeds=range(2),
        trials=4,
        executor="inline",
        progress=False,
    )
    saved = json.loads((store / "tuning" / "deadline.json").read_text())
    assert out.to_dict()["trials"] == saved["trials"]


def test_a_report_of_the_store_shows_the_search(searched, tmp_path, monkeypatch):
    from simfl.report import figures

    series = []  # the metric's curves (bootstrap bands: most of a report's time) are not drawn
    monkeypatch.setattr(figures, "metric_figure", lambda frame, metric, by, **kw: series.append(by))
    store, _, _ = searched
    out = tmp_path / "report"
    assert main(["report", str(store), "--out", str(out), "--quiet"]) == 0
    text = (out / "index.html").read_text()
    assert series == ["label", "label"]  # one series per setting, named by its knobs' values
    assert "<h2>Searches</h2>" in text and "<h3>Search deadline</h3>" in text
    assert "Target: <b>distance ≤ 0.3</b> (the sweep&#x27;s --target" in text
    for name in ("search-1-history.png", "search-1-importance.png", "search-1-trials.csv"):
        assert (out / name).is_file() and name in text, name
    assert "search-1-front" not in text  # one objective: no front is attempted
    head = text[text.index("<h3>Search deadline</h3>") : text.index("search-1-history.png")]
    assert "(fresh seeds 2-3)" in head and "met (" in head and "policy.count" in head
    assert text.index("<h2>Searches</h2>") < text.index("<h2>Time to")


def test_the_file_may_define_the_search_and_flags_replace_its_entries(tmp_path):
    text = FILE + textwrap.dedent(
        """
        from simfl import tuning

        TUNE = {
            "knobs": {"policy.seconds": tuning.Float(1.5, 5.0), "policy.count": "2..10"},
            "objective": "sim_time",
            "constraints": ["updates_per_hour>=1"],
            "seeds": "0-1",
            "fresh_seeds": (),
            "trials": 3,
        }
        """
    )
    path = _file(tmp_path, text)
    store = tmp_path / "s"
    code, out, err = _run(["tune", str(path), "--store", str(store), "--executor", "inline"])
    assert code == 0, err
    assert "tune deadline: 3 trials x 2 seeds, 2 knobs" in out
    saved = json.loads((store / "tuning" / "deadline.json").read_text())
    assert saved["objectives"] == ["sim_time"] and saved["fresh_seeds"] == []
    assert saved["constraints"] == ["updates_per_hour>=1"]
    assert not (store / "report.json").exists()  # no target to record
    argv = ["tune", str(path), "--store", str(store), "--executor", "inline", "--quiet"]
    argv += ["--objective", "updates_per_hour", "--knob", "fleet=@FLEETS", "--study", "other"]
    argv += ["--trials", "2", "--no-prune"]
    code, out, err = _run(argv)
    assert code == 0, err
    saved = json.loads((store / "tuning" / "other.json").read_text())
    assert saved["objectives"] == ["updates_per_hour"] and list(saved["knobs"]) == ["fleet"]
    assert len(saved["trials"]) == 2 and saved["constraints"] == ["updates_per_hour>=1"]
    assert {t["fleet"] for t in saved["trials"]} <= {"small", "big"}


def _refused(argv: list[str], tmp_path: Path, capsys, *words: str) -> None:
    store = tmp_path / "refused"
    assert main([*argv, "--store", str(store)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # refused before it says what it will run
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    for word in words:
        assert word in lines[0], (word, lines[0])
    assert not store.exists()


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"knob": ["policy.nope=1:2"]}, ["knob 'policy.nope'", "has no field 'nope'"]),
        ({"knob": ["policy.seconds=abc"]}, ["--knob policy.seconds", "PATH=LOW:HIGH"]),
        ({"knob": ["policy.count=1.5:4"]}, ["search it with Int(low, high)"]),
        ({"knob": ["policy.count=0..4"]}, ["knob values", "refused by the scenario"]),
        ({"knob": ["fleet=@NOPE"]}, ["defines no 'NOPE'"]),
        ({"knob": ["rounds=2..3", "rounds=4..5"]}, ["--knob rounds is given twice"]),
        ({"objective": ["time:accuracy>=0.9"]}, ["does not report 'accuracy'", "distance"]),
        ({"objective": ["speed"]}, ["--objective must be a measure", "updates_per_hour"]),
        ({"objective": ["sim_time"] * 3}, ["--objective is given 3 times"]),
        ({"constraint": ["share:medium>=0.1"]}, ["'medium' is not a group", "fast"]),
        ({"constraint": ["jain>=2"]}, ["can never be met"]),
        ({"seeds": ["3-1"]}, ["--seeds ranges must go from low to high"]),
        ({"fresh_seeds": ["1-2"]}, ["--fresh-seeds must be seeds the search never saw", "1 is"]),
        ({"trials": ["0"]}, ["--trials must be an integer in [1, "]),
    ],
)
def test_bad_input_is_one_line_before_any_run(change, words, tmp_path, capsys):
    argv = ["tune", str(_file(tmp_path)), *_search(**change)]
    _refused(argv, tmp_path, capsys, *words)


def test_usage_errors(tmp_path, capsys):
    path = _file(tmp_path)
    _refused(["tune", str(path)], tmp_path, capsys, "needs knobs and objective", "--knob PATH=SPEC")
    _refused(["tune", str(path), "--knob", "rounds=5..9"], tmp_path, capsys, "needs objective")
    more = "SCENARIOS = {'a': SCENARIO, 'b': dataclasses.replace(SCENARIO, name='b')}\n"
    two = _file(tmp_path, "import dataclasses\n" + FILE + more, "two.py")
    _refused(
        ["tune", str(two), "--knob", "rounds=5..9", "--objective", "sim_time"],
        tmp_path,
        capsys,
        "--pick NAME",
    )
    bad = _file(tmp_path, FILE + "TUNE = {'knob': {}}\n", "bad.py")
    _refused(["tune", str(bad)], tmp_path, capsys, "TUNE has no entry 'knob'", "knobs")


def test_a_failed_search_exits_1(tmp_path, monkeypatch):
    from simfl.tuning import search

    def fail(self, params, seeds):
        raise RuntimeError("run x failed: boom")

    monkeypatch.setattr(search._Runner, "run", fail)
    path = _file(tmp_path)
    code, out, _ = _run(["tune", str(path), *SEARCH, "--store", str(tmp_path / "s")])
    assert code == 1
    assert "4 trials (0 complete, 0 pruned, 4 failed)" in out and "best       none" in out


@pytest.mark.parametrize(("sig", "status"), [(None, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_search_says_how_to_resume(sig, status, tmp_path, monkeypatch):
    from simfl.tuning import search

    calls = []
    evaluate = search._evaluate

    def stop_at_the_second(*args, **kwargs):
        calls.append(args[1].params)
        if len(calls) == 2:
            if sig is None:
                raise KeyboardInterrupt
            os.kill(os.getpid(), sig)  # the handler raises KeyboardInterrupt here
        return evaluate(*args, **kwargs)

    monkeypatch.setattr(search, "_evaluate", stop_at_the_second)
    path, store = _file(tmp_path), tmp_path / "s"
    argv = ["tune", str(path), *_search(trials=["3"]), "--quiet", "--store", str(store)]
    code, out, err = _run(argv)
    assert code == status
    assert "study      deadline: 1 trials" in out  # the trial that finished
    why = "terminated (SIGTERM)" if sig else "interrupted"
    assert err.startswith(f"{why}: the search stopped")
    command = err.strip().splitlines()[-1].strip()
    assert command.startswith(f"simfl tune {path} --knob policy.seconds=1.5:5:log")
    assert f"--store {store}" in command and "--executor inline" in command
    if sig is None:
        return  # resumed once, after the SIGTERM
    monkeypatch.setattr(search, "_evaluate", evaluate)
    code, out, err = _run(shlex.split(command)[1:])
    assert code == 0, err
    saved = json.loads((store / "tuning" / "deadline.json").read_text())
    assert [t["trial"] for t in saved["trials"]] == [0, 2, 3]  # 1 was abandoned, run again
    assert saved["trials"][1]["policy.seconds"] == calls[1]["policy.seconds"]


def test_the_resume_command_keeps_every_flag():
    argv = ["tune", "f.py", "--pick", "a b", "--knob", "x=1:2", "--knob", "y=1..3"]
    argv += ["--objective", "sim_time", "--objective", "jain", "--constraint", "round_time<=5"]
    argv += ["--seeds", "0-3", "--trials", "9", "--no-fresh", "--study", "s", "--search-seed"]
    argv += ["7", "--no-prune", "--executor", "processes", "--workers", "2", "--threads", "1"]
    args = cli.parser().parse_args(argv)
    line = resume_command(args, "runs/t")
    again = cli.parser().parse_args(shlex.split(line)[1:])
    assert vars(again) == {**vars(args), "store": "runs/t", "quiet": False}


def test_without_optuna_tune_says_what_to_install_and_report_shows_tables(searched, tmp_path):
    store, _, _ = searched
    path = _file(tmp_path)
    code = textwrap.dedent(
        f"""
        import html, io, sys
        from contextlib import redirect_stderr
        from pathlib import Path
        sys.modules["optuna"] = None
        from simfl.cli import main
        from simfl.report.searches import search_sections
        err = io.StringIO()
        with redirect_stderr(err):
            code = main(["tune", {str(path)!r}, "--knob", "rounds=5..9", "--objective", "sim_time"])
        print(code, err.getvalue().strip())
        lines = search_sections(
            Path({str(store)!r}), Path({str(tmp_path)!r}), text=html.escape,
            table=lambda f: f.to_html(), say=lambda s: None,
        )
        print("\\n".join(lines))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    first, page = done.stdout.split("\n", 1)
    assert first == (
        "2 error: simfl tune needs Optuna, which is not installed: pip install 'simfl[tune]'"
    )
    # the report of a store with searches, without Optuna: their tables, and what to install
    assert "<h3>Search deadline</h3>" in page and "<table" in page
    assert "the figures need Optuna" in page and "pip install &#x27;simfl[tune]&#x27;" in page
    assert not list(tmp_path.glob("*.png"))


def test_tune_takes_threads_with_a_named_executor(tmp_path):
    base = cli.load_scenarios(_file(tmp_path))["deadline"]
    out = simfl.tune(
        base,
        {"policy.seconds": tuning.Float(1.5, 5.0)},
        tuning.SimTime(),
        seeds=range(1),
        trials=1,
        fresh_seeds=(),
        executor="inline",
        threads=1,
        progress=False,
    )
    assert out.trials["state"].tolist() == ["complete"]


def test_max_runs_budgets_the_search(tmp_path):
    # 2 seeds a trial and a budget of 5 runs: a third trial would not fit after two whole ones
    path = _file(tmp_path)
    code, _, err = _run(
        [
            "tune",
            str(path),
            *SEARCH,
            "--max-runs",
            "5",
            "--no-fresh",
            "--store",
            str(tmp_path / "s"),
        ]
    )
    assert code == 0, err
    study = json.loads((tmp_path / "s" / "tuning" / "deadline.json").read_text())
    assert study["used"] <= 5 and len(study["trials"]) < 4
    code, _, err = _run(
        ["tune", str(path), *SEARCH, "--max-runs", "1", "--store", str(tmp_path / "t")]
    )
    assert code == 2 and "tune max_runs must be an integer in [2, inf], got 1" in err
