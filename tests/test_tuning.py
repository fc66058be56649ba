"""simfl.tune: the search finds what an exhaustive grid finds, deterministically and resumably.

The acceptance check compares a search with an exhaustive grid over the same knob on the same
seeds (common random numbers: the objective is then one deterministic function of the knob,
so "within 5% of the grid's best" compares like with like). The other checks are exact:
determinism across executors, a resumed search equal to an uninterrupted one, errors before
any run, and the warnings on scenarios built to trigger them.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

pytest.importorskip("optuna")

import simfl
from simfl import (
    Fleet,
    Profile,
    Scenario,
    Target,
    algorithms,
    compare,
    dists,
    policies,
    tasks,
    tuning,
)
from simfl.fleet import Availability
from simfl.tuning import search

TARGET = tuning.TimeToTarget("distance", below=1e-3)


def deadline_base(rounds: int = 120) -> Scenario:
    """80 fast (Exp mean 1 s) and 20 slow (Exp mean 8 s) devices, 0.5 s latency each way.

    A deadline below the two transfers lets nothing arrive; a little above, few updates arrive
    and FedRep needs many rounds; far above, every round waits long. Time to target is
    infinite below about 1.3 s, lowest near 1.6 s, and grows steadily above.
    """
    fleet = Fleet.tiers(
        (80, Profile(compute=dists.Exponential(mean=1.0), latency=0.5, name="fast")),
        (20, Profile(compute=dists.Exponential(mean=8.0), latency=0.5, name="slow")),
    )
    task = tasks.LinearRepresentation(
        d=20, k=2, samples_per_client=5, noise_std=1e-3, eval_clients=20
    )
    return Scenario(
        task=task,
        algorithm=algorithms.FedRep(),
        fleet=fleet,
        policy=policies.Deadline(2.0, count=10),
        rounds=rounds,
        target=Target("distance", below=1e-3),
        name="deadline",
    )


def timing_base(**changes: object) -> Scenario:
    """No training: 20 devices of constant speed, a deadline policy over all of them."""
    base = Scenario(
        task=None,
        algorithm=algorithms.TimingOnly(),
        fleet=Fleet.homogeneous(20, compute=dists.Constant(1.0)),
        policy=policies.Deadline(5.0, count=20),
        rounds=4,
        name="timing",
    )
    return dataclasses.replace(base, **changes)


def _mean_time(scenario: Scenario, seeds: range) -> float:
    """Mean time to target over ``seeds`` (``inf`` at the first seed that misses it)."""
    times = []
    for s in seeds:
        res = simfl.run(dataclasses.replace(scenario, seed=s), progress=False)
        times.append(compare.time_to_target(res, "distance", below=1e-3))
        if math.isinf(times[-1]):
            return math.inf
    return float(np.mean(times))


@pytest.mark.slow
def test_search_finds_the_grids_best_with_a_quarter_of_its_runs() -> None:
    # The grid: 24 log-spaced deadlines over [0.6, 24] s, 8 seeds each (192 runs). Its best
    # is the reference; the search may run at most a quarter of the grid's runs (48). With
    # common random numbers the objective of a deadline is the same number in the grid and
    # in the search, so the 5% tolerance (the issue's) is on one deterministic function; no
    # standard error enters. How strict this is: the share of the grid within 5% of its best
    # is asserted below 10%, so an optimiser whose pick ignored the objective would land
    # there with probability under 0.1 for each search seed, and under 1e-3 for all three.
    base = deadline_base()
    seeds = range(8)
    deadlines = np.geomspace(0.6, 24.0, 24)
    grid = np.array(
        [
            _mean_time(
                dataclasses.replace(base, policy=policies.Deadline(float(d), count=10)), seeds
            )
            for d in deadlines
        ]
    )
    best = float(grid.min())
    assert math.isfinite(best) and np.isinf(grid[0]) and grid[-1] > 2 * best  # the landscape
    share = float(np.mean(grid <= 1.05 * best))
    assert share < 0.10, share
    budget = grid.size * len(seeds) // 4
    for search_seed in range(3):
        out = simfl.tune(
            base,
            {"policy.seconds": tuning.Float(0.6, 24.0, log=True)},
            TARGET,
            seeds=seeds,
            trials=1000,
            max_runs=budget,
            fresh_seeds=(),
            search_seed=search_seed,
            executor="inline",
            progress=False,
        )
        assert out.used <= budget and out.runs <= budget, (out.used, out.runs)
        (found,) = out.best
        assert found.values[0] <= 1.05 * best, (search_seed, found.values[0], best)
        if search_seed == 0:  # the value reported is the runs' own mean time, recomputed
            chosen = dataclasses.replace(
                base, policy=policies.Deadline(found.params["policy.seconds"], count=10)
            )
            assert _mean_time(chosen, seeds) == found.values[0]


def _small(**kwargs: object) -> tuning.TuneOutcome:
    base = deadline_base(rounds=60)
    options: dict[str, object] = {
        "seeds": range(3),
        "trials": 6,
        "fresh_seeds": (),
        "executor": "inline",
        "progress": False,
    }
    options.update(kwargs)
    return simfl.tune(
        base,
        {"policy.seconds": tuning.Float(0.6, 24.0, log=True), "policy.count": tuning.Int(5, 40)},
        TARGET,
        **options,  # type: ignore[arg-type]
    )


def test_the_same_search_seed_gives_the_same_trials_on_every_executor() -> None:
    inline = _small()
    again = _small()
    processes = _small(executor="processes", workers=2)
    assert inline.trials.equals(again.trials)
    assert inline.trials.equals(processes.trials)
    assert not inline.trials.equals(_small(search_seed=1).trials)


def test_a_killed_search_resumes_without_repeating_finished_trials(tmp_path, monkeypatch) -> None:
    whole = _small(trials=8, store=tmp_path / "whole")
    calls = {"n": 0}
    real = search._Runner.run

    def dies_at_the_fifth_trial(self, params, seeds):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 5:  # inline: one call per seed; the 5th falls inside a trial
            raise KeyboardInterrupt
        return real(self, params, seeds)

    monkeypatch.setattr(search._Runner, "run", dies_at_the_fifth_trial)
    with pytest.raises(tuning.TuneInterrupted) as stopped:
        _small(trials=8, store=tmp_path / "cut")
    before = len(stopped.value.outcome.trials)
    assert 0 < before < 8
    monkeypatch.setattr(search._Runner, "run", real)
    resumed = _small(trials=8, store=tmp_path / "cut")
    # the trials a search finishes are the same, in the same order; the one that was
    # running when it died is run again (numbered anew) and its finished runs are reused
    cols = [c for c in whole.trials.columns if c != "trial"]
    assert resumed.trials[cols].reset_index(drop=True).equals(whole.trials[cols])
    assert resumed.reused >= 1
    assert resumed.runs + resumed.reused <= whole.runs  # no finished trial ran again
    assert resumed.runs < whole.runs


class _Killed(BaseException):
    """Stands for SIGKILL: nothing in the search catches it, nothing after it runs."""


@pytest.mark.parametrize("dies", [2, 5])  # a Sobol start trial, a TPE trial (4 start trials)
def test_a_search_killed_before_its_trial_had_parameters_resumes_to_the_same_trials(
    tmp_path, monkeypatch, dies: int
) -> None:
    # killed between Optuna's ask (the trial is RUNNING in the journal) and the first
    # parameter being written: the trial has no params, so it cannot be asked again by them
    import optuna

    whole = _small(trials=8, store=tmp_path / "whole")
    real = optuna.trial.Trial._suggest

    def dies_before_the_first_parameter(self, name, distribution):  # type: ignore[no-untyped-def]
        if self.number == dies:
            raise _Killed
        return real(self, name, distribution)

    monkeypatch.setattr(optuna.trial.Trial, "_suggest", dies_before_the_first_parameter)
    with pytest.raises(_Killed):
        _small(trials=8, store=tmp_path / "cut")
    monkeypatch.setattr(optuna.trial.Trial, "_suggest", real)
    resumed = _small(trials=8, store=tmp_path / "cut")
    cols = [c for c in whole.trials.columns if c != "trial"]
    assert resumed.trials[cols].reset_index(drop=True).equals(whole.trials[cols])


@pytest.mark.parametrize(
    ("knobs", "objective", "extra", "message"),
    [
        ({"policy.nope": tuning.Float(1, 2)}, TARGET, {}, r"Deadline\) has no field 'nope'"),
        ({"rounds.x": tuning.Int(1, 2)}, TARGET, {}, "is a int, not a dataclass"),
        ({"fleet.redraw": tuning.Choice(["round", "job"])}, TARGET, {}, "built by its constr"),
        ({"policy.count": tuning.Float(5, 9)}, TARGET, {}, r"is an int\): search it with Int"),
        ({"policy.partial": tuning.Float(0, 1)}, TARGET, {}, "is a bool"),
        ({"policy.count": tuning.Int(5, 200)}, TARGET, {}, "count must be <= the fleet size"),
        ({"policy.seconds": tuning.Float(-1, 2)}, TARGET, {}, "Deadline.seconds must be"),
        (
            {"policy.seconds": tuning.Float(1, 2)},
            tuning.TimeToTarget("accuracy", above=0.9),
            {},
            "does not report 'accuracy'",
        ),
        (
            {"policy.seconds": tuning.Float(1, 2)},
            tuning.UpdateShare("medium"),
            {},
            "is not a group of the fleet",
        ),
        (
            {"policy.seconds": tuning.Float(1, 2)},
            tuning.EnergyToTarget("distance", below=1e-3),
            {},
            "needs a fleet with an energy model",
        ),
        (
            {"policy.seconds": tuning.Float(1, 2)},
            TARGET,
            {"fresh_seeds": [2, 5]},
            "fresh_seeds must be seeds the search never saw",
        ),
        ({"policy.seconds": tuning.Float(1, 2)}, TARGET, {"seeds": []}, "at least one seed"),
        ({"policy.seconds": tuning.Float(1, 2)}, TARGET, {"trials": 0}, "tune trials"),
        ({"policy.seconds": tuning.Float(1, 2)}, (TARGET, TARGET), {}, "objectives must differ"),
        ({}, TARGET, {}, "at least one knob"),
    ],
)
def test_bad_input_is_refused_before_any_run(knobs, objective, extra, message, monkeypatch):
    def no_run(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("a run started")

    monkeypatch.setattr(search, "sweep", no_run)
    with pytest.raises(ValueError, match=message):
        simfl.tune(deadline_base(), knobs, objective, progress=False, executor="inline", **extra)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"at_least": 1.5}, "can never be met: jain_groups is at most 1"),
        ({"at_most": -1.0}, "can never be met: jain_groups is at least 0"),
    ],
)
def test_a_constraint_no_run_can_meet_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        tuning.Constraint(tuning.Jain("groups"), **kwargs)  # type: ignore[arg-type]


def test_knob_values_are_checked_against_the_fields_own_rules() -> None:
    with pytest.raises(ValueError, match="give them labels"):
        tuning.Choice([timing_base().fleet, timing_base().fleet])
    with pytest.raises(ValueError, match="log scale"):
        tuning.Float(0.0, 1.0, log=True)
    with pytest.raises(ValueError, match="multiple of step"):
        tuning.Int(1, 10, step=4)


def test_a_stored_study_with_other_knobs_is_not_resumed(tmp_path) -> None:
    base = timing_base()
    obj = tuning.SimTime()
    common = {"seeds": range(2), "trials": 2, "store": tmp_path, "executor": "inline"}
    simfl.tune(base, {"policy.seconds": tuning.Float(0.5, 2.0)}, obj, progress=False, **common)
    with pytest.raises(ValueError, match="was started with other knobs"):
        simfl.tune(base, {"policy.seconds": tuning.Float(0.5, 3.0)}, obj, progress=False, **common)


def test_a_target_never_reached_is_reported_as_such() -> None:
    base = dataclasses.replace(deadline_base(rounds=5), target=None)
    out = simfl.tune(
        base,
        {"policy.seconds": tuning.Float(1.0, 4.0)},
        tuning.TimeToTarget("distance", below=1e-12),
        seeds=range(3),
        trials=4,
        fresh_seeds=(),
        executor="inline",
        progress=False,
    )
    assert out.best == ()
    assert (out.trials["seeds_run"] == 1).all()  # each stopped at its first missed seed
    assert np.isinf(out.trials["time_to_distance<=1e-12"]).all()
    assert (out.trials["reached"] == 0).all() and not out.trials["feasible"].any()
    assert any("no trial reached it on any seed" in w for w in out.warnings)
    assert "best       none" in out.summary()


def test_the_warnings_of_a_search_that_would_mislead() -> None:
    # 8 of 20 devices online, the rest only from t = 1e9: a cohort above 8 is capped; jobs
    # take 1 s exactly and every device is picked, so nothing is random: seeds agree; the
    # deadline never binds above 2.2 s (transfers are instant); every round lasts 1 s
    online = Availability([[(0.0, math.inf)]] * 8 + [[(1e9, math.inf)]] * 12)
    base = timing_base(
        fleet=Fleet.homogeneous(20, compute=dists.Constant(1.0)).with_availability(online),
        policy=policies.Deadline(5.0, count=4),
    )
    out = simfl.tune(
        base,
        {"policy.count": tuning.Int(4, 16), "policy.seconds": tuning.Float(2.2, 9.0)},
        tuning.UpdatesPerHour(),
        constraints=[tuning.Constraint(tuning.RoundTime(0.95), at_most=100.0)],
        seeds=range(3),
        trials=8,
        fresh_seeds=(),
        executor="inline",
        progress=False,
    )
    text = "\n".join(out.warnings)
    assert "knob policy.count" in text and "capped (at the devices online)" in text
    assert "no round of theirs selected more than 8" in text
    assert "knob policy.seconds" in text and "gave identical runs on every seed" in text
    assert "seeds 0-2 gave identical runs" in text
    assert "constraint round_time_q0.95<=100 was met by every trial" in text


def test_two_objectives_give_a_pareto_front_of_feasible_settings() -> None:
    base = deadline_base(rounds=60)
    out = simfl.tune(
        base,
        {"policy.seconds": tuning.Float(1.2, 12.0, log=True), "policy.count": tuning.Int(5, 40)},
        (TARGET, tuning.Jain("devices")),
        seeds=range(2),
        trials=8,
        fresh_seeds=(),
        executor="inline",
        progress=False,
    )
    names = [TARGET.name, "jain_devices"]
    done = out.trials[(out.trials["state"] == "complete") & out.trials["feasible"]]
    points = {tuple(r) for r in done[names].to_numpy()}
    front = {ev.values for ev in out.best}
    assert front and front <= points

    def dominates(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
        x, y = (a[0], -a[1]), (b[0], -b[1])  # time: lower is better; Jain: higher
        return all(p <= q for p, q in zip(x, y, strict=True)) and x != y

    assert not any(dominates(a, b) for a in front for b in front)
    assert all(any(dominates(f, p) or f == p for f in front) for p in points)


def test_fresh_seeds_re_evaluate_the_best_setting() -> None:
    out = _small(trials=4, fresh_seeds=range(10, 13))
    (best,) = out.best
    fresh = best.fresh[TARGET.name]
    assert fresh["seeds"] == [10, 11, 12]
    params = best.params
    chosen = dataclasses.replace(
        deadline_base(rounds=60),
        policy=policies.Deadline(params["policy.seconds"], count=params["policy.count"]),
    )
    assert fresh["per_seed"] == [
        compare.time_to_target(
            simfl.run(dataclasses.replace(chosen, seed=s), progress=False), "distance", below=1e-3
        )
        for s in (10, 11, 12)
    ]


def test_a_pruned_trial_could_not_have_beaten_the_best() -> None:
    out = _small(trials=10, seeds=range(4))
    best = out.best[0].values[0]
    pruned = out.trials[out.trials["state"] == "pruned"]
    assert len(pruned)  # the check below must look at something
    for _, row in pruned.iterrows():
        scenario = dataclasses.replace(
            deadline_base(rounds=60),
            policy=policies.Deadline(row["policy.seconds"], count=int(row["policy.count"])),
        )
        assert _mean_time(scenario, range(4)) >= best


def test_asynchronous_knobs_are_searched_too() -> None:
    base = timing_base(
        fleet=Fleet.homogeneous(20, compute=dists.Exponential(mean=1.0)),
        policy=policies.FedBuff(buffer_size=5, concurrency=10),
        rounds=10,
    )
    out = simfl.tune(
        base,
        {"policy.buffer_size": tuning.Int(1, 10), "policy.concurrency": tuning.Int(2, 20)},
        tuning.UpdatesPerHour(),
        seeds=range(2),
        trials=5,
        fresh_seeds=(),
        executor="inline",
        progress=False,
    )
    assert len(out.trials) == 5 and out.best


def test_a_search_killed_by_sigkill_resumes_to_the_same_trials(tmp_path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    import optuna
    from optuna.storages.journal import JournalFileBackend

    script = tmp_path / "search.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(os.path.dirname(__file__))!r})\n"
        "from test_tuning import _small\n"
        f"_small(trials=8, store={str(tmp_path / 'cut')!r})\n"
    )
    proc = subprocess.Popen([sys.executable, str(script)])
    journal = tmp_path / "cut" / "tuning" / "deadline.journal"
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            if journal.exists():
                storage = optuna.storages.JournalStorage(JournalFileBackend(str(journal)))
                names = [s.study_name for s in storage.get_all_studies()]
                trials = (
                    storage.get_all_trials(storage.get_study_id_from_name(names[0]))
                    if names
                    else []
                )
                if sum(t.state.is_finished() for t in trials) >= 2:
                    break
            time.sleep(0.05)
        killed = proc.poll() is None
        if killed:
            os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    resumed = _small(trials=8, store=tmp_path / "cut")
    whole = _small(trials=8, store=tmp_path / "whole")
    cols = [c for c in whole.trials.columns if c != "trial"]
    assert resumed.trials[cols].reset_index(drop=True).equals(whole.trials[cols])
    assert killed, "the search finished before it could be killed: nothing was tested"


@dataclasses.dataclass(frozen=True)
class FailsOnLongDeadlines(policies.Deadline):
    """A deadline policy whose plan raises for deadlines above 5 s (a run that fails)."""

    def plan(self, state, view):  # type: ignore[no-untyped-def]
        if self.seconds > 5:
            raise RuntimeError("too long a deadline")
        return super().plan(state, view)


def test_a_failing_run_fails_its_trial_and_the_search_goes_on() -> None:
    base = timing_base(
        fleet=Fleet.homogeneous(20, compute=dists.Exponential(1.0)),
        policy=FailsOnLongDeadlines(2.0, count=5),
    )
    out = simfl.tune(
        base,
        {"policy.seconds": tuning.Float(1.0, 9.0)},
        tuning.SimTime(),
        seeds=range(2),
        trials=5,
        fresh_seeds=(),
        executor="inline",
        progress=False,
    )
    failed = out.trials[out.trials["state"] == "failed"]
    assert len(failed) and (failed["policy.seconds"] > 5).all()
    assert failed["error"].str.contains("RuntimeError: too long a deadline").all()
    assert len(out.trials) == 5 and out.best and out.best[0].params["policy.seconds"] <= 5
