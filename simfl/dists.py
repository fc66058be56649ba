"""Non-negative time distributions with exact moments and vectorised sampling.

Each distribution knows its mean and variance exactly (so tests can hold the simulator against
queueing theory), its CDF, and its inverse CDF ``ppf``. Sampling is inverse-transform: simfl
feeds ``ppf`` with keyed uniforms from :class:`simfl.rng.Streams`, which makes every draw a
function of (seed, device, round) and nothing else. :meth:`Dist.sample` offers the same with a
plain ``numpy.random.Generator``.

Invalid parameters (negative where not allowed, zero where not allowed, NaN, infinity) raise a
``ValueError`` naming the field at construction.

Finite draws
------------
Durations must stay finite all the way through a run: a job's time is its work times a compute
draw times the device's scale, plus its transfers, and it is added to the clock. So every
distribution checks at construction that

* its *largest draw* -- its ``ppf`` at :data:`simfl.rng.UNIFORM_MAX` = ``1 - 2**-53``, the
  largest uniform any simfl stream produces (``numpy``'s ``Generator.random`` reaches no more), or
  for :class:`Empirical` its largest value -- is at most :data:`MAX_DRAW` = ``1e300``, and
* its :attr:`~Dist.mean` is at most :data:`MAX_DRAW` (unless the mean does not exist at all,
  as for a :class:`Pareto` with ``shape <= 1``: then it is ``inf``),

and raises a ``ValueError`` naming the field, its value and the valid range otherwise.
:class:`simfl.Fleet` applies the same rule to the largest draw times each device's scale.
``MAX_DRAW`` is not tuned to anything: it leaves a factor of about ``1.8e8`` below the largest
float for the work multiplier, the download and upload added to the compute time, and the clock
the job's duration is added to, so sums of durations stay finite in any practical run.

Transfers obey the same bound. A transfer of ``S`` bytes over a link of bandwidth ``B`` and
latency ``L`` takes ``S / B + L`` seconds. A payload is at most :data:`MAX_BYTES` (``2**63 - 1``,
the range of :class:`simfl.network.Payload`), whatever the algorithm and its state, so every
link's bandwidth must be at least :data:`MIN_BANDWIDTH` = ``MAX_BYTES / MAX_DRAW`` (about
``9.2e-282`` bytes/s: any payload crosses it in at most ``MAX_DRAW`` seconds) and its latency
at most ``MAX_DRAW``. The fleet's link columns, :class:`simfl.Profile` and every
:class:`simfl.network.Network` check this at construction (a bound that needs no payload, which
is only known once the run has built the algorithm's state).

:attr:`~Dist.mean` and :attr:`~Dist.var` never raise ``OverflowError``. The variance is
``inf`` where it does not exist (:class:`Pareto` with ``shape <= 2``) or where its exact value
exceeds the float range although the draws are finite (e.g. ``Exponential(1e200)``, whose
variance is ``1e400``); :attr:`~Dist.std` stays exact there for the distributions whose standard
deviation is a simple function of their parameters.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import ndtr, ndtri

from simfl._checks import check_array, check_real
from simfl.rng import UNIFORM_MAX

__all__ = [
    "MAX_BYTES",
    "MAX_DRAW",
    "MIN_BANDWIDTH",
    "Constant",
    "Dist",
    "Empirical",
    "Exponential",
    "LogNormal",
    "Pareto",
    "ShiftedExponential",
    "Uniform",
]

FloatArray = NDArray[np.float64]

#: The largest duration (seconds, or seconds per unit of work) a distribution may draw, and the
#: largest draw times a device's scale a :class:`simfl.Fleet` accepts (see the module docstring).
MAX_DRAW = 1e300
#: The most bytes one transfer carries (the int64 range of a payload).
MAX_BYTES = 2**63 - 1
#: The smallest link bandwidth (bytes/s): :data:`MAX_BYTES` cross it in :data:`MAX_DRAW` s.
MIN_BANDWIDTH = MAX_BYTES / MAX_DRAW
_LOG_MAX_DRAW = math.log(MAX_DRAW)
_LOG_FLOAT_MAX = math.log(np.finfo(np.float64).max)
#: ``-log(1 - UNIFORM_MAX)`` = 53 ln 2: the largest draw of a unit exponential in simfl.
_EXP_TAIL = float(-np.log1p(-UNIFORM_MAX))
#: ``ndtri(UNIFORM_MAX)``: the largest standard normal quantile simfl's uniforms reach.
_NORMAL_TAIL = float(ndtri(UNIFORM_MAX))


def _too_large(field: str, value: float, valid: str, why: str) -> ValueError:
    return ValueError(
        f"{field} must be {valid} so that draws stay finite ({why}; simfl.dists.MAX_DRAW = "
        f"{MAX_DRAW:g}), got {value:g}"
    )


def _square(x: float) -> float:
    """``x**2`` without ``OverflowError`` (``inf`` beyond the float range)."""
    return x * x


class Dist(ABC):
    """A distribution of non-negative durations (seconds, or seconds per unit of work).

    Every distribution that constructs has a :attr:`max_draw` and a :attr:`mean` of at most
    :data:`MAX_DRAW` (see the module docstring), so its draws are finite.
    """

    @property
    @abstractmethod
    def mean(self) -> float:
        """Exact mean (``inf`` where it does not exist)."""

    @property
    @abstractmethod
    def var(self) -> float:
        """Exact variance (``inf`` where it does not exist)."""

    @property
    def std(self) -> float:
        """Standard deviation, the square root of :attr:`var`."""
        return math.sqrt(self.var)

    @abstractmethod
    def ppf(self, u: ArrayLike) -> FloatArray:
        """Inverse CDF: the quantiles at probabilities ``u`` in [0, 1)."""

    @abstractmethod
    def cdf(self, x: ArrayLike) -> FloatArray:
        """Cumulative distribution function at ``x``."""

    def sample(self, rng: np.random.Generator, size: int | tuple[int, ...]) -> FloatArray:
        """Draw ``size`` samples with a numpy Generator (inverse-transform sampling)."""
        return self.ppf(rng.random(size))

    @property
    def max_draw(self) -> float:
        """The largest value simfl can draw: :meth:`ppf` at :data:`simfl.rng.UNIFORM_MAX`.

        At most :data:`MAX_DRAW` for every distribution that constructs.
        """
        with np.errstate(over="ignore"):  # an overflow is inf, which the caller refuses
            return float(self.ppf(np.float64(UNIFORM_MAX)))


def _u(u: ArrayLike) -> FloatArray:
    return np.asarray(u, dtype=np.float64)


@dataclass(frozen=True)
class Constant(Dist):
    """A fixed duration ``value`` >= 0."""

    value: float

    def __post_init__(self) -> None:
        v = check_real("Constant.value", self.value, low=0.0)
        if v > MAX_DRAW:
            raise _too_large(
                "Constant.value", v, f"in [0, {MAX_DRAW:g}]", "the value is every draw"
            )
        object.__setattr__(self, "value", v)

    @property
    def mean(self) -> float:  # noqa: D102
        return self.value

    @property
    def var(self) -> float:  # noqa: D102
        return 0.0

    def ppf(self, u: ArrayLike) -> FloatArray:  # noqa: D102
        return np.full(np.shape(u), self.value)

    def cdf(self, x: ArrayLike) -> FloatArray:  # noqa: D102
        return (np.asarray(x, dtype=np.float64) >= self.value).astype(np.float64)


@dataclass(frozen=True, init=False)
class Exponential(Dist):
    """Exponential distribution with the given ``mean`` > 0 (rate ``1/mean``).

    A frozen dataclass like the other distributions, whose field is ``_mean`` because the
    constructor's parameter shares its name with the :attr:`mean` property.
    """

    _mean: float

    def __init__(self, mean: float) -> None:
        m = check_real("Exponential.mean", mean, low=0.0, low_open=True)
        object.__setattr__(self, "_mean", m)
        if not self.max_draw <= MAX_DRAW:
            raise _too_large(
                "Exponential.mean",
                m,
                f"a positive number <= {MAX_DRAW / _EXP_TAIL:.4g}",
                f"the largest draw is {_EXP_TAIL:.4g} * mean and must be <= MAX_DRAW",
            )

    def __repr__(self) -> str:
        return f"Exponential(mean={self._mean!r})"

    @property
    def rate(self) -> float:
        """The rate ``1/mean``."""
        return 1.0 / self._mean

    @property
    def mean(self) -> float:  # noqa: D102
        return self._mean

    @property
    def var(self) -> float:  # noqa: D102
        return _square(self._mean)

    @property
    def std(self) -> float:  # noqa: D102
        return self._mean

    def ppf(self, u: ArrayLike) -> FloatArray:  # noqa: D102
        return -self._mean * np.log1p(-_u(u))

    def cdf(self, x: ArrayLike) -> FloatArray:  # noqa: D102
        xa = np.asarray(x, dtype=np.float64)
        return np.where(xa > 0, -np.expm1(-np.maximum(xa, 0.0) / self._mean), 0.0)


@dataclass(frozen=True)
class ShiftedExponential(Dist):
    """``shift + Exponential(scale)``: a minimum time plus an exponential tail.

    The usual straggler model of coded-computation papers; the mean is ``shift + scale``.
    """

    shift: float
    scale: float

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "shift", check_real("ShiftedExponential.shift", self.shift, low=0.0)
        )
        object.__setattr__(
            self,
            "scale",
            check_real("ShiftedExponential.scale", self.scale, low=0.0, low_open=True),
        )
        why = f"the largest draw is shift + {_EXP_TAIL:.4g} * scale and must be <= MAX_DRAW"
        if self.shift > MAX_DRAW:
            raise _too_large("ShiftedExponential.shift", self.shift, f"in [0, {MAX_DRAW:g}]", why)
        if not self.max_draw <= MAX_DRAW:
            raise _too_large(
                "ShiftedExponential.scale",
                self.scale,
                f"a positive number <= {(MAX_DRAW - self.shift) / _EXP_TAIL:.4g} with shift="
                f"{self.shift:g}",
                why,
            )

    @property
    def mean(self) -> float:  # noqa: D102
        return self.shift + self.scale

    @property
    def var(self) -> float:  # noqa: D102
        return _square(self.scale)

    @property
    def std(self) -> float:  # noqa: D102
        return self.scale

    def ppf(self, u: ArrayLike) -> FloatArray:  # noqa: D102
        return self.shift - self.scale * np.log1p(-_u(u))

    def cdf(self, x: ArrayLike) -> FloatArray:  # noqa: D102
        z = np.asarray(x, dtype=np.float64) - self.shift
        return np.where(z > 0, -np.expm1(-np.maximum(z, 0.0) / self.scale), 0.0)


@dataclass(frozen=True)
class LogNormal(Dist):
    """``exp(N(mu, sigma^2))``; see :meth:`from_mean_std` to set it by its own mean and std."""

    mu: float
    sigma: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "mu", check_real("LogNormal.mu", self.mu))
        object.__setattr__(
            self, "sigma", check_real("LogNormal.sigma", self.sigma, low=0.0, low_open=True)
        )
        mu, sigma = self.mu, self.sigma
        # in logs: the largest draw is exp(mu + sigma * ndtri(UNIFORM_MAX)), the mean
        # exp(mu + sigma**2 / 2); either may exceed the other
        if not mu + sigma * _NORMAL_TAIL <= _LOG_MAX_DRAW:
            raise _too_large(
                "LogNormal.mu",
                mu,
                f"<= {_LOG_MAX_DRAW - sigma * _NORMAL_TAIL:.6g} with sigma={sigma:g}",
                f"the largest draw is exp(mu + {_NORMAL_TAIL:.4g} * sigma) and must be <= MAX_DRAW",
            )
        if not mu + sigma * sigma / 2.0 <= _LOG_MAX_DRAW:
            raise _too_large(
                "LogNormal.sigma",
                sigma,
                f"in (0, {math.sqrt(2.0 * (_LOG_MAX_DRAW - mu)):.6g}] with mu={mu:g}",
                "the mean exp(mu + sigma**2 / 2) must be <= MAX_DRAW",
            )

    @classmethod
    def from_mean_std(cls, mean: float, std: float) -> LogNormal:
        """The log-normal distribution whose own mean and standard deviation are given."""
        m = check_real("LogNormal.mean", mean, low=0.0, low_open=True)
        s = check_real("LogNormal.std", std, low=0.0, low_open=True)
        ratio = s / m
        # beyond 1e150, ratio**2 would overflow; there log1p(ratio**2) = 2 log(ratio) exactly
        sigma2 = 2.0 * (math.log(s) - math.log(m)) if ratio > 1e150 else math.log1p(ratio**2)
        try:
            return cls(mu=math.log(m) - sigma2 / 2.0, sigma=math.sqrt(sigma2))
        except ValueError as exc:  # sigma underflows to 0, or the draws would not stay finite
            raise ValueError(f"LogNormal.from_mean_std(mean={m:g}, std={s:g}): {exc}") from None

    @property
    def mean(self) -> float:  # noqa: D102
        return math.exp(self.mu + self.sigma**2 / 2.0)

    def _log_var(self) -> float:
        s2 = self.sigma**2
        log_expm1 = s2 + math.log1p(-math.exp(-s2)) if s2 > 1.0 else math.log(math.expm1(s2))
        return log_expm1 + 2.0 * self.mu + s2

    @property
    def var(self) -> float:  # noqa: D102
        s2 = self.sigma**2
        if s2 <= 700.0 and abs(2.0 * self.mu + s2) <= 700.0:  # neither factor over/underflows
            return math.expm1(s2) * math.exp(2.0 * self.mu + s2)
        log_var = self._log_var()
        return math.inf if log_var > _LOG_FLOAT_MAX else math.exp(log_var)

    @property
    def std(self) -> float:  # noqa: D102
        var = self.var
        return math.sqrt(var) if math.isfinite(var) else math.exp(self._log_var() / 2.0)

    def ppf(self, u: ArrayLike) -> FloatArray:  # noqa: D102
        return np.exp(self.mu + self.sigma * ndtri(_u(u)))

    def cdf(self, x: ArrayLike) -> FloatArray:  # noqa: D102
        xa = np.asarray(x, dtype=np.float64)
        with np.errstate(divide="ignore"):
            z = (np.log(np.maximum(xa, 0.0)) - self.mu) / self.sigma
        return np.asarray(ndtr(z), dtype=np.float64)


@dataclass(frozen=True)
class Pareto(Dist):
    """Pareto (type I) with tail index ``shape`` > 0 and minimum ``scale`` > 0.

    Heavy-tailed: the mean is infinite for ``shape <= 1`` and the variance for ``shape <= 2``.
    """

    shape: float
    scale: float

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "shape", check_real("Pareto.shape", self.shape, low=0.0, low_open=True)
        )
        object.__setattr__(
            self, "scale", check_real("Pareto.scale", self.scale, low=0.0, low_open=True)
        )
        # the largest draw is scale * exp(_EXP_TAIL / shape): in logs
        why = f"the largest draw is scale * exp({_EXP_TAIL:.4g} / shape) and must be <= MAX_DRAW"
        if self.scale >= MAX_DRAW:  # even an infinite shape draws above the scale
            raise _too_large("Pareto.scale", self.scale, f"in (0, {MAX_DRAW:g})", why)
        if not math.log(self.scale) + _EXP_TAIL / self.shape <= _LOG_MAX_DRAW:
            low = _EXP_TAIL / (_LOG_MAX_DRAW - math.log(self.scale))
            raise _too_large(
                "Pareto.shape", self.shape, f">= {low:.4g} with scale={self.scale:g}", why
            )

    @property
    def mean(self) -> float:  # noqa: D102
        a = self.shape
        if a <= 1.0:
            return math.inf
        m = a * self.scale / (a - 1.0)
        return m if math.isfinite(m) else self.scale * (a / (a - 1.0))

    @property
    def var(self) -> float:  # noqa: D102
        a = self.shape
        if a <= 2.0:
            return math.inf
        r = self.scale / (a - 1.0)
        return _square(r) * (a / (a - 2.0))

    @property
    def std(self) -> float:  # noqa: D102
        a = self.shape
        var = self.var
        if math.isfinite(var) or a <= 2.0:
            return math.sqrt(var)
        return self.scale / (a - 1.0) * math.sqrt(a / (a - 2.0))

    def ppf(self, u: ArrayLike) -> FloatArray:  # noqa: D102
        return self.scale * np.exp(-np.log1p(-_u(u)) / self.shape)

    def cdf(self, x: ArrayLike) -> FloatArray:  # noqa: D102
        xa = np.asarray(x, dtype=np.float64)
        return np.where(
            xa > self.scale, 1.0 - (self.scale / np.maximum(xa, self.scale)) ** self.shape, 0.0
        )


@dataclass(frozen=True)
class Uniform(Dist):
    """Uniform on ``[low, high]`` with ``0 <= low <= high`` (e.g. SRPFL's U[1, 100] means)."""

    low: float
    high: float

    def __post_init__(self) -> None:
        lo = check_real("Uniform.low", self.low, low=0.0)
        hi = check_real(f"Uniform.high (>= Uniform.low = {lo:g})", self.high, low=lo)
        if hi > MAX_DRAW:
            raise _too_large(
                "Uniform.high", hi, f"in [low, {MAX_DRAW:g}]", "high is the largest draw"
            )
        object.__setattr__(self, "low", lo)
        object.__setattr__(self, "high", hi)

    @property
    def mean(self) -> float:  # noqa: D102
        return (self.low + self.high) / 2.0

    @property
    def var(self) -> float:  # noqa: D102
        return _square(self.high - self.low) / 12.0

    @property
    def std(self) -> float:  # noqa: D102
        return (self.high - self.low) / math.sqrt(12.0)

    def ppf(self, u: ArrayLike) -> FloatArray:  # noqa: D102
        return self.low + (self.high - self.low) * _u(u)

    def cdf(self, x: ArrayLike) -> FloatArray:  # noqa: D102
        xa = np.asarray(x, dtype=np.float64)
        if self.high == self.low:
            return (xa >= self.low).astype(np.float64)
        return np.clip((xa - self.low) / (self.high - self.low), 0.0, 1.0)


@dataclass(frozen=True, eq=False)
class Empirical(Dist):
    """Resampling of observed durations: each draw is one of ``samples``, uniformly.

    The moments are those of the empirical distribution itself (population variance), so they
    are exact for what simfl samples. Build it from a trace, e.g. measured round times.
    """

    samples: NDArray[np.float64]

    def __init__(self, samples: ArrayLike) -> None:
        arr = np.sort(check_array("Empirical.samples", samples, size=None, low=0.0))
        if arr.size == 0:
            raise ValueError("Empirical.samples must hold at least one value, got none")
        if arr[-1] > MAX_DRAW:
            raise _too_large(
                "Empirical.samples",
                float(arr[-1]),
                f"in [0, {MAX_DRAW:g}]",
                "the largest value is the largest draw",
            )
        arr.setflags(write=False)
        object.__setattr__(self, "samples", arr)

    def __repr__(self) -> str:
        return f"Empirical(<{self.samples.size} samples, mean {self.mean:.4g}>)"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Empirical) and np.array_equal(self.samples, other.samples)

    def __hash__(self) -> int:
        return hash(self.samples.tobytes())

    @property
    def mean(self) -> float:  # noqa: D102
        top = float(self.samples[-1])
        if top * self.samples.size <= MAX_DRAW:  # the plain sum cannot overflow
            return float(self.samples.mean())
        return top * float((self.samples / top).mean())

    @property
    def var(self) -> float:  # noqa: D102
        top = float(self.samples[-1])
        if top <= 1e100:  # squared deviations (<= 1e200 each) cannot overflow
            return float(self.samples.var())
        return _square(top) * float((self.samples / top).var())

    def ppf(self, u: ArrayLike) -> FloatArray:  # noqa: D102
        n = self.samples.size
        idx = np.minimum((_u(u) * n).astype(np.int64), n - 1)
        return self.samples[idx]

    def cdf(self, x: ArrayLike) -> FloatArray:  # noqa: D102
        xa = np.asarray(x, dtype=np.float64)
        return np.searchsorted(self.samples, xa, side="right") / self.samples.size
