"""``simfl report STORE``: PNG figures and an ``index.html`` from a results store."""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

from simfl.cli.commands.store import print_bad
from simfl.cli.errors import UsageError
from simfl.report.recorded import ReportWarning, parse_target
from simfl.sweeps.store import Store, StoreWarning

__all__ = ["DESCRIPTION", "HELP", "arguments", "command"]

HELP = "figures and index.html from a results store"
DESCRIPTION = """\
Write PNG figures and an index.html that shows them (default STORE/report), with a line for
each step as it starts (reading the runs, each figure; --quiet: none). Runs that cannot be
read are left out, one line each. The target is --target, else the one simfl sweep --target
recorded in the store (a bad record: one warning line), else one chosen from the runs. A store
with searches (simfl tune) gets a section per search (the best setting, warnings, the trials'
history, the knobs' importance, the front) and one series per setting."""


def arguments(p: argparse.ArgumentParser) -> None:
    """Add the arguments of ``simfl report`` to its parser."""
    p.add_argument("store", help="results store written by simfl sweep")
    p.add_argument("--out", default=None, help="report folder (default STORE/report)")
    p.add_argument("--metric", default=None, help="metric to plot (default: the first)")
    p.add_argument(
        "--target",
        default=None,
        help='e.g. "distance<1e-3" or "accuracy>=0.9" (default: the sweep\'s --target, '
        "recorded in the store, else chosen from the runs)",
    )
    p.add_argument("--run", default=None, help="run id for the Gantt chart")
    p.add_argument(
        "--by", default=None, help="column that names the compared series (default: guessed)"
    )
    p.add_argument("--baseline", default=None, help="series speedups are relative to")
    p.add_argument(
        "--quiet", action="store_true", help="no progress lines (reading runs, each figure)"
    )
    p.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    """Run ``simfl report``."""
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
    print_bad(store, bad, "skipped")
    print(f"report     {index}  ({len(list(out.glob('*.png')))} figures)")
    return 0


def _say(line: str) -> None:
    """A progress line of ``simfl report``, printed at once."""
    print(f"...        {line}", flush=True)
