"""Versions of a stored run: which runs of a store an edited scenario has superseded.

A run is identified by its scenario's values (the fingerprint in its id), so editing a scenario
and sweeping again stores new runs beside the old ones: the same scenario name, seed and grid
labels, another fingerprint. These are *versions* of one run. The rule that
:meth:`simfl.Store.prune` follows, for each (name, seed, labels):

* the version kept is the run that finished last (``finished`` in ``run.json``, an ISO 8601
  time; a run whose time is missing or cannot be read counts as older than every run with one);
* runs that finished at exactly the same time as the newest one are all kept (there is no
  newest among them to choose);
* every other run of the group is set aside, whatever its status: a newer version that failed
  still replaces an older one that finished (it is what the scenario now computes).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

__all__ = ["SetAside", "finished_at", "older_versions"]

#: Sorts before every readable finishing time.
_NEVER = datetime.min.replace(tzinfo=timezone.utc)


@dataclass(frozen=True)
class SetAside:
    """A stored run of an older version of a scenario (:meth:`simfl.Store.prune`).

    Attributes
    ----------
    run_id
        The older run.
    kept
        The run of the newest version that stays in its place.
    key
        The scenario name, seed and grid labels the two share, in words.
    moved_to
        Where it was moved (``None``: not moved, e.g. a dry run).
    """

    run_id: str
    kept: str
    key: str
    moved_to: Path | None = None

    def __str__(self) -> str:
        where = f" -> {self.moved_to}" if self.moved_to is not None else ""
        return f"{self.run_id}: an older version of {self.key} (kept {self.kept}){where}"


def finished_at(record: dict[str, Any]) -> datetime:
    """When a run finished (UTC); the earliest time if its record does not say."""
    text = record.get("finished")
    if not isinstance(text, str):
        return _NEVER
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return _NEVER
    return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)


def older_versions(records: Iterable[dict[str, Any]]) -> list[SetAside]:
    """The runs that a newer version of the same run supersedes (the rule of the module).

    Parameters
    ----------
    records
        The ``run.json`` records of a store (:meth:`simfl.Store.records`).

    Returns
    -------
    list of SetAside
        The older runs, by run id, each with the run kept in its place.
    """
    groups: dict[tuple[str, int, str], list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        labels = json.dumps(record.get("labels", {}), sort_keys=True)
        groups[(record["name"], record["seed"], labels)].append(record)
    out = []
    for (name, seed, labels), runs in groups.items():
        newest = max(finished_at(r) for r in runs)
        kept = sorted(r["run_id"] for r in runs if finished_at(r) == newest)
        key = f"{name!r} seed {seed} labels {labels}"
        out += [SetAside(r["run_id"], kept[-1], key) for r in runs if finished_at(r) != newest]
    return sorted(out, key=lambda one: one.run_id)
