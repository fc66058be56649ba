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
    over ``--draws`` simulated seeds) and the time to the target, compared with the measured
    ones. The fit is over the regular families (exponential, log-normal): with six jobs per
    tier, the families whose support starts at a fitted bound (uniform: the sample's range;
    Pareto, whose fitted tail can lack a mean) are not regular models and AIC is no guide
    among them (see :mod:`simfl.fleet.fit`). The same prediction over all of simfl's
    families is reported beside it (``fitted_all``).

It writes ``analysis/results/twin_fidelity.json`` (each case's errors, the medians and worst
cases before and after calibration, the policy rankings, the calibrated server, the system's
measured overheads; a ``--quick`` run writes beside its figure instead), the figure
``twin_fidelity.png`` (measured against predicted round durations) in ``--out``, and keeps
every measured run under ``analysis/results/twin_runs/`` as a results folder (``--reuse``
analyses those again without playing them).

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
from _common import parser, save, write_results

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


def spread(runs: dict[tuple[str, str, int], tuple[Scenario, Results]]) -> dict[str, float]:
    """How much the per-message costs vary over all arrived jobs (simulated seconds), and
    their share of a job's duration: what a constant cost per message cannot follow."""
    jobs = pd.concat([real.clients for _, real in runs.values()], ignore_index=True)
    got = jobs[jobs["status"].astype(str) == "arrived"]
    share = (got["dispatch"] + got["return_"]) / (got["t_end"] - got["t_start"])
    played = got["download"] + got["compute"] + got["upload"]
    planned = got["planned_download"] + got["planned_compute"] + got["planned_upload"]
    rest = (got["t_end"] - got["t_start"]) - (played + got["dispatch"] + got["return_"])
    out = {
        "jobs": float(len(got)),
        "overhead_share_median": float(share.median()),
        # how closely the SuperNodes played the drawn durations (sleep granularity, overruns)
        "emulation_error_median": float((played - planned).abs().median()),
        "emulation_error_max": float((played - planned).abs().max()),
        # a job's duration not in its five parts (should be nil: the parts tile it)
        "unaccounted_max": float(rest.abs().max()),
    }
    for col, name in (("dispatch", "dispatch"), ("return_", "return")):
        out[f"{name}_p10"] = float(got[col].quantile(0.1))
        out[f"{name}_p90"] = float(got[col].quantile(0.9))
    return out


#: The calibration's grid: message handlers at once, and factors of the measured per-message
#: cost's centre (0.25 to 1.5 in steps of 0.05).
CONCURRENCY: tuple[int | None, ...] = (None, 1, 2, 3, 4)
FACTORS: tuple[float, ...] = tuple(np.linspace(0.25, 1.5, 26))


def calibrate(
    pairs: list[tuple[Scenario, Results]],
    payload: float,
    concurrency: tuple[int | None, ...] = CONCURRENCY,
    factors: tuple[float, ...] = FACTORS,
) -> Server:
    """The server costs that best explain the calibration runs (see the module docstring)."""
    gaps = [overheads(real)["aggregation_median"] for _, real in pairs]
    messages = [overheads(real)["message_median"] for _, real in pairs]
    agg = float(np.nanmedian(gaps))
    # a run where no job arrived (a deadline every job missed) says nothing about messages
    centre = float(np.nanmedian(messages))
    best: tuple[float, Server] | None = None
    for conc, factor in itertools.product(concurrency, factors):
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


#: The families the fitted prediction chooses among (see the module docstring).
REGULAR = (Exponential, LogNormal)


def fitted_prediction(
    sc: Scenario,
    real: Results,
    server: Server,
    k: int,
    draws: int,
    families: tuple[type[Any], ...] | None = REGULAR,
) -> dict[str, Any]:
    """Fit the fleet on the first ``k`` measured rounds; predict the time of the others
    (``families=None``: all of :data:`simfl.fleet.FAMILIES`)."""
    c = real.clients
    first = c[c["round"] < k].copy()
    groups = dict(enumerate(sc.fleet.group_labels()))
    first["group"] = first["device"].map(groups)
    if not (first["status"].astype(str) == "arrived").any():  # nothing measured to fit
        return {"k": k, "error": math.nan, "ttt_error": math.nan, "note": "no arrived job"}
    fit = fit_fleet(
        first[["device", "compute", "status", "group", "download", "upload"]],
        by="group",
        min_jobs=3,
        **({} if families is None else {"families": list(families)}),
    )
    fleet = fit.fleet
    r = real.rounds
    metric, below = TARGET
    reached = np.flatnonzero(r[metric].to_numpy() <= below)
    # the round that reaches the target, when it is one of those predicted
    target = int(reached[0]) if len(reached) and reached[0] >= k else None
    measured_rest = float(r["time"].iloc[-1] - r["t_start"].iloc[k])
    rests, to_target = [], []
    payload = float(real.clients["bytes_down"].max())
    for s in range(draws):
        pred = simfl.run(
            dataclasses.replace(timing(sc, payload), fleet=fleet, server=server, seed=10_000 + s),
            progress=False,
        )
        pr = pred.rounds
        rests.append(float(pr["time"].iloc[-1] - pr["t_start"].iloc[k]))
        if target is not None:
            to_target.append(float(pr["time"].iloc[target] - pr["t_start"].iloc[k]))
    predicted = float(np.mean(rests))
    ttt: dict[str, Any] = {"ttt_measured": math.nan, "ttt_predicted": math.nan}
    if target is not None:
        # the first k rounds as measured, the rest up to the target round as predicted
        ttt["ttt_measured"] = float(r["time"].iloc[target])
        ttt["ttt_predicted"] = float(r["t_start"].iloc[k]) + float(np.mean(to_target))
    ttt["ttt_error"] = abs(ttt["ttt_predicted"] - ttt["ttt_measured"]) / ttt["ttt_measured"]
    return {
        "k": k,
        "measured_rest": measured_rest,
        "predicted_rest": predicted,
        "predicted_rest_sd": float(np.std(rests, ddof=1)) if draws > 1 else math.nan,
        "error": abs(predicted - measured_rest) / measured_rest,
        **ttt,
        "families": fit.report[["family", "n"]].astype(str).to_dict("records")
        if "family" in fit.report
        else [],
    }


def _order(x: float, y: float) -> int:
    """-1, 0 or 1 as ``x`` is below, equal to (two runs that never reach it) or above ``y``."""
    return 0 if x == y else -1 if x < y else 1


def rankings(table: pd.DataFrame, column: str) -> dict[str, Any]:
    """Pairwise policy orders by ``column`` (lower is better), measured against predicted;
    over all seeds and over the held-out ones (seed 0 calibrated the server)."""
    agree, total, held_agree, held_total, flips = 0, 0, 0, 0, []
    for (fleet, seed), g in table.groupby(["fleet", "seed"]):
        g = g.set_index("policy")
        for a, b in itertools.combinations(sorted(g.index), 2):
            m = _order(g.at[a, "measured_" + column], g.at[b, "measured_" + column])
            same = m == _order(g.at[a, column], g.at[b, column])
            total += 1
            agree += same
            if seed != 0:
                held_total += 1
                held_agree += same
            if not same:
                flips.append(f"{fleet} seed {seed}: {a} vs {b}")
    return {
        "pairs": total,
        "preserved": agree,
        "held_out_pairs": held_total,
        "held_out_preserved": held_agree,
        "flipped": flips,
    }


def _pct(x: float | None) -> str:
    """A relative error as a percentage (``None``: a NaN or inf the results file dropped)."""
    return "n/a" if x is None or not math.isfinite(x) else f"{100 * x:.1f}%"


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
    f, fa = h["fitted_rest"], h["fitted_rest_all"]
    bp = r["by_policy"]
    per_policy = "; ".join(
        f"{name} {_pct(v['round_median'])}, predicted short in {v['predicted_short']} of "
        f"{v['runs']}"
        for name, v in bp.items()
    )
    rk = r["rankings"]
    lines += [
        "",
        f"The system's own costs, in simulated seconds (medians over all runs): "
        f"{o['dispatch_median']:.2f} s from the server's send to the ClientApp's start, "
        f"{o['return_median']:.2f} s from its reply to the server's receipt, "
        f"{o['aggregation_median']:.3f} s per aggregation; the largest training overrun was "
        f"{o['overrun_max']:.3f} s. Over the {o['jobs']:.0f} arrived jobs the send-to-start "
        f"time ranged from {o['dispatch_p10']:.2f} to {o['dispatch_p90']:.2f} s (10th to 90th "
        f"percentile: Flower's SuperNode asks for work every 3 wall seconds when idle, then "
        f"starts a process for the message) and the return from {o['return_p10']:.2f} to "
        f"{o['return_p90']:.2f} s; the two made {_pct(o['overhead_share_median'])} of a job's "
        f"duration (median), and a constant cost per message cannot follow their spread. The "
        f"SuperNodes played the drawn download, compute and upload times to within "
        f"{o['emulation_error_median']:.3f} s (median; worst {o['emulation_error_max']:.3f} s). "
        f"The calibrated server: "
        f"`Server(aggregate_seconds={srv['aggregate_seconds']:.3g}, "
        f"overhead_per_message={srv['overhead_per_message']:.3g}, concurrency={conc})`. "
        f"By policy (held-out median round error, calibrated; runs whose time to the target "
        f"it predicted short): {per_policy}. A round that waits for all of its messages waits "
        f"for the slowest of several random delays, which is longer than the constant cost "
        f"the calibration fitted to their middle.",
        "",
        f"A fleet fitted on each run's first {c['k']} rounds (per tier, exponential or "
        f"log-normal by AIC, with the calibrated server) predicted the remaining rounds' time "
        f"with a median error of "
        f"{_pct(f['median'])} (worst {_pct(f['worst'])}), and the time to the target with "
        f"{_pct(f['ttt_median'])} (worst {_pct(f['ttt_worst'])}; the {f['ttt_runs']} held-out "
        f"runs that reached it after round {c['k']}). Fitted over all of simfl's families "
        f"instead (uniform, Pareto and the shifted exponential too) the errors "
        f"were {_pct(fa['median'])} (worst {_pct(fa['worst'])}) and {_pct(fa['ttt_median'])} "
        f"(worst {_pct(fa['ttt_worst'])}). The three policies' pairwise order by "
        f"the time to the target (test MSE <= 1.0) was preserved in {rk['free']['preserved']} of "
        f"{rk['free']['pairs']} pairs as written and {rk['calibrated']['preserved']} of "
        f"{rk['calibrated']['pairs']} calibrated ({rk['calibrated']['held_out_preserved']} of "
        f"the {rk['calibrated']['held_out_pairs']} on held-out seeds). The same devices' "
        f"updates were aggregated in every round in {r['same_arrivals']['free']} of "
        f"{len(r['cases'])} runs as written and {r['same_arrivals']['calibrated']} calibrated, "
        f"and the test errors equalled simfl.run's bit for bit in "
        f"{r['same_metrics']['free']} and {r['same_metrics']['calibrated']} (the SuperNodes "
        f"train as simfl seeds the app: the same updates give the same model).",
    ]
    cal = h["calibrated"]
    goals = {
        "median round-duration error <= 5% calibrated": cal["round_median"] <= 0.05,
        "median time-to-target error <= 5% calibrated": cal["ttt_median"] <= 0.05,
        "every pairwise order preserved": rk["calibrated"]["preserved"]
        == rk["calibrated"]["pairs"],
    }
    met = [g for g, ok in goals.items() if ok]
    missed = [g for g, ok in goals.items() if not ok]
    lines += [
        "",
        f"The goal set for the twin: {'; '.join(goals)}. Met: {', '.join(met) or 'none'}. "
        f"Missed: {', '.join(missed) or 'none'}.",
    ]
    return "\n".join(lines)


def analyse(
    runs: dict[tuple[str, str, int], tuple[Scenario, Results]],
    k: int,
    draws: int,
    grid: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], pd.DataFrame]:
    """Calibrate on seed 0, compare every run three ways; the numbers and the paired rounds."""
    seeds = sorted({s for _, _, s in runs})
    calibration = [runs[(f, p, 0)] for f, p in itertools.product(fleets(), POLICIES)]
    payload = float(calibration[0][1].clients["bytes_down"].max())
    server = calibrate(calibration, payload, **(grid or {}))
    print(f"calibrated: {server}", flush=True)
    rows, paired = [], []
    metric, below = TARGET
    for (fleet, policy, seed), (sc, real) in runs.items():
        free = simfl.run(sc, progress=False)
        cal = simfl.run(dataclasses.replace(sc, server=server), progress=False)
        row: dict[str, Any] = {
            "fleet": fleet,
            "policy": policy,
            "seed": seed,
            "held_out": seed != 0,
            **overheads(real),
            "measured_time": float(real.rounds["time"].iloc[-1]),
        }
        for name, pred in (("free", free), ("calibrated", cal)):
            fid = compare(pred, real, metric=metric, below=below)
            s = fid.summary()
            row.update({f"{name}_{key}": v for key, v in s.items()})
            row[f"{name}_time"] = s["ttt_predicted"]
            paired.append(fid.rounds.assign(prediction=name, held_out=seed != 0, fleet=fleet))
        row["measured_ttt"] = s["ttt_measured"]
        for name, pred in (("free", free), ("calibrated", cal)):
            row[f"same_metrics_{name}"] = bool(
                np.array_equal(pred.rounds[metric].to_numpy(), real.rounds[metric].to_numpy())
            )
            row[f"same_arrivals_{name}"] = bool(row[f"{name}_same_arrivals"] == 1.0)
        row["fitted"] = fitted_prediction(sc, real, server, k, draws)
        row["fitted_all"] = fitted_prediction(sc, real, server, k, draws, families=None)
        rows.append(row)
    table = pd.DataFrame(rows)
    held = table[table["held_out"]]

    def errors(name: str) -> dict[str, float]:
        return {
            "round_median": float(held[f"{name}_round_error_median"].median()),
            "round_worst": float(held[f"{name}_round_error_max"].max()),
            "job_median": float(held[f"{name}_job_error_median"].median()),
            "job_worst": float(held[f"{name}_job_error_max"].max()),
            "ttt_median": float(held[f"{name}_ttt_error"].median()),
            "ttt_worst": float(held[f"{name}_ttt_error"].max()),
        }

    def fitted(key: str) -> dict[str, float]:
        held_rows = [r[key] for r in rows if r["held_out"]]
        rest = [f["error"] for f in held_rows if math.isfinite(f["error"])]
        ttt = [f["ttt_error"] for f in held_rows if math.isfinite(f["ttt_error"])]
        return {
            "median": float(np.median(rest)) if rest else math.nan,
            "worst": float(np.max(rest)) if rest else math.nan,
            "ttt_median": float(np.median(ttt)) if ttt else math.nan,
            "ttt_worst": float(np.max(ttt)) if ttt else math.nan,
            "ttt_runs": len(ttt),
        }

    out = {
        "config": {
            "seeds": len(seeds),
            "rounds": int(max(len(real.rounds) for _, real in runs.values())),
            "k": k,
            "draws": draws,
            "devices": 4,
            "flwr": __import__("flwr").__version__,
        },
        "server": dataclasses.asdict(server),
        "held_out": {
            "free": errors("free"),
            "calibrated": errors("calibrated"),
            "fitted_rest": fitted("fitted"),
            "fitted_rest_all": fitted("fitted_all"),
        },
        "by_policy": {
            policy: {
                "round_median": float(g["calibrated_round_error_median"].median()),
                "runs": len(g),
                "predicted_short": int((g["calibrated_time"] < g["measured_ttt"]).sum()),
            }
            for policy, g in held.groupby("policy", sort=False)
        },
        "rankings": {
            "free": rankings(table.assign(measured_free_time=table["measured_ttt"]), "free_time"),
            "calibrated": rankings(
                table.assign(measured_calibrated_time=table["measured_ttt"]), "calibrated_time"
            ),
        },
        "same_metrics": {
            name: int(table[f"same_metrics_{name}"].sum()) for name in ("free", "calibrated")
        },
        "same_arrivals": {
            name: int(table[f"same_arrivals_{name}"].sum()) for name in ("free", "calibrated")
        },
        "overheads": {
            "dispatch_median": float(table["dispatch_median"].median()),
            "return_median": float(table["return_median"].median()),
            "aggregation_median": float(table["aggregation_median"].median()),
            "overrun_max": float(table["overrun_max"].max()),
            **spread(runs),
        },
        "cases": rows,
    }
    return out, pd.concat(paired, ignore_index=True)


def figure(paired: pd.DataFrame, out: str) -> Path:
    """Measured against predicted round durations, as written and calibrated."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    fig, axes = plt.subplots(1, 2, figsize=(9, 4.2), sharex=True, sharey=True)
    top = float(paired[["predicted", "measured"]].to_numpy().max()) * 1.05
    for ax, name in zip(axes, ("free", "calibrated"), strict=True):
        d = paired[paired["prediction"] == name]
        sns.scatterplot(data=d, x="measured", y="predicted", hue="fleet", style="held_out", ax=ax)
        ax.plot([0, top], [0, top], color="grey", lw=1)
        ax.set(
            title="as written (free server)" if name == "free" else "calibrated Server",
            xlabel="measured round duration (s)",
            ylabel="simfl.run's prediction (s)",
            xlim=(0, top),
            ylim=(0, top),
        )
    fig.tight_layout()
    return save(fig, out, "twin_fidelity")


def checks_text(r: dict[str, Any]) -> tuple[str, str]:
    """The study's row of the table of checks: what it checks, what it measured."""
    c, h = r["config"], r["held_out"]
    checks = (
        "simfl.run's round and job durations and time to a target against the same scenario "
        f"played for real on Flower {c['flwr']}'s Deployment Engine (3 policies x 2 fleets x "
        f"{c['seeds']} seeds, a Flower app trained on both sides); goal: median error <= 5% "
        "and the policies' order preserved"
    )
    free, cal, rk = h["free"], h["calibrated"], r["rankings"]
    measured = (
        f"held-out median round error {_pct(free['round_median'])} as written, "
        f"{_pct(cal['round_median'])} with a calibrated Server (time to target "
        f"{_pct(free['ttt_median'])}, {_pct(cal['ttt_median'])}); order kept in "
        f"{rk['calibrated']['preserved']} of {rk['calibrated']['pairs']} pairs calibrated; "
        f"test errors bit-identical in {r['same_metrics']['calibrated']} of "
        f"{len(r['cases'])} runs calibrated"
    )
    return checks, measured


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=None)
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--k", type=int, default=None, help="rounds the fitted fleet is fitted on")
    p.add_argument("--draws", type=int, default=None, help="simulated seeds per prediction")
    p.add_argument("--reuse", action="store_true", help="analyse the stored measured runs")
    p.add_argument("--results", default=None, help="folder for twin_fidelity.json")
    p.add_argument("--runs", default=str(RUNS), help="folder of the measured runs")
    args = p.parse_args()
    seeds = args.seeds or 2
    rounds = args.rounds or (3 if args.quick else 6)
    k = args.k or max(1, rounds // 2)
    draws = args.draws or (5 if args.quick else 40)
    started = time.time()
    runs: dict[tuple[str, str, int], tuple[Scenario, Results]] = {}
    for fleet, policy, seed in itertools.product(fleets(), POLICIES, range(seeds)):
        sc = scenario(fleet, policy, seed, rounds)
        t = time.time()
        runs[(fleet, policy, seed)] = (sc, measured(sc, args.scale, args.reuse, Path(args.runs)))
        print(f"measured {sc.name} seed {seed} in {time.time() - t:.0f} s", flush=True)
    scales = {float(real.meta["twin"]["scale"]) for _, real in runs.values()}
    out, paired = analyse(runs, k, draws)
    out["config"]["scale"] = scales.pop() if len(scales) == 1 else sorted(scales)
    out["wall_seconds"] = time.time() - started
    print(figure(paired, args.out))
    checks, measured_text = checks_text(out)
    write_results(args, "twin_fidelity", out, [], checks=checks, measured=measured_text)
    print(
        json.dumps(
            {key: out[key] for key in ("server", "held_out", "rankings", "overheads")},
            indent=1,
            default=float,
        )
    )
    print(f"\ndocs block:\n{docs_text(out)}")


if __name__ == "__main__":
    main()
