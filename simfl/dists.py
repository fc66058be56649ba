"""Non-negative time distributions with exact moments and vectorised sampling.

Each distribution knows its mean and variance exactly (so tests can hold the simulator against
queueing theory), its CDF, and its inverse CDF ``ppf``. Sampling is inverse-transform: simfl
feeds ``ppf`` with keyed uniforms from :class:`simfl.rng.Streams`, which makes every draw a
function of (seed, device, round) and nothing else. :meth:`Dist.sample` offers the same with a
plain ``numpy.random.Generator``.

Invalid parameters (negative where not allowed, zero where not allowed, NaN, infinity) raise a
``ValueError`` naming the field at construction.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import ndtr, ndtri

from simfl._checks import check_real

__all__ = [
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


class Dist(ABC):
    """A distribution of non-negative durations (seconds, or seconds per unit of work)."""

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


def _u(u: ArrayLike) -> FloatArray:
    return np.asarray(u, dtype=np.float64)


@dataclass(frozen=True)
class Constant(Dist):
    """A fixed duration ``value`` >= 0."""

    value: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", check_real("Constant.value", self.value, low=0.0))

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
        object.__setattr__(
            self, "_mean", check_real("Exponential.mean", mean, low=0.0, low_open=True)
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
        return self._mean**2

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

    @property
    def mean(self) -> float:  # noqa: D102
        return self.shift + self.scale

    @property
    def var(self) -> float:  # noqa: D102
        return self.scale**2

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

    @classmethod
    def from_mean_std(cls, mean: float, std: float) -> LogNormal:
        """The log-normal distribution whose own mean and standard deviation are given."""
        m = check_real("LogNormal.mean", mean, low=0.0, low_open=True)
        s = check_real("LogNormal.std", std, low=0.0, low_open=True)
        sigma2 = math.log1p((s / m) ** 2)
        return cls(mu=math.log(m) - sigma2 / 2.0, sigma=math.sqrt(sigma2))

    @property
    def mean(self) -> float:  # noqa: D102
        return math.exp(self.mu + self.sigma**2 / 2.0)

    @property
    def var(self) -> float:  # noqa: D102
        return math.expm1(self.sigma**2) * math.exp(2.0 * self.mu + self.sigma**2)

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

    @property
    def mean(self) -> float:  # noqa: D102
        a = self.shape
        return math.inf if a <= 1.0 else a * self.scale / (a - 1.0)

    @property
    def var(self) -> float:  # noqa: D102
        a = self.shape
        return math.inf if a <= 2.0 else self.scale**2 * a / ((a - 1.0) ** 2 * (a - 2.0))

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
        hi = check_real("Uniform.high", self.high, low=lo)
        object.__setattr__(self, "low", lo)
        object.__setattr__(self, "high", hi)

    @property
    def mean(self) -> float:  # noqa: D102
        return (self.low + self.high) / 2.0

    @property
    def var(self) -> float:  # noqa: D102
        return (self.high - self.low) ** 2 / 12.0

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
        try:
            arr = np.sort(np.asarray(samples, dtype=np.float64).ravel())
        except (TypeError, ValueError) as exc:
            raise ValueError(f"Empirical.samples must be numbers, got {samples!r}") from exc
        if arr.size == 0:
            raise ValueError("Empirical.samples must hold at least one value, got none")
        if not np.isfinite(arr).all() or arr[0] < 0:
            raise ValueError("Empirical.samples must be finite and >= 0")
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
        return float(self.samples.mean())

    @property
    def var(self) -> float:  # noqa: D102
        return float(self.samples.var())

    def ppf(self, u: ArrayLike) -> FloatArray:  # noqa: D102
        n = self.samples.size
        idx = np.minimum((_u(u) * n).astype(np.int64), n - 1)
        return self.samples[idx]

    def cdf(self, x: ArrayLike) -> FloatArray:  # noqa: D102
        xa = np.asarray(x, dtype=np.float64)
        return np.searchsorted(self.samples, xa, side="right") / self.samples.size
