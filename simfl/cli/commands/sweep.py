"""``simfl sweep FILE``: every scenario of a file over seeds, into a resumable results store."""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from simfl.cli.scenario_file import load_cases
from simfl.cli.seeds import DEFAULT_SEEDS, parse_seeds
from simfl.cli.shared import check_scheduler, save_target, sigterm_interrupts
from simfl.report.recorded import parse_target
from simfl.sweeps.executors import EXECUTORS
from simfl.sweeps.grid import Case, ranges_text, with_seeds
from simfl.sweeps.store import StoreWriteError

__all__ = ["DESCRIPTION", "HELP", "arguments", "command", "resume_command"]

HELP = "run a file's scenarios over seeds into a resumable results store"
DESCRIPTION = """\
Run every scenario of a file (SCENARIO, SCENARIOS, or CASES: a list of simfl.sweeps.Case from
sweeps.grid, whose labels become columns) for every seed, into a results store (default
runs/sweep-FILE). Cases with a seed axis run their own seeds and --seeds is refused for them.

Runs already in the store are skipped, so re-running a killed sweep resumes it; failed runs
are kept and skipped unless --retry-failed. A stored run whose code changed since is stale: it
runs again, the old run kept in STORE/.superseded/, unless --reuse-stale; runs stored before
simfl recorded code are kept unless --rerun-unknown. Sweeps started at once on one store
compute each run once.

With --target (a metric of the scenarios' tasks, checked before anything runs) it prints the
time-to-target across seeds for each scenario and records the target for simfl report.

Exit status 1 if any run failed; on Ctrl-C (130) or SIGTERM (143) the workers are stopped and
it prints what finished and the command that resumes."""


def arguments(p: argparse.ArgumentParser) -> None:
    """Add the arguments of ``simfl sweep`` to its parser."""
    p.add_argument("scenario", help="Python file defining SCENARIO, SCENARIOS or CASES")
    p.add_argument(
        "--seeds",
        default=None,
        help="seeds, e.g. 0-9 or 1,4,7 (default 0-4); refused for CASES with a seed axis, "
        "which run their own seeds",
    )
    p.add_argument("--store", default=None, help="results store (default runs/sweep-FILE)")
    p.add_argument(
        "--executor",
        default=None,
        choices=EXECUTORS,
        help="where runs execute (default: processes, or dask with --scheduler)",
    )
    p.add_argument("--scheduler", default=None, help="running Dask scheduler, e.g. tcp://host:8786")
    p.add_argument(
        "--workers", type=int, default=None, help="local processes or local Dask workers"
    )
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="compute threads (torch, OpenMP, BLAS) of each worker (default: its share of "
        "the cores)",
    )
    p.add_argument(
        "--retry-failed", action="store_true", help="run again the runs stored as failed"
    )
    p.add_argument(
        "--reuse-stale",
        action="store_true",
        help="keep stored runs whose code changed since they ran (for a cosmetic change)",
    )
    p.add_argument(
        "--rerun-unknown",
        action="store_true",
        help="run again the runs stored before simfl recorded the code behind a run",
    )
    p.add_argument(
        "--target",
        default=None,
        help='e.g. "distance<1e-3" or "accuracy>=0.9" (< means <=, > means >=): print time to it',
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=command)


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


def resume_command(args: argparse.Namespace, store: str | Path) -> str:
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
        f"command to resume (finished runs are skipped):\n  {resume_command(args, store)}",
        file=sys.stderr,
    )
    return 128 + signal.SIGTERM if terminated else 130


def _unwritable(exc: StoreWriteError, args: argparse.Namespace, store: str | Path) -> int:
    """Say what a sweep that could not write its store did, in one error line; exit status 2."""
    if exc.outcome is not None:
        print(exc.outcome.summary(), flush=True)
    print(
        f"error: {exc}; the sweep stopped and the runs it could not store are not recorded: "
        f"make room and run `{resume_command(args, store)}` to run them",
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


def command(args: argparse.Namespace) -> int:
    """Run ``simfl sweep``; its exit status (1 if a run failed, 130 or 143 if stopped)."""
    from simfl import compare
    from simfl.sweeps import sweep

    cases = load_cases(args.scenario)
    grid, counted = _seeded(cases, args.seeds, args.scenario)
    target = parse_target(args.target) if args.target else None
    if target is not None:
        _check_target(target[0], cases)
    store = args.store or Path("runs") / f"sweep-{Path(args.scenario).stem}"
    if args.scheduler and args.executor in (None, "dask"):
        check_scheduler(args.scheduler)
    print(f"{len(grid)} runs ({counted}) -> {store}/", flush=True)
    signals: list[int] = []
    try:
        with sigterm_interrupts(signals):
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
        save_target(store, target)
        return _stopped(exc, bool(signals), args, store)
    except StoreWriteError as exc:
        return _unwritable(exc, args, store)
    save_target(store, target)
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
