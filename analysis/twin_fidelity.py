"""Trust the clock: simfl.run's prediction against the same scenario played for real.

Every case is played twice with the same scenario and seed: by :func:`simfl.run` (the
prediction) and by :func:`simfl.twin.twin` (the measurement: a Flower SuperLink and one
SuperNode per device on this machine, the policy in a ServerApp, each job emulating its
device's drawn durations times ``--scale`` wall seconds per simulated second). The grid:

    fleets     tiered     2 fast devices (Exp, mean 2 s) and 2 slow (Exp, mean 6 s)
               lognormal  4 devices, LogNormal compute (mean 4 s, std 3 s)
    policies   wait-all   WaitAll()
               deadline   Deadline(6 s)
               fastest-2  FastestK(k=2) over all 4 devices
    seeds      --seeds (default 2); links 0.2 s latency, 1 MB/s both ways
    app        docs/examples/flower_linreg: a Flower app (Message API, numpy only) training a
               linear regression with FedAvg; target: test MSE <= 1.0 (four times the noise
               floor of 0.25)

Three predictions are compared with each measurement (:func:`simfl.twin.fidelity.compare`,
paired round by round and job by job):

``free``
    the scenario as written: a server that costs nothing (simfl's default);
``calibrated``
    with a :class:`simfl.Server` whose costs were fitted on the *calibration seed* (seed 0)
    of every case and are then used unchanged on the other seeds (held out): the aggregation
    seconds are the median gap between a round's close and the next round's start, and the
    per-message overhead and concurrency are the pair of a grid that gives the smallest median
    round-duration error on the calibration seed;
``fitted``
    "calibrate on the first k rounds, predict the rest": a fleet fitted by maximum likelihood
    (:func:`simfl.fleet.fit_fleet`, per tier) from the first ``--k`` rounds of each measured
    run, with the calibrated server; it predicts the duration of the remaining rounds (mean
    over ``--draws`` simulated seeds), compared with the measured remaining time.

It writes ``analysis/results/twin_fidelity.json`` (each case's errors, the medians and worst
cases before and after calibration, the policy rankings, the calibrated server, the system's
measured overheads) and keeps every measured run under ``analysis/results/twin_runs/`` as a
results folder (``--reuse`` analyses those again without playing them).

    python analysis/twin_fidelity.py [--quick] [--seeds S] [--rounds R] [--scale X] [--reuse]
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import parser

import simfl
from simfl import Fleet, Profile, Results, Scenario, Server
from simfl.algorithms import TimingOnly
from simfl.dists import Exponential, LogNormal
from simfl.fleet import fit_fleet
from simfl.flower import FlowerApp, FlowerTask
from simfl.policies import Deadline, FastestK, WaitAll
from simfl.twin import twin
from simfl.twin.fidelity import compare

HERE = Path(__file__).resolve().parent
RUNS = HERE / "results" / "twin_runs"
RESULTS = HERE / "results" / "twin_fidelity.json"

LINK = {"latency": 0.2, "bandwidth_down": 1e6, "bandwidth_up": 1e6}
TARGET = ("eval_mse", 1.0)  # test MSE at most four times the noise floor (0.25)

sys.path.insert(0, str(HERE.parent / "docs" / "examples" / "flower_linreg"))
import linreg_app  # noqa: E402  (the Flower app, imported as Flower imports it)


def fleets() -> dict[str, Fleet]:
    fast = Profile(compute=Exponential(mean=2.0), **LINK)
    slow = Profile(compute=Exponential(mean=6.0), **LINK)
    return {
        "tiered": Fleet.tiers((2, fast), (2, slow)).with_groups(["fast"] * 2 + ["slow"] * 2),
        "lognormal": Fleet.homogeneous(4, compute=LogNormal.from_mean_std(4.0, 3.0), **LINK),
    }


POLICIES = {
    "wait-all": WaitAll(),
    "deadline": Deadline(6.0),
    "fastest-2": FastestK(k=2),
}


def flower_app() -> FlowerApp:
    from flwr.app import ArrayRecord
    from flwr.serverapp.strategy import FedAvg

    return FlowerApp(
        client=linreg_app.app,
        strategy=FedAvg(),
        initial=ArrayRecord([np.zeros(linreg_app.DIM)]),
    )


def scenario(fleet: str, policy: str, seed: int, rounds: int) -> Scenario:
    return Scenario(
        task=FlowerTask(metrics=("eval_mse",)),
        algorithm=flower_app(),
        fleet=fleets()[fleet],
        policy=POLICIES[policy],
        rounds=rounds,
        seed=seed,
        name=f"{fleet}-{policy}",
    )


def timing(sc: Scenario, payload: float) -> Scenario:
    """``sc`` without its training: the same jobs, times and arrivals (the policies here never
    read the model), much faster to simulate for the calibration's grid."""
    return dataclasses.replace(
        sc, task=None, algorithm=TimingOnly(bytes_down=int(payload), bytes_up=int(payload))
    )


def measured(sc: Scenario, scale: float, reuse: bool, runs: Path) -> Results:
    folder = runs / f"{sc.name}-seed{sc.seed}"
    if reuse and (folder / "meta.json").exists():
        return Results.load(folder)
    res = twin(sc, scale=scale, timeout=1800)
    if folder.exists():
        import shutil

        shutil.rmtree(folder)
    res.save(folder)
    return res


def overheads(real: Results) -> dict[str, float]:
    """The system's own costs in a measured run, in simulated seconds."""
    c = real.clients
    arrived = c[c["status"].astype(str) == "arrived"]
    return {
        "dispatch_median": float(arrived["dispatch"].median()),
        "return_median": float(arrived["return_"].median()),
        "message_median": float((arrived["dispatch"] + arrived["return_"]).median() / 2),
        "aggregation_median": float(np.median(real.meta["twin"]["aggregation"])),
        "overrun_max": float(c["overrun"].max()),
    }


def calibrate(pairs: list[tuple[Scenario, Results]], payload: float) -> Server:
    """The server costs that best explain the calibration runs (see the module docstring)."""
    gaps = [overheads(real)["aggregation_median"] for _, real in pairs]
    messages = [overheads(real)["message_median"] for _, real in pairs]
    agg = float(np.median(gaps))
    centre = float(np.median(messages))
    best: tuple[float, Server] | None = None
    for conc, factor in itertools.product((None, 1, 2, 3, 4), np.linspace(0.25, 1.5, 26)):
        server = Server(
            aggregate_seconds=agg, overhead_per_message=centre * factor, concurrency=conc
        )
        errors = []
        for sc, real in pairs:
            pred = simfl.run(
                dataclasses.replace(timing(sc, payload), server=server), progress=False
            )
            errors.extend(compare(pred, real).rounds["error"].tolist())
        score = float(np.median(errors))
        if best is None or score < best[0]:
            best = (score, server)
    assert best is not None
    return best[1]


def fitted_prediction(
    sc: Scenario, real: Results, server: Server, k: int, draws: int
) -> dict[str, Any]:
    """Fit the fleet on the first ``k`` measured rounds; predict the time of the others."""
    c = real.clients
    first = c[c["round"] < k].copy()
    groups = dict(enumerate(sc.fleet.group_labels))
    first["group"] = first["device"].map(groups)
    fit = fit_fleet(
        first[["device", "compute", "status", "group", "download", "upload"]],
        by="group",
        min_jobs=3,
    )
    fleet = fit.fleet
    r = real.rounds
    measured_rest = float(r["time"].iloc[-1] - r["t_start"].iloc[k])
    rests = []
    payload = float(real.clients["bytes_down"].max())
    for s in range(draws):
        pred = simfl.run(
            dataclasses.replace(timing(sc, payload), fleet=fleet, server=server, seed=10_000 + s),
            progress=False,
        )
        pr = pred.rounds
        rests.append(float(pr["time"].iloc[-1] - pr["t_start"].iloc[k]))
    predicted = float(np.mean(rests))
    return {
        "k": k,
        "measured_rest": measured_rest,
        "predicted_rest": predicted,
        "predicted_rest_sd": float(np.std(rests, ddof=1)) if draws > 1 else math.nan,
        "error": abs(predicted - measured_rest) / measured_rest,
        "families": fit.report[["family", "n"]].astype(str).to_dict("records")
        if "family" in fit.report
        else [],
    }


def rankings(table: pd.DataFrame, column: str) -> dict[str, Any]:
    """Pairwise policy orders by ``column`` (lower is better), measured against predicted."""
    agree, total, flips = 0, 0, []
    for (fleet, seed), g in table.groupby(["fleet", "seed"]):
        g = g.set_index("policy")
        for a, b in itertools.combinations(sorted(g.index), 2):
            m = np.sign(g.at[a, "measured_" + column] - g.at[b, "measured_" + column])
            p = np.sign(g.at[a, column] - g.at[b, column])
            total += 1
            if m == p:
                agree += 1
            else:
                flips.append(f"{fleet} seed {seed}: {a} vs {b}")
    return {"pairs": total, "preserved": agree, "flipped": flips}


def _pct(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{100 * x:.1f}%"


def docs_text(r: dict[str, Any]) -> str:
    """The docs' block on the study (``docs/twin.md``), from its results file."""
    c, h, o, srv = r["config"], r["held_out"], r["overheads"], r["server"]
    conc = "any number" if srv["concurrency"] is None else str(srv["concurrency"])
    lines = [
        f"From `python analysis/twin_fidelity.py` ({len(r['cases'])} measured runs: 3 policies "
        f"x 2 fleets x {c['seeds']} seeds, {c['rounds']} rounds each, {c['devices']} SuperNodes, "
        f"scale {c['scale']:g}; Flower {c['flwr']}). Errors are relative, on the held-out seeds "
        f"(median of the runs' medians / worst single round or job):",
        "",
        "| prediction | round durations | job durations | time to target |",
        "|---|---|---|---|",
    ]
    for name, label in (
        ("free", "as written (free server)"),
        ("calibrated", "with the calibrated `Server`"),
    ):
        e = h[name]
        lines.append(
            f"| {label} | {_pct(e['round_median'])} / {_pct(e['round_worst'])} | "
            f"{_pct(e['job_median'])} / {_pct(e['job_worst'])} | "
            f"{_pct(e['ttt_median'])} / {_pct(e['ttt_worst'])} |"
        )
    f = h["fitted_rest"]
    rk = r["rankings"]
    lines += [
        "",
        f"The system's own costs, in simulated seconds (medians over all runs): "
        f"{o['dispatch_median']:.2f} s from the server's send to the ClientApp's start, "
        f"{o['return_median']:.2f} s from its reply to the server's receipt, "
        f"{o['aggregation_median']:.3f} s per aggregation; the largest training overrun was "
        f"{o['overrun_max']:.3f} s. The calibrated server: "
        f"`Server(aggregate_seconds={srv['aggregate_seconds']:.3g}, "
        f"overhead_per_message={srv['overhead_per_message']:.3g}, concurrency={conc})`.",
        "",
        f"A fleet fitted on each run's first {c['k']} rounds (per tier, with the calibrated "
        f"server) predicted the remaining rounds' time with a median error of "
        f"{_pct(f['median'])} (worst {_pct(f['worst'])}). The three policies' pairwise order by "
        f"the time to the target (test MSE <= 1.0) was preserved in {rk['free']['preserved']} of "
        f"{rk['free']['pairs']} pairs as written and {rk['calibrated']['preserved']} of "
        f"{rk['calibrated']['pairs']} calibrated. In {r['same_metrics']} of {len(r['cases'])} "
        f"runs the twin's test errors equalled simfl.run's bit for bit (the same updates "
        f"arrived every round, and the SuperNodes trained as simfl seeds the app).",
    ]
    return "\n".join(lines)


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=None)
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--k", type=int, default=None, help="rounds the fitted fleet is fitted on")
    p.add_argument("--draws", type=int, default=None, help="simulated seeds per prediction")
    p.add_argument("--reuse", action="store_true", help="analyse the stored measured runs")
    p.add_argument("--results", default=str(RESULTS))
    p.add_argument("--runs", default=str(RUNS), help="folder of the measured runs")
    args = p.parse_args()
    seeds = args.seeds or 2
    rounds = args.rounds or (3 if args.quick else 6)
    k = args.k or max(1, rounds // 2)
    draws = args.draws or (5 if args.quick else 40)
    cases = list(itertools.product(fleets(), POLICIES, range(seeds)))
    started = time.time()
    runs: dict[tuple[str, str, int], tuple[Scenario, Results]] = {}
    for fleet, policy, seed in cases:
        sc = scenario(fleet, policy, seed, rounds)
        t = time.time()
        runs[(fleet, policy, seed)] = (sc, measured(sc, args.scale, args.reuse, Path(args.runs)))
        print(f"measured {sc.name} seed {seed} in {time.time() - t:.0f} s", flush=True)
    calibration = [runs[(f, p, 0)] for f, p in itertools.product(fleets(), POLICIES)]
    payload = float(calibration[0][1].clients["bytes_down"].max())
    server = calibrate(calibration, payload)
    print(f"calibrated: {server}", flush=True)
    rows = []
    for (fleet, policy, seed), (sc, real) in runs.items():
        free = simfl.run(sc, progress=False)
        cal = simfl.run(dataclasses.replace(sc, server=server), progress=False)
        row: dict[str, Any] = {
            "fleet": fleet,
            "policy": policy,
            "seed": seed,
            "held_out": seed != 0,
            **overheads(real),
        }
        row["measured_time"] = float(real.rounds["time"].iloc[-1])
        metric, below = TARGET
        for name, pred in (("free", free), ("calibrated", cal)):
            s = compare(pred, real, metric=metric, below=below).summary()
            row.update({f"{name}_{key}": v for key, v in s.items()})
            row[f"{name}_time"] = s["ttt_predicted"]
        row["measured_ttt"] = s["ttt_measured"]
        row["same_metrics"] = bool(
            np.array_equal(free.rounds[metric].to_numpy(), real.rounds[metric].to_numpy())
        )
        row["fitted"] = fitted_prediction(sc, real, server, k, draws)
        rows.append(row)
    table = pd.DataFrame(rows)
    held = table[table["held_out"]]

    def med(col: str, frame: pd.DataFrame = held) -> float:
        return float(frame[col].median())

    def worst(col: str, frame: pd.DataFrame = held) -> float:
        return float(frame[col].max())

    rank_free = rankings(table.assign(measured_free_time=table["measured_ttt"]), "free_time")
    rank_cal = rankings(
        table.assign(measured_calibrated_time=table["measured_ttt"]), "calibrated_time"
    )
    fitted_errors = [r["fitted"]["error"] for r in rows if r["held_out"]]
    out = {
        "config": {
            "seeds": seeds,
            "rounds": rounds,
            "scale": args.scale,
            "k": k,
            "draws": draws,
            "devices": 4,
            "quick": args.quick,
            "flwr": __import__("flwr").__version__,
        },
        "server": dataclasses.asdict(server),
        "held_out": {
            "free": {
                "round_median": med("free_round_error_median"),
                "round_worst": worst("free_round_error_max"),
                "ttt_median": med("free_ttt_error"),
                "ttt_worst": worst("free_ttt_error"),
                "job_median": med("free_job_error_median"),
                "job_worst": worst("free_job_error_max"),
            },
            "calibrated": {
                "round_median": med("calibrated_round_error_median"),
                "round_worst": worst("calibrated_round_error_max"),
                "ttt_median": med("calibrated_ttt_error"),
                "ttt_worst": worst("calibrated_ttt_error"),
                "job_median": med("calibrated_job_error_median"),
                "job_worst": worst("calibrated_job_error_max"),
            },
            "fitted_rest": {
                "median": float(np.median(fitted_errors)) if fitted_errors else math.nan,
                "worst": float(np.max(fitted_errors)) if fitted_errors else math.nan,
            },
        },
        "rankings": {"free": rank_free, "calibrated": rank_cal},
        "same_metrics": int(table["same_metrics"].sum()),
        "overheads": {
            "dispatch_median": med("dispatch_median", table),
            "return_median": med("return_median", table),
            "aggregation_median": med("aggregation_median", table),
            "overrun_max": worst("overrun_max", table),
        },
        "cases": rows,
        "wall_seconds": time.time() - started,
    }
    Path(args.results).write_text(json.dumps(out, indent=1, default=float) + "\n")
    print(
        json.dumps(
            {k: out[k] for k in ("server", "held_out", "rankings", "overheads")},
            indent=1,
            default=float,
        )
    )


if __name__ == "__main__":
    main()
