"""Fleets fitted from measured job durations: maximum likelihood, a criterion, a report.

:func:`fit_fleet` reads a log of jobs (one row per job: which device ran it and how long its
stages took) and returns a :class:`FleetFit`: a :class:`~simfl.Fleet` with one device per
observed device id, whose compute time per unit of work is *redrawn for every job* from the
distribution fitted to that device's (or its group's) jobs, whose links reproduce its measured
transfers and whose dropout hazard is the measured one; and the report of every fit.

The log
-------
A :class:`pandas.DataFrame` (a CSV read with :func:`pandas.read_csv`, a trace, or simfl's own
``Results.clients``; a :class:`simfl.results.Results` itself is taken too, its device groups as
the ``group`` column), with the columns (``columns=`` renames others to these names first):

``device`` (required)
    The device's id: any values that sort (ints, strings). The fitted fleet's device ``i`` is
    the ``i``-th id in sorted order (:attr:`FleetFit.devices`).
``compute`` (required)
    Seconds the job spent computing (>= 0).
``work`` (optional)
    Units of work the job was given (>= 0). With it, the fitted distribution is of seconds per
    unit of work, ``compute / work`` (how a fleet describes compute); rows with ``work == 0``
    say nothing about speed and are left out of the compute fit. Without it, each job counts
    as one unit (seconds per job).
``download``, ``upload`` (optional, both or neither)
    Seconds spent in each transfer (>= 0).
``bytes_down``, ``bytes_up`` (optional, both or neither)
    Bytes each transfer moved (>= 0).
``status`` (optional)
    ``"arrived"``, ``"late"``, ``"dropped"`` or ``"cancelled"`` (:data:`simfl.outcome.STATUSES`).
    Durations are fitted from arrived jobs only; the others were cut short (see below).
``group`` (optional)
    A label per device (one per device): ``by="group"`` fits one distribution per group, and
    ``by="device"`` falls back to the group's pooled fit for devices with too few jobs.

A missing required column, a column of the wrong kind or a negative, NaN or infinite duration
raises a ``ValueError`` naming the column (and the row); only a job that did not arrive may
have NaN durations (a real system may not see how far a cut-short job got: the twin's rows
leave them NaN), and such a job is then left out of the dropout hazard, failure and busy
seconds both (missing data).

Compute: families, criterion, goodness of fit
---------------------------------------------
Each device's (``by="device"``) or group's (``by="group"`` or another column) compute times
per unit are fitted by maximum likelihood in every family of ``families`` (by default the
parametric families of :mod:`simfl.dists`), all in closed form:

===================== ========================================= ===========================
simfl family          maximum-likelihood estimate                scipy.stats equivalent
===================== ========================================= ===========================
Exponential(mean)     mean = sample mean                         ``expon(scale=mean)``
ShiftedExponential    shift = min, scale = mean - min            ``expon(loc=shift, scale)``
LogNormal(mu, sigma)  mean and (1/n) std of ``log x``            ``lognorm(sigma, scale=e^mu)``
Pareto(shape, scale)  scale = min, shape = n / sum log(x/scale)  ``pareto(shape, scale=scale)``
Uniform(low, high)    low = min, high = max                      ``uniform(low, high - low)``
===================== ========================================= ===========================

(these are what :meth:`scipy.stats.rv_continuous.fit` returns with the location fixed at 0
for the families that have none). The log-likelihood is the scipy distribution's ``logpdf``
summed over the sample; ``AIC = 2k - 2 loglik`` and ``BIC = k ln n - 2 loglik`` (``k`` the
number of parameters), and the family with the smallest ``criterion`` is chosen (the first
listed on a tie). A family that cannot describe the sample is skipped, with the reason in
:attr:`FleetFit.candidates` (log-normal and Pareto need positive times; two-parameter
families need two distinct values; a fit whose draws would not stay finite in simfl). A
sample whose values are all equal (to 1e-12 relative) is a :class:`~simfl.dists.Constant`.

Goodness of fit is the Kolmogorov-Smirnov statistic of the chosen distribution against its
sample, with its p-value (:func:`scipy.stats.kstest`). The p-value is *optimistic*: the
parameters were estimated from the same sample, which pulls the distribution towards it (a
Lilliefors-type correction would lower it), so a small p-value is evidence against the family
but a large one is weaker evidence for it than the number says. Likewise the families whose
support starts at a fitted bound (shifted exponential, Pareto, uniform) are not regular models,
for which AIC and BIC are only a guide. On exponential data AIC picks the shifted exponential
about ``e^-1`` = 37% of the time (twice its log-likelihood gain is about an Exp(1) variable
against a penalty of 2; the fitted shift is then close to 0, so the two nearly coincide), BIC
about ``1/sqrt(n)`` of the time.

Too few jobs
------------
A device or group with fewer than ``min_jobs`` jobs to fit (default :data:`MIN_JOBS` = 10:
the mean of ``n`` exponential durations has a relative standard error of ``1/sqrt(n)``, 32% at
10, and on fewer points the criterion cannot tell the families apart) is not fitted on its
own. It falls back, in this order, to the fit pooled over its group's jobs (``by="device"``
with a ``group`` column, the group having ``min_jobs`` jobs: ``fallback="group"``), to the fit
pooled over every job (``"pooled"``), or, when even that is too few, to a
:class:`~simfl.dists.Constant` at its own mean (``"constant"``; the mean of all jobs for a
device with none). The report marks these rows ``too_few`` and names the fallback, and a
:class:`FitWarning` says how many there were. No distribution is ever fitted to fewer than
``min_jobs`` points.

Links and dropouts
------------------
simfl's transfer takes ``latency + bytes / bandwidth`` seconds, with one latency per device
for both directions and a bandwidth per direction. Each device's arrived jobs give the model
``download = L + bytes_down / B_down`` and ``upload = L + bytes_up / B_up``, fitted jointly by
non-negative least squares (``L, 1/B_down, 1/B_up >= 0``; :func:`scipy.optimize.nnls`):

* when the byte counts vary (in at least one direction), latency and bandwidths are all fitted
  (``link_fit="latency+bandwidth"``);
* with one payload size per direction, latency and bandwidth cannot be told apart: the latency
  is set to 0 and each direction's mean time goes into its bandwidth (``"bandwidth"``), which
  reproduces the measured times for payloads of the measured sizes and scales them with the
  payload otherwise; a direction that moved no bytes gets an infinite bandwidth and its time
  in the latency (``"latency"``);
* without byte counts a transfer's time is taken as independent of its size: the latency is
  the mean of all download and upload times, the bandwidths infinite (``"no bytes"``);
* without transfer columns the links are free (``"none"``).

The dropout hazard (failures per busy second) is the maximum-likelihood estimate of a constant
hazard, ``dropped jobs / busy seconds`` summed over all the device's jobs (arrived, late and
cancelled jobs survived their busy time; a dropped one failed at its end). Jobs ended by the
device going offline (a fleet with availability, ``offline="abort"``) are recorded as dropped
too and count as failures here. Links and dropout rates of devices with fewer than
``min_jobs`` jobs are pooled over all devices, as compute is.

Cut-short jobs
--------------
Late, cancelled and dropped jobs stopped before they finished: their durations are lower
bounds, not measurements, and are left out of the compute and link fits. Where a deadline or
dropouts cut the slow jobs, the remaining (arrived) jobs are the faster ones and the fitted
times lean fast; :class:`FitWarning` says how many jobs were left out (``n_excluded`` in the
report). Fit from runs where jobs finish (wait-all, or asynchronous policies without a
staleness limit) to avoid the bias.

The fitted fleet
----------------
``redraw="round"``: every job draws a fresh compute time from its device's fitted
distribution (synchronous rounds: one draw per device per round; asynchronous policies: one per
job), as the measured jobs did; scales are 1. With ``by="device"`` each device has its own
distribution (the fleet's ``group_names`` are the device ids as strings) and the ``group``
column, if any, gives the fleet's group labels for per-group results; with ``by="group"`` the
devices of a group share its distribution.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray
from scipy import optimize, stats

from simfl._checks import check_choice, check_int, check_str
from simfl.dists import (
    Constant,
    Dist,
    Exponential,
    LogNormal,
    Pareto,
    ShiftedExponential,
    Uniform,
)
from simfl.fleet.devices import Fleet
from simfl.outcome import STATUSES

__all__ = [
    "CRITERIA",
    "FAMILIES",
    "MIN_JOBS",
    "DistFit",
    "FitWarning",
    "FleetFit",
    "fit_dist",
    "fit_fleet",
]

FloatArray = NDArray[np.float64]

#: The parametric families of :mod:`simfl.dists` that :func:`fit_fleet` fits by default.
FAMILIES: tuple[type[Dist], ...] = (Exponential, ShiftedExponential, LogNormal, Pareto, Uniform)
#: The information criteria that choose a family.
CRITERIA = ("aic", "bic")
#: The default least number of jobs a device or group needs for a fit of its own.
MIN_JOBS = 10
#: Values within this relative spread of each other count as one value (a constant sample).
_CONSTANT_RTOL = 1e-12
_CANDIDATE_COLUMNS = ("family", "params", "k", "loglik", "aic", "bic", "ks_stat", "ks_p")


class FitWarning(UserWarning):
    """Something about the data that limits a fit: too few jobs, or jobs cut short."""


class _SkipError(Exception):
    """A family that cannot describe the sample (the message says why)."""


@dataclass(frozen=True, eq=False)
class DistFit:
    """The distribution chosen for one sample, and every family tried.

    Attributes
    ----------
    dist
        The chosen simfl distribution (:class:`~simfl.dists.Constant` for a constant sample).
    n
        Sample size.
    candidates
        One row per family tried: ``family``, ``params`` (the simfl constructor's keywords),
        ``k`` (parameters), ``loglik``, ``aic``, ``bic``, ``ks_stat``, ``ks_p``, ``chosen``
        and ``note`` (why a family was skipped; its numbers are then NaN).
    """

    dist: Dist
    n: int
    candidates: pd.DataFrame

    @property
    def chosen(self) -> pd.Series:
        """The candidates row of the chosen family (NaN statistics for a constant sample)."""
        rows = self.candidates[self.candidates["chosen"]]
        return rows.iloc[0]


@dataclass(frozen=True, eq=False)
class FleetFit:
    """A fleet fitted from measured jobs, and how well each part fits (see :mod:`.fit`).

    Attributes
    ----------
    fleet
        The fitted fleet: device ``i`` is ``devices[i]``; compute redrawn every job
        (``redraw="round"``) from the fitted distribution, fitted links and dropout hazards.
    devices
        The observed device ids in sorted order (the fleet's device order).
    report
        One row per device (``by="device"``) or group: the id (column named after ``by``),
        ``n`` (jobs fitted), ``n_excluded`` (jobs cut short, left out), ``family``,
        ``params``, ``mean`` (of the distribution used), ``loglik``, ``aic``, ``bic``,
        ``ks_stat``, ``ks_p`` (NaN for rows that fell back), ``too_few`` and ``fallback``
        (``""``, ``"group"``, ``"pooled"`` or ``"constant"``).
    candidates
        Every family tried for every row of the report (see :class:`DistFit`), the row's id
        first.
    links
        One row per device: ``device``, ``n`` (arrived jobs with transfers), ``latency``,
        ``bandwidth_down``, ``bandwidth_up``, ``link_fit`` (how, see the module docstring),
        ``rmse`` (seconds, of the fitted transfer times), ``n_jobs``, ``n_dropped``,
        ``busy_seconds``, ``dropout_rate``, ``too_few`` and ``fallback`` (``""`` or
        ``"pooled"``).
    by, criterion, min_jobs
        The settings of the fit.
    """

    fleet: Fleet
    devices: tuple[Any, ...]
    report: pd.DataFrame
    candidates: pd.DataFrame
    links: pd.DataFrame
    by: str
    criterion: str
    min_jobs: int


# ----------------------------------------------------------------- one sample
def _mle(family: type[Dist], x: FloatArray) -> tuple[Dist, Any, dict[str, float]]:
    """Closed-form maximum-likelihood fit of ``family``: the simfl and scipy distributions."""
    lo, mean = float(x.min()), float(x.mean())
    if family is Exponential:
        if mean <= 0.0:
            raise _SkipError("needs a positive mean")
        return Exponential(mean), stats.expon(scale=mean), {"mean": mean}
    if family is ShiftedExponential:
        scale = mean - lo
        if not scale > 0.0:
            raise _SkipError("needs two distinct values")
        return (
            ShiftedExponential(shift=lo, scale=scale),
            stats.expon(loc=lo, scale=scale),
            {"shift": lo, "scale": scale},
        )
    if family is Uniform:
        hi = float(x.max())
        if not hi > lo:
            raise _SkipError("needs two distinct values")
        return Uniform(lo, hi), stats.uniform(loc=lo, scale=hi - lo), {"low": lo, "high": hi}
    if lo <= 0.0:
        raise _SkipError("needs positive values")
    logs = np.log(x)
    if family is LogNormal:
        mu = float(logs.mean())
        sigma = float(np.sqrt(np.mean((logs - mu) ** 2)))
        if not sigma > 0.0:
            raise _SkipError("needs two distinct values")
        return (
            LogNormal(mu=mu, sigma=sigma),
            stats.lognorm(s=sigma, scale=math.exp(mu)),
            {"mu": mu, "sigma": sigma},
        )
    if family is Pareto:
        total = float(np.sum(logs - math.log(lo)))
        if not total > 0.0:
            raise _SkipError("needs two distinct values")
        shape = x.size / total
        return (
            Pareto(shape=shape, scale=lo),
            stats.pareto(b=shape, scale=lo),
            {"shape": shape, "scale": lo},
        )
    raise _SkipError(f"is not a family fit_fleet knows ({family!r})")  # refused by _check_families


def _candidate(family: type[Dist], x: FloatArray) -> tuple[Dist | None, dict[str, Any]]:
    """One family fitted to ``x``: its simfl distribution (``None`` if skipped) and its row."""
    n = x.size
    row: dict[str, Any] = {"family": family.__name__, "params": {}, "k": 0}
    row.update(dict.fromkeys(_CANDIDATE_COLUMNS[3:], math.nan))
    try:
        dist, frozen, params = _mle(family, x)
    except _SkipError as why:
        return None, {**row, "note": f"skipped: {why}"}
    except ValueError as exc:  # simfl refuses the parameters (draws would not stay finite)
        return None, {**row, "note": f"skipped: {exc}"}
    k = len(params)
    loglik = float(np.sum(frozen.logpdf(x)))
    if not math.isfinite(loglik):
        return None, {**row, "params": params, "k": k, "note": "skipped: infinite likelihood"}
    ks = stats.kstest(x, frozen.cdf)
    row.update(
        params=params,
        k=k,
        loglik=loglik,
        aic=2.0 * k - 2.0 * loglik,
        bic=k * math.log(n) - 2.0 * loglik,
        ks_stat=float(ks.statistic),
        ks_p=float(ks.pvalue),
        note="",
    )
    return dist, row


def _check_families(families: object) -> tuple[type[Dist], ...]:
    field = "fit_fleet families"
    if not isinstance(families, (list, tuple)):
        raise ValueError(
            f"{field} must be a list or tuple of simfl.dists classes, got {families!r:.60}"
        )
    if not families:
        raise ValueError(f"{field} must name at least one family, got none")
    names = ", ".join(f.__name__ for f in FAMILIES)
    for i, fam in enumerate(families):
        if fam not in FAMILIES:
            raise ValueError(f"{field}[{i}] must be one of simfl.dists' {names}; got {fam!r:.60}")
    return tuple(families)


def fit_dist(
    samples: Any,
    *,
    families: Sequence[type[Dist]] = FAMILIES,
    criterion: str = "aic",
) -> DistFit:
    """Fit every family to ``samples`` by maximum likelihood and choose one by ``criterion``.

    Parameters
    ----------
    samples
        Non-negative, finite durations (at least one).
    families
        simfl distribution classes among :data:`FAMILIES`.
    criterion
        ``"aic"`` or ``"bic"`` (see :mod:`simfl.fleet.fit`).

    Returns
    -------
    DistFit
        The chosen distribution and every candidate. A constant sample gives a
        :class:`~simfl.dists.Constant`; a sample no family can describe (e.g. only
        log-normal asked for and a zero among the values) the constant at its mean, with the
        reasons in the candidates.

    Examples
    --------
    >>> import numpy as np
    >>> from simfl import dists
    >>> x = dists.Exponential(2.0).sample(np.random.default_rng(0), 5000)
    >>> fit = fit_dist(x, criterion="bic")
    >>> type(fit.dist).__name__, round(fit.dist.mean, 1)
    ('Exponential', 2.0)
    """
    fams = _check_families(families)
    crit = check_choice("fit_fleet criterion", criterion, CRITERIA)
    x = np.asarray(samples, dtype=np.float64).reshape(-1)
    if x.size == 0 or not np.isfinite(x).all() or (x < 0).any():
        raise ValueError("fit_dist samples must be at least one finite, non-negative number")
    lo, hi = float(x.min()), float(x.max())
    if hi - lo <= _CONSTANT_RTOL * hi:
        value = float(x.mean())
        row = {"family": "Constant", "params": {"value": value}, "k": 1}
        row.update(dict.fromkeys(_CANDIDATE_COLUMNS[3:], math.nan))
        row.update(ks_stat=0.0, chosen=True, note="all values equal")
        return DistFit(Constant(value), int(x.size), pd.DataFrame([row]))
    fitted: list[tuple[Dist | None, dict[str, Any]]] = [_candidate(f, x) for f in fams]
    scores = [row[crit] if dist is not None else math.inf for dist, row in fitted]
    rows = [dict(row, chosen=False) for _, row in fitted]
    best = int(np.argmin(scores))
    chosen = fitted[best][0]
    if chosen is None:  # every family skipped
        value = float(x.mean())
        row = {"family": "Constant", "params": {"value": value}, "k": 1}
        row.update(dict.fromkeys(_CANDIDATE_COLUMNS[3:], math.nan))
        row.update(chosen=True, note="no family fits: the constant at the mean")
        return DistFit(Constant(value), int(x.size), pd.DataFrame([*rows, row]))
    rows[best]["chosen"] = True
    return DistFit(chosen, int(x.size), pd.DataFrame(rows))


# ----------------------------------------------------------------- the log
def _numeric(
    frame: pd.DataFrame, name: str, unknown: NDArray[np.bool_] | None = None
) -> FloatArray:
    """Column ``name`` as floats, all finite and >= 0 (NaN allowed in the rows ``unknown``)."""
    col = frame[name]
    if not (pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col)):
        raise ValueError(f"fit_fleet jobs column {name!r} must hold numbers, got dtype {col.dtype}")
    values = col.to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isfinite(values) | (values < 0)
    if unknown is not None:
        bad &= ~(unknown & np.isnan(values))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"fit_fleet jobs column {name!r} must be finite and >= 0; row {i} (index "
            f"{frame.index[i]!r}) has {values[i]!r}"
        )
    return values


def _table(jobs: Any, columns: Mapping[str, str] | None) -> pd.DataFrame:
    """The log as a DataFrame with simfl's column names (a Results gives its groups too)."""
    frame = getattr(jobs, "clients", None)
    if isinstance(frame, pd.DataFrame) and callable(getattr(jobs, "groups", None)):
        frame = frame.copy()
        if "group" not in frame and len(frame):
            names, index = jobs.groups()
            devices = frame["device"].to_numpy(dtype=np.int64)
            frame["group"] = np.asarray(names, dtype=object)[index[devices]]
    elif isinstance(jobs, pd.DataFrame):
        frame = jobs
    else:
        raise ValueError(
            f"fit_fleet jobs must be a pandas DataFrame (one row per job) or a simfl Results, "
            f"got {type(jobs).__name__}"
        )
    if columns is not None:
        if not isinstance(columns, Mapping):
            raise ValueError(
                f"fit_fleet columns must be a mapping of the log's names to fit_fleet's, got "
                f"{columns!r:.60}"
            )
        for old in columns:
            if old not in frame.columns:
                raise ValueError(
                    f"fit_fleet columns renames {old!r}, which the jobs do not have (columns: "
                    f"{list(frame.columns)})"
                )
        frame = frame.rename(columns=dict(columns))
    if frame.columns.duplicated().any():
        dup = list(frame.columns[frame.columns.duplicated()])
        raise ValueError(f"fit_fleet jobs have duplicated columns {dup} (after renaming)")
    for name, what in (
        ("device", "the device id of each job"),
        ("compute", "seconds each job computed"),
    ):
        if name not in frame.columns:
            raise ValueError(
                f"fit_fleet jobs need a {name!r} column ({what}); columns are "
                f"{list(frame.columns)} (rename with columns={{...: {name!r}}})"
            )
    for a, b in (("download", "upload"), ("bytes_down", "bytes_up")):
        if (a in frame.columns) != (b in frame.columns):
            have, lack = (a, b) if a in frame.columns else (b, a)
            raise ValueError(f"fit_fleet jobs have a {have!r} column but no {lack!r} column")
    if len(frame) == 0:
        raise ValueError("fit_fleet jobs must hold at least one job, got an empty table")
    return frame


def _devices(frame: pd.DataFrame) -> tuple[tuple[Any, ...], NDArray[np.int64]]:
    """The sorted device ids and each row's index into them."""
    ids = frame["device"]
    if ids.isna().any():
        i = int(np.flatnonzero(ids.isna().to_numpy())[0])
        raise ValueError(f"fit_fleet jobs column 'device' has a missing id in row {i}")
    unique = [u.item() if isinstance(u, np.generic) else u for u in pd.unique(ids.to_numpy())]
    try:
        order = sorted(unique)
    except TypeError as exc:
        raise ValueError(
            f"fit_fleet jobs column 'device' must hold ids that sort (all ints or all strings), "
            f"got {sorted({type(u).__name__ for u in unique})}"
        ) from exc
    index = pd.Index(order, dtype=object).get_indexer(ids.to_numpy(dtype=object))
    return tuple(order), np.asarray(index, dtype=np.int64)


def _labels(
    frame: pd.DataFrame, name: str, row_device: NDArray[np.int64], devices: Sequence[Any]
) -> list[Any]:
    """The single value of column ``name`` of each device (an error if a device has two)."""
    missing = pd.isna(frame[name]).to_numpy()
    if missing.any():
        i = int(np.flatnonzero(missing)[0])
        raise ValueError(f"fit_fleet jobs column {name!r} has a missing value in row {i}")
    values = pd.Series(frame[name].to_numpy(dtype=object), index=row_device)
    per_device = values.groupby(level=0)
    counts = per_device.nunique()
    if (counts > 1).any():
        d = int(counts.index[np.flatnonzero(counts.to_numpy() > 1)[0]])
        seen = sorted(map(repr, values.loc[[d]].unique()))
        raise ValueError(
            f"fit_fleet jobs column {name!r} must hold one value per device; device "
            f"{devices[d]!r} has {', '.join(seen)}"
        )
    first = per_device.first()
    return [v.item() if isinstance(v, np.generic) else v for v in first.to_numpy()]


def _sort_units(values: Sequence[Any], name: str) -> list[Any]:
    try:
        return sorted(set(values))
    except TypeError as exc:
        raise ValueError(
            f"fit_fleet jobs column {name!r} must hold values that sort (all ints or all strings)"
        ) from exc


# ----------------------------------------------------------------- links and dropouts
def _link_fit(
    t_down: FloatArray, t_up: FloatArray, b_down: FloatArray | None, b_up: FloatArray | None
) -> tuple[float, float, float, str, float]:
    """latency, bandwidth_down, bandwidth_up, how, rmse of ``t = L + bytes / B`` per direction."""
    times = np.concatenate([t_down, t_up])
    if times.size == 0:
        return 0.0, math.inf, math.inf, "none", math.nan
    if b_down is None or b_up is None:
        latency = float(times.mean())
        return (
            latency,
            math.inf,
            math.inf,
            "no bytes",
            float(np.sqrt(np.mean((times - latency) ** 2))),
        )
    nd, nu = t_down.size, t_up.size
    columns = {
        "latency": np.ones(nd + nu),
        "down": np.concatenate([b_down, np.zeros(nu)]),
        "up": np.concatenate([np.zeros(nd), b_up]),
    }
    used = [c for c, v in columns.items() if v.any()]
    scale = {c: float(np.abs(columns[c]).max()) for c in used}

    def design(names: list[str]) -> FloatArray:
        return np.stack([columns[c] / scale[c] for c in names], axis=1)

    if np.linalg.matrix_rank(design(used)) < len(used):  # one size per direction
        used = [c for c in used if c != "latency"]
    coef = dict.fromkeys(columns, 0.0)
    solution, _ = optimize.nnls(design(used), times)
    for c, v in zip(used, solution.tolist(), strict=True):
        coef[c] = v / scale[c]
    fitted = sum((coef[c] * columns[c] for c in used), np.zeros(nd + nu))
    rmse = float(np.sqrt(np.mean((times - fitted) ** 2)))
    how = (
        "latency+bandwidth"
        if "latency" in used and len(used) > 1
        else ("latency" if used == ["latency"] else "bandwidth")
    )

    def bandwidth(slope: float) -> float:
        return 1.0 / slope if slope > 0.0 else math.inf

    return coef["latency"], bandwidth(coef["down"]), bandwidth(coef["up"]), how, rmse


# ----------------------------------------------------------------- the fleet
def fit_fleet(
    jobs: Any,
    *,
    by: str = "device",
    families: Sequence[type[Dist]] = FAMILIES,
    criterion: str = "aic",
    min_jobs: int = MIN_JOBS,
    columns: Mapping[str, str] | None = None,
) -> FleetFit:
    """A fleet fitted from a log of measured jobs (see :mod:`simfl.fleet.fit`).

    Parameters
    ----------
    jobs
        One row per job: a DataFrame with the columns of the module docstring (``device``,
        ``compute``; optionally ``work``, ``download``/``upload``, ``bytes_down``/``bytes_up``,
        ``status``, ``group``), e.g. ``Results.clients``, or a :class:`simfl.results.Results`.
    by
        ``"device"`` (one distribution per device), ``"group"`` (per value of the ``group``
        column) or the name of another column holding one value per device.
    families
        The simfl distribution classes to try, among :data:`FAMILIES` (the default: all).
    criterion
        ``"aic"`` or ``"bic"``: the information criterion that chooses the family.
    min_jobs
        The least number of jobs for a fit of its own (>= 3; see "Too few jobs").
    columns
        Renames the log's columns to these names first, e.g. ``{"client_id": "device"}``.

    Returns
    -------
    FleetFit
        The fitted fleet (device ``i`` is ``devices[i]``), the report of every fit, the
        candidates and the links.

    Raises
    ------
    ValueError
        On a missing or malformed column (named), an unknown family or criterion, or
        ``min_jobs < 3``, before anything is fitted.

    Warns
    -----
    FitWarning
        When rows had too few jobs (their fallback is in the report), or jobs that did not
        arrive were left out.

    Examples
    --------
    >>> import pandas as pd
    >>> jobs = pd.DataFrame({"device": ["a"] * 3 + ["b"] * 3, "compute": [1, 2, 3, 2, 4, 6]})
    >>> from simfl import dists
    >>> fit = fit_fleet(jobs, min_jobs=3, families=[dists.Uniform])
    >>> fit.devices, fit.fleet.mean_compute.tolist()
    (('a', 'b'), [2.0, 4.0])
    """
    fams = _check_families(families)
    crit = check_choice("fit_fleet criterion", criterion, CRITERIA)
    min_jobs = check_int("fit_fleet min_jobs", min_jobs, low=3)
    by = check_str("fit_fleet by", by, empty=False)
    frame = _table(jobs, columns)
    if by != "device" and by not in frame.columns:
        raise ValueError(
            f"fit_fleet by={by!r} needs a {by!r} column in the jobs (one value per device); "
            f"columns are {list(frame.columns)}"
        )
    if "status" in frame.columns:
        status = frame["status"].astype(object).to_numpy()
        known = np.isin(status, np.array(STATUSES, dtype=object))
        if not known.all():
            i = int(np.flatnonzero(~known)[0])
            raise ValueError(
                f"fit_fleet jobs column 'status' must hold {list(STATUSES)}; row {i} has "
                f"{status[i]!r}"
            )
        arrived = status == "arrived"
        dropped = status == "dropped"
    else:
        arrived = np.ones(len(frame), dtype=bool)
        dropped = np.zeros(len(frame), dtype=bool)
    cut = ~arrived  # how long a cut-short job ran may be unknown (NaN)
    compute = _numeric(frame, "compute", cut)
    work = _numeric(frame, "work") if "work" in frame.columns else np.ones(len(frame))
    has_links = "download" in frame.columns
    has_bytes = "bytes_down" in frame.columns
    t_down = _numeric(frame, "download", cut) if has_links else np.zeros(len(frame))
    t_up = _numeric(frame, "upload", cut) if has_links else np.zeros(len(frame))
    b_down = _numeric(frame, "bytes_down", cut) if has_bytes else None
    b_up = _numeric(frame, "bytes_up", cut) if has_bytes else None
    devices, row_device = _devices(frame)
    n_dev = len(devices)
    groups = _labels(frame, "group", row_device, devices) if "group" in frame.columns else None
    unit_of = list(range(n_dev)) if by == "device" else _labels(frame, by, row_device, devices)
    speed_rows = arrived & (work > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        per_unit = np.where(speed_rows, compute / np.where(work > 0, work, 1.0), np.nan)

    # ---- compute fits, one per unit (device or label)
    units: list[Any] = list(devices) if by == "device" else _sort_units(unit_of, by)
    unit_index = {u: i for i, u in enumerate(units)}
    device_unit = np.array(
        [unit_index[devices[d] if by == "device" else unit_of[d]] for d in range(n_dev)],
        dtype=np.int64,
    )
    row_unit = device_unit[row_device]
    pooled_cache: dict[Hashable, DistFit] = {}

    def pooled(key: Hashable, mask: NDArray[np.bool_]) -> DistFit:
        if key not in pooled_cache:
            pooled_cache[key] = fit_dist(per_unit[mask], families=fams, criterion=crit)
        return pooled_cache[key]

    if not speed_rows.any():
        raise ValueError(
            "fit_fleet jobs hold no arrived job with work > 0: there is no compute time to fit"
        )
    all_fit = speed_rows.sum() >= min_jobs
    dev_group = np.array(groups, dtype=object) if by == "device" and groups is not None else None
    report_rows: list[dict[str, Any]] = []
    candidate_frames: list[pd.DataFrame] = []
    unit_dists: list[Dist] = []
    for u, unit in enumerate(units):
        rows = row_unit == u
        mask = rows & speed_rows
        n = int(mask.sum())
        n_excluded = int((rows & ~arrived).sum())
        row: dict[str, Any] = {by: unit, "n": n, "n_excluded": n_excluded}
        if by == "device" and groups is not None:
            row["group"] = groups[u]
        if n >= min_jobs:
            fit = fit_dist(per_unit[mask], families=fams, criterion=crit)
            chosen = fit.chosen
            row.update({c: chosen[c] for c in ("family", "params", *_CANDIDATE_COLUMNS[3:])})
            row.update(too_few=False, fallback="")
            candidate_frames.append(fit.candidates.assign(**{by: unit}))
            dist = fit.dist
        else:
            group_mask = None
            if dev_group is not None:
                group_mask = (dev_group[row_device] == dev_group[u]) & speed_rows
            if dev_group is not None and group_mask is not None and group_mask.sum() >= min_jobs:
                dist, fallback = pooled(("group", dev_group[u]), group_mask).dist, "group"
            elif all_fit:
                dist, fallback = pooled("all", speed_rows).dist, "pooled"
            else:  # the constant at its own mean, or at the mean of all jobs without any
                dist = Constant(float(per_unit[mask if n else speed_rows].mean()))
                fallback = "constant"
            row.update(family=type(dist).__name__, params=_params(dist))
            row.update(dict.fromkeys(_CANDIDATE_COLUMNS[3:], math.nan))
            row.update(too_few=True, fallback=fallback)
        row["mean"] = dist.mean
        unit_dists.append(dist)
        report_rows.append(row)
    report = pd.DataFrame(report_rows)
    first = [by, "group"] if by == "device" and groups is not None else [by]
    stats_columns = _CANDIDATE_COLUMNS[3:]
    report = report[
        [
            *first,
            "n",
            "n_excluded",
            "family",
            "params",
            "mean",
            *stats_columns,
            "too_few",
            "fallback",
        ]
    ]
    candidates = (
        pd.concat(candidate_frames, ignore_index=True)
        if candidate_frames
        else pd.DataFrame(columns=[*_CANDIDATE_COLUMNS, "chosen", "note"])
    )
    if by in candidates:
        candidates = candidates[[by, *(c for c in candidates if c != by)]]

    # ---- links and dropouts, one per device
    links = _links(
        row_device,
        n_dev,
        arrived,
        dropped,
        compute,
        t_down,
        t_up,
        b_down,
        b_up,
        has_links=has_links,
        min_jobs=min_jobs,
    )
    links.insert(0, "device", list(devices))

    # ---- warnings
    too_few = int(report["too_few"].sum())
    if too_few:
        what = "devices" if by == "device" else f"{by} values"
        counts = report.loc[report["too_few"], "fallback"].value_counts().to_dict()
        warnings.warn(
            f"fit_fleet: {too_few} of {len(report)} {what} have fewer than min_jobs={min_jobs} "
            f"jobs to fit (too few); they use a fallback instead of a fit of their own "
            f"({', '.join(f'{v} {k}' for k, v in counts.items())}; see FleetFit.report)",
            FitWarning,
            stacklevel=2,
        )
    excluded = int((~arrived).sum())
    if excluded:
        warnings.warn(
            f"fit_fleet: {excluded} of {len(frame)} jobs did not arrive (late, dropped or "
            f"cancelled) and were left out of the duration fits: their times were cut short, "
            f"so where a deadline or dropouts cut the slow jobs the fitted times lean fast",
            FitWarning,
            stacklevel=2,
        )

    # ---- the fleet
    if by == "device":
        dist_index, names = np.arange(n_dev), [str(d) for d in devices]
        labels = ["all"] * n_dev if groups is None else [str(g) for g in groups]
    else:
        dist_index, names, labels = device_unit, [str(u) for u in units], None
    fleet = Fleet(
        unit_dists,
        dist_index,
        bandwidth_down=links["bandwidth_down"].to_numpy(dtype=np.float64),
        bandwidth_up=links["bandwidth_up"].to_numpy(dtype=np.float64),
        latency=links["latency"].to_numpy(dtype=np.float64),
        dropout_rate=links["dropout_rate"].to_numpy(dtype=np.float64),
        redraw="round",
        group_names=names,
        groups=labels,
    )
    return FleetFit(
        fleet=fleet,
        devices=devices,
        report=report,
        candidates=candidates,
        links=links,
        by=by,
        criterion=crit,
        min_jobs=min_jobs,
    )


def _params(dist: Dist) -> dict[str, float]:
    """The constructor keywords of a fitted simfl distribution."""
    if isinstance(dist, Exponential):
        return {"mean": dist.mean}
    return {k: float(v) for k, v in vars(dist).items()}


def _links(
    row_device: NDArray[np.int64],
    n_dev: int,
    arrived: NDArray[np.bool_],
    dropped: NDArray[np.bool_],
    compute: FloatArray,
    t_down: FloatArray,
    t_up: FloatArray,
    b_down: FloatArray | None,
    b_up: FloatArray | None,
    *,
    has_links: bool,
    min_jobs: int,
) -> pd.DataFrame:
    """Per-device link and dropout fits (see the module docstring), pooled when too few."""
    busy = compute + t_down + t_up

    def link(mask: NDArray[np.bool_]) -> tuple[float, float, float, str, float]:
        if not has_links:
            return 0.0, math.inf, math.inf, "none", math.nan
        return _link_fit(
            t_down[mask],
            t_up[mask],
            None if b_down is None else b_down[mask],
            None if b_up is None else b_up[mask],
        )

    known = np.isfinite(busy)

    def hazard(mask: NDArray[np.bool_]) -> tuple[int, float, float]:
        mask = mask & known
        n_drop, seconds = int(dropped[mask].sum()), float(busy[mask].sum())
        return n_drop, seconds, (n_drop / seconds if seconds > 0.0 else 0.0)

    all_link = link(arrived) if arrived.sum() >= min_jobs else None
    all_hazard = hazard(np.ones(row_device.size, dtype=bool))
    rows = []
    for d in range(n_dev):
        mine = row_device == d
        n_link = int((mine & arrived).sum())
        n_jobs = int(mine.sum())
        too_few = n_link < min_jobs or n_jobs < min_jobs
        use_pool = too_few and all_link is not None
        latency, bw_down, bw_up, how, rmse = (
            all_link if use_pool and all_link is not None else link(mine & arrived)
        )
        n_drop, seconds, rate = hazard(mine)
        if use_pool:
            rate = all_hazard[2]
        rows.append(
            {
                "n": n_link,
                "latency": latency,
                "bandwidth_down": bw_down,
                "bandwidth_up": bw_up,
                "link_fit": how,
                "rmse": rmse,
                "n_jobs": n_jobs,
                "n_dropped": n_drop,
                "busy_seconds": seconds,
                "dropout_rate": rate,
                "too_few": too_few,
                "fallback": "pooled" if use_pool else "",
            }
        )
    return pd.DataFrame(rows)
