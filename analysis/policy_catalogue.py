"""The straggler-mitigation catalogue: every policy on two seeded fleets, two tasks, 5 seeds.

Fleets (100 devices; seconds are per job, so both tasks see the same job times):

    tiered      60 fast devices Exp(1 s), 30 medium Exp(3 s), 10 slow Exp(15 s); 50 ms
                latency per transfer; no dropouts.
    lognormal   Exp(1 s) per job times a persistent per-device factor, log-normal with mean 1
                and std 2 (a heavy tail of reliably slow devices); 50 ms latency; a dropout
                hazard of 0.02 per busy second. Its "tiers" (for the update shares only) are
                the 60% fastest, the next 30% and the slowest 10% by that factor.

Tasks:

    linear      linear FedRep (d=20, k=2, m=10 fresh samples, noise 1e-3) with 5 local
                representation steps of 0.1 (FedRep(local_steps=5): the paper's Algorithm 2
                takes one; five give partial work something to cut), target: principal-angle
                distance <= 1e-3.
    neural      FedAvg of an MLP (64-32-16-10) on scikit-learn's 8x8 digits, Dirichlet(1.0)
                label split, 2 local epochs of SGD (lr 0.05, batch 10); target: accuracy >=
                0.85. Work is the job's multiply-accumulates, so data-rich clients take longer.

Policies, 20 updates per aggregation wherever the policy has such a knob:

    wait-all        WaitAll(count=20)
    deadline        Deadline(4 s, count=20)
    partial-work    Deadline(4 s, count=20, partial=True): each device does the local steps
                    that fit (linear: FedNova's normalised average; neural: the plain
                    size-weighted average, simfl has no FedNova for momentum SGD yet)
    adaptive        AdaptiveDeadline(quantile=0.8, count=20)
    fastest-k       FastestK(k=20, overcommit=0.3)
    srpfl           SRPFL(n0=5, count=20, rounds_per_stage=10) (planned speeds: an oracle)
    srpfl-observed  the same, speeds="observed" (mean durations of arrived jobs)
    fedasync        FedAsync(concurrency=20)
    fedbuff         FedBuff(buffer_size=10, concurrency=20)
    fedat           FedAT(tiers=3, count=7)
    oort            Oort(count=20) (over-commit 30%, its defaults otherwise)
    tifl            TiFL(tiers=5, count=20, selection="adaptive", profile_rounds=3): three
                    profiling rounds of the whole fleet, then one tier per round
    fedcs           FedCS(seconds=4, fraction=0.5)

Every run stops at its target or at the time budget. Prints, per fleet and task, time to
target (mean over seeds, bootstrap 95% CI), speedup over wait-all (paired bootstrap CI) and the
share of aggregated updates that came from each tier; beside each policy, the improvement its
own paper claims and whether simfl sees one here. Writes analysis/results/policy_catalogue.json
and the figure; the runs stay in a store (default runs/policy_catalogue) for ``simfl report``.

    python analysis/policy_catalogue.py [--quick] [--seeds S] [--workers W] [--store DIR]
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import HERE, parser, save

from simfl import (
    Fleet,
    Profile,
    Scenario,
    Target,
    algorithms,
    compare,
    dists,
    policies,
    sweep,
    sweeps,
    tasks,
)

TIERS = ("fast", "medium", "slow")
DEADLINE = 4.0

#: Where each policy's own paper claims an improvement, and over what.
CLAIMS: dict[str, str] = {
    "wait-all": "baseline (FedAvg's synchronous rounds)",
    "deadline": "drops stragglers to bound round time (FedAvg practice; Bonawitz et al. 2019)",
    "partial-work": "FedProx/FedNova: keeping stragglers' partial work speeds convergence over "
    "dropping them (FedProx MLSys 2020, FedNova NeurIPS 2020)",
    "adaptive": "deadline set from recent job times: shorter rounds than wait-all",
    "fastest-k": "over-selection: rounds end at the k-th arrival (Bonawitz et al. 2019)",
    "srpfl": "SRPFL TMLR 2023: large wall-clock speedups over FedRep with wait-all (speeds "
    "observed by an oracle, as in its code)",
    "srpfl-observed": "SRPFL with speeds learned from arrived jobs only (simfl's server view; "
    "no paper claim)",
    "fedasync": "FedAsync 2019: faster than synchronous FedAvg in wall-clock time",
    "fedbuff": "FedBuff AISTATS 2022: 2.5-3.8x faster than synchronous FL to target",
    "fedat": "FedAT SC 2021: faster convergence and higher accuracy than sync/async baselines",
    "oort": "Oort OSDI 2021: 1.2-14.1x time-to-accuracy over random selection",
    "tifl": "TiFL HPDC 2020: up to 3x faster training than FedAvg's random selection",
    "fedcs": "FedCS ICC 2019: reaches target accuracy in less time than FedLim's random "
    "selection under a deadline",
}


#: The baseline each policy's paper measures its improvement against, among the catalogue's.
PAPER_BASELINE: dict[str, str] = {
    "deadline": "wait-all",
    "partial-work": "deadline",  # the same deadline, stragglers' work dropped
    "adaptive": "wait-all",
    "fastest-k": "wait-all",
    "srpfl": "wait-all",
    "srpfl-observed": "srpfl",  # what the oracle buys
    "fedasync": "wait-all",
    "fedbuff": "wait-all",
    "fedat": "fedbuff",  # FedAT compares with synchronous and asynchronous baselines
    "oort": "fastest-k",  # random selection with the same 30% over-commitment
    "tifl": "wait-all",  # FedAvg's random selection, waiting for all
    "fedcs": "deadline",  # FedLim: random selection under the same deadline
}


def tiered_fleet(unit: float) -> Fleet:
    return Fleet.tiers(
        (60, Profile(compute=dists.Exponential(mean=1.0 * unit), latency=0.05, name="fast")),
        (30, Profile(compute=dists.Exponential(mean=3.0 * unit), latency=0.05, name="medium")),
        (10, Profile(compute=dists.Exponential(mean=15.0 * unit), latency=0.05, name="slow")),
    )


def lognormal_fleet(unit: float) -> Fleet:
    fleet = Fleet.homogeneous(
        100,
        compute=dists.Exponential(mean=unit),
        scale=dists.LogNormal.from_mean_std(mean=1.0, std=2.0),
        latency=0.05,
        dropout_rate=0.02,
        seed=11,
    )
    # group labels by the persistent factor, so results and reports show the tiers too
    return fleet.with_groups([TIERS[t] for t in _scale_tiers(fleet)])


def _scale_tiers(fleet: Fleet) -> np.ndarray:
    rank = np.argsort(np.argsort(fleet.scale, kind="stable"), kind="stable")
    return np.where(rank < 60, 0, np.where(rank < 90, 1, 2)).astype(np.int64)


def tier_of(fleet_name: str, fleet: Fleet) -> np.ndarray:
    """The tier (0 fast, 1 medium, 2 slow) of every device, for the update shares."""
    if fleet_name == "tiered":
        return np.asarray(fleet.group, dtype=np.int64)
    return _scale_tiers(fleet)


def linear_setup() -> tuple[Any, Any, Any, Target, float, int]:
    task = tasks.LinearRepresentation(d=20, k=2, samples_per_client=10, noise_std=1e-3)
    alg = algorithms.FedRep(local_steps=5, step_size=0.1)
    nova = dataclasses.replace(alg, aggregation="fednova")
    # 5 work units per job: a unit is a fifth of the job's seconds
    return task, alg, nova, Target("distance", below=1e-3), 1.0 / 5.0, 1


def neural_setup() -> tuple[Any, Any, Any, Target, float, int]:
    from simfl.neural import MLP, SGD, Digits, Dirichlet, ImageClassification, NeuralFedAvg

    task = ImageClassification(Digits(), Dirichlet(1.0), MLP((32, 16)))
    alg = NeuralFedAvg(epochs=2, optimizer=SGD(lr=0.05))
    # seconds per work unit so that the mean job does 1 unit-second of the fleet's profile
    data = task.build(100, __import__("simfl").Streams(0))
    state = alg.initial_state(data, __import__("simfl").Streams(0))
    unit = 1.0 / float(np.mean(alg.work(state, np.arange(100))))
    return task, alg, alg, Target("accuracy", above=0.85), unit, 4


def policy_set(task_name: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "wait-all": policies.WaitAll(count=20),
        "deadline": policies.Deadline(DEADLINE, count=20),
        "adaptive": policies.AdaptiveDeadline(quantile=0.8, count=20),
        "fastest-k": policies.FastestK(k=20, overcommit=0.3),
        "srpfl": policies.SRPFL(n0=5, count=20, rounds_per_stage=10),
        "srpfl-observed": policies.SRPFL(n0=5, count=20, rounds_per_stage=10, speeds="observed"),
        "fedasync": policies.FedAsync(concurrency=20),
        "fedbuff": policies.FedBuff(buffer_size=10, concurrency=20),
        "fedat": policies.FedAT(tiers=3, count=7),
    }
    for name, make in EXTRA.items():
        out[name] = make()
    return out


#: Policies added by other modules (filled below when they exist).
EXTRA: dict[str, Any] = {}
if hasattr(policies, "Oort"):
    EXTRA["oort"] = lambda: policies.Oort(count=20)
if hasattr(policies, "TiFL"):
    EXTRA["tifl"] = lambda: policies.TiFL(tiers=5, count=20, selection="adaptive", profile_rounds=3)
if hasattr(policies, "FedCS"):
    EXTRA["fedcs"] = lambda: policies.FedCS(seconds=DEADLINE, fraction=0.5)


def cases_for(task_name: str, seeds: int, max_time: float) -> list[sweeps.Case]:
    task, alg, nova, target, unit, eval_every = (
        linear_setup() if task_name == "linear" else neural_setup()
    )
    out: list[sweeps.Case] = []
    for fleet_name, make in (("tiered", tiered_fleet), ("lognormal", lognormal_fleet)):
        base = Scenario(
            name=f"catalogue-{task_name}-{fleet_name}",
            task=task,
            algorithm=alg,
            fleet=make(unit),
            policy=policies.WaitAll(count=20),
            target=target,
            max_time=max_time,
            eval_every=eval_every,
        )
        fixed = {"task": {task_name: task}, "fleet": {fleet_name: base.fleet}}
        out += sweeps.grid(base, **fixed, policy=policy_set(task_name), seed=range(seeds))
        if nova is not None:
            partial = policies.Deadline(DEADLINE, count=20, partial=True)
            out += sweeps.grid(
                dataclasses.replace(base, algorithm=nova),
                **fixed,
                policy={"partial-work": partial},
                seed=range(seeds),
            )
    return out


def tier_shares(
    stores: dict[tuple[str, str], Any], frame: pd.DataFrame, cases: list[Any]
) -> pd.DataFrame:
    """Share of the aggregated updates from each tier, per task, fleet and policy.

    ``stores`` maps (task, fleet) to the store holding those runs.
    """
    fleets = {(c.labels["task"], c.labels["fleet"]): c.scenario.fleet for c in cases}
    rows = []
    runs = frame[["run_id", "task", "fleet", "policy", "seed"]].drop_duplicates()
    for r in runs.itertuples(index=False):
        jobs = stores[(r.task, r.fleet)].clients(r.run_id)
        tier = tier_of(r.fleet, fleets[(r.task, r.fleet)])
        used = jobs.loc[jobs["status"].astype(str) == "arrived", "device"].to_numpy()
        counts = np.bincount(tier[used], minlength=3)
        total = max(int(counts.sum()), 1)
        rows.append(
            {
                "task": r.task,
                "fleet": r.fleet,
                "policy": r.policy,
                **{f"share_{t}": counts[i] / total for i, t in enumerate(TIERS)},
            }
        )
    return pd.DataFrame(rows).groupby(["task", "fleet", "policy"], as_index=False).mean()


def run_catalogue(
    cases: list[Any], root: Path, workers: int, report: bool
) -> tuple[pd.DataFrame, dict[tuple[str, str], Any]]:
    """Sweep each (task, fleet) into its own store under ``root``; their tidy frame and stores.

    One store per task and fleet, so that ``simfl report`` on it compares the policies alone
    (a report groups runs by fleet size, and the two fleets have the same size).
    """
    from simfl.report import write_report

    executor = "inline" if workers == 1 else "processes"
    frames, stores = [], {}
    keys = list(dict.fromkeys((c.labels["task"], c.labels["fleet"]) for c in cases))
    for t, f in keys:
        part = [c for c in cases if (c.labels["task"], c.labels["fleet"]) == (t, f)]
        out = sweep(
            part, store=root / f"{t}-{f}", executor=executor, workers=workers, progress=False
        )
        print(out.summary())
        frames.append(out.frame)
        stores[(t, f)] = out.store
        if report:
            target = part[0].scenario.target
            side = "below" if target.below is not None else "above"
            value = target.below if target.below is not None else target.above
            index = write_report(
                out.store, target=(target.metric, side, value), baseline="wait-all"
            )
            print(f"report: {index}")
    return pd.concat(frames, ignore_index=True), stores


def summarize(frame: pd.DataFrame, task_name: str, fleet_name: str) -> pd.DataFrame:
    part = frame[(frame["task"] == task_name) & (frame["fleet"] == fleet_name)]
    metric, kw = ("distance", {"below": 1e-3}) if task_name == "linear" else ("accuracy", {})
    if task_name == "neural":
        kw = {"above": 0.85}
    table = compare.summarize_targets(part, metric, by="policy", **kw)
    speed = compare.speedup(part, metric, baseline="wait-all", by="policy", **kw)
    speed = speed.rename(columns={"ci_low": "speedup_lo", "ci_high": "speedup_hi"})
    table = table.rename(columns={"ci_low": "time_lo", "ci_high": "time_hi"})
    keep = ["policy", "speedup", "speedup_lo", "speedup_hi"]
    out = table.merge(speed[keep], on="policy", how="left")
    # each policy against the baseline its own paper compares with (paired by seed)
    rel = []
    for base in dict.fromkeys(PAPER_BASELINE.values()):
        if base not in set(part["policy"]):
            continue
        vs = compare.speedup(part, metric, baseline=base, by="policy", **kw)
        vs = vs[vs["policy"].map(PAPER_BASELINE) == base]
        rel.append(
            vs.rename(columns={"speedup": "vs_paper", "ci_low": "vs_lo", "ci_high": "vs_hi"})
        )
    if rel:
        vs_all = pd.concat(rel)[["policy", "vs_paper", "vs_lo", "vs_hi"]]
        out = out.merge(vs_all, on="policy", how="left")
    out["paper_baseline"] = out["policy"].map(PAPER_BASELINE)
    out.insert(0, "fleet", fleet_name)
    out.insert(0, "task", task_name)
    return out


def _cell(row: dict[str, Any]) -> str:
    """One cell of the catalogue: speedup over wait-all with its CI, and the slow tier's share."""
    share = f"slow {100 * row['share_slow']:.0f}%" if row.get("share_slow") is not None else ""
    if row["policy"] == "wait-all":
        time = row["mean_time"]
        head = f"{time:.0f} s" if time is not None and math.isfinite(time) else "not reached"
        return f"{head} · {share}"
    speed, lo, hi = row.get("speedup"), row.get("speedup_lo"), row.get("speedup_hi")
    if not row["reached"]:
        return f"not reached · {share}"
    if speed is None or not all(math.isfinite(v) for v in (speed, lo, hi)):
        return f"{row['mean_time']:.0f} s (wait-all: not reached) · {share}"
    return f"{speed:.2f}x [{lo:.2f}, {hi:.2f}] · {share}"


def docs_table(results: dict[str, Any]) -> str:
    """The catalogue tables of ``docs/policies.md``, from the results file (so they cannot drift).

    First the speedups over wait-all (95% CI) with the slow tier's share of the aggregated
    updates, one column per task and fleet; then each policy's paper claim beside what simfl
    sees in each column.
    """
    rows = results["rows"]
    panels = list(dict.fromkeys((r["task"], r["fleet"]) for r in rows))
    policies_ = list(dict.fromkeys(r["policy"] for r in rows))
    cells = {(r["task"], r["fleet"], r["policy"]): r for r in rows}
    heads = " | ".join(f"{t}, {f} fleet" for t, f in panels)
    rule = "|---" * (len(panels) + 1) + "|"
    lines = [f"| policy | {heads} |", rule]
    for name in policies_:
        row = [_cell(cells[(t, f, name)]) if (t, f, name) in cells else "n/a" for t, f in panels]
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    lines += [
        "",
        f"| policy | its paper claims | seen here, against the paper's own baseline "
        f"({'; '.join(heads.split(' | '))}) |",
    ]
    lines.append("|---|---|---|")
    for name in policies_:
        seen = [
            cells[(t, f, name)]["seen_here"] if (t, f, name) in cells else "n/a" for t, f in panels
        ]
        lines.append(f"| {name} | {CLAIMS.get(name, '')} | " + "; ".join(seen) + " |")
    return "\n".join(lines)


def verdict(row: pd.Series) -> str:
    """Faster or slower than the policy's paper baseline (95% CI of the paired speedup)."""
    if row["policy"] == "wait-all":
        return "baseline"
    if not row["reached"]:
        return "not reached"
    lo, hi = row.get("vs_lo", math.nan), row.get("vs_hi", math.nan)
    base = row.get("paper_baseline")
    ratio = row.get("vs_paper", math.nan)
    if not (isinstance(lo, float) and math.isfinite(lo) and math.isfinite(hi)):
        return f"vs {base}: no finite speedup"
    if lo > 1.0:
        return f"{ratio:.2f}x faster than {base}"
    if hi < 1.0:
        return f"{1 / ratio:.2f}x slower than {base}"
    return f"no clear difference from {base} ({ratio:.2f}x, CI [{lo:.2f}, {hi:.2f}])"


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=None)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--store", default=str(HERE.parent / "runs" / "policy_catalogue"))
    p.add_argument("--tasks", default="linear,neural")
    p.add_argument("--results", default=str(HERE / "results" / "policy_catalogue.json"))
    args = p.parse_args()
    seeds = args.seeds or (2 if args.quick else 5)
    task_names = [t for t in args.tasks.split(",") if t]
    budget = {"linear": 600.0 if args.quick else 3000.0, "neural": 300.0 if args.quick else 1500.0}
    cases = [c for t in task_names for c in cases_for(t, seeds, budget[t])]
    frame, stores = run_catalogue(cases, Path(args.store), args.workers, report=not args.quick)
    tables = [summarize(frame, t, f) for t in task_names for f in ("tiered", "lognormal")]
    table = pd.concat(tables, ignore_index=True)
    shares = tier_shares(stores, frame, cases)
    table = table.merge(shares, on=["task", "fleet", "policy"], how="left")
    table["claim"] = table["policy"].map(CLAIMS)
    table["seen_here"] = table.apply(verdict, axis=1)
    pd.set_option("display.width", 250)
    cols = [
        "policy",
        "reached",
        "mean_time",
        "time_lo",
        "time_hi",
        "speedup",
        "speedup_lo",
        "speedup_hi",
        "share_fast",
        "share_medium",
        "share_slow",
        "vs_paper",
        "seen_here",
    ]
    for (t, f), part in table.groupby(["task", "fleet"], sort=False):
        print(f"\n== {t} task, {f} fleet: time to target (simulated s) over {seeds} seeds ==")
        print(
            part[cols]
            .sort_values("mean_time")
            .to_string(index=False, float_format=lambda v: f"{v:.3g}")
        )
    print("\nwhat each policy's paper claims:")
    for name, claim in CLAIMS.items():
        print(f"  {name:13s} {claim}")

    results = Path(args.results)
    results.parent.mkdir(parents=True, exist_ok=True)
    records = json.loads(table.to_json(orient="records"))
    results.write_text(
        json.dumps({"seeds": seeds, "quick": args.quick, "rows": records}, indent=1) + "\n"
    )
    print(f"results: {results}")
    print("\ndocs tables (between the catalogue markers of docs/policies.md):\n")
    print(docs_table(json.loads(results.read_text())))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(t, f) for t in task_names for f in ("tiered", "lognormal")]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4.8), squeeze=False)
    for ax, (t, f) in zip(axes[0], panels, strict=True):
        part = table[(table["task"] == t) & (table["fleet"] == f)].sort_values("policy")
        y = np.arange(len(part))
        speed, lo, hi = (
            part[c].to_numpy(dtype=float) for c in ("speedup", "speedup_lo", "speedup_hi")
        )
        finite = np.isfinite(speed) & np.isfinite(lo) & np.isfinite(hi)
        err = np.where(finite, np.vstack([speed - lo, hi - speed]), 0.0)
        ax.barh(y, np.where(finite, speed, np.nan), xerr=err, color="tab:blue", alpha=0.8)
        for yi, ok, s in zip(y, finite, speed, strict=True):
            if not ok:  # no finite speedup: the policy or wait-all missed the target
                ax.text(1.0, yi, " n/a" if np.isnan(s) else " inf", va="center", fontsize=8)
        ax.axvline(1.0, color="k", lw=0.8)
        ax.set_yticks(y, part["policy"])
        ax.set_xscale("log")
        ax.set_xlabel("speedup over wait-all (95% CI)")
        ax.set_title(f"{t} task, {f} fleet", fontsize=10)
    fig.suptitle(f"Time to target: every policy vs wait-all ({seeds} seeds)")
    fig.tight_layout()
    print(f"figure: {save(fig, args.out, 'policy_catalogue')}")


if __name__ == "__main__":
    main()
