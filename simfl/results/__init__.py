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
    When the fleet declares an energy model, four more columns give each job's joules:
    ``energy`` and its parts ``energy_compute``, ``energy_transfer``, ``energy_idle`` (see
    :mod:`simfl.fleet.energy`).
``Results.meta``
    A JSON-able dict: scenario, seed, simfl version, stop reason, status (``ok``, ``diverged``,
    ``error`` or ``interrupted``), error, host seconds, ``initial_metrics`` (the metrics of the
    model before round 0, at time 0), the task's ``goals``, each device's group (``groups``)
    and, where the algorithm evaluates per client, the final model's metrics per evaluated
    client (``client_metrics``); see :mod:`simfl.results.groups`. ``n_rounds`` counts the rows
    of ``rounds`` and ``empty_rounds`` those that applied no update (``n_arrived == 0``, status
    ``empty``: nobody was selected, or every selected job dropped, was late or was cancelled).
    ``warnings`` lists what the run found worth a word: more than half of its rounds empty
    (:data:`EMPTY_SHARE`), a stall although updates arrived (see
    :mod:`simfl.engine.stops`). Results saved before these keys existed lack them.

Who took part and what it cost: :meth:`Results.participation` (jobs per group or device by
status, share of the aggregated updates), :meth:`Results.group_metrics`,
:meth:`Results.fairness` (Jain's index of participation, worst group) and
:meth:`Results.cumulative_energy`.

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

from simfl.fleet.energy import ENERGY_COLUMNS
from simfl.outcome import STATUSES
from simfl.results import folder
from simfl.results.groups import (
    Groups,
    decode_groups,
    energy_until,
    group_metrics,
    jain_index,
    participation,
)

__all__ = ["EMPTY_SHARE", "ROUND_COLUMNS", "ROUND_STATUSES", "Recorder", "Results"]

#: A run more than this share of whose rounds are empty is flagged in ``meta["warnings"]``.
EMPTY_SHARE = 0.5

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
#: The columns ``Results.rounds`` always has (the metrics come after them).
ROUND_COLUMNS = (
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

    Job rows arrive a cohort at a time as arrays; round rows as dicts, kept as they are (a
    copy) and turned into columns at the end (one dict copy per row is cheaper than one append
    per column). Nothing becomes a DataFrame until :meth:`results`.
    """

    def __init__(self, metrics: tuple[str, ...], *, energy: bool = False) -> None:
        self.metrics = metrics
        #: The job columns: the fixed ones, then the energy ones when the fleet declares energy.
        self.job_columns = _JOB_COLUMNS + (ENERGY_COLUMNS if energy else ())
        self._jobs: dict[str, list[NDArray[Any]]] = {c: [] for c in self.job_columns}
        #: The round columns: the fixed ones, then the metrics.
        self.round_columns = (*ROUND_COLUMNS, *metrics)
        self._rounds: list[dict[str, Any]] = []
        self._tail: dict[str, NDArray[Any]] = {}  # rows added as columns, after _rounds
        self._n_tail = 0

    @property
    def n_rounds(self) -> int:
        """Number of round rows recorded so far."""
        return len(self._rounds) + self._n_tail

    def add_jobs(self, columns: dict[str, NDArray[Any]]) -> None:
        """Append one cohort's job rows (one array per column, all the same length)."""
        for c in self.job_columns:
            self._jobs[c].append(np.asarray(columns[c]))

    def add_round(self, row: dict[str, Any]) -> None:
        """Append one round row; columns missing from ``row`` are NaN, other keys ignored."""
        if self._tail:
            raise RuntimeError("Recorder: no round row can follow add_round_columns")
        self._rounds.append(row.copy())

    def add_round_columns(self, columns: dict[str, NDArray[Any]]) -> None:
        """Append round rows given as columns (arrays of one length; missing columns NaN).

        For a loop that records all its aggregations at the end of its run: they follow the
        rows of :meth:`add_round`, and nothing is recorded after them.
        """
        if self._tail:
            raise RuntimeError("Recorder: round columns can be added once, at the end")
        lengths = {len(v) for v in columns.values()}
        if len(lengths) != 1:
            raise ValueError(f"Recorder: round columns of different lengths {sorted(lengths)}")
        self._n_tail = lengths.pop()
        self._tail = {self._column(c): np.asarray(v) for c, v in columns.items()}

    def _column(self, column: str) -> str:
        """``column``, checked to be a round column."""
        if column not in self.round_columns:
            raise KeyError(f"Recorder: no round column {column!r} (have {self.round_columns})")
        return column

    def last_round(self, column: str) -> Any:
        """A value of the last round row."""
        return self._rounds[-1].get(self._column(column), math.nan)

    def set_round_values(self, column: str, rows: list[int], values: list[float]) -> None:
        """Set ``column`` of the round rows numbered ``rows`` (filled in after the fact)."""
        column, recorded = self._column(column), self._rounds
        for i, v in zip(rows, values, strict=True):
            recorded[i][column] = v

    def set_status(self, status: str) -> None:
        """Set the status of the last round row (one of :data:`ROUND_STATUSES`)."""
        self._rounds[-1]["status"] = status

    def set_metrics(self, metrics: dict[str, float]) -> None:
        """Fill the metric columns of the last round row."""
        last = self._rounds[-1]
        for name, value in metrics.items():
            last[self._column(name)] = float(value)

    def results(self, meta: dict[str, Any], state: Any = None) -> Results:
        """The recorded rows as :class:`Results` (with the final algorithm ``state``)."""
        jobs: dict[str, Any] = {}
        for c in self.job_columns:
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
        nan = math.nan
        for c in self.round_columns:
            values: Any = [row.get(c, nan) for row in self._rounds]
            tail = self._tail.get(c, np.full(self._n_tail, nan))
            if c == "status":
                codes = [ROUND_STATUSES.index(v) for v in values] + _status_codes(tail)
                rounds_cols[c] = pd.Categorical.from_codes(codes, dtype=_round_status_dtype())
            else:
                dtype = np.int64 if c in _INT_COLUMNS else np.float64
                rounds_cols[c] = np.concatenate(
                    [np.asarray(values, dtype=dtype), tail.astype(dtype, copy=False)]
                )
        frame = pd.DataFrame(rounds_cols)
        count_empty_rounds(frame, meta)
        return Results(frame, clients, meta, state)


def count_empty_rounds(rounds: pd.DataFrame, meta: dict[str, Any]) -> None:
    """Set ``meta``'s ``n_rounds`` and ``empty_rounds``; warn when most rounds are empty.

    An empty round applied no update (``n_arrived == 0``). Empty rounds are legitimate (a
    deadline nobody met, an empty cohort), but a run made mostly of them says little about its
    algorithm: more than :data:`EMPTY_SHARE` of them adds a line to ``meta["warnings"]`` (a
    list, created if missing).
    """
    n = len(rounds)
    empty = int((rounds["n_arrived"].to_numpy() == 0).sum()) if n else 0
    meta["n_rounds"] = n
    meta["empty_rounds"] = empty
    warnings = meta.setdefault("warnings", [])
    if empty > EMPTY_SHARE * n:
        warnings.append(
            f"{empty} of {n} rounds were empty (no update applied: nobody selected, or every "
            f"selected job dropped, was late or was cancelled)"
        )


def _status_codes(names: NDArray[Any]) -> list[int]:
    """The codes of round statuses given as an array of names (a ``ValueError`` if unknown)."""
    codes = np.full(names.size, -1, dtype=np.int64)
    for code, name in enumerate(ROUND_STATUSES):
        codes[names == name] = code
    if (codes < 0).any():
        bad = names[codes < 0][0]
        raise ValueError(f"Recorder: round status {bad!r} is not one of {ROUND_STATUSES}")
    out: list[int] = codes.tolist()
    return out


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

    def groups(self) -> Groups:
        """The group names and each device's index into them (see :mod:`simfl.results.groups`).

        Results saved before groups were recorded have one group, ``"all"``.
        """
        n = self.meta.get("n_devices")
        if n is None:
            n = int(self.clients["device"].max()) + 1 if len(self.clients) else 0
        return decode_groups(self.meta.get("groups"), int(n))

    def participation(self, by: str = "group") -> pd.DataFrame:
        """Jobs per group (``by="group"``) or per device (``"device"``) by status.

        Per group: ``group``, ``devices``, ``fleet_share``, ``selected``, ``arrived``,
        ``late``, ``dropped``, ``cancelled``, ``devices_arrived``, ``update_share`` (the
        group's share of the aggregated updates), ``updates_per_device`` and, when the run
        recorded energy, ``energy`` (J). See :func:`simfl.results.groups.participation`.

        Examples
        --------
        >>> # res.participation()[["group", "fleet_share", "update_share"]]
        """
        return participation(self.clients, self.groups(), by=by)

    def group_metrics(self) -> pd.DataFrame:
        """The final model's metrics averaged over each group's evaluated clients.

        One row per group and a last row ``"all"``; empty when the algorithm does not evaluate
        per client (see ``Algorithm.evaluate_clients``).
        """
        return group_metrics(self.meta.get("client_metrics"), self.groups())

    def fairness(self) -> dict[str, float]:
        """Who was left out, in numbers.

        ``jain_devices``
            Jain's index of the aggregated updates per device, over every device of the fleet
            (1: all contributed equally; ``1/n``: one did everything).
        ``jain_groups``
            Jain's index of the aggregated updates per device of each group (group sizes do
            not weigh in).
        ``worst_group_<metric>``
            For every metric evaluated per client, the worst group's mean (the largest for a
            metric to minimise, the smallest for one to maximise; see :meth:`group_metrics`).
        """
        per_device = self.participation("device")["arrived"].to_numpy()
        table = self.participation()
        out = {
            "jain_devices": jain_index(per_device),
            "jain_groups": jain_index(table["updates_per_device"].to_numpy()),
        }
        metrics = self.group_metrics()
        goals = self.meta.get("goals") or {}
        for name in metrics.columns[2:]:
            values = metrics[name].to_numpy()[:-1]  # the groups, not "all"
            if np.isnan(values).all():
                out[f"worst_group_{name}"] = math.nan
                continue
            worst = np.nanmax if goals.get(name, "min") == "min" else np.nanmin
            out[f"worst_group_{name}"] = float(worst(values))
        return out

    @property
    def has_energy(self) -> bool:
        """Whether the run recorded each job's energy (its fleet declared an energy model)."""
        return "energy" in self.clients.columns

    def cumulative_energy(self) -> pd.Series:
        """Joules spent by the jobs ended by each aggregation, one value per row of ``rounds``.

        For synchronous policies this is the energy of every round up to it (idle waits
        included); under asynchronous ones, jobs still running at the aggregation are not yet
        counted (see :func:`simfl.results.groups.energy_until`).

        Raises
        ------
        ValueError
            If the run recorded no energy.
        """
        spent = energy_until(self.clients, self.rounds["time"].to_numpy())
        return pd.Series(spent, index=self.rounds.index, name="energy")

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
        server = self.meta.get("server")
        if server:  # the server's own costs (simfl.Server)
            lines.append(
                f"server     {server['messages_sent']} sent, {server['messages_received']} "
                f"received ({server['message_seconds']:.6g} s handling, "
                f"{server['queue_seconds']:.6g} s queued), {server['aggregations']} "
                f"aggregations ({server['aggregation_seconds']:.6g} s)"
            )
        lines += self._who_took_part()
        if self.meta.get("error"):
            lines.append("error      " + str(self.meta["error"]).strip().splitlines()[-1])
        lines += [f"warning    {w}" for w in self.meta.get("warnings") or []]
        return "\n".join(lines)

    def _who_took_part(self) -> list[str]:
        """The summary's lines on groups, fairness and energy."""
        if self.clients.empty:
            return []
        table = self.participation()
        lines = []
        if len(table) > 1:
            rows = zip(table["group"], table["fleet_share"], table["update_share"], strict=True)
            lines.append(
                "groups     "
                + "  ".join(
                    f"{name} {100 * float(fleet):.3g}% of devices, "
                    f"{100 * float(updates):.3g}% of updates"
                    for name, fleet, updates in rows
                )
            )
        fair = self.fairness()
        text = f"Jain's index of updates: {fair['jain_devices']:.3g} over devices"
        if len(table) > 1:
            text += f", {fair['jain_groups']:.3g} over groups"
        worst = [f"{k[12:]} {v:.4g}" for k, v in fair.items() if k.startswith("worst_group_")]
        if worst and len(table) > 1:
            text += "; worst group " + ", ".join(worst)
        lines.append("fairness   " + text)
        if self.has_energy:
            total = float(self.clients["energy"].sum())
            parts = [
                f"{p} {100 * float(self.clients['energy_' + p].sum()) / total:.3g}%"
                for p in ("compute", "transfer", "idle")
                if total > 0
            ]
            lines.append(f"energy     {total:.4g} J" + (f" ({', '.join(parts)})" if parts else ""))
        return lines

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
        return cls.from_tables(frames["rounds"], frames["clients"], meta)

    @classmethod
    def from_tables(
        cls, rounds: pd.DataFrame, clients: pd.DataFrame, meta: dict[str, Any]
    ) -> Results:
        """Results from the tables and metadata of a saved folder, read and checked elsewhere.

        ``status`` columns get back their categories (which Parquet drops from an empty
        column), as in :meth:`load`.
        """
        rounds = _with_status_dtype(rounds, _round_status_dtype())
        clients = _with_status_dtype(clients, _job_status_dtype())
        return cls(rounds, clients, meta)


def _with_status_dtype(frame: pd.DataFrame, dtype: pd.CategoricalDtype) -> pd.DataFrame:
    """Give ``status`` its categories back (Parquet drops those of an empty column)."""
    if "status" in frame and frame["status"].dtype != dtype:
        status = frame["status"]
        if status.isin(dtype.categories).all():
            frame["status"] = status.astype(dtype)
    return frame
