"""Records of a run: flat rows in columnar buffers, turned into DataFrames once at the end.

``Results.rounds``
    One row per aggregation: ``round``, ``stage``, ``t_start`` (when the round began),
    ``time`` (simulated seconds at the aggregation), ``duration``, ``status`` (``ok``,
    ``empty`` when no update arrived, ``diverged`` when an update or the metrics evaluated after
    it were not finite, ``error``),
    ``n_selected``, ``n_arrived``, ``n_dropped``, ``n_late``, ``n_cancelled``, ``bytes_down``,
    ``bytes_up`` (bytes actually moved, partial transfers included), ``staleness_mean`` (mean
    staleness of the aggregated updates; 0 for synchronous rounds), ``train_loss`` (mean local
    loss of the accepted updates, if the algorithm reports one), then one column per task
    metric (NaN on rounds that were not evaluated).
``Results.clients``
    One row per device job: ``round``, ``stage``, ``device``, ``status`` (``arrived``,
    ``late``, ``dropped``, ``cancelled``), ``t_start``, ``t_end``, the seconds spent in
    ``download``, ``compute`` and ``upload``, ``work`` units, ``bytes_down``/``bytes_up`` and
    ``staleness`` (server versions between the model the job downloaded and the aggregation
    that applied its update; NaN for updates never applied). For asynchronous policies ``round``
    is the model version the job downloaded.
``Results.meta``
    A JSON-able dict: scenario, seed, simfl version, stop reason, status (``ok``, ``diverged``,
    ``error`` or ``interrupted``), error, host seconds, and ``initial_metrics`` (the metrics of
    the model before round 0, at time 0).

``save(dir)`` writes ``rounds.parquet``, ``clients.parquet`` and ``meta.json`` as one folder,
published whole (:mod:`simfl.results.folder`); ``load(dir)`` checks the folder and reads them
back exactly (same dtypes, same values, bit for bit).
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from simfl.outcome import STATUSES
from simfl.results import folder

__all__ = ["ROUND_STATUSES", "Recorder", "Results"]

ROUND_STATUSES = ("ok", "empty", "diverged", "error")

_JOB_COLUMNS = (
    "round",
    "stage",
    "device",
    "status",
    "t_start",
    "t_end",
    "download",
    "compute",
    "upload",
    "work",
    "bytes_down",
    "bytes_up",
    "staleness",
)
_ROUND_COLUMNS = (
    "round",
    "stage",
    "t_start",
    "time",
    "duration",
    "status",
    "n_selected",
    "n_arrived",
    "n_dropped",
    "n_late",
    "n_cancelled",
    "bytes_down",
    "bytes_up",
    "staleness_mean",
    "train_loss",
)
_INT_COLUMNS = {
    "round",
    "stage",
    "device",
    "n_selected",
    "n_arrived",
    "n_dropped",
    "n_late",
    "n_cancelled",
}


class Recorder:
    """Columnar buffers for the rows of one run.

    Job rows arrive a cohort at a time as arrays; round rows as dicts. Nothing becomes a
    DataFrame until :meth:`results`.
    """

    def __init__(self, metrics: tuple[str, ...]) -> None:
        self.metrics = metrics
        self._jobs: dict[str, list[NDArray[Any]]] = {c: [] for c in _JOB_COLUMNS}
        self._rounds: dict[str, list[Any]] = {c: [] for c in (*_ROUND_COLUMNS, *metrics)}

    @property
    def n_rounds(self) -> int:
        """Number of round rows recorded so far."""
        return len(self._rounds["round"])

    def add_jobs(self, columns: dict[str, NDArray[Any]]) -> None:
        """Append one cohort's job rows (one array per column, all the same length)."""
        for c in _JOB_COLUMNS:
            self._jobs[c].append(np.asarray(columns[c]))

    def add_round(self, row: dict[str, Any]) -> None:
        """Append one round row; metrics missing from ``row`` are NaN."""
        for c in self._rounds:
            self._rounds[c].append(row.get(c, math.nan))

    def last_round(self, column: str) -> Any:
        """A value of the last round row."""
        return self._rounds[column][-1]

    def set_status(self, status: str) -> None:
        """Set the status of the last round row (one of :data:`ROUND_STATUSES`)."""
        self._rounds["status"][-1] = status

    def set_metrics(self, metrics: dict[str, float]) -> None:
        """Fill the metric columns of the last round row."""
        for name, value in metrics.items():
            self._rounds[name][-1] = float(value)

    def results(self, meta: dict[str, Any], state: Any = None) -> Results:
        """The recorded rows as :class:`Results` (with the final algorithm ``state``)."""
        jobs: dict[str, Any] = {}
        for c in _JOB_COLUMNS:
            parts = self._jobs[c]
            dtype = np.int8 if c == "status" else np.int64 if c in _INT_COLUMNS else np.float64
            # one copy per column; int8 codes make the categorical's range check cheap
            jobs[c] = (
                np.concatenate(parts, dtype=dtype, casting="unsafe")
                if parts
                else np.empty(0, dtype)
            )
        jobs["status"] = pd.Categorical.from_codes(jobs["status"], dtype=_job_status_dtype())
        clients = pd.DataFrame(jobs, copy=False)  # the columns are this frame's own
        rounds_cols: dict[str, Any] = {}
        for c, values in self._rounds.items():
            if c == "status":
                codes = [ROUND_STATUSES.index(v) for v in values]
                rounds_cols[c] = pd.Categorical.from_codes(codes, dtype=_round_status_dtype())
            elif c in _INT_COLUMNS:
                rounds_cols[c] = np.asarray(values, dtype=np.int64)
            else:
                rounds_cols[c] = np.asarray(values, dtype=np.float64)
        return Results(pd.DataFrame(rounds_cols), clients, meta, state)


@functools.cache
def _job_status_dtype() -> pd.CategoricalDtype:
    """The dtype of ``clients.status`` (built once: pandas validates categories slowly)."""
    return pd.CategoricalDtype(list(STATUSES))


@functools.cache
def _round_status_dtype() -> pd.CategoricalDtype:
    """The dtype of ``rounds.status``."""
    return pd.CategoricalDtype(list(ROUND_STATUSES))


@dataclass
class Results:
    """The outcome of :func:`simfl.run`: two DataFrames and a metadata dict."""

    rounds: pd.DataFrame
    clients: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)
    #: The algorithm's final state (e.g. the learned representation). Kept in memory only:
    #: :meth:`save` writes the tables and metadata, not the model.
    state: Any = field(default=None, repr=False, compare=False)

    @property
    def metric_names(self) -> list[str]:
        """The task metric columns of :attr:`rounds`."""
        return list(self.meta.get("metrics", []))

    @property
    def ok(self) -> bool:
        """Whether the run ended without an error, a divergence or an interruption."""
        return bool(self.meta.get("status") == "ok")

    def final(self) -> dict[str, float]:
        """The metrics of the last evaluated round (empty if none was evaluated)."""
        names = self.metric_names
        if not names or self.rounds.empty:
            return {}
        evaluated = self.rounds.dropna(subset=names, how="all")
        if evaluated.empty:
            return {}
        last = evaluated.iloc[-1]
        return {n: float(last[n]) for n in names}

    def summary(self) -> str:
        """A short human-readable summary of the run."""
        counts = self.clients["status"].value_counts()
        lines = [
            f"scenario   {self.meta.get('scenario', '?')} (seed {self.meta.get('seed', '?')}, "
            f"{self.meta.get('n_devices', '?')} devices)",
            f"rounds     {len(self.rounds)}   stopped by: {self.meta.get('stop_reason', '?')}"
            f"   status: {self.meta.get('status', '?')}",
            f"sim time   {self.meta.get('sim_time', math.nan):.6g} s   "
            f"(host {self.meta.get('host_seconds', math.nan):.3g} s)",
            "jobs       " + "  ".join(f"{s} {int(counts.get(s, 0))}" for s in STATUSES),
        ]
        if not self.rounds.empty:
            empty = int((self.rounds["status"] != "ok").sum())
            lines.append(f"bad rounds {empty} (empty, diverged or error)")
        final = self.final()
        if final:
            lines.append("final      " + "  ".join(f"{k} {v:.6g}" for k, v in final.items()))
        if self.meta.get("stop_reason") == "diverged":
            lines.append("diverged   the run stopped on a non-finite update or metric")
        if self.meta.get("error"):
            lines.append("error      " + str(self.meta["error"]).strip().splitlines()[-1])
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (
            f"Results({self.meta.get('scenario', '?')!r}: {len(self.rounds)} rounds, "
            f"{len(self.clients)} jobs, sim time {self.meta.get('sim_time', math.nan):.6g} s)"
        )

    def save(self, directory: str | os.PathLike[str]) -> Path:
        """Write ``rounds.parquet``, ``clients.parquet`` and ``meta.json`` into ``directory``.

        The folder is published as a whole (see :mod:`simfl.results.folder`): written under a
        hidden sibling name, flushed to disk and renamed into place, replacing an earlier
        results folder there, so a reader never sees a half-written or mixed folder. Files get
        the usual mode (0666 less the umask). ``meta.json``, written last, lists the other
        files with their sizes and SHA-256 (its reserved key ``"_files"``).

        Raises
        ------
        ValueError
            Before anything is written, if ``directory`` is a file, a folder holding other
            files than results, has a name too long for the filesystem, or cannot be created
            (see :func:`~simfl.results.folder.check_destination`).
        OSError
            If writing fails (e.g. a full disk); an earlier folder there is left as it was.
        """
        return folder.publish(
            directory, {"rounds": self.rounds, "clients": self.clients}, self.meta
        )

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> Results:
        """Read results written by :meth:`save`, after checking the folder is whole.

        Raises
        ------
        FileNotFoundError
            If the folder does not exist or lacks one of its files.
        ValueError
            If its files do not match the list in its ``meta.json`` (files of different saves,
            a truncated file). Folders saved before that list existed are read unchecked,
            unless they hold the temporary files of an interrupted save.
        """
        frames, meta = folder.read(directory, ("rounds", "clients"))
        rounds = _with_status_dtype(frames["rounds"], _round_status_dtype())
        clients = _with_status_dtype(frames["clients"], _job_status_dtype())
        return cls(rounds, clients, meta)


def _with_status_dtype(frame: pd.DataFrame, dtype: pd.CategoricalDtype) -> pd.DataFrame:
    """Give ``status`` its categories back (Parquet drops those of an empty column)."""
    if "status" in frame and frame["status"].dtype != dtype:
        status = frame["status"]
        if status.isin(dtype.categories).all():
            frame["status"] = status.astype(dtype)
    return frame
