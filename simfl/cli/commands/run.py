"""``simfl run FILE``: run one scenario of a file and save its results folder."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from simfl.cli.errors import UsageError
from simfl.cli.scenario_file import folder_name, load_scenarios, pick_scenario
from simfl.engine import run
from simfl.results.folder import check_destination

__all__ = ["DESCRIPTION", "HELP", "arguments", "command"]

HELP = "run a scenario file and save its results"
DESCRIPTION = """\
Load a scenario file, run it with a progress bar, write the results directory and print a
summary. The file defines SCENARIO (a simfl.Scenario), SCENARIOS (a dict of them) or CASES; a
file with several scenarios needs --pick (a name of SCENARIOS, or a case's labels such as
policy=srpfl,seed=2), and the error lists them."""


def arguments(p: argparse.ArgumentParser) -> None:
    """Add the arguments of ``simfl run`` to its parser."""
    p.add_argument("scenario", help="Python file defining SCENARIO or SCENARIOS")
    p.add_argument("--seed", type=int, default=None, help="override the scenario seed")
    p.add_argument("--out", default=None, help="results directory (default runs/NAME-seedN)")
    p.add_argument(
        "--pick",
        default=None,
        help="which of the file's scenarios to run: a SCENARIOS name, or a case's labels "
        "(e.g. policy=srpfl,seed=2)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    """Run ``simfl run``; its exit status (1 if the run failed)."""
    scenarios = load_scenarios(args.scenario)
    scenario = pick_scenario(
        scenarios,
        args.scenario,
        args.pick,
        args.seed,
        one="simfl run runs one",
        also=f", or run them all with simfl sweep {shlex.quote(str(args.scenario))}",
    )
    name = folder_name(f"{scenario.name}-seed{scenario.seed}")
    out = check_destination(args.out or Path("runs") / name, ("rounds", "clients"))
    results = run(scenario, progress=not args.quiet)
    print(results.summary())
    try:
        results.save(out)
    except OSError as exc:
        raise UsageError(f"could not save the results to {out}: {exc}") from None
    print(f"results    {out}/ (rounds.parquet, clients.parquet, meta.json)")
    return 0 if results.ok else 1
