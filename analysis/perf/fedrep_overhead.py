"""Target 2: simulation overhead on FedRep-linear against the same math in a plain numpy loop.

FedRep (Collins et al. 2021, Alg. 2) on the linear representation task with n=1000 clients,
10% of them per round, d=20, k=2, 10 fresh samples per client per round, 200 rounds, the
method-of-moments start over all clients and both metrics (principal-angle distance and the
personalised test MSE of 1000 evaluated clients) every round: once as a simfl scenario on an
Exp(1) fleet (every device job timed by the engine, every round recorded), once as a plain
vectorised numpy loop with no simulator (numpy's own generator for the data, nothing timed or
recorded). The ratio of total times is the simulator's overhead; the goal is at most 1.5.

    python analysis/perf/fedrep_overhead.py [--quick] [--repeats 5]
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _perf import parser, report, shown

D, K, M, STEP, NOISE, TEST = 20, 2, 10, 0.25, 1e-3, 100


def plain_fedrep(n: int, fraction: float, rounds: int, seed: int = 0) -> float:
    """FedRep written out with numpy only; returns the final principal-angle distance."""
    rng = np.random.default_rng(seed)
    b_star = np.linalg.qr(rng.standard_normal((D, K)))[0]
    heads = rng.standard_normal((n, K))
    heads *= math.sqrt(K) / np.linalg.norm(heads, axis=1, keepdims=True)
    theta = heads @ b_star.T  # (n, d): each client's true model

    def batch(clients: np.ndarray, m: int, noisy: bool) -> tuple[np.ndarray, np.ndarray]:
        x = rng.standard_normal((clients.size, m, D))
        y = (x @ theta[clients][:, :, None])[:, :, 0]
        if noisy:
            y = y + NOISE * rng.standard_normal(y.shape)
        return x, y

    def fit_heads(x: np.ndarray, y: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.asarray((np.linalg.pinv(x @ b) @ y[:, :, None])[:, :, 0])

    def distance(b: np.ndarray) -> float:
        q, q_star = np.linalg.qr(b)[0], np.linalg.qr(b_star)[0]
        return float(np.linalg.norm(q_star - q @ (q.T @ q_star), 2))

    everyone = np.arange(n)
    x, y = batch(everyone, M, True)  # method of moments over all clients
    xs = x.reshape(-1, D)
    b = np.linalg.eigh((xs * (y.reshape(-1, 1) ** 2)).T @ xs / (n * M))[1][:, ::-1][:, :K]
    evaluated = everyone[: min(n, 1000)]
    x_fit, y_fit = batch(evaluated, M, True)
    x_test, y_test = batch(evaluated, TEST, False)
    cohort = max(1, round(fraction * n))
    dist = math.nan
    for _ in range(rounds):
        clients = np.sort(rng.choice(n, cohort, replace=False))
        x, y = batch(clients, M, True)
        w = fit_heads(x, y, b)
        residual = (x @ (b @ w.T).T[:, :, None])[:, :, 0] - y
        grad = ((x.transpose(0, 2, 1) @ residual[:, :, None]) @ w[:, None, :]) / M
        b = np.linalg.qr(np.mean(b[None] - STEP * grad, axis=0))[0]
        w_eval = fit_heads(x_fit, y_fit, b)  # evaluation, every round
        pred = (x_test @ (w_eval @ b.T)[:, :, None])[:, :, 0]
        float(np.mean(np.mean((pred - y_test) ** 2, axis=1)))
        dist = distance(b)
    return dist


def simfl_fedrep(n: int, fraction: float, rounds: int, seed: int = 0) -> float:
    """The same workload as a simfl scenario; returns the final distance."""
    from simfl import Fleet, Scenario, algorithms, dists, policies, run, tasks

    sc = Scenario(
        task=tasks.LinearRepresentation(d=D, k=K, samples_per_client=M, noise_std=NOISE),
        algorithm=algorithms.FedRep(step_size=STEP),
        fleet=Fleet.homogeneous(n, compute=dists.Exponential(mean=1.0)),
        policy=policies.WaitAll(fraction=fraction),
        rounds=rounds,
        seed=seed,
    )
    return float(run(sc, progress=False).rounds["distance"].iloc[-1])


def measure(quick: bool = False, repeats: int = 5) -> list[dict[str, Any]]:
    """Median total times of both, interleaved, and their ratio."""
    n, rounds = (1000, 40) if quick else (1000, 200)
    times: dict[str, list[float]] = {"simfl": [], "plain": []}
    final: dict[str, float] = {}
    simfl_fedrep(n, 0.1, 2)  # warm imports and caches for both
    plain_fedrep(n, 0.1, 2)
    for rep in range(repeats):
        for name, fn in (("simfl", simfl_fedrep), ("plain", plain_fedrep)):
            t = time.perf_counter()
            final[name] = fn(n, 0.1, rounds, seed=rep)
            times[name].append(time.perf_counter() - t)
    ratios = [s / p for s, p in zip(times["simfl"], times["plain"], strict=True)]
    med = {k: statistics.median(v) for k, v in times.items()}
    return [
        {
            "target": "2 FedRep-linear overhead",
            "setting": f"n={n}, 10%/round, d={D}, k={K}, m={M}, {rounds} rounds",
            "simfl": round(med["simfl"], 4),
            "baseline": round(med["plain"], 4),
            "unit": "s total",
            "ratio": shown(statistics.median(ratios), 3, at_least=False),
            "goal": "simfl/plain <= 1.5",
            "passed": statistics.median(ratios) <= 1.5,
            "note": f"final distance simfl {final['simfl']:.2e}, plain {final['plain']:.2e}",
        }
    ]


if __name__ == "__main__":
    args = parser(__doc__).parse_args()
    report(measure(args.quick, args.repeats), args.out, "fedrep_overhead")
