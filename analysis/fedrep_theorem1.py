"""FedRep Theorem 1: the per-round contraction of the representation distance, measured.

FedRep (Collins et al., ICML 2021), Theorem 1 [mem, algorithms.md 1.2]: for linear FedRep
(exact heads, one gradient step on B, average, QR) with step eta <= 1/(4 sbar_max^2) and enough
samples per client (m >= c (kappa^4 k^3 log(rn)/E0^2 + kappa^4 k^2 d/(E0^2 r n)), c unstated),
with high probability

    dist(B^T, B*) <= (1 - eta E0 sbar_min^2 / 2)^(T/2) dist(B^0, B*),

where E0 = 1 - dist(B^0, B*)^2 and sbar_min^2 (sbar_max^2) is the smallest (largest) eigenvalue
of W*_I^T W*_I / (rn) over all sets I of rn clients. **This is a bound**, so the check is
measured <= bound: the measured per-round factor exp(slope of log dist) must not exceed
sqrt(1 - eta E0 sbar_min^2 / 2).

A bound can be loose, so the script also derives the **rate** the iteration contracts at with
infinitely many samples: with exact heads w_i = B^T B* w_i*, the averaged step gives
B*perp^T Bbar = B*perp^T B (I - eta P S_I P^T), P = B^T B*, S_I = W*_I^T W*_I / (rn), and
Bbar^T Bbar = I + O(dist^2), so once P is orthogonal the distance contracts by the top Lyapunov
exponent of the random products of (I - eta S_I); with full participation (r = 1) this is
exactly log(1 - eta lambda_min(S)) per round. The check at the largest m: measured/population
log-rate ratio within 3 SE of 1 with its SE at most 1% (finite m slows the rate; it should vanish
as m grows), see :func:`rate_status`. At 40 seeds m=160 is not large enough: the ratio was
0.994 +- 0.002 (r=1) and 0.974 +- 0.007 (r=0.1), 3.0 and 3.7 SE slow, with the gap shrinking
from m=10 (0.775, 0.754) and m=40 (0.952, 0.932); so the grid goes on to m=640, and the claim
gives the ratio at every m.

Setting: d=20, k=2 (the exact subset extremes use k=2: lambda_min over sets of the s smallest
(u . w_i)^2, scanned over unit u), n=100, noise std 1e-3, ||w_i*|| = sqrt(k), MoM initialisation,
fresh samples, eta = 1/(4 sbar_max^2) per seed (the theorem's largest step), r in {1, 0.1},
m in {10, 40, 160, 640}, T=100, 40 seeds. The slope of log dist is fitted by least squares from the
initial distance to the first round below 30x the noise floor (median of the last 20 rounds).

    python analysis/fedrep_theorem1.py [--quick] [--seeds S]
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import claim, parser, save, write_results

from simfl import Fleet, Scenario, algorithms, dists, policies, run, tasks
from simfl.rng import Streams

Array = NDArray[np.float64]


@dataclass(frozen=True)
class Setting:
    """One (n, r, m) case of the experiment."""

    n: int
    fraction: float
    m: int
    rounds: int

    @property
    def cohort(self) -> int:
        return max(int(self.fraction * self.n), 1)


FULL = [Setting(100, r, m, 100) for r in (1.0, 0.1) for m in (10, 40, 160, 640)]
QUICK = [Setting(40, 1.0, 100, 60), Setting(40, 0.25, 10, 60)]


def subset_extremes(heads: Array, s: int, grid: int = 8192) -> tuple[float, float]:
    """``(sbar_min^2, sbar_max^2)``: extreme eigenvalues of ``W_I^T W_I / s`` over ``|I| = s``.

    Exact for k = 2 up to the angle grid: min over I and unit u commute, and for a fixed u the
    worst (best) set holds the s smallest (largest) ``(u . w_i)^2``.
    """
    if heads.shape[1] != 2:
        raise ValueError(f"subset_extremes needs k = 2 heads, got k = {heads.shape[1]}")
    theta = np.linspace(0.0, np.pi, grid, endpoint=False)
    u = np.stack([np.cos(theta), np.sin(theta)], axis=1)
    proj = np.sort((u @ heads.T) ** 2, axis=1)
    return float(proj[:, :s].mean(axis=1).min()), float(proj[:, -s:].mean(axis=1).max())


def population_rate(heads: Array, s: int, eta: float, rounds: int = 20000, seed: int = 0) -> float:
    """Log per-round contraction with infinite samples: top Lyapunov exponent of ``I - eta S_I``.

    ``I`` is a uniform set of ``s`` clients each round (``r = 1``: the exact
    ``log(1 - eta lambda_min(S))``).
    """
    n, k = heads.shape
    if s == n:
        lam = np.linalg.eigvalsh(heads.T @ heads / n)
        return float(np.log(1.0 - eta * lam[0]))
    rng = np.random.default_rng(seed)
    v = np.ones(k) / np.sqrt(k)
    total = 0.0
    for _ in range(rounds):
        w = heads[rng.choice(n, s, replace=False)]
        v = v - eta * (w.T @ (w @ v)) / s
        norm = float(np.linalg.norm(v))
        total += np.log(norm)
        v /= norm
    return total / rounds


def fitted_slope(dist: Array) -> tuple[float, int]:
    """Least-squares slope of log distance over the linear phase, and the phase length."""
    floor = float(np.median(dist[-20:]))
    below = np.flatnonzero(dist < 30.0 * floor)
    end = int(below[0]) if below.size and below[0] >= 3 else len(dist)
    slope = np.polyfit(np.arange(end), np.log(dist[:end]), 1)[0]
    return float(slope), end


def one_run(setting: Setting, seed: int) -> dict[str, Any]:
    """Run linear FedRep once and compare its slope with the bound and the population rate."""
    task = tasks.LinearRepresentation(d=20, k=2, samples_per_client=setting.m, noise_std=1e-3)
    heads = task.build(setting.n, Streams(seed)).heads(np.arange(setting.n))
    smin2, smax2 = subset_extremes(heads, setting.cohort)
    eta = 1.0 / (4.0 * smax2)
    res = run(
        Scenario(
            name="FedRep",
            task=task,
            algorithm=algorithms.FedRep(step_size=eta),
            fleet=Fleet.homogeneous(setting.n, compute=dists.Exponential(mean=1.0)),
            policy=policies.WaitAll(fraction=setting.fraction),
            rounds=setting.rounds,
            seed=seed,
        ),
        progress=False,
    )
    d0 = float(res.meta["initial_metrics"]["distance"])
    dist = np.r_[d0, res.rounds["distance"].to_numpy()]
    slope, phase = fitted_slope(dist)
    e0 = 1.0 - d0**2
    return {
        "n": setting.n,
        "r": setting.fraction,
        "m": setting.m,
        "seed": seed,
        "eta": eta,
        "sbar_min2": smin2,
        "sbar_max2": smax2,
        "dist0": d0,
        "E0": e0,
        "phase rounds": phase,
        "measured": slope,
        "bound": 0.5 * float(np.log(1.0 - eta * e0 * smin2 / 2.0)),
        "population": population_rate(heads, setting.cohort, eta, seed=seed),
        "curve": dist,
    }


def summary(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (n, r, m): log-rates per round (mean, SE over seeds) and their ratios."""
    rows = rows.assign(
        **{
            "measured/bound": rows["measured"] / rows["bound"],
            "measured/population": rows["measured"] / rows["population"],
            "within bound": rows["measured"] <= rows["bound"],
        }
    )
    g = rows.groupby(["n", "r", "m"], sort=False)
    cols = ["measured", "bound", "population", "measured/bound", "measured/population"]
    out = g[cols].mean()
    out["measured SE"] = g["measured"].sem()
    out["ratio SE"] = g["measured/population"].sem()
    out["factor measured"] = np.exp(out["measured"])
    out["factor bound"] = np.exp(out["bound"])
    out["factor population"] = np.exp(out["population"])
    out["E0"] = g["E0"].mean()
    out["eta"] = g["eta"].mean()
    out["all within bound"] = g["within bound"].all()
    out["seeds"] = g.size()
    return out.reset_index()


#: The rate check (theory: the derived infinite-sample rate): |measured/population - 1| below
#: ``TOLERANCE_Z`` SE of the ratio (SE over seeds) ...
TOLERANCE_Z = 3.0
#: ... with that SE at most ``POWER_SE``: a 5% error is then >= 5 SE away and fails with
#: probability >= P(Z > 3 - 5) = 97.7%. The former rule, within max(3 SE, 0.05), had a 5% floor
#: that a 5% error passed half the time. With S seeds the SE has S - 1 degrees of freedom: a
#: correct rate exceeds 3 SE with probability 4.0% at 5 seeds (t_4), 0.7% at 20 (t_19).
POWER_SE = 0.01


def rate_status(ratio: float, se: float) -> tuple[str, str]:
    """The rate claim's status and why: ``"not reproduced"`` beyond :data:`TOLERANCE_Z` SE,
    ``"qualitative"`` within it but with an SE above :data:`POWER_SE` (too few seeds to see a
    5% error), ``"reproduced"`` otherwise."""
    if not abs(ratio - 1) < TOLERANCE_Z * se:
        return "not reproduced", "finite samples still slow the rate at this m"
    if se > POWER_SE:
        return "qualitative", (
            f"not powered: the ratio's SE {se:.1%} exceeds {POWER_SE:.0%} (a 5% error would "
            "pass; more seeds)"
        )
    return "reproduced", ""


def claims(tab: pd.DataFrame) -> list[dict[str, str]]:
    """The results file's claims: the bound at every (r, m), the rate at the largest m."""
    out = []
    for _, row in tab.iterrows():
        ok = bool(row["all within bound"])
        out.append(
            claim(
                "FedRep",
                f"Theorem 1 (bound, as recalled in algorithms.md [mem]): dist contracts at least "
                f"by sqrt(1 - eta E0 sbar_min^2/2) per round (n={row['n']}, r={row['r']}, "
                f"m={row['m']})",
                f"factor <= {row['factor bound']:.4f}",
                f"factor {row['factor measured']:.4f} (log-rate {row['measured']:.4f} "
                f"+- {row['measured SE']:.4f} SE, {row['seeds']} seeds; all within: {ok})",
                "reproduced" if ok else "not reproduced",
                ""
                if ok
                else "a seed's measured contraction is slower than the bound (m may be below "
                "the theorem's unstated constant)",
            )
        )
    for r, t in tab.groupby("r", sort=False):
        by_m = t.sort_values("m")
        row = by_m.iloc[-1]
        trend = ", ".join(
            f"{m}: {v:.3f}" for m, v in zip(by_m["m"], by_m["measured/population"], strict=True)
        )
        status, why = rate_status(float(row["measured/population"]), float(row["ratio SE"]))
        out.append(
            claim(
                "theory",
                f"FedRep Theorem 1's mechanism, derived infinite-sample rate: per-round factor "
                f"of the distance, n={row['n']}, r={r}, m={row['m']}",
                f"{row['factor population']:.4f} (derived, not in the paper)",
                f"{row['factor measured']:.4f}; log-rate ratio "
                f"{row['measured/population']:.3f} +- {row['ratio SE']:.3f} SE "
                f"({row['seeds']} seeds; the ratio by m, {trend})",
                status,
                why,
            )
        )
    return out


def record(args: Any, tab: pd.DataFrame) -> None:
    """Write the results file (numbers, claims, the row of the table of checks)."""
    largest = tab.sort_values("m").groupby("r", sort=False).tail(1)
    write_results(
        args,
        "fedrep_theorem1",
        {"table": tab.to_dict(orient="records")},
        claims(tab),
        checks="linear FedRep: measured contraction of dist per round vs Theorem 1's bound "
        "and the derived infinite-sample rate",
        measured=f"within the bound at all {len(tab)} (r, m); measured/derived rate "
        + ", ".join(
            f"{v:.3f} (r={r:g}, m={m})"
            for r, m, v in zip(
                largest["r"], largest["m"], largest["measured/population"], strict=True
            )
        ),
    )


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=None)
    p.add_argument("--results", default=None, help="directory for the results JSON")
    p.add_argument("--reclaim", default=None, help="rewrite a results file's claims from its table")
    args = p.parse_args()
    if args.reclaim:
        saved = json.loads(Path(args.reclaim).read_text())
        args.quick = saved["size"] == "quick"
        args.results = str(Path(args.reclaim).parent)
        record(args, pd.DataFrame(saved.get("numbers", saved)["table"]))
        return
    settings = QUICK if args.quick else FULL
    seeds = range(args.seeds or (2 if args.quick else 40))
    rows = pd.DataFrame([one_run(s, seed) for s in settings for seed in seeds])
    tab = summary(rows.drop(columns="curve"))
    pd.set_option("display.width", 250)
    print(
        "log of the per-round contraction factor of dist(B^t, B*) (slope of log dist; "
        "bound = Theorem 1, population = derived infinite-sample rate)"
    )
    shown = tab[
        [
            *("n", "r", "m", "eta", "E0", "measured", "measured SE", "bound", "population"),
            *("measured/bound", "measured/population", "all within bound"),
        ]
    ]
    print(shown.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    record(args, tab)
    figure(rows, args.out)


def figure(rows: pd.DataFrame, out: str) -> None:
    """log dist vs round per (r, m) (mean over seeds) with the bound and population lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rs = list(dict.fromkeys(rows["r"]))
    fig, axes = plt.subplots(1, len(rs), figsize=(6 * len(rs), 4.2), squeeze=False)
    for ax, r in zip(axes[0], rs, strict=True):
        sub = rows[rows["r"] == r]
        for i, (m, g) in enumerate(sub.groupby("m")):
            curve = np.exp(np.mean(np.log(np.stack(g["curve"].to_list())), axis=0))
            t = np.arange(len(curve))
            color = f"C{i}"
            ax.semilogy(t, curve, color=color, label=f"measured, m={m}")
            d0 = float(np.exp(np.mean(np.log(g["dist0"]))))
            ax.semilogy(t, d0 * np.exp(g["bound"].mean() * t), ":", color=color)
            ax.semilogy(t, d0 * np.exp(g["population"].mean() * t), "--", color=color)
        ax.set(
            xlabel="round",
            ylabel="dist(B^t, B*)",
            ylim=(1e-6, 1.0),
            title=f"n={sub['n'].iloc[0]}, r={r} (dotted: Theorem 1 bound; dashed: m = inf rate)",
        )
        ax.legend(fontsize=8)
    fig.suptitle("FedRep Theorem 1: measured contraction vs the bound and the infinite-sample rate")
    fig.tight_layout()
    print(f"figure: {save(fig, out, 'fedrep_theorem1')}")


if __name__ == "__main__":
    main()
