"""The ``simfl`` command's parser and entry point."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from simfl.cli.commands import report, run, store, sweep, tune, twin
from simfl.cli.errors import ENVIRONMENT_ERRNOS, UsageError, fail
from simfl.sweeps.scheduler import SchedulerError

__all__ = ["main", "parser"]

_DESCRIPTION = "Simulate federated learning on device fleets: run, sweep, tune and report."
_EPILOG = """\
Errors a user can fix (a bad argument, a scenario file that does not import, an output path
that cannot be written, a full disk, an unreachable scheduler) are printed as one line
"error: ..." with exit status 2; anything else is a bug and keeps its traceback.

Each command's own --help says more; the manual is docs/cli.md."""


def parser() -> argparse.ArgumentParser:
    """The argument parser of the ``simfl`` command and its subcommands."""
    raw = argparse.RawDescriptionHelpFormatter
    top = argparse.ArgumentParser(
        prog="simfl", description=_DESCRIPTION, epilog=_EPILOG, formatter_class=raw
    )
    sub = top.add_subparsers(dest="command", required=True)
    commands = (("run", run), ("sweep", sweep), ("tune", tune), ("report", report), ("twin", twin))
    for name, module in commands:
        module.arguments(
            sub.add_parser(
                name, help=module.HELP, description=module.DESCRIPTION, formatter_class=raw
            )
        )
    store.show_arguments(
        sub.add_parser(
            "show", help=store.SHOW_HELP, description=store.SHOW_DESCRIPTION, formatter_class=raw
        )
    )
    store.arguments(
        sub.add_parser("store", help=store.HELP, description=store.DESCRIPTION, formatter_class=raw)
    )
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``simfl`` console script; its exit status."""
    args = parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except (UsageError, ValueError, FileNotFoundError, SchedulerError) as exc:
        return fail(str(exc))
    except OSError as exc:
        if exc.errno not in ENVIRONMENT_ERRNOS:
            raise
        return fail(str(exc))  # e.g. [Errno 30] Read-only file system: 'runs/x'
    return code
