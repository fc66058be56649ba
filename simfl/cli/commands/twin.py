"""``simfl twin FILE``: play one scenario for real on Flower's Deployment Engine."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from simfl.cli.errors import UsageError
from simfl.cli.scenario_file import folder_name, load_scenarios, pick_scenario
from simfl.results.folder import check_destination

__all__ = ["DESCRIPTION", "HELP", "arguments", "command"]

HELP = "play a scenario for real on Flower's Deployment Engine (a twin) and save its results"
DESCRIPTION = """\
Start a Flower SuperLink and one SuperNode per device on this machine, play the scenario's
synchronous policy in a ServerApp, emulate every job's download, compute and upload on its
SuperNode (times --scale wall-clock seconds per simulated second; --app runs your Flower
ClientApp for real inside the compute window), and write the real timeline as a results
folder with the rows of `simfl run`. Needs the flower extra: pip install 'simfl[flower]'."""


def arguments(p: argparse.ArgumentParser) -> None:
    """Add the arguments of ``simfl twin`` to its parser."""
    p.add_argument("scenario", help="Python file defining SCENARIO or SCENARIOS")
    p.add_argument("--pick", default=None, help="which of the file's scenarios to play")
    p.add_argument("--seed", type=int, default=None, help="override the scenario seed")
    p.add_argument("--scale", type=float, default=1.0, help="wall seconds per simulated second")
    p.add_argument("--app", default=None, help="your Flower ClientApp as module:attribute")
    p.add_argument("--path", action="append", default=[], help="folder to import --app from")
    p.add_argument("--port", type=int, default=None, help="the SuperLink's port (default: free)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds the run may take")
    p.add_argument("--out", default=None, help="results directory (default twins/NAME-seedN)")
    p.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    """Run ``simfl twin``; its exit status."""
    from simfl.twin import TwinError, twin

    scenarios = load_scenarios(args.scenario)
    scenario = pick_scenario(
        scenarios, args.scenario, args.pick, args.seed, one="simfl twin plays one"
    )
    name = folder_name(f"{scenario.name}-seed{scenario.seed}")
    out = check_destination(args.out or Path("twins") / name, ("rounds", "clients"))
    try:
        results = twin(
            scenario,
            scale=args.scale,
            app=args.app,
            paths=args.path,
            port=args.port,
            timeout=args.timeout,
        )
    except (ValueError, ImportError) as exc:
        raise UsageError(str(exc)) from None
    except TwinError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(results.summary())
    try:
        results.save(out)
    except OSError as exc:
        raise UsageError(f"could not save the results to {out}: {exc}") from None
    print(f"results    {out}/ (rounds.parquet, clients.parquet, meta.json)")
    return 0
