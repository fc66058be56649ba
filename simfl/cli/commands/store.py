"""``simfl show DIR`` and ``simfl store check|prune DIR``: read and look after a results store."""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

from simfl.results import Results
from simfl.sweeps.store import QUARANTINE, SUPERSEDED, BadRun, Store, StoreWarning

__all__ = [
    "DESCRIPTION",
    "HELP",
    "SHOW_DESCRIPTION",
    "SHOW_HELP",
    "arguments",
    "print_bad",
    "show",
    "show_arguments",
]

SHOW_HELP = "summarise a saved results directory or a store"
SHOW_DESCRIPTION = """\
Print the summary of a saved results directory, or of the runs of a store (and a line per run
that cannot be read)."""
HELP = "check a results store, or prune old versions"
_CHECK_DESCRIPTION = """\
List the runs of a store that cannot be read (a missing, cut-short or changed run.json,
meta.json or Parquet file, a field of run.json that is not valid, a symbolic link or special
file), with the reason; --repair moves them into DIR/.quarantine/ so that the next sweep runs
them again. Every file's SHA-256 is checked; --fast checks sizes only. Exit status 1 if an
unreadable run is left in place."""
_PRUNE_DESCRIPTION = """\
Set aside the runs of older versions of a scenario (same name, seed and grid labels, another
fingerprint: the scenario was edited between sweeps), keeping the run that finished last; they
are moved into DIR/.superseded/, never deleted. Prints each run set aside."""
DESCRIPTION = f"check: {_CHECK_DESCRIPTION}\n\nprune: {_PRUNE_DESCRIPTION}"


def show_arguments(p: argparse.ArgumentParser) -> None:
    """Add the arguments of ``simfl show`` to its parser."""
    p.add_argument("directory")
    p.set_defaults(func=show)


def arguments(p: argparse.ArgumentParser) -> None:
    """Add the subcommands of ``simfl store`` (check, prune) to its parser."""
    store_sub = p.add_subparsers(dest="action", required=True)
    p_check = store_sub.add_parser(
        "check",
        help="list the runs that cannot be read; --repair moves them aside",
        description=_CHECK_DESCRIPTION,
        formatter_class=p.formatter_class,
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
    p_check.set_defaults(func=_check)
    p_prune = store_sub.add_parser(
        "prune",
        help="move runs of older versions of a scenario into DIR/.superseded/",
        description=_PRUNE_DESCRIPTION,
        formatter_class=p.formatter_class,
    )
    p_prune.add_argument("directory", help="results store written by simfl sweep")
    p_prune.add_argument(
        "--dry-run", action="store_true", help="only print what would be set aside"
    )
    p_prune.set_defaults(func=_prune)


def print_bad(store: Store, bad: list[BadRun], word: str) -> None:
    """A line per unreadable run, and what to do about those still in place."""
    for one in bad:
        print(f"{'moved' if one.moved_to is not None else word:<10} {one}")
    if any(one.moved_to is None for one in bad):
        print(
            f"           (simfl store check {store.path} --repair moves unreadable runs into "
            f"{store.path / QUARANTINE}/; the next sweep runs them again)"
        )


def _check(args: argparse.Namespace) -> int:
    """Run ``simfl store check``; its exit status (1 if an unreadable run is left in place)."""
    store = Store(args.directory)
    bad = store.check(repair=args.repair, verify=not args.fast)
    with warnings.catch_warnings():  # the unreadable runs are listed below instead
        warnings.simplefilter("ignore", StoreWarning)
        readable = len(store.records())
    print_bad(store, bad, "unreadable")
    moved = sum(one.moved_to is not None for one in bad)
    print(
        f"store      {store.path}: {readable} readable runs, {len(bad) - moved} unreadable, "
        f"{moved} moved aside"
    )
    return 1 if moved < len(bad) else 0


def _prune(args: argparse.Namespace) -> int:
    """Run ``simfl store prune``."""
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


def show(args: argparse.Namespace) -> int:
    """Run ``simfl show``."""
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
        print_bad(store, bad, "unreadable")
        return 0
    print(Results.load(args.directory).summary())
    return 0
