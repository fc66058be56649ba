"""FedDAR's linear analysis: dist(B^t, B*) converges linearly (geometrically) to a noise floor.

Zhong et al., ICLR 2023, Appendix A (algorithms.md 4.3 [mem]): for the linear FedDAR (Alg. 2:
MoM initialisation, domain heads by least squares, one gradient step on B, a weighted average
and QR) an informal theorem states *linear convergence* of the principal-angle distance
dist(B^t, B*), with constants (depending on the domains' diversity and the mixtures) that
were not retrievable. So there is no rate to compare with: what is checked is the shape the
theorem claims, a per-round contraction factor that stays the same as the distance falls
(geometric descent), against a sublinear descent (dist ~ C / t^p), whose per-round log-rate
shrinks like p / t.

Setting: ``analysis/feddar.py``'s synthetic domain mixture (n=100 clients, M=5 domains, d=20,
k=2, noise std 1e-3, alpha=0.5) with m in {10, 20} samples per client, FedDAR-SA with exact
local heads (``head_solver="lstsq"``: SA then returns the pooled least-squares heads, as Alg. 2)
and step 1.0 on B, full participation, 150 rounds, the distance evaluated every round, 40
seeds. simfl's encoder step uses each client's own heads (Alg. 1) instead of Alg. 2's global
heads (see :mod:`simfl.algorithms.feddar`).

For each seed: the floor is the median distance of the last 20 rounds, the descent runs from
round 0 to the first round below 30x the floor, and log dist is fitted by least squares on the
descent (the per-round factor is exp(slope)) and on each half of it. Checks:

* every seed contracts (factor < 1) and the log-linear fit explains the descent (its R^2);
* linear, not sublinear: the second half's log-rate over the first half's. A geometric
  descent gives 1 (or more, as the start's misalignment E0 wears off); dist ~ C / (1 + t)^p
  from round 0 over a descent of T rounds gives about ln 2 / ln(T / 2) (endpoints), 0.26 for
  T = 30 and at most 0.5 for any T >= 8, whatever p. The claim holds if every seed's ratio is
  above 0.5. (A power law shifted by t0 >> T, C / (t0 + t)^p, looks geometric over a window
  of T rounds, so this separates geometric descent from power laws started at round 0, the
  form sublinear convergence bounds take.)

    python analysis/feddar_rate.py [--quick] [--seeds S] [--results DIR]
"""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import feddar
from _common import claim, parser, save, write_results

from simfl import run
from simfl.algorithms.feddar import FedDAR

FULL = {"samples": (10, 20), "rounds": 150, "seeds": 40, "n": 100}
QUICK = {"samples": (10,), "rounds": 80, "seeds": 3, "n": 100}
FLOOR_TAIL = 20  # rounds whose median distance is the floor
FLOOR_FACTOR = 30.0  # the descent ends at the first round below 30x the floor
#: A sublinear descent dist ~ C / t^p over T >= 8 rounds has a second-half/first-half log-rate
#: ratio ln 2 / ln(T / 2) <= 0.5; a geometric one has 1.
LINEAR_RATIO = 0.5


def curve(m: int, seed: int, rounds: int, n: int) -> np.ndarray:
    """dist(B^t, B*) for t = 0..rounds (round 0: the MoM initialisation)."""
    sc = dataclasses.replace(
        feddar.base_scenario(n, rounds),
        task=feddar.task(m),
        algorithm=FedDAR(aggregation="sa", step_size=1.0),
        eval_every=1,
        seed=seed,
    )
    res = run(sc, progress=False, on_error="raise")
    return np.r_[res.meta["initial_metrics"]["distance"], res.rounds["distance"].to_numpy()]


def _slope(t: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least-squares slope of ``y`` on ``t`` and the fit's R^2."""
    slope, icept = np.polyfit(t, y, 1)
    resid = y - (slope * t + icept)
    total = float(np.sum((y - y.mean()) ** 2))
    return float(slope), 1.0 - float(np.sum(resid**2)) / total if total > 0 else 1.0


def descent(dist: np.ndarray) -> dict[str, float]:
    """The seed's floor, descent length, per-round factor, fit R^2 and half-rate ratio."""
    floor = float(np.median(dist[-FLOOR_TAIL:]))
    below = np.flatnonzero(dist < FLOOR_FACTOR * floor)
    end = int(below[0]) if below.size else dist.size - 1
    t = np.arange(end + 1, dtype=np.float64)
    y = np.log(dist[: end + 1])
    slope, r2 = _slope(t, y)
    half = end // 2
    first, _ = _slope(t[: half + 1], y[: half + 1])
    second, _ = _slope(t[half:], y[half:])
    return {
        "floor": floor,
        "descent rounds": float(end),
        "log-rate": slope,
        "factor": math.exp(slope),
        "R2": r2,
        "second/first": second / first if first < 0 else math.nan,
    }


def experiment(size: dict, seeds: range) -> tuple[pd.DataFrame, dict[int, np.ndarray]]:  # type: ignore[type-arg]
    """One row per (m, seed), and the mean log-distance curve per m."""
    rows, curves = [], {}
    for m in size["samples"]:
        logs = []
        for seed in seeds:
            dist = curve(m, seed, size["rounds"], size["n"])
            logs.append(np.log10(dist))
            rows.append({"m": m, "seed": seed, **descent(dist)})
        curves[m] = np.mean(logs, axis=0)
    return pd.DataFrame(rows), curves


def summary(rows: pd.DataFrame) -> pd.DataFrame:
    """Per m: the factor (mean, SE), the worst R^2 and half-rate ratio, and the floor."""
    g = rows.groupby("m")
    out = pd.DataFrame(
        {
            "seeds": g.size(),
            "factor": g["factor"].mean(),
            "factor SE": g["factor"].sem(),
            "descent rounds": g["descent rounds"].mean(),
            "min R2": g["R2"].min(),
            "second/first mean": g["second/first"].mean(),
            "second/first min": g["second/first"].min(),
            "floor (median)": g["floor"].median(),
            "all contract": g["factor"].max() < 1,
        }
    )
    out["linear"] = out["all contract"] & (out["second/first min"] > LINEAR_RATIO)
    return out.reset_index()


def claims(tab: pd.DataFrame) -> list[dict[str, str]]:
    ok = bool(tab["linear"].all())
    ours = "; ".join(
        f"m={r['m']}: factor {r['factor']:.3f} +- {r['factor SE']:.3f} per round over "
        f"{r['descent rounds']:.0f} rounds to a floor of {r['floor (median)']:.1e}, "
        f"second/first-half log-rate {r['second/first mean']:.2f} (min {r['second/first min']:.2f} "
        f"of {r['seeds']} seeds), fit R^2 >= {r['min R2']:.3f}"
        for _, r in tab.iterrows()
    )
    return [
        claim(
            "FedDAR",
            "Appendix A: linear convergence of dist(B^t, B*) for the linear FedDAR (Alg. 2)",
            "informal theorem, constants not retrieved",
            ours,
            "qualitative" if ok else "not reproduced",
            "the shape is checked (a constant per-round factor down to the noise floor: every "
            f"seed's second-half log-rate above {LINEAR_RATIO} of its first half's, which a "
            "sublinear C/t^p descent cannot reach); no rate, since the theorem's constants "
            "were not retrievable; simfl's B step uses the clients' own heads (Alg. 1)"
            if ok
            else "a seed's descent slows as a sublinear one would",
        )
    ]


def figure(curves: dict[int, np.ndarray], out: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for m, c in curves.items():
        ax.plot(np.arange(c.size), c, label=f"FedDAR-SA, m={m}")
    ax.set_xlabel("round")
    ax.set_ylabel("log10 dist(B^t, B*) (mean over seeds)")
    ax.set_title("FedDAR (linear): geometric descent to a noise floor")
    ax.legend()
    return save(fig, out, "feddar_rate")


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=None)
    p.add_argument("--results", default=None, help="directory for the results JSON")
    args = p.parse_args()
    size = QUICK if args.quick else FULL
    seeds = range(args.seeds or size["seeds"])
    rows, curves = experiment(size, seeds)
    tab = summary(rows)
    pd.set_option("display.width", 220)
    print(
        f"FedDAR-SA, n={size['n']}, M=5, d=20, k=2, {size['rounds']} rounds: per-round factor "
        "of dist(B^t, B*) on the descent (to 30x the floor)"
    )
    print(tab.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    cl = claims(tab)
    for c in cl:
        print(f"[{c['status']}] {c['claim']}: {c['ours']}")
    write_results(
        args,
        "feddar_rate",
        {"table": tab.to_dict(orient="records"), "rounds": size["rounds"], "n": size["n"]},
        cl,
        checks="linear FedDAR-SA: dist(B^t, B*) per round, geometric (linear) vs sublinear "
        "descent (Appendix A's informal theorem)",
        measured=cl[0]["ours"],
    )
    print(f"figure: {figure(curves, args.out)}")


if __name__ == "__main__":
    main()
