"""``simfl tune FILE``: search one scenario's knobs for the best setting, resumably."""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
from pathlib import Path
from typing import Any

from simfl._checks import check_int
from simfl.cli.errors import UsageError
from simfl.cli.scenario_file import listing, load_module, scenarios_of
from simfl.cli.seeds import parse_seeds
from simfl.cli.shared import check_scheduler, save_target, sigterm_interrupts
from simfl.scenario import Scenario
from simfl.sweeps.executors import EXECUTORS
from simfl.sweeps.grid import ranges_text
from simfl.sweeps.store import StoreWriteError

__all__ = [
    "DEFAULT_TUNE_SEEDS",
    "DESCRIPTION",
    "HELP",
    "TUNE_KEYS",
    "arguments",
    "command",
    "resume_command",
]

HELP = "search a scenario's knobs for the best setting (Optuna), resumably"
DESCRIPTION = """\
Search one scenario's knobs for the setting that optimises an objective over seeds
(simfl.tune: Optuna's TPE; needs pip install 'simfl[tune]'). A file with several scenarios
needs --pick, as for run.

Knobs are dataclass paths of the scenario with a range or choice: policy.seconds=1:60 (real;
1:60:log on a log scale), policy.count=5..50 (integer; 5..50:5 by steps), policy.partial=
False,True (a choice of plain values), fleet=@FLEETS (a dict {label: value} of the file).
Measures: time:METRIC<=X (or >=X), energy:METRIC<=X, updates_per_hour, final:METRIC,
round_time[:Q], jain[:groups|:devices], share:GROUP, sim_time; two --objective give a Pareto
front. A constraint is a measure, <= or >= and a number (round_time:0.95<=60).

The file may define TUNE, a dict of simfl.tune's arguments (knobs, objective, constraints,
seeds, trials, max_runs, fresh_seeds, study, search_seed, prune) as objects or as these text
forms; a flag replaces the file's entry of the same name.

Every trial runs --seeds (default 0-2) into a store (default runs/tune-FILE), whose tuning/
folder holds the study's journal and outcome, so the same command resumes a stopped search.
Exit status 0, also when no setting met the constraints; 1 if every trial failed; 130 or 143
on Ctrl-C or SIGTERM, with the command that resumes."""


def arguments(p: argparse.ArgumentParser) -> None:
    """Add the arguments of ``simfl tune`` to its parser."""
    p.add_argument("scenario", help="Python file defining SCENARIO, SCENARIOS or CASES")
    p.add_argument(
        "--pick", default=None, help="which of the file's scenarios to search (as for run)"
    )
    p.add_argument(
        "--knob",
        action="append",
        default=None,
        metavar="PATH=SPEC",
        help="a knob, e.g. policy.seconds=1:60 (real), policy.seconds=1:60:log, "
        "policy.count=5..50 (integer), policy.count=5..50:5, policy.partial=False,True "
        "(choice), fleet=@FLEETS (a dict of the file); repeat for more knobs",
    )
    p.add_argument(
        "--objective",
        action="append",
        default=None,
        metavar="MEASURE",
        help="what to optimise: time:METRIC<=X, time:METRIC>=X, energy:METRIC<=X, "
        "updates_per_hour, final:METRIC, round_time[:Q], jain[:groups|:devices], "
        "share:GROUP, sim_time; twice for a Pareto front",
    )
    p.add_argument(
        "--constraint",
        action="append",
        default=None,
        metavar="MEASURE<=X",
        help="a bound the setting must meet, e.g. round_time:0.95<=60, jain>=0.8, "
        "share:slow>=0.1, sim_time<=3600; repeat for more",
    )
    p.add_argument("--seeds", default=None, help="seeds every trial runs, e.g. 0-2 (default 0-2)")
    p.add_argument("--trials", type=int, default=None, help="trials to finish (default 30)")
    p.add_argument(
        "--max-runs",
        type=int,
        default=None,
        help="a budget of runs: no trial starts unless its seeds fit (default: none)",
    )
    fresh = p.add_mutually_exclusive_group()
    fresh.add_argument(
        "--fresh-seeds",
        default=None,
        help="seeds the search never saw, on which the best setting runs again (default: as "
        "many as --seeds, after them)",
    )
    fresh.add_argument(
        "--no-fresh", action="store_true", help="do not run the best setting on fresh seeds"
    )
    p.add_argument("--store", default=None, help="results store (default runs/tune-FILE)")
    p.add_argument(
        "--study", default=None, help="the search's name in the store (default: the scenario's)"
    )
    p.add_argument("--search-seed", type=int, default=None, help="seed of the sampler (default 0)")
    p.add_argument(
        "--no-prune",
        action="store_true",
        help="run every seed of every trial (default: stop trials that cannot win)",
    )
    p.add_argument(
        "--executor",
        default=None,
        choices=EXECUTORS,
        help="where runs execute (default: processes, or dask with --scheduler)",
    )
    p.add_argument("--scheduler", default=None, help="running Dask scheduler, e.g. tcp://host:8786")
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="local processes or local Dask workers (a trial runs that many seeds at once)",
    )
    p.add_argument("--threads", type=int, default=None, help="compute threads of each worker")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=command)


#: The entries a scenario file's ``TUNE`` dict may hold (keyword arguments of ``simfl.tune``).
TUNE_KEYS = (
    "knobs",
    "objective",
    "constraints",
    "seeds",
    "trials",
    "max_runs",
    "fresh_seeds",
    "study",
    "search_seed",
    "prune",
)
#: Seeds of ``simfl tune`` when neither ``--seeds`` nor the file's ``TUNE`` gives them.
DEFAULT_TUNE_SEEDS = "0-2"


def _tuning() -> Any:
    """The :mod:`simfl.tuning` package, or a one-line error if Optuna is not installed."""
    try:
        import simfl.tuning
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] != "optuna":
            raise
        raise UsageError(
            "simfl tune needs Optuna, which is not installed: pip install 'simfl[tune]'"
        ) from None
    return simfl.tuning


def _pick_one(scenarios: dict[str, Scenario], pick: str | None, file: str) -> Scenario:
    """The scenario ``--pick`` names, or the file's only one (else a usage error)."""
    if pick is not None:
        if pick not in scenarios:
            raise UsageError(f"--pick must be one of {listing(scenarios)}, got {pick!r}")
        return scenarios[pick]
    if len(scenarios) > 1:
        raise UsageError(
            f"{file} defines {len(scenarios)} scenarios and simfl tune searches one: choose it "
            f"with --pick NAME ({listing(scenarios)})"
        )
    return next(iter(scenarios.values()))


def _file_tune(module: Any, file: str) -> dict[str, Any]:
    """The scenario file's ``TUNE`` dict (empty if it defines none), its keys checked."""
    spec = getattr(module, "TUNE", None)
    if spec is None:
        return {}
    if not isinstance(spec, dict):
        raise UsageError(f"{file}: TUNE must be a dict of simfl.tune's arguments, got {spec!r}")
    unknown = [k for k in spec if k not in TUNE_KEYS]
    if unknown:
        raise UsageError(
            f"{file}: TUNE has no entry {unknown[0]!r}; its entries are {', '.join(TUNE_KEYS)}"
        )
    return dict(spec)


def _file_seeds(value: Any, name: str, file: str) -> list[int]:
    """Seeds from a ``TUNE`` entry: ``"0-2"`` as ``--seeds`` takes it, or integers."""
    if isinstance(value, str):
        return parse_seeds(value)
    try:
        return list(value)
    except TypeError:
        raise UsageError(
            f"{file}: TUNE[{name!r}] must be seeds such as range(3), got {value!r}"
        ) from None


def _tune_arguments(args: argparse.Namespace, module: Any) -> dict[str, Any]:
    """The keyword arguments of ``simfl.tune``: the file's ``TUNE``, replaced by the flags given.

    A ``TUNE`` entry may hold the objects (``tuning.Float(1, 60)``) or the flags' text forms
    (``"1:60"``, ``"time:distance<=1e-3"``, ``"round_time<=60"``).
    """
    from simfl.tuning import parse

    file = str(args.scenario)
    spec = _file_tune(module, file)
    names = vars(module)
    where = f"{file}: TUNE"
    out: dict[str, Any] = {}
    if args.knob:
        out["knobs"] = parse.parse_knobs(args.knob, names)
    elif "knobs" in spec:
        knobs = spec["knobs"]
        if not isinstance(knobs, dict) or not knobs:
            raise UsageError(f"{where}['knobs'] must be a dict {{path: knob}}, got {knobs!r}")
        out["knobs"] = {
            str(p): parse.parse_knob(f"{p}={k}", names, option=f"{where}['knobs']")[1]
            if isinstance(k, str)
            else k
            for p, k in knobs.items()
        }
    objective = args.objective
    if objective:
        if len(objective) > 2:
            raise UsageError(
                f"--objective is given {len(objective)} times; give one measure, or two for a "
                f"Pareto front"
            )
        found = [parse.parse_measure(text) for text in objective]
        out["objective"] = found[0] if len(found) == 1 else found
    elif "objective" in spec:
        given = spec["objective"]
        items = given if isinstance(given, (list, tuple)) else [given]
        found = [
            parse.parse_measure(m, option=f"{where}['objective']") if isinstance(m, str) else m
            for m in items
        ]
        out["objective"] = found[0] if not isinstance(given, (list, tuple)) else found
    if args.constraint is not None:
        out["constraints"] = [parse.parse_constraint(text) for text in args.constraint]
    elif "constraints" in spec:
        given = spec["constraints"]
        if not isinstance(given, (list, tuple)):
            raise UsageError(f"{where}['constraints'] must be a list, got {given!r}")
        out["constraints"] = [
            parse.parse_constraint(c, option=f"{where}['constraints']") if isinstance(c, str) else c
            for c in given
        ]
    missing = [k for k in ("knobs", "objective") if k not in out]
    if missing:
        raise UsageError(
            f"simfl tune needs {' and '.join(missing)}: give "
            + " and ".join(
                "--knob PATH=SPEC" if k == "knobs" else "--objective MEASURE" for k in missing
            )
            + f", or define TUNE = {{'knobs': {{...}}, 'objective': ...}} in {file}"
        )
    if args.seeds is not None:
        out["seeds"] = parse_seeds(args.seeds)
    elif "seeds" in spec:
        out["seeds"] = _file_seeds(spec["seeds"], "seeds", file)
    else:
        out["seeds"] = parse_seeds(DEFAULT_TUNE_SEEDS)
    if args.no_fresh:
        out["fresh_seeds"] = ()
    elif args.fresh_seeds is not None:
        out["fresh_seeds"] = parse_seeds(args.fresh_seeds)
    elif spec.get("fresh_seeds") is not None:
        out["fresh_seeds"] = _file_seeds(spec["fresh_seeds"], "fresh_seeds", file)
    for key, flag in (
        ("trials", "trials"),
        ("max_runs", "max_runs"),
        ("study", "study"),
        ("search_seed", "search_seed"),
    ):
        value = getattr(args, flag)
        if value is not None:
            out[key] = value
        elif key in spec:
            out[key] = spec[key]
    out["prune"] = False if args.no_prune else spec.get("prune", True)
    return out


def _check_search(base: Scenario, kwargs: dict[str, Any], args: argparse.Namespace) -> None:
    """Refuse knobs, objectives, constraints and seeds the search cannot take, before output.

    :func:`simfl.tune` checks them too; here they are refused before the line that says what
    will run.
    """
    from simfl.tuning.search import check_search

    if "trials" in kwargs:
        name = "--trials" if args.trials is not None else f"{args.scenario}: TUNE['trials']"
        check_int(name, kwargs["trials"], low=1, high=100_000)
    common = sorted(set(kwargs.get("fresh_seeds") or ()) & set(kwargs["seeds"]))
    if common:
        raise UsageError(
            f"--fresh-seeds must be seeds the search never saw; {ranges_text(common)} "
            f"{'is' if len(common) == 1 else 'are'} also in --seeds"
        )
    check_search(base, kwargs["knobs"], kwargs["objective"], kwargs.get("constraints", ()))


def command(args: argparse.Namespace) -> int:
    """Run ``simfl tune``; its exit status (1 if every trial failed, 130 or 143 if stopped)."""
    tuning = _tuning()
    from simfl.sweeps.executors import make_executor
    from simfl.tuning.search import STUDY_DIR

    module = load_module(args.scenario)
    base = _pick_one(scenarios_of(module, Path(args.scenario)), args.pick, args.scenario)
    kwargs = _tune_arguments(args, module)
    _check_search(base, kwargs, args)
    store = Path(args.store) if args.store else Path("runs") / f"tune-{Path(args.scenario).stem}"
    if args.scheduler and args.executor in (None, "dask"):
        check_scheduler(args.scheduler)
    executor = make_executor(
        args.executor, workers=args.workers, scheduler=args.scheduler, threads=args.threads
    )
    study = kwargs.get("study") or base.name
    trials = kwargs.get("trials", 30)
    print(
        f"tune {study}: {trials} trials x {len(kwargs['seeds'])} seeds, "
        f"{len(kwargs['knobs'])} knob{'s' * (len(kwargs['knobs']) > 1)} -> {store}/",
        flush=True,
    )
    signals: list[int] = []
    try:
        with sigterm_interrupts(signals):
            outcome = tuning.tune(
                base, **kwargs, store=store, executor=executor, progress=not args.quiet
            )
    except KeyboardInterrupt as exc:
        save_target(store, _objective_target(kwargs["objective"], tuning))
        return _tune_stopped(exc, bool(signals), args, store)
    except StoreWriteError as exc:
        print(
            f"error: {exc}; the search stopped and the runs it could not store are not "
            f"recorded: make room and run `{resume_command(args, store)}` to resume it",
            file=sys.stderr,
        )
        return 2
    finally:
        executor.close()
    save_target(store, _objective_target(kwargs["objective"], tuning))
    print(outcome.summary())
    folder = store / STUDY_DIR
    print(
        f"study      {folder / (outcome.study + '.json')} (trials, best, warnings); the "
        f"journal {outcome.study}.journal resumes the search"
    )
    print(
        f"figures    simfl report {shlex.quote(str(store))}  (the search's history, the knobs' "
        f"importance, the front, and the runs)"
    )
    states = outcome.trials["state"] if len(outcome.trials) else []
    return 1 if len(states) and all(s == "failed" for s in states) else 0


def _objective_target(objective: Any, tuning: Any) -> tuple[str, str, float] | None:
    """The target of the (first) objective, for ``simfl report``; ``None`` if it has none."""
    first = objective[0] if isinstance(objective, list) else objective
    if not isinstance(first, (tuning.TimeToTarget, tuning.EnergyToTarget)):
        return None
    if first.below is not None:
        return (first.metric, "below", float(first.below))
    return (first.metric, "above", float(first.above))


def resume_command(args: argparse.Namespace, store: str | Path) -> str:
    """The ``simfl tune`` command line that resumes this search."""
    words = ["simfl", "tune", str(args.scenario)]
    words += ["--pick", args.pick] if args.pick is not None else []
    for flag in ("knob", "objective", "constraint"):
        for text in getattr(args, flag) or []:
            words += [f"--{flag}", text]
    for flag in ("seeds", "trials", "max_runs", "fresh_seeds"):
        if getattr(args, flag) is not None:
            words += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    words += ["--no-fresh"] if args.no_fresh else []
    words += ["--store", str(store)]
    for flag in ("study", "search_seed", "executor", "scheduler", "workers", "threads"):
        if getattr(args, flag) is not None:
            words += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    words += ["--no-prune"] if args.no_prune else []
    return shlex.join(words)


def _tune_stopped(
    exc: KeyboardInterrupt, terminated: bool, args: argparse.Namespace, store: str | Path
) -> int:
    """Say what an interrupted search did and how to resume it; its exit status (130 or 143)."""
    from simfl.tuning import TuneInterrupted

    if isinstance(exc, TuneInterrupted):
        print(exc.outcome.summary(), flush=True)
    why = "terminated (SIGTERM)" if terminated else "interrupted"
    print(
        f"{why}: the search stopped; its finished trials are in {store}/tuning/ and their runs "
        f"in {store}/. Run the same command to resume (the trial that was running runs again, "
        f"finding its finished runs stored):\n  {resume_command(args, store)}",
        file=sys.stderr,
    )
    return 128 + signal.SIGTERM if terminated else 130
