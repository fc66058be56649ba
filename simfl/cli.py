"""The ``simfl`` command line.

``simfl run SCENARIO.py [--seed N] [--out DIR] [--pick NAME] [--quiet]``
    Load a scenario file, run it with a progress bar, write the results directory and print a
    summary. The file defines ``SCENARIO`` (a :class:`~simfl.Scenario`), ``SCENARIOS`` (a dict
    of them) or ``CASES``; a file with several scenarios needs ``--pick`` (a name of
    ``SCENARIOS``, or a case's labels such as ``policy=srpfl,seed=2``), and the error lists them.
``simfl sweep SCENARIO.py [--seeds 0-9] [--store DIR] [--executor processes|dask|inline]``
``[--scheduler tcp://host:8786] [--workers N] [--threads N] [--retry-failed]``
``[--reuse-stale] [--rerun-unknown] [--target "distance<1e-3"]``
    Run every scenario of a file (``SCENARIO``, ``SCENARIOS``, or ``CASES``: a list of
    ``simfl.sweeps.Case`` from ``sweeps.grid``, whose labels become columns) for every seed
    (at most ``MAX_SEEDS``; default 0-4). Cases with a seed axis (``sweeps.grid(B,
    seed=range(3))``) run their own seeds and ``--seeds`` is refused for them, with a message
    that names them (:func:`simfl.sweeps.with_seeds`). A progress bar counts runs, with the
    share done of the runs in flight, into a results store (default
    ``runs/sweep-FILE``). Runs already in the store are skipped, so re-running a killed sweep
    resumes it; failed runs are kept and skipped unless ``--retry-failed``. A stored run whose
    code changed since (simfl's sources, or the file's classes and functions and what they
    reach) is stale: it runs again, the old run kept in ``STORE/.superseded/``, unless
    ``--reuse-stale``; runs stored before simfl recorded code are kept unless
    ``--rerun-unknown`` (the summary says how many of each there are). Sweeps started at
    once on one store compute each run once: a run another sweep is computing is waited for
    and counted as already in the store ("claimed by another sweep"). Prints what ran, was
    skipped or failed, and, with ``--target`` (a metric of the scenarios' tasks, checked before
    anything runs), the time-to-target across seeds (mean with a bootstrap 95% CI, and "not
    reached in k of n seeds") for each scenario; the target is recorded in
    ``STORE/report.json`` for ``simfl report``. Exit status 1 if any run of the sweep failed;
    on Ctrl-C (130) or SIGTERM (143) the workers are stopped and it prints what finished and
    the command that resumes.
``simfl tune SCENARIO.py [--pick NAME] [--knob PATH=SPEC ...] [--objective MEASURE]``
``[--objective MEASURE] [--constraint "MEASURE<=X" ...] [--seeds 0-2] [--trials N]``
``[--max-runs N]``
``[--fresh-seeds 100-102 | --no-fresh] [--store DIR] [--study NAME] [--search-seed N]``
``[--no-prune] [--executor processes|dask|inline] [--scheduler ADDR] [--workers N]``
``[--threads N] [--quiet]``
    Search one scenario's knobs for the setting that optimises an objective over seeds
    (:func:`simfl.tune`: Optuna's TPE; needs ``pip install 'simfl[tune]'``). A file with
    several scenarios needs ``--pick``, as for ``run``. Knobs are dataclass paths of the
    scenario with a range or choice (:mod:`simfl.tuning.parse`): ``policy.seconds=1:60``
    (real; ``1:60:log`` on a log scale), ``policy.count=5..50`` (integer; ``5..50:5`` by steps,
    ``1..64:log``), ``policy.partial=False,True`` (a choice of plain values),
    ``fleet=@FLEETS`` (a choice of the dict ``{label: value}`` the file defines as
    ``FLEETS``). Measures: ``time:METRIC<=X`` (or ``>=X``), ``energy:METRIC<=X``,
    ``updates_per_hour``, ``final:METRIC``, ``round_time[:Q]``, ``jain[:groups|:devices]``,
    ``share:GROUP``, ``sim_time``; two ``--objective`` give a Pareto front. A constraint is a
    measure, ``<=`` or ``>=`` and a number (the last comparison is the bound:
    ``round_time:0.95<=60``, ``time:accuracy>=0.8<=500``). The file may define ``TUNE``, a
    dict of ``simfl.tune``'s arguments (``knobs``, ``objective``, ``constraints``, ``seeds``,
    ``trials``, ``max_runs``, ``fresh_seeds``, ``study``, ``search_seed``, ``prune``) as
    objects or as these
    text forms; a flag replaces the file's entry of the same name (``--knob`` all its knobs).
    Every trial runs ``--seeds`` (default 0-2) into a store (default ``runs/tune-FILE``),
    whose ``tuning/`` folder holds the study's journal and outcome (``STUDY.json``), so the
    same command resumes a search that was stopped, running only what is missing. Prints the
    trials' counts, the best setting (or the front) with its mean and 95% CI over the seeds
    and over the fresh seeds, the warnings, and the files; ``simfl report STORE`` draws the
    search with its runs. A time or energy target of the objective is recorded for ``simfl
    report`` as ``sweep --target`` records its. Exit status 0, also when no setting met the
    constraints (the summary says so); 1 if every trial failed; on Ctrl-C (130) or SIGTERM
    (143) it prints the trials so far and the command that resumes.
``simfl report STORE [--out DIR] [--metric NAME] [--target "distance<1e-3"] [--run RUN_ID]``
``[--by COLUMN] [--baseline NAME] [--quiet]``
    Write PNG figures and an ``index.html`` that shows them (default ``STORE/report``), with a
    line for each step as it starts (reading the runs, each figure; ``--quiet``: none). Runs
    that cannot be read are left out, one line each. The target is ``--target``, else the one
    ``simfl sweep --target`` recorded in the store (a bad record: one warning line), else one
    chosen from the runs. A store with searches (``simfl tune``) gets a section per search
    (the best setting, warnings, the trials' history, the knobs' importance, the front) and
    one series per setting.
``simfl show DIR``
    Print the summary of a saved results directory, or of the runs of a store (and a line per
    run that cannot be read).
``simfl store check DIR [--repair] [--fast]``
    List the runs of a store that cannot be read (a missing, cut-short or changed
    ``run.json``, ``meta.json`` or Parquet file, a field of ``run.json`` that is not valid, a
    symbolic link or special file), with the reason; ``--repair`` moves them into
    ``DIR/.quarantine/`` so that the next sweep runs them again. Every file's SHA-256 is
    checked; ``--fast`` checks sizes only. Exit status 1 if an unreadable run is left in place.
``simfl store prune DIR [--dry-run]``
    Set aside the runs of older versions of a scenario (same name, seed and grid labels,
    another fingerprint: the scenario was edited between sweeps), keeping the run that finished
    last (:mod:`simfl.sweeps.versions`); they are moved into ``DIR/.superseded/``, never
    deleted. Prints each run set aside.

Errors a user can fix (a bad argument, a scenario file that does not import, an output path
that cannot be written, a full disk, an unreachable scheduler or a peer that is not one) are
printed as one line ``error: ...`` with exit status 2; anything else is a bug and keeps its
traceback. A sweep whose store cannot be written (a full disk, a quota, a read-only
filesystem) stops its workers, prints what it stored and that one line; the runs it could not
store are not recorded, so the same command runs them once there is room.

``run``, ``sweep`` and ``tune`` import the scenario file as ``python FILE`` does, with its
folder first on ``sys.path``, so it can import modules beside it; those modules travel to the
workers by value, like the file's own classes.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import errno
import hashlib
import importlib.util
import re
import shlex
import signal
import sys
import threading
import traceback
import warnings
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import cloudpickle

from simfl._checks import check_int
from simfl.engine import run
from simfl.report.recorded import RECORD, ReportWarning, parse_target, record_target
from simfl.results import Results
from simfl.results.folder import check_destination
from simfl.scenario import Scenario
from simfl.sweeps.executors import EXECUTORS
from simfl.sweeps.grid import Case, ranges_text, with_seeds
from simfl.sweeps.integrity import MARKER
from simfl.sweeps.scheduler import SchedulerError, probe_scheduler
from simfl.sweeps.store import (
    QUARANTINE,
    SUPERSEDED,
    BadRun,
    Store,
    StoreWarning,
    StoreWriteError,
)

__all__ = [
    "MAX_SEEDS",
    "UsageError",
    "load_cases",
    "load_scenarios",
    "main",
    "parse_seeds",
    "parse_target",
    "parser",
]

#: Errors of the environment rather than of simfl: reported in one line by :func:`main`.
_ENVIRONMENT_ERRNOS = frozenset(
    getattr(errno, name)
    for name in [
        "EACCES",
        "EPERM",
        "EROFS",
        "ENOSPC",
        "EDQUOT",
        "EFBIG",
        "EIO",
        "ENOENT",
        "ENOTDIR",
        "EISDIR",
        "EEXIST",
        "ENOTEMPTY",
        "ENAMETOOLONG",
        "ELOOP",
        "EMFILE",
        "ENFILE",
        "EXDEV",
    ]
    if hasattr(errno, name)
)
#: Scenario names an error message lists before it says how many more there are.
_LISTED = 12
#: Seeds of ``simfl sweep`` for scenarios without a seed axis when ``--seeds`` is not given.
DEFAULT_SEEDS = "0-4"
#: Longest scenario-derived folder name under ``runs/`` (a hash suffix keeps names distinct).
_NAME_LIMIT = 100


class UsageError(Exception):
    """A command that cannot be carried out as given; :func:`main` prints it as one line."""


#: The most seeds ``simfl sweep --seeds`` takes (each seed is one run of every scenario).
MAX_SEEDS = 100_000


def _load(path: str | Path) -> Any:
    """Import a scenario file as ``python FILE`` would: its folder first on ``sys.path``.

    The file's modules beside it (and packages below its folder) that it imports are then
    pickled by value (``cloudpickle.register_pickle_by_value``), like the file's own classes,
    so that workers that cannot import them (a Dask cluster's) still get them.
    """
    file = Path(path)
    if file.is_dir():
        raise ValueError(f"scenario file {file} is a directory; give a Python file in it")
    if not file.is_file():
        raise ValueError(f"scenario file {file} does not exist")
    folder = str(file.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    before = set(sys.modules)
    # not registered in sys.modules: cloudpickle then ships the file's own classes by value
    spec = importlib.util.spec_from_file_location(f"_simfl_scenario_{file.stem}", file)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot import scenario file {file}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the user's code: report where it failed, in one line
        raise ValueError(_import_error(file, exc)) from exc
    _ship_by_value([sys.modules[name] for name in set(sys.modules) - before], Path(folder))
    return module


def _ship_by_value(modules: list[Any], folder: Path) -> None:
    """Have cloudpickle pickle by value the top-level ``modules`` whose files are in ``folder``.

    simfl itself is never shipped (a scenario file beside a simfl checkout imports it from
    there), nor are modules inside a virtual environment's site-packages.
    """
    for module in modules:
        name = getattr(module, "__name__", "")
        origin = getattr(module, "__file__", None)
        installed = "site-packages" in str(origin) or "dist-packages" in str(origin)
        if "." in name or name == "simfl" or not origin or installed:
            continue
        try:
            inside = Path(origin).resolve().is_relative_to(folder)
        except OSError:
            continue
        if inside:
            cloudpickle.register_pickle_by_value(module)


def _import_error(file: Path, exc: Exception) -> str:
    """``FILE, line N: ErrorType: message`` for an exception raised while importing ``file``."""
    if isinstance(exc, SyntaxError):
        where, line, text = exc.filename or str(file), exc.lineno, exc.msg
    else:
        frames = traceback.extract_tb(exc.__traceback__)
        mine = [f for f in frames if Path(f.filename).resolve() == file.resolve()]
        last = mine[-1] if mine else frames[-1]
        where, line, text = str(file), last.lineno, str(exc)
    message = "; ".join(part.strip() for part in text.splitlines() if part.strip())
    return f"{where}, line {line}: {type(exc).__name__}: {message}"


def _folder_name(text: str) -> str:
    """``text`` as one safe path component (no separators, no ``..``, at most 100 bytes).

    Characters other than ASCII letters, digits and ``._+-`` become ``_``, leading dots go;
    a name that had to change or be shortened gets ``-`` and 8 hex digits of its SHA-256.
    """
    safe = re.sub(r"[^A-Za-z0-9._+-]", "_", text).lstrip(".")
    if safe == text and len(safe) <= _NAME_LIMIT:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{safe[: _NAME_LIMIT - 9] or 'scenario'}-{digest}"


def _check_scheduler(address: str) -> None:
    """Fail fast, in one line, if ``--scheduler`` is malformed or no Dask scheduler is there.

    See :func:`simfl.sweeps.scheduler.probe_scheduler` (bounded by its ``CONNECT_TIMEOUT``).
    """
    try:
        probe_scheduler(address)
    except ValueError as exc:
        raise UsageError(f"--scheduler: {exc}") from None
    except SchedulerError as exc:
        raise UsageError(f"{exc} (--scheduler)") from None


def load_scenarios(path: str | Path) -> dict[str, Scenario]:
    """The scenarios a Python file exposes, by name.

    ``SCENARIO`` and ``SCENARIOS``, or else the scenarios of its ``CASES``, named by their
    labels (``policy=srpfl,seed=2``; see ``simfl run --pick``).

    Raises
    ------
    ValueError
        If the file does not exist or defines none of these names with scenarios in it.
    """
    return _scenarios(_load(path), Path(path))


def _scenarios(module: Any, file: Path) -> dict[str, Scenario]:
    found: dict[str, Scenario] = {}
    single = getattr(module, "SCENARIO", None)
    if isinstance(single, Scenario):
        found[single.name] = single
    many = getattr(module, "SCENARIOS", None)
    if isinstance(many, dict):
        found.update({str(k): v for k, v in many.items() if isinstance(v, Scenario)})
    cases = getattr(module, "CASES", None)
    if not found and isinstance(cases, (list, tuple)):
        found.update(_by_key([c for c in cases if isinstance(c, Case)]))
    if not found:
        raise ValueError(
            f"{file} must define SCENARIO (a simfl.Scenario), SCENARIOS (a dict of them) or "
            f"CASES (a list of simfl.sweeps.Case)"
        )
    return found


def _by_key(cases: list[Case]) -> dict[str, Scenario]:
    """The scenarios of ``cases`` by the name ``--pick`` takes: the case's labels.

    ``policy=srpfl,seed=2`` for a case of ``sweeps.grid`` (the scenario's name for a case
    without labels); a key shared by several cases gets ``#`` and the case's index.
    """
    keys = [",".join(f"{k}={v}" for k, v in c.labels.items()) or c.scenario.name for c in cases]
    count = Counter(keys)
    return {
        key if count[key] == 1 else f"{key}#{i}": case.scenario
        for i, (key, case) in enumerate(zip(keys, cases, strict=True))
    }


def load_cases(path: str | Path) -> list[Case]:
    """The cases of a sweep file.

    Its ``CASES`` (a list of ``simfl.sweeps.Case``, e.g. from ``sweeps.grid``, whose labels
    become columns), or else one unlabelled case per scenario of :func:`load_scenarios`.

    Raises
    ------
    ValueError
        If the file does not exist, ``CASES`` holds something else, or there are no scenarios.
    """
    module = _load(path)
    cases = getattr(module, "CASES", None)
    if cases is None:
        return [Case(sc, {}) for sc in _scenarios(module, Path(path)).values()]
    if not isinstance(cases, (list, tuple)) or not cases:
        raise ValueError(f"{path}: CASES must be a non-empty list of simfl.sweeps.Case")
    for i, case in enumerate(cases):
        if not isinstance(case, Case):
            raise ValueError(f"{path}: CASES[{i}] must be a simfl.sweeps.Case, got {case!r}")
    return list(cases)


def _listing(names: Sequence[str] | dict[str, Any]) -> str:
    """Names as shell words, the first :data:`_LISTED` of them and how many more there are."""
    words = [shlex.quote(name) for name in names]
    more = f", ... ({len(words) - _LISTED} more)" if len(words) > _LISTED else ""
    return ", ".join(words[:_LISTED]) + more


def _cmd_run(args: argparse.Namespace) -> int:
    scenarios = load_scenarios(args.scenario)
    if args.pick is not None:
        if args.pick not in scenarios:
            print(
                f"error: --pick must be one of {_listing(scenarios)}, got {args.pick!r}",
                file=sys.stderr,
            )
            return 2
        scenario = scenarios[args.pick]
    elif len(scenarios) == 1:
        scenario = next(iter(scenarios.values()))
    else:
        print(
            f"error: {args.scenario} defines {len(scenarios)} scenarios and simfl run runs one: "
            f"choose it with --pick NAME ({_listing(scenarios)}), or run them all with "
            f"simfl sweep {shlex.quote(str(args.scenario))}",
            file=sys.stderr,
        )
        return 2
    if args.seed is not None:
        scenario = dataclasses.replace(scenario, seed=args.seed)
    name = _folder_name(f"{scenario.name}-seed{scenario.seed}")
    out = check_destination(args.out or Path("runs") / name, ("rounds", "clients"))
    results = run(scenario, progress=not args.quiet)
    print(results.summary())
    try:
        results.save(out)
    except OSError as exc:
        raise UsageError(f"could not save the results to {out}: {exc}") from None
    print(f"results    {out}/ (rounds.parquet, clients.parquet, meta.json)")
    return 0 if results.ok else 1


def parse_seeds(text: str) -> list[int]:
    """Seeds from ``"0-9"``, ``"1,4,7"`` or a mix such as ``"0-3,10"``.

    Raises
    ------
    ValueError
        If ``text`` does not look like that (seeds are >= 0), a range is empty, or it lists
        more than :data:`MAX_SEEDS` seeds (counted before any list is made).
    """
    ranges: list[range] = []
    try:
        for part in text.split(","):
            lo, _, hi = part.strip().partition("-")
            ranges.append(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise ValueError(f"--seeds must look like 0-9 or 1,4,7, got {text!r}") from None
    if any(not r for r in ranges):
        raise ValueError(f"--seeds ranges must go from low to high, like 0-9, got {text!r}")
    count = sum(len(r) for r in ranges)
    if count > MAX_SEEDS:
        raise ValueError(
            f"--seeds {text} lists {count:,} seeds; a sweep takes at most {MAX_SEEDS:,} "
            f"(each seed is one run of every scenario)"
        )
    return [seed for r in ranges for seed in r]


def _check_target(metric: str, cases: Sequence[Case]) -> None:
    """Refuse a ``--target`` metric that no case's task reports, before anything runs."""
    valid = sorted(
        {m for c in cases if c.scenario.task is not None for m in c.scenario.task.metrics}
    )
    if not valid:
        raise ValueError(f"--target {metric!r}: these scenarios have no task, so no metrics")
    if metric not in valid:
        raise ValueError(
            f"--target metric {metric!r} is not a metric of these scenarios; valid: "
            f"{', '.join(valid)}"
        )


@contextlib.contextmanager
def _sigterm_interrupts(seen: list[int]) -> Iterator[None]:
    """Within the block SIGTERM interrupts like Ctrl-C (and is appended to ``seen``).

    So ``kill PID`` stops a sweep's workers cleanly and prints how to resume. Only in the main
    thread (elsewhere the block runs with the handler as it was).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        if not seen:  # a second SIGTERM does not cut the clean-up short (SIGKILL does)
            seen.append(signum)
            raise KeyboardInterrupt

    before = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def _resume_command(args: argparse.Namespace, store: str | Path) -> str:
    """The ``simfl sweep`` command line that resumes this sweep."""
    words = ["simfl", "sweep", str(args.scenario)]
    words += ["--seeds", args.seeds] if args.seeds is not None else []
    words += ["--store", str(store)]
    for flag in ("executor", "scheduler", "workers", "threads"):
        if getattr(args, flag) is not None:
            words += [f"--{flag}", str(getattr(args, flag))]
    for flag in ("retry_failed", "reuse_stale", "rerun_unknown"):
        words += [f"--{flag.replace('_', '-')}"] if getattr(args, flag) else []
    return shlex.join(words)


def _stopped(
    exc: KeyboardInterrupt, terminated: bool, args: argparse.Namespace, store: str | Path
) -> int:
    """Say what an interrupted sweep did and how to resume it; its exit status (130 or 143)."""
    from simfl.sweeps.run import SweepInterrupted

    if isinstance(exc, SweepInterrupted):
        print(exc.outcome.summary(), flush=True)
    why = "terminated (SIGTERM)" if terminated else "interrupted"
    print(
        f"{why}: the sweep and its workers stopped; finished runs are in {store}/. Run the same "
        f"command to resume (finished runs are skipped):\n  {_resume_command(args, store)}",
        file=sys.stderr,
    )
    return 128 + signal.SIGTERM if terminated else 130


def _unwritable(exc: StoreWriteError, args: argparse.Namespace, store: str | Path) -> int:
    """Say what a sweep that could not write its store did, in one error line; exit status 2."""
    if exc.outcome is not None:
        print(exc.outcome.summary(), flush=True)
    print(
        f"error: {exc}; the sweep stopped and the runs it could not store are not recorded: "
        f"make room and run `{_resume_command(args, store)}` to run them",
        file=sys.stderr,
    )
    return 2


def _seeded(cases: list[Case], seeds: str | None, file: str) -> tuple[list[Case], str]:
    """The runs of a sweep file's cases, and how they were counted, in words.

    The rule of :func:`simfl.sweeps.with_seeds`: cases with a seed axis keep their own seeds
    and ``--seeds`` is refused for them; the other cases run on every seed of ``--seeds``
    (default :data:`DEFAULT_SEEDS`).
    """
    if seeds is not None:
        wanted = parse_seeds(seeds)
        runs = with_seeds(cases, wanted, where=f"{file} defines CASES", option="--seeds")
        return runs, f"{len(cases)} scenarios x {len(wanted)} seeds"
    default = parse_seeds(DEFAULT_SEEDS)
    own = [c for c in cases if "seed" in c.labels]
    runs = [r for c in cases for r in ([c] if c in own else with_seeds([c], default))]
    words = []
    if own:
        seeds_text = ranges_text(c.scenario.seed for c in own)
        words.append(f"{len(own)} cases with the file's own seeds {seeds_text}")
    if len(own) < len(cases):
        words.append(f"{len(cases) - len(own)} scenarios x {len(default)} seeds")
    return runs, " + ".join(words)


def _cmd_sweep(args: argparse.Namespace) -> int:
    from simfl import compare
    from simfl.sweeps import sweep

    cases = load_cases(args.scenario)
    grid, counted = _seeded(cases, args.seeds, args.scenario)
    target = parse_target(args.target) if args.target else None
    if target is not None:
        _check_target(target[0], cases)
    store = args.store or Path("runs") / f"sweep-{Path(args.scenario).stem}"
    if args.scheduler and args.executor in (None, "dask"):
        _check_scheduler(args.scheduler)
    print(f"{len(grid)} runs ({counted}) -> {store}/", flush=True)
    signals: list[int] = []
    try:
        with _sigterm_interrupts(signals):
            out = sweep(
                grid,
                store=store,
                executor=args.executor,
                workers=args.workers,
                scheduler=args.scheduler,
                retry_failed=args.retry_failed,
                progress=not args.quiet,
                threads=args.threads,
                reuse_stale=args.reuse_stale,
                rerun_unknown=args.rerun_unknown,
            )
    except KeyboardInterrupt as exc:
        _record_target(store, target)
        return _stopped(exc, bool(signals), args, store)
    except StoreWriteError as exc:
        return _unwritable(exc, args, store)
    _record_target(store, target)
    print(out.summary())
    if target is not None and len(out.failed) < len(out.run_ids):
        metric, side, value = target
        below, above = (value, None) if side == "below" else (None, value)
        table = compare.summarize_targets(out.frame, metric, below=below, above=above)
        print(
            f"time to {metric} {'<=' if side == 'below' else '>='} {value:g} "
            f"(simulated seconds, mean over seeds with a 95% bootstrap CI):"
        )
        print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return 1 if out.failed else 0


def _record_target(store: str | Path, target: tuple[str, str, float] | None) -> None:
    """Record ``--target`` in the store for ``simfl report`` (a warning line if it cannot)."""
    if target is None or not (Path(store) / MARKER).is_file():
        return
    try:
        record_target(store, target)
    except OSError as exc:
        print(
            f"warning: could not record --target in {Path(store) / RECORD} ({exc}); give "
            f"simfl report the same --target",
            file=sys.stderr,
        )


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
            raise UsageError(f"--pick must be one of {_listing(scenarios)}, got {pick!r}")
        return scenarios[pick]
    if len(scenarios) > 1:
        raise UsageError(
            f"{file} defines {len(scenarios)} scenarios and simfl tune searches one: choose it "
            f"with --pick NAME ({_listing(scenarios)})"
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


def _cmd_tune(args: argparse.Namespace) -> int:
    tuning = _tuning()
    from simfl.sweeps.executors import make_executor
    from simfl.tuning.search import STUDY_DIR

    module = _load(args.scenario)
    base = _pick_one(_scenarios(module, Path(args.scenario)), args.pick, args.scenario)
    kwargs = _tune_arguments(args, module)
    _check_search(base, kwargs, args)
    store = Path(args.store) if args.store else Path("runs") / f"tune-{Path(args.scenario).stem}"
    if args.scheduler and args.executor in (None, "dask"):
        _check_scheduler(args.scheduler)
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
        with _sigterm_interrupts(signals):
            outcome = tuning.tune(
                base, **kwargs, store=store, executor=executor, progress=not args.quiet
            )
    except KeyboardInterrupt as exc:
        _record_target(store, _objective_target(kwargs["objective"], tuning))
        return _tune_stopped(exc, bool(signals), args, store)
    except StoreWriteError as exc:
        print(
            f"error: {exc}; the search stopped and the runs it could not store are not "
            f"recorded: make room and run `{_tune_command(args, store)}` to resume it",
            file=sys.stderr,
        )
        return 2
    finally:
        executor.close()
    _record_target(store, _objective_target(kwargs["objective"], tuning))
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


def _tune_command(args: argparse.Namespace, store: str | Path) -> str:
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
        f"finding its finished runs stored):\n  {_tune_command(args, store)}",
        file=sys.stderr,
    )
    return 128 + signal.SIGTERM if terminated else 130


def _cmd_report(args: argparse.Namespace) -> int:
    from simfl.report import write_report

    store = Store(args.store)
    target = parse_target(args.target) if args.target else None
    out = Path(args.out) if args.out else store.path / "report"
    if out.exists() and not out.is_dir():
        raise UsageError(f"report folder {out} is an existing file; give a folder (--out)")
    bad = store.check()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("ignore", StoreWarning)  # the unreadable runs are listed below
        warnings.simplefilter("always", ReportWarning)
        index = write_report(
            store,
            out,
            metric=args.metric,
            target=target,
            run=args.run,
            by=args.by,
            baseline=args.baseline,
            progress=None if args.quiet else _say,
        )
    for warning in caught:
        if issubclass(warning.category, ReportWarning):
            print(f"warning: {warning.message}", file=sys.stderr)
        else:
            warnings.warn_explicit(
                warning.message, warning.category, warning.filename, warning.lineno
            )
    _print_bad(store, bad, "skipped")
    print(f"report     {index}  ({len(list(out.glob('*.png')))} figures)")
    return 0


def _say(line: str) -> None:
    """A progress line of ``simfl report``, printed at once."""
    print(f"...        {line}", flush=True)


def _print_bad(store: Store, bad: list[BadRun], word: str) -> None:
    """A line per unreadable run, and what to do about those still in place."""
    for one in bad:
        print(f"{'moved' if one.moved_to is not None else word:<10} {one}")
    if any(one.moved_to is None for one in bad):
        print(
            f"           (simfl store check {store.path} --repair moves unreadable runs into "
            f"{store.path / QUARANTINE}/; the next sweep runs them again)"
        )


def _cmd_store_check(args: argparse.Namespace) -> int:
    store = Store(args.directory)
    bad = store.check(repair=args.repair, verify=not args.fast)
    with warnings.catch_warnings():  # the unreadable runs are listed below instead
        warnings.simplefilter("ignore", StoreWarning)
        readable = len(store.records())
    _print_bad(store, bad, "unreadable")
    moved = sum(one.moved_to is not None for one in bad)
    print(
        f"store      {store.path}: {readable} readable runs, {len(bad) - moved} unreadable, "
        f"{moved} moved aside"
    )
    return 1 if moved < len(bad) else 0


def _cmd_store_prune(args: argparse.Namespace) -> int:
    store = Store(args.directory)
    older = store.prune(dry_run=args.dry_run)
    word = "would move" if args.dry_run else "set aside"
    for one in older:
        print(f"{word:<10} {one}")
    where = store.path / SUPERSEDED
    print(
        f"store      {store.path}: {len(older)} run(s) of older versions "
        + (f"would be moved into {where}/ (--dry-run)" if args.dry_run else f"moved into {where}/")
    )
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    if (Path(args.directory) / "simfl-store.json").is_file():
        store = Store(args.directory)
        bad = store.check()
        with warnings.catch_warnings():  # the unreadable runs are listed below instead
            warnings.simplefilter("ignore", StoreWarning)
            runs = store.runs()
        counts = runs["status"].value_counts()
        print(
            f"store      {args.directory}: {len(runs)} runs, "
            + ", ".join(f"{int(counts.get(s, 0))} {s}" for s in ("done", "failed"))
            + (f", {len(bad)} unreadable" if bad else "")
        )
        columns = [
            c for c in runs.columns if c not in ("error", "fingerprint", "started", "finished")
        ]
        print(runs[columns[: columns.index("n_rounds") + 1]].to_string(index=False))
        _print_bad(store, bad, "unreadable")
        return 0
    print(Results.load(args.directory).summary())
    return 0


def parser() -> argparse.ArgumentParser:
    """The argument parser of the ``simfl`` command (run, sweep, tune, report, show, store)."""
    parser = argparse.ArgumentParser(prog="simfl", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run", help="run a scenario file and save its results")
    p_run.add_argument("scenario", help="Python file defining SCENARIO or SCENARIOS")
    p_run.add_argument("--seed", type=int, default=None, help="override the scenario seed")
    p_run.add_argument("--out", default=None, help="results directory (default runs/NAME-seedN)")
    p_run.add_argument(
        "--pick",
        default=None,
        help="which of the file's scenarios to run: a SCENARIOS name, or a case's labels "
        "(e.g. policy=srpfl,seed=2)",
    )
    p_run.add_argument("--quiet", action="store_true", help="no progress bar")
    p_run.set_defaults(func=_cmd_run)
    p_sweep = sub.add_parser(
        "sweep", help="run a file's scenarios over seeds into a resumable results store"
    )
    p_sweep.add_argument("scenario", help="Python file defining SCENARIO, SCENARIOS or CASES")
    p_sweep.add_argument(
        "--seeds",
        default=None,
        help="seeds, e.g. 0-9 or 1,4,7 (default 0-4); refused for CASES with a seed axis, "
        "which run their own seeds",
    )
    p_sweep.add_argument("--store", default=None, help="results store (default runs/sweep-FILE)")
    p_sweep.add_argument(
        "--executor",
        default=None,
        choices=EXECUTORS,
        help="where runs execute (default: processes, or dask with --scheduler)",
    )
    p_sweep.add_argument(
        "--scheduler", default=None, help="running Dask scheduler, e.g. tcp://host:8786"
    )
    p_sweep.add_argument(
        "--workers", type=int, default=None, help="local processes or local Dask workers"
    )
    p_sweep.add_argument(
        "--threads",
        type=int,
        default=None,
        help="compute threads (torch, OpenMP, BLAS) of each worker (default: its share of "
        "the cores)",
    )
    p_sweep.add_argument(
        "--retry-failed", action="store_true", help="run again the runs stored as failed"
    )
    p_sweep.add_argument(
        "--reuse-stale",
        action="store_true",
        help="keep stored runs whose code changed since they ran (for a cosmetic change)",
    )
    p_sweep.add_argument(
        "--rerun-unknown",
        action="store_true",
        help="run again the runs stored before simfl recorded the code behind a run",
    )
    p_sweep.add_argument(
        "--target",
        default=None,
        help='e.g. "distance<1e-3" or "accuracy>=0.9" (< means <=, > means >=): print time to it',
    )
    p_sweep.add_argument("--quiet", action="store_true", help="no progress bar")
    p_sweep.set_defaults(func=_cmd_sweep)
    p_tune = sub.add_parser(
        "tune", help="search a scenario's knobs for the best setting (Optuna), resumably"
    )
    p_tune.add_argument("scenario", help="Python file defining SCENARIO, SCENARIOS or CASES")
    p_tune.add_argument(
        "--pick", default=None, help="which of the file's scenarios to search (as for run)"
    )
    p_tune.add_argument(
        "--knob",
        action="append",
        default=None,
        metavar="PATH=SPEC",
        help="a knob, e.g. policy.seconds=1:60 (real), policy.seconds=1:60:log, "
        "policy.count=5..50 (integer), policy.count=5..50:5, policy.partial=False,True "
        "(choice), fleet=@FLEETS (a dict of the file); repeat for more knobs",
    )
    p_tune.add_argument(
        "--objective",
        action="append",
        default=None,
        metavar="MEASURE",
        help="what to optimise: time:METRIC<=X, time:METRIC>=X, energy:METRIC<=X, "
        "updates_per_hour, final:METRIC, round_time[:Q], jain[:groups|:devices], "
        "share:GROUP, sim_time; twice for a Pareto front",
    )
    p_tune.add_argument(
        "--constraint",
        action="append",
        default=None,
        metavar="MEASURE<=X",
        help="a bound the setting must meet, e.g. round_time:0.95<=60, jain>=0.8, "
        "share:slow>=0.1, sim_time<=3600; repeat for more",
    )
    p_tune.add_argument(
        "--seeds", default=None, help="seeds every trial runs, e.g. 0-2 (default 0-2)"
    )
    p_tune.add_argument("--trials", type=int, default=None, help="trials to finish (default 30)")
    p_tune.add_argument(
        "--max-runs",
        type=int,
        default=None,
        help="a budget of runs: no trial starts unless its seeds fit (default: none)",
    )
    fresh = p_tune.add_mutually_exclusive_group()
    fresh.add_argument(
        "--fresh-seeds",
        default=None,
        help="seeds the search never saw, on which the best setting runs again (default: as "
        "many as --seeds, after them)",
    )
    fresh.add_argument(
        "--no-fresh", action="store_true", help="do not run the best setting on fresh seeds"
    )
    p_tune.add_argument("--store", default=None, help="results store (default runs/tune-FILE)")
    p_tune.add_argument(
        "--study", default=None, help="the search's name in the store (default: the scenario's)"
    )
    p_tune.add_argument(
        "--search-seed", type=int, default=None, help="seed of the sampler (default 0)"
    )
    p_tune.add_argument(
        "--no-prune",
        action="store_true",
        help="run every seed of every trial (default: stop trials that cannot win)",
    )
    p_tune.add_argument(
        "--executor",
        default=None,
        choices=EXECUTORS,
        help="where runs execute (default: processes, or dask with --scheduler)",
    )
    p_tune.add_argument(
        "--scheduler", default=None, help="running Dask scheduler, e.g. tcp://host:8786"
    )
    p_tune.add_argument(
        "--workers",
        type=int,
        default=None,
        help="local processes or local Dask workers (a trial runs that many seeds at once)",
    )
    p_tune.add_argument("--threads", type=int, default=None, help="compute threads of each worker")
    p_tune.add_argument("--quiet", action="store_true", help="no progress bar")
    p_tune.set_defaults(func=_cmd_tune)
    p_report = sub.add_parser("report", help="figures and index.html from a results store")
    p_report.add_argument("store", help="results store written by simfl sweep")
    p_report.add_argument("--out", default=None, help="report folder (default STORE/report)")
    p_report.add_argument("--metric", default=None, help="metric to plot (default: the first)")
    p_report.add_argument(
        "--target",
        default=None,
        help='e.g. "distance<1e-3" or "accuracy>=0.9" (default: the sweep\'s --target, '
        "recorded in the store, else chosen from the runs)",
    )
    p_report.add_argument("--run", default=None, help="run id for the Gantt chart")
    p_report.add_argument(
        "--by", default=None, help="column that names the compared series (default: guessed)"
    )
    p_report.add_argument("--baseline", default=None, help="series speedups are relative to")
    p_report.add_argument(
        "--quiet", action="store_true", help="no progress lines (reading runs, each figure)"
    )
    p_report.set_defaults(func=_cmd_report)
    p_show = sub.add_parser("show", help="summarise a saved results directory or a store")
    p_show.add_argument("directory")
    p_show.set_defaults(func=_cmd_show)
    p_store = sub.add_parser("store", help="check a results store, or prune old versions")
    store_sub = p_store.add_subparsers(dest="action", required=True)
    p_check = store_sub.add_parser(
        "check", help="list the runs that cannot be read; --repair moves them aside"
    )
    p_check.add_argument("directory", help="results store written by simfl sweep")
    p_check.add_argument(
        "--repair",
        action="store_true",
        help="move unreadable runs into DIR/.quarantine/ so that the next sweep runs them again",
    )
    p_check.add_argument(
        "--fast", action="store_true", help="check file sizes only, not their SHA-256"
    )
    p_check.set_defaults(func=_cmd_store_check)
    p_prune = store_sub.add_parser(
        "prune", help="move runs of older versions of a scenario into DIR/.superseded/"
    )
    p_prune.add_argument("directory", help="results store written by simfl sweep")
    p_prune.add_argument(
        "--dry-run", action="store_true", help="only print what would be set aside"
    )
    p_prune.set_defaults(func=_cmd_store_prune)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``simfl`` console script."""
    args = parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except (UsageError, ValueError, FileNotFoundError, SchedulerError) as exc:
        return _fail(str(exc))
    except OSError as exc:
        if exc.errno not in _ENVIRONMENT_ERRNOS:
            raise
        return _fail(str(exc))  # e.g. [Errno 30] Read-only file system: 'runs/x'
    return code


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
