"""The ``simfl`` command line.

``simfl run SCENARIO.py [--seed N] [--out DIR] [--pick NAME] [--quiet]``
    Load a scenario file, run it with a progress bar, write the results directory and print a
    summary. The file defines ``SCENARIO`` (a :class:`~simfl.Scenario`) or ``SCENARIOS`` (a dict
    of them; choose one with ``--pick``).
``simfl sweep SCENARIO.py [--seeds 0-9] [--workers N] [--out DIR] [--target "distance<1e-3"]``
    Run every scenario of a file for every seed on local processes, save each run under
    ``DIR/NAME/seedK/`` and the tidy rounds of all runs as ``DIR/sweep.parquet``, and print the
    time-to-target across seeds (mean with a bootstrap 95% CI) for each scenario.
``simfl show DIR``
    Print the summary of a saved results directory.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path

from simfl.engine import run
from simfl.results import Results
from simfl.scenario import Scenario

__all__ = ["load_scenarios", "main", "parse_seeds", "parse_target"]


def load_scenarios(path: str | Path) -> dict[str, Scenario]:
    """The scenarios a Python file exposes as ``SCENARIO`` or ``SCENARIOS``, by name.

    Raises
    ------
    ValueError
        If the file does not exist or defines neither name with scenarios in it.
    """
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"scenario file {file} does not exist")
    spec = importlib.util.spec_from_file_location(f"_simfl_scenario_{file.stem}", file)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot import scenario file {file}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    found: dict[str, Scenario] = {}
    single = getattr(module, "SCENARIO", None)
    if isinstance(single, Scenario):
        found[single.name] = single
    many = getattr(module, "SCENARIOS", None)
    if isinstance(many, dict):
        found.update({str(k): v for k, v in many.items() if isinstance(v, Scenario)})
    if not found:
        raise ValueError(
            f"{file} must define SCENARIO (a simfl.Scenario) or SCENARIOS (a dict of them)"
        )
    return found


def _cmd_run(args: argparse.Namespace) -> int:
    scenarios = load_scenarios(args.scenario)
    if args.pick is not None:
        if args.pick not in scenarios:
            print(
                f"error: --pick must be one of {sorted(scenarios)}, got {args.pick!r}",
                file=sys.stderr,
            )
            return 2
        scenario = scenarios[args.pick]
    elif len(scenarios) == 1:
        scenario = next(iter(scenarios.values()))
    else:
        print(
            f"error: {args.scenario} defines several scenarios; choose one with --pick "
            f"({', '.join(sorted(scenarios))})",
            file=sys.stderr,
        )
        return 2
    if args.seed is not None:
        scenario = dataclasses.replace(scenario, seed=args.seed)
    out = Path(args.out) if args.out else Path("runs") / f"{scenario.name}-seed{scenario.seed}"
    results = run(scenario, progress=not args.quiet)
    results.save(out)
    print(results.summary())
    print(f"results    {out}/ (rounds.parquet, clients.parquet, meta.json)")
    return 0 if results.ok else 1


def parse_seeds(text: str) -> list[int]:
    """Seeds from ``"0-9"``, ``"1,4,7"`` or a mix such as ``"0-3,10"``."""
    seeds: list[int] = []
    try:
        for part in text.split(","):
            lo, _, hi = part.strip().partition("-")
            seeds.extend(range(int(lo), int(hi) + 1) if hi else [int(lo)])
    except ValueError:
        raise ValueError(f"--seeds must look like 0-9 or 1,4,7, got {text!r}") from None
    if not seeds or min(seeds) < 0:
        raise ValueError(f"--seeds must list non-negative seeds, got {text!r}")
    return seeds


def parse_target(text: str) -> tuple[str, str, float]:
    """``"distance<1e-3"`` -> ("distance", "below", 0.001); ``"accuracy>0.9"`` -> above."""
    for sign, side in (("<", "below"), (">", "above")):
        if sign in text:
            metric, _, value = text.partition(sign)
            try:
                return metric.strip(), side, float(value)
            except ValueError:
                break
    raise ValueError(f"--target must look like metric<value or metric>value, got {text!r}")


def _cmd_sweep(args: argparse.Namespace) -> int:
    from simfl import compare
    from simfl.sweep import grid, run_all

    scenarios = load_scenarios(args.scenario)
    seeds = parse_seeds(args.seeds)
    target = parse_target(args.target) if args.target else None
    cases = [c for sc in scenarios.values() for c in grid(sc, seed=seeds)]
    out = Path(args.out) if args.out else Path("runs") / f"sweep-{Path(args.scenario).stem}"
    done = run_all(cases, workers=args.workers, progress=not args.quiet)
    for case, res in zip(done.cases, done.results, strict=True):
        res.save(out / case.scenario.name / f"seed{case.scenario.seed}")
    frame = done.frame
    frame.to_parquet(out / "sweep.parquet", index=False)
    print(f"{len(cases)} runs ({len(scenarios)} scenarios x {len(seeds)} seeds) -> {out}/")
    if target is not None:
        metric, side, value = target
        below, above = (value, None) if side == "below" else (None, value)
        table = compare.summarize_targets(frame, metric, below=below, above=above)
        print(
            f"time to {metric} {'<=' if side == 'below' else '>='} {value:g} "
            f"(simulated seconds, mean over seeds with a 95% bootstrap CI):"
        )
        print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    failed = [r for r in done.results if not r.ok]
    return 1 if failed else 0


def _cmd_show(args: argparse.Namespace) -> int:
    print(Results.load(args.directory).summary())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``simfl`` console script."""
    parser = argparse.ArgumentParser(prog="simfl", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run", help="run a scenario file and save its results")
    p_run.add_argument("scenario", help="Python file defining SCENARIO or SCENARIOS")
    p_run.add_argument("--seed", type=int, default=None, help="override the scenario seed")
    p_run.add_argument("--out", default=None, help="results directory (default runs/NAME-seedN)")
    p_run.add_argument("--pick", default=None, help="which of the file's SCENARIOS to run")
    p_run.add_argument("--quiet", action="store_true", help="no progress bar")
    p_run.set_defaults(func=_cmd_run)
    p_sweep = sub.add_parser("sweep", help="run a file's scenarios over seeds, in parallel")
    p_sweep.add_argument("scenario", help="Python file defining SCENARIO or SCENARIOS")
    p_sweep.add_argument("--seeds", default="0-4", help="seeds, e.g. 0-9 or 1,4,7 (default 0-4)")
    p_sweep.add_argument("--workers", type=int, default=None, help="processes (default: CPUs)")
    p_sweep.add_argument("--out", default=None, help="output directory (default runs/sweep-FILE)")
    p_sweep.add_argument("--target", default=None, help='e.g. "distance<1e-3": print time to it')
    p_sweep.add_argument("--quiet", action="store_true", help="no progress bar")
    p_sweep.set_defaults(func=_cmd_sweep)
    p_show = sub.add_parser("show", help="summarise a saved results directory")
    p_show.add_argument("directory")
    p_show.set_defaults(func=_cmd_show)
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
