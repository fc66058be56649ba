"""The synthetic linear task of LG-FedAvg's alpha-interpolation experiment, and its closed form.

Liang, Liu, Ziyin, Allen, Auerbach, Brent, Salakhutdinov, Morency, "Think Locally, Act Globally:
Federated Learning with Local and Global Representations", NeurIPS-W 2019 / arXiv 2001.01523
(Section 5.1 and Appendix C.1; published script ``plot_synthetic_data.py``). Device ``m`` sees

    y = u_m^T x + eps,   x ~ U[-1, 1]^d,   u_m = v + r_m,   v ~ U[0, 1]^d,   r_m ~ N(0, rho^2 I_d),

with one ``v`` per seed. The paper writes ``eps ~ N(0, sigma^2)`` (noise std ``sigma``); the
published script draws ``np.random.normal(0, sigma**2)`` (noise std ``sigma^2``, variance
``sigma^4``), which is why its curves sit near 5.06-5.14 for ``sigma = 1.5``. Following the paper,
``convention="paper"`` is the default; ``convention="script"`` reproduces the script (and the
[sim] reference numbers of algorithms.md 2.2).

All data are procedural: a client's samples come from the run's keyed streams when needed. The
bound data keep only ``v`` and the sufficient statistics of the evaluated clients.

Metrics
-------
``mse_a<alpha>`` (one per alpha of the grid, e.g. ``mse_a0.0`` ... ``mse_a1.0``)
    Mean over evaluated devices of each device's test MSE of
    ``f_alpha = alpha * u_local + (1 - alpha) * v_global`` on its own noisy test points
    (alpha = 0: the global model; alpha = 1: the local model).
``alpha_best``, ``mse_best``
    The grid alpha with the lowest mean test MSE, and that MSE.
``mse_oracle``
    Mean test MSE of the true teachers ``u_m`` on the same test points: the irreducible noise
    of this test set (its expectation is the noise variance), so ``mse_a - mse_oracle`` estimates
    the excess risk with far less test-noise variance.

Closed form
-----------
:func:`expected_test_mse` is algorithms.md 2.2 [derived]: with label-noise variance ``s2``, ``n``
training samples per device, ``M`` devices, ``E[x x^T] = c I`` (``c = 1/3`` here),
``a = d s2 / n`` and ``b = ((M - 1) / M) c d rho^2``,

    E(alpha) = s2 + alpha^2 a + (1 - alpha)^2 b + (1 - alpha^2) a / M,

i.e. the paper's formula (:func:`paper_error`) with its sigma^2 read as ``s2`` and its rho^2 as
``c d rho^2``, plus the irreducible ``s2``. It replaces ``(X^T X)^{-1}`` by its leading order
``I / (c n)`` (standard for OLS; relative error O(d / n), about 1% of the variance terms at
d = 20, n = 2000, i.e. +5e-4 at alpha = 1); ``finite_n=True`` adds that next order. It also
covers a global model pooled from ``K < M`` devices (devices outside the pool see
``(1 + 1/K) c d rho^2`` and no cross term), and ``K = 0`` (global model 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import numpy as np
from numpy.typing import ArrayLike, NDArray

from simfl._checks import check_choice, check_int, check_real
from simfl.rng import Streams
from simfl.tasks.base import Task

__all__ = [
    "ALPHA_GRID",
    "LGSynthetic",
    "LGSyntheticData",
    "alpha_metric",
    "expected_test_mse",
    "optimal_alpha",
    "paper_error",
]

Array = NDArray[np.float64]
IntArray = NDArray[np.int64]

#: alpha = 0, 0.1, ..., 1 (the script's grid).
ALPHA_GRID: tuple[float, ...] = tuple(round(0.1 * i, 10) for i in range(11))
#: E[x_i^2] for x_i ~ U[-1, 1], and E[v_i^2] for v_i ~ U[0, 1].
C_UNIFORM = 1.0 / 3.0
_CHUNK = 1 << 19  # floats of X generated at once (4 MiB)


def alpha_metric(alpha: float) -> str:
    """The metric name of ``alpha``: ``0 -> "mse_a0.0"``, ``0.05 -> "mse_a0.05"``."""
    text = f"{alpha:.6f}".rstrip("0")
    return "mse_a" + (text + "0" if text.endswith(".") else text)


def paper_error(
    alpha: ArrayLike, *, d: int, n: int, m: int, sigma: float, rho: float
) -> NDArray[np.float64]:
    """LG-FedAvg's generalisation error of ``f_alpha`` (Appendix A theorem), as written.

    ``alpha^2 (d/N) sigma^2 + (1-alpha)^2 ((M-1)/M) rho^2 + (1 - alpha^2) (d/(MN)) sigma^2``
    with ``N = n`` samples per device and ``M = m`` devices. In the simulation's conventions
    :func:`expected_test_mse` equals ``noise_var + paper_error(sigma=sqrt(noise_var),
    rho=sqrt(c d) rho)``.
    """
    a = np.asarray(alpha, dtype=np.float64)
    s2, r2 = sigma**2, rho**2
    return np.asarray(
        a**2 * d / n * s2 + (1 - a) ** 2 * (m - 1) / m * r2 + (1 - a**2) * d / (m * n) * s2
    )


def _terms(
    d: int, n: int, m: int, noise_var: float, rho: float, c: float, arrived: int, finite_n: bool
) -> tuple[float, float, float]:
    """``(a, Q, X)`` with ``E = s2 + alpha^2 a + (1-alpha)^2 Q + 2 alpha (1-alpha) X``."""
    k = arrived
    a = d * noise_var / n
    a_k = a / k if k else 0.0  # variance of the pooled estimate (prediction space)
    if finite_n:  # E[(X^T X)^-1] = (I / (c n)) (1 + (d - 1/5) / n + O(n^-2)) for U[-1, 1]
        a *= 1.0 + (d - 0.2) / n
        if k:
            a_k *= 1.0 + (d - 0.2) / (k * n)
    if k == 0:  # global model 0: the whole teacher is error, E||u_m||^2 = d (1/3 + rho^2)
        return a, c * d * (C_UNIFORM + rho**2), 0.0
    q_in = c * d * rho**2 * (k - 1) / k + a_k
    q_out = c * d * rho**2 * (k + 1) / k + a_k
    return a, (k * q_in + (m - k) * q_out) / m, a_k * k / m


def expected_test_mse(
    alpha: ArrayLike,
    *,
    d: int,
    n: int,
    m: int,
    noise_var: float,
    rho: float,
    c: float = C_UNIFORM,
    arrived: int | None = None,
    finite_n: bool = False,
) -> NDArray[np.float64]:
    """Expected mean test MSE of ``f_alpha`` in the simulation's conventions (module docstring).

    Parameters
    ----------
    alpha
        Interpolation weight(s) of the local model.
    d, n, m
        Dimension, training samples per device, devices evaluated.
    noise_var
        Label-noise variance ``s2`` (``sigma^2`` for the paper, ``sigma^4`` for the script).
    rho
        Device spread: ``r_m ~ N(0, rho^2 I)``.
    c
        ``E[x x^T] = c I`` (1/3 for ``x ~ U[-1, 1]^d``).
    arrived
        Devices pooled in the global model (default ``m``: all; 0: the global model is 0, and
        ``v ~ U[0, 1]^d`` is averaged over).
    finite_n
        ``False`` (default): the [derived] formula, ``(X^T X)^{-1} ~ I / (c n)``. ``True``:
        also the next order of the OLS variances for ``x ~ U[-1, 1]^d``, which multiplies the
        local variance ``a`` by ``1 + (d - 1/5) / n`` (and the pooled one by
        ``1 + (d - 1/5) / (K n)``); the remaining error is ``O((d / n)^2)`` (the bias terms'
        own corrections are ``O(d / (K n))`` relative and left out).
    """
    k = m if arrived is None else check_int("arrived", arrived, low=0, high=m)
    a_, q, x = _terms(d, n, m, noise_var, rho, c, k, finite_n)
    al = np.asarray(alpha, dtype=np.float64)
    return np.asarray(noise_var + al**2 * a_ + (1 - al) ** 2 * q + 2 * al * (1 - al) * x)


def optimal_alpha(
    *,
    d: int,
    n: int,
    m: int,
    noise_var: float,
    rho: float,
    c: float = C_UNIFORM,
    arrived: int | None = None,
) -> float:
    """The minimiser of :func:`expected_test_mse` over real alpha: ``(Q - X) / (a + Q - 2X)``.

    With every device pooled this is ``b / (a + b - a/M)`` (algorithms.md 2.2).
    """
    k = m if arrived is None else check_int("arrived", arrived, low=0, high=m)
    a, q, x = _terms(d, n, m, noise_var, rho, c, k, False)
    return (q - x) / (a + q - 2 * x)


@dataclass(frozen=True)
class LGSynthetic(Task):
    """LG-FedAvg's synthetic linear regression (see the module docstring).

    Parameters
    ----------
    d
        Input dimension (>= 1; paper 20).
    train_samples, test_samples
        Samples per device (>= 1; paper 2000 and 1000).
    sigma
        Data-noise parameter (>= 0; paper 1.5). The noise std is ``sigma`` (``convention="paper"``)
        or ``sigma**2`` (``convention="script"``).
    rho
        Device spread (>= 0; paper 0.5, 0.1, 0.06, 0.02).
    convention
        ``"paper"`` (default) or ``"script"``, as above.
    alphas
        Grid of interpolation weights in [0, 1], strictly increasing (default 0, 0.1, ..., 1).
    eval_clients
        How many devices are evaluated: all if the fleet is no larger, otherwise a fixed
        uniformly drawn subset of this size.
    """

    d: int = 20
    train_samples: int = 2000
    test_samples: int = 1000
    sigma: float = 1.5
    rho: float = 0.1
    convention: str = "paper"
    alphas: tuple[float, ...] = ALPHA_GRID
    eval_clients: int = 1000

    def __post_init__(self) -> None:
        check_int("LGSynthetic.d", self.d, low=1)
        check_int("LGSynthetic.train_samples", self.train_samples, low=1)
        check_int("LGSynthetic.test_samples", self.test_samples, low=1)
        check_real("LGSynthetic.sigma", self.sigma, low=0.0)
        check_real("LGSynthetic.rho", self.rho, low=0.0)
        check_choice("LGSynthetic.convention", self.convention, ("paper", "script"))
        check_int("LGSynthetic.eval_clients", self.eval_clients, low=1)
        try:
            alphas = tuple(self.alphas)
        except TypeError:
            raise ValueError(
                f"LGSynthetic.alphas must be a sequence of numbers in [0, 1], got {self.alphas!r}"
            ) from None
        if not alphas:
            raise ValueError("LGSynthetic.alphas must hold at least one alpha in [0, 1], got ()")
        values = tuple(
            check_real(f"LGSynthetic.alphas[{i}]", a, low=0.0, high=1.0)
            for i, a in enumerate(alphas)
        )
        names = [alpha_metric(a) for a in values]
        if any(b <= a for a, b in pairwise(values)) or len(set(names)) < len(names):
            raise ValueError(
                f"LGSynthetic.alphas must be strictly increasing with distinct metric names "
                f"(6 decimals), got {alphas!r}"
            )
        object.__setattr__(self, "alphas", values)

    @property
    def metrics(self) -> tuple[str, ...]:  # type: ignore[override]
        """One ``mse_a<alpha>`` per alpha, then ``alpha_best``, ``mse_best``, ``mse_oracle``."""
        return (*(alpha_metric(a) for a in self.alphas), "alpha_best", "mse_best", "mse_oracle")

    @property
    def goals(self) -> dict[str, str]:  # type: ignore[override]
        """Every MSE is better smaller (``alpha_best`` has no goal)."""
        return {name: "min" for name in self.metrics if name != "alpha_best"}

    @property
    def noise_std(self) -> float:
        """Standard deviation of the label noise under ``convention``."""
        return self.sigma if self.convention == "paper" else self.sigma**2

    def closed_form(
        self,
        n_devices: int,
        alpha: ArrayLike | None = None,
        arrived: int | None = None,
        finite_n: bool = False,
    ) -> NDArray[np.float64]:
        """:func:`expected_test_mse` for this task on ``n_devices`` devices (default: the grid)."""
        return expected_test_mse(
            self.alphas if alpha is None else alpha,
            d=self.d,
            n=self.train_samples,
            m=n_devices,
            noise_var=self.noise_std**2,
            rho=self.rho,
            arrived=arrived,
            finite_n=finite_n,
        )

    def build(self, n_clients: int, streams: Streams) -> LGSyntheticData:
        """Bind the task to ``n_clients`` devices."""
        return LGSyntheticData(self, n_clients, streams)


class LGSyntheticData:
    """A :class:`LGSynthetic` bound to a number of devices and a seed.

    Generates each device's data from keyed streams when asked (``"lg/v"``, ``"lg/r"``, and
    ``"lg/<split>/x"``, ``"lg/<split>/noise"`` keyed by device and sample), so a device's data
    never depend on which other devices are asked at the same time.
    """

    def __init__(self, spec: LGSynthetic, n_clients: int, streams: Streams) -> None:
        self.spec = spec
        self.n_clients = n_clients
        self.streams = streams
        self.v: Array = streams.uniform("lg/v", np.arange(spec.d))
        n_eval = min(spec.eval_clients, n_clients)
        if n_eval == n_clients:
            self.eval_clients: IntArray = np.arange(n_clients, dtype=np.int64)
        else:
            pick = streams.generator("task/eval_clients").choice(n_clients, n_eval, replace=False)
            self.eval_clients = np.sort(pick).astype(np.int64)
        self._fit: tuple[Array, Array, Array] | None = None
        self._test: tuple[Array, Array, Array] | None = None

    @property
    def d(self) -> int:
        """Input dimension."""
        return self.spec.d

    def client_sizes(self) -> NDArray[np.float64]:
        """Training samples of each device (all equal)."""
        return np.full(self.n_clients, float(self.spec.train_samples))

    def teachers(self, clients: IntArray) -> Array:
        """True models ``u_m = v + r_m`` of ``clients``, shape ``(C, d)``."""
        r = self.streams.normal("lg/r", np.asarray(clients)[:, None], np.arange(self.d)[None, :])
        return np.asarray(self.v[None, :] + self.spec.rho * r)

    def batch(self, split: str, clients: IntArray) -> tuple[Array, Array]:
        """Samples ``(X, y)`` of ``clients`` for ``split`` (``"train"`` or ``"test"``).

        Shapes ``(C, n, d)`` and ``(C, n)``. Each device has one fixed training set (the paper).
        """
        n = self.spec.train_samples if split == "train" else self.spec.test_samples
        c = np.asarray(clients, dtype=np.int64)
        keys = np.arange(n * self.d, dtype=np.int64).reshape(1, n, self.d)
        x = 2.0 * self.streams.uniform(f"lg/{split}/x", c[:, None, None], keys) - 1.0
        eps = self.streams.normal(f"lg/{split}/noise", c[:, None], np.arange(n)[None, :])
        y = (x @ self.teachers(c)[:, :, None])[:, :, 0] + self.spec.noise_std * eps
        return x, y

    def stats(self, split: str, clients: IntArray) -> tuple[Array, Array, Array]:
        """Sufficient statistics ``X^T X`` (C, d, d), ``X^T y`` (C, d), ``y^T y`` (C,).

        Generated a few devices at a time, so memory stays small for any cohort.
        """
        c = np.asarray(clients, dtype=np.int64)
        n = self.spec.train_samples if split == "train" else self.spec.test_samples
        step = max(1, _CHUNK // (n * self.d))
        gram = np.empty((c.size, self.d, self.d))
        xty = np.empty((c.size, self.d))
        yty = np.empty(c.size)
        for start in range(0, c.size, step):
            part = slice(start, start + step)
            x, y = self.batch(split, c[part])
            xt = x.transpose(0, 2, 1)
            gram[part] = xt @ x
            xty[part] = (xt @ y[:, :, None])[:, :, 0]
            yty[part] = (y[:, None, :] @ y[:, :, None])[:, 0, 0]
        return gram, xty, yty

    def fit_stats(self) -> tuple[Array, Array, Array]:
        """Training statistics of the evaluated devices (cached), for their local models."""
        if self._fit is None:
            self._fit = self.stats("train", self.eval_clients)
        return self._fit

    def test_stats(self) -> tuple[Array, Array, Array]:
        """Test statistics of the evaluated devices (cached)."""
        if self._test is None:
            self._test = self.stats("test", self.eval_clients)
        return self._test

    def test_mse(self, models: Array) -> Array:
        """Each evaluated device's test MSE of its model, from the test statistics.

        ``models`` is ``(E, d)`` (one model per evaluated device) or ``(A, E, d)``.
        """
        gram, xty, yty = self.test_stats()
        th = np.asarray(models)
        quad = (th[..., None, :] @ gram @ th[..., :, None])[..., 0, 0]
        lin = (th[..., None, :] @ xty[..., :, None])[..., 0, 0]
        return np.asarray((quad - 2.0 * lin + yty) / self.spec.test_samples)

    def evaluate(self, local: Array, global_model: Array) -> dict[str, float]:
        """Metrics of ``f_alpha = alpha * local + (1 - alpha) * global_model`` for the grid.

        Parameters
        ----------
        local
            Each evaluated device's local model, ``(E, d)`` in ``eval_clients`` order.
        global_model
            The global model, ``(d,)``.
        """
        alphas = np.asarray(self.spec.alphas)[:, None, None]
        models = alphas * np.asarray(local)[None] + (1.0 - alphas) * np.asarray(global_model)
        mse = self.test_mse(models).mean(axis=1)  # (A,)
        best = int(np.argmin(mse))
        names = (alpha_metric(a) for a in self.spec.alphas)
        metrics = {name: float(v) for name, v in zip(names, mse, strict=True)}
        metrics["alpha_best"] = float(self.spec.alphas[best])
        metrics["mse_best"] = float(mse[best])
        metrics["mse_oracle"] = float(self.test_mse(self.teachers(self.eval_clients)).mean())
        return metrics
