"""The ``simfl`` command line.

``simfl run SCENARIO.py [--seed N] [--out DIR] [--pick NAME] [--quiet]``
    Load a scenario file, run it with a progress bar, write the results directory and print a
    summary. The file defines ``SCENARIO`` (a :class:`~simfl.Scenario`) or ``SCENARIOS`` (a dict
    of them; choose one with ``--pick``).
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

__all__ = ["load_scenarios", "main"]


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
