"""Fingerprints of the ``rounds`` and ``clients`` frames of many scenarios: refactors keep numbers.

Before restructuring the engine, run ``python analysis/fingerprints.py --write``; after it,
``python analysis/fingerprints.py --check`` re-runs every scenario and compares the SHA-256 of
its frames with the recorded ones (exit status 1 on any difference, listing which). The
catalogue spans every policy, network, availability mode, algorithm family, stop rule and
playback option, plus every scenario defined in ``scenarios/``.

A fingerprint hashes each column's name, dtype and values (categoricals by their labels), in
column order, so a renamed, retyped or reordered column counts as a change, as does a value
that differs in its last bit. ``meta["stop_reason"]`` is recorded beside it for reading diffs.

A deliberate change of some cases' frames (a bug fix, or a fast path allowed to round
otherwise) is recorded with ``--write --only NAME``; where the other kinds of CPU cannot be run
to record it there, ``--others-stale REASON`` marks those cases *stale* in the other kinds'
sets: ``--check`` and the tests skip them there, saying why, until ``--write --only NAME`` on
such a machine records them again.

The last bits depend on the CPU's vector instructions (NumPy's SIMD dispatch of ``log`` and
``exp``, OpenBLAS's kernels, torch's), so fingerprints are recorded per *kind of CPU*
(:func:`cpu_kind`: the SIMD levels NumPy dispatches to and OpenBLAS's kernel architecture)
and compared only on the kind they were recorded on. The first set was written on an AVX2
machine; on an AVX-512 one 72 of its 75 cases differ for the same code, and with
``NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL AVX512_SPR" OPENBLAS_CORETYPE=Zen`` (or
``Haswell``) 74 agree (``neural-fedrep-digits``, whose matrix products are torch's, still
differs), so the first set is filed under the kind those settings report (with ``Zen`` too:
``openblas Haswell``). A machine whose kind has no set of its own is compared with the set of
its NumPy SIMD levels, if exactly one is recorded (OpenBLAS may name its kernels otherwise
on the same instructions). ``--write`` replaces the
set of the machine's own kind and keeps the others; to check a refactor on a kind that has
none, write the code before it there first (``--write --file before.json``).

Usage::

    python analysis/fingerprints.py --write           # record analysis/results/fingerprints.json
    python analysis/fingerprints.py --check           # compare (exit 1 on any difference)
    python analysis/fingerprints.py --check --only fast   # the timing-only subset (seconds)
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import runpy
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "analysis" / "results" / "fingerprints.json"


def frame_digest(frame: pd.DataFrame) -> str:
    """SHA-256 of a frame's column names, dtypes and values (index ignored)."""
    h = hashlib.sha256()
    h.update(str(len(frame)).encode())
    for name in frame.columns:
        col = frame[name]
        h.update(f"|{name}:{col.dtype}|".encode())
        if isinstance(col.dtype, pd.CategoricalDtype):
            values = np.asarray(col.astype(str).to_numpy(), dtype=str)
            h.update("\x00".join(values.tolist()).encode())
        elif col.dtype == object:
            h.update("\x00".join(map(repr, col.tolist())).encode())
        else:
            h.update(np.ascontiguousarray(col.to_numpy()).tobytes())
    return h.hexdigest()


Case = tuple[Any, dict[str, Any]]  # (scenario, run keyword arguments)


def _catalogue() -> dict[str, Callable[[], Case]]:
    """Scenario builders by name (built lazily: neural ones import torch)."""
    from simfl import Fleet, Profile, Scenario, Target, algorithms, dists, policies, tasks
    from simfl.fleet import Availability
    from simfl.network import Network

    linear = tasks.LinearRepresentation(d=20, k=2, samples_per_client=10, noise_std=1e-3)

    def timing(policy: Any, n: int = 30, rounds: int = 25, **kw: Any) -> Any:
        fleet_kw = {k: kw.pop(k) for k in list(kw) if k not in ("max_time", "network", "seed")}
        compute = fleet_kw.pop("compute", dists.Exponential(mean=1.0))
        return Scenario(
            task=None,
            algorithm=algorithms.TimingOnly(),
            fleet=Fleet.homogeneous(n, compute=compute, **fleet_kw),
            policy=policy,
            rounds=rounds if "max_time" not in kw else None,
            **kw,
        )

    def lin(algorithm: Any, policy: Any, n: int = 50, rounds: int = 20, **kw: Any) -> Any:
        fleet = kw.pop("fleet", None) or Fleet.homogeneous(
            n, compute=dists.Exponential(mean=1.0), dropout_rate=kw.pop("dropout_rate", 0.0)
        )
        return Scenario(
            task=kw.pop("task", linear),
            algorithm=algorithm,
            fleet=fleet,
            policy=policy,
            rounds=rounds,
            **kw,
        )

    flaky = Fleet.tiers(
        (
            30,
            Profile(
                compute=dists.ShiftedExponential(shift=0.2, scale=1.0),
                bandwidth_down=2e6,
                bandwidth_up=5e5,
                latency=0.05,
                dropout_rate=0.05,
                name="regular",
            ),
        ),
        (
            10,
            Profile(
                compute=dists.LogNormal.from_mean_std(mean=5.0, std=3.0),
                bandwidth_down=2e5,
                bandwidth_up=5e4,
                latency=0.3,
                dropout_rate=0.2,
                name="slow",
            ),
        ),
    )
    exp_av = Availability.exponential(40, mean_on=20.0, mean_off=5.0, horizon=5000.0, seed=7)
    diurnal = Availability.diurnal(
        40, mean_on=30.0, low=0.3, high=0.9, period=600.0, horizon=20_000.0, seed=1
    )
    groups = np.arange(40) % 4
    group_av = Availability.exponential(4, mean_on=40.0, mean_off=5.0, horizon=5000.0, seed=2)
    correlated = Availability.correlated(groups, group_av)
    churn = Availability.churn(40, lifetime=dists.Exponential(200.0), join_window=5.0, seed=4)
    hier = Network.hierarchical(groups, edge_up=2e4, edge_down=2e5, server_up=3e4)
    star = Network.star(server_up=2e4, server_down=1e5)

    def nested(policy: Any) -> Any:
        """Timing only on two nested shared levels: six edge links under a cloud link that
        binds whenever three edges are saturated; unequal access links."""
        n = 120
        up = np.random.default_rng(5).uniform(1e4, 1e5, n)
        return Scenario(
            task=None,
            algorithm=algorithms.TimingOnly(bytes_down=50_000, bytes_up=50_000),
            fleet=Fleet(
                [dists.Exponential(mean=1.0)],
                np.zeros(n, dtype=np.int64),
                bandwidth_down=4.0 * up,
                bandwidth_up=up,
                latency=0.01,
                dropout_rate=0.02,
            ),
            policy=policy,
            rounds=12,
            network=Network.hierarchical(
                np.arange(n) % 6, edge_up=6e4, edge_down=2.4e5, server_up=1.5e5, server_down=6e5
            ),
            seed=3,
        )

    def graph_net() -> Any:
        import networkx as nx

        g = nx.Graph()
        g.add_edge("server", "hub", bandwidth=5e4, latency=0.01)
        for i in range(40):
            g.add_edge("hub", i)
        return Network.from_graph(g)

    def net_fleet(av: Any = None, offline: str = "abort") -> Any:
        f = Fleet.homogeneous(
            40,
            compute=dists.Exponential(mean=2.0),
            bandwidth_down=2e5,
            bandwidth_up=2e4,
            latency=0.02,
            dropout_rate=0.01,
        )
        return f if av is None else f.with_availability(av, offline=offline)

    fedrep, fedavg = algorithms.FedRep(), algorithms.FedAvg()
    c: dict[str, Callable[[], Case]] = {
        # ---- timing only: every synchronous policy, both playbacks, distributions, stops
        "t-waitall": lambda: (timing(policies.WaitAll(fraction=0.3)), {}),
        "t-waitall-proc": lambda: (timing(policies.WaitAll(fraction=0.3)), {"batched": False}),
        "t-deadline-drop": lambda: (
            timing(policies.Deadline(1.2, count=10), dropout_rate=0.3),
            {},
        ),
        "t-deadline-drop-proc": lambda: (
            timing(policies.Deadline(1.2, count=10), dropout_rate=0.3),
            {"batched": False},
        ),
        "t-fastestk-ties": lambda: (
            timing(
                policies.FastestK(k=5, overcommit=0.6),
                compute=dists.Empirical([1.0, 2.0]),
            ),
            {},
        ),
        "t-fastestk-ties-proc": lambda: (
            timing(
                policies.FastestK(k=5, overcommit=0.6),
                compute=dists.Empirical([1.0, 2.0]),
            ),
            {"batched": False},
        ),
        "t-adaptive": lambda: (timing(policies.AdaptiveDeadline(quantile=0.7, count=10)), {}),
        "t-srpfl-stage": lambda: (
            timing(policies.SRPFL(n0=2, rounds_per_stage=4), redraw="stage"),
            {},
        ),
        "t-srpfl-round": lambda: (
            timing(policies.SRPFL(n0=3, resample="round", count=20), redraw="round"),
            {},
        ),
        "t-maxtime-pareto": lambda: (
            timing(
                policies.Deadline(3.0, fraction=0.5),
                compute=dists.Pareto(shape=2.5, scale=1.0),
                max_time=40.0,
            ),
            {},
        ),
        "t-maxtime-proc": lambda: (
            timing(
                policies.Deadline(3.0, fraction=0.5),
                compute=dists.Pareto(shape=2.5, scale=1.0),
                max_time=40.0,
            ),
            {"batched": False},
        ),
        "t-uniform-scale": lambda: (
            timing(
                policies.WaitAll(count=8),
                compute=dists.Uniform(0.5, 1.5),
                scale=dists.Uniform(1.0, 10.0),
                seed=3,
            ),
            {},
        ),
        "t-fedasync": lambda: (
            timing(policies.FedAsync(concurrency=5), dropout_rate=0.1),
            {},
        ),
        "t-fedbuff-maxtime": lambda: (
            timing(policies.FedBuff(buffer_size=4, concurrency=8, max_staleness=3), max_time=30.0),
            {},
        ),
        # ---- linear algorithms
        "fedrep-waitall": lambda: (lin(fedrep, policies.WaitAll(fraction=0.2)), {}),
        "fedrep-deadline-eager": lambda: (
            lin(fedrep, policies.Deadline(1.0, count=10), dropout_rate=0.1),
            {"lazy": False},
        ),
        "fedrep-fastestk-target": lambda: (
            lin(
                fedrep,
                policies.FastestK(k=8, overcommit=0.5),
                rounds=200,
                target=Target("distance", below=1e-2),
            ),
            {},
        ),
        "fedrep-srpfl-plateau": lambda: (
            lin(
                fedrep,
                policies.SRPFL(n0=4, stage_rule=policies.Plateau(window=2, max_rounds=6)),
                rounds=30,
            ),
            {},
        ),
        "fedrep-srpfl-plateau-metric": lambda: (
            lin(
                fedrep,
                policies.SRPFL(
                    n0=4, stage_rule=policies.Plateau(metric="distance", window=2, max_rounds=6)
                ),
                rounds=30,
            ),
            {},
        ),
        "fedavg-adaptive-eval3": lambda: (
            lin(fedavg, policies.AdaptiveDeadline(count=10), eval_every=3),
            {},
        ),
        "fedavg-local2-fedasync": lambda: (
            lin(algorithms.FedAvg(local_steps=2), policies.FedAsync(concurrency=6), rounds=40),
            {},
        ),
        "fedrep-fedbuff": lambda: (
            lin(fedrep, policies.FedBuff(buffer_size=5, concurrency=10), rounds=20),
            {},
        ),
        "fedrep-fedbuff-eager": lambda: (
            lin(
                fedrep,
                policies.FedBuff(buffer_size=5, concurrency=10),
                rounds=20,
                dropout_rate=0.2,
            ),
            {"lazy": False},
        ),
        "gdgd-flaky": lambda: (
            lin(algorithms.GDGD(head_steps=3), policies.Deadline(3.0, count=10), fleet=flaky),
            {},
        ),
        "localonly": lambda: (lin(algorithms.LocalOnly(), policies.WaitAll(count=10)), {}),
        "feddar-sa": lambda: (
            lin(
                algorithms.FedDAR(aggregation="sa"),
                policies.WaitAll(count=10),
                task=tasks.DomainMixture(d=8, k=2, n_domains=3, samples_per_client=8, alpha=0.5),
                n=30,
            ),
            {},
        ),
        "feddar-wa": lambda: (
            lin(
                algorithms.FedDAR(aggregation="wa"),
                policies.Deadline(1.5, count=10),
                task=tasks.DomainMixture(d=8, k=2, n_domains=3, samples_per_client=8, alpha=0.5),
                n=30,
            ),
            {},
        ),
        "lg-interpolation": lambda: (
            lin(
                algorithms.LGInterpolation(),
                policies.WaitAll(count=10),
                task=tasks.LGSynthetic(d=10, train_samples=200, test_samples=100, eval_clients=30),
                n=30,
                rounds=6,
            ),
            {},
        ),
        "fedmavg-replace": lambda: (
            lin(
                algorithms.FedMAvg(q_hat=5),
                policies.WaitAll(count=6, weights="size", replace=True),
                task=tasks.SyntheticClustering(
                    n_features=60, n_samples=300, n_clusters=4, noise_std=0.5
                ),
                n=20,
                rounds=8,
            ),
            {},
        ),
        "softmax-fedavg": lambda: (
            lin(
                algorithms.SoftmaxFedAvg(),
                policies.FastestK(k=5, overcommit=0.4),
                task=tasks.SyntheticSoftmax(samples_per_client=40, test_samples=200, d=10, k=3),
                n=20,
                rounds=10,
            ),
            {},
        ),
        # ---- networks and availability
        "star-deadline": lambda: (
            lin(fedrep, policies.Deadline(4.0, count=10), fleet=net_fleet(), network=star),
            {},
        ),
        "star-fedbuff": lambda: (
            lin(
                fedrep,
                policies.FedBuff(buffer_size=4, concurrency=8),
                fleet=net_fleet(),
                network=star,
            ),
            {},
        ),
        "graph-fastestk": lambda: (
            lin(
                fedavg,
                policies.FastestK(k=6, overcommit=0.5),
                fleet=net_fleet(),
                network=graph_net(),
            ),
            {},
        ),
        "hier-edge": lambda: (
            lin(
                fedrep,
                policies.EdgeAggregation(count=12, edge_deadline=8.0, deadline=12.0),
                fleet=net_fleet(),
                network=hier,
            ),
            {},
        ),
        "hier-edge-diurnal-pause": lambda: (
            lin(
                fedrep,
                policies.EdgeAggregation(count=12, edge_deadline=20.0),
                fleet=net_fleet(diurnal, "pause"),
                network=hier,
            ),
            {},
        ),
        "hier-nested-waitall": lambda: (nested(policies.WaitAll(count=40)), {}),
        "hier-nested-deadline": lambda: (nested(policies.Deadline(6.0, count=40)), {}),
        "hier-flat-waitall": lambda: (
            lin(fedrep, policies.WaitAll(count=12), fleet=net_fleet(), network=hier),
            {},
        ),
        "avail-exp-abort": lambda: (
            lin(fedrep, policies.WaitAll(count=10), fleet=net_fleet(exp_av, "abort")),
            {},
        ),
        "avail-exp-pause-deadline": lambda: (
            lin(fedrep, policies.Deadline(6.0, count=10), fleet=net_fleet(exp_av, "pause")),
            {},
        ),
        "avail-correlated-srpfl": lambda: (
            lin(fedrep, policies.SRPFL(n0=3, rounds_per_stage=3), fleet=net_fleet(correlated)),
            {},
        ),
        "avail-churn-fedasync": lambda: (
            lin(fedavg, policies.FedAsync(concurrency=5), fleet=net_fleet(churn), rounds=30),
            {},
        ),
        "avail-diurnal-adaptive-star": lambda: (
            lin(
                fedrep,
                policies.AdaptiveDeadline(count=10),
                fleet=net_fleet(diurnal, "pause"),
                network=star,
            ),
            {},
        ),
        "avail-exp-maxtime-star": lambda: (
            dataclasses.replace(
                lin(
                    fedrep,
                    policies.FastestK(k=5, overcommit=1.0),
                    fleet=net_fleet(exp_av, "pause"),
                    network=star,
                ),
                rounds=None,
                max_time=150.0,
            ),
            {},
        ),
        "avail-exp-maxtime-star-proc": lambda: (
            dataclasses.replace(
                lin(
                    fedrep,
                    policies.FastestK(k=5, overcommit=1.0),
                    fleet=net_fleet(exp_av, "pause"),
                    network=star,
                ),
                rounds=None,
                max_time=150.0,
            ),
            {"batched": False},
        ),
    }

    def neural_case() -> Case:
        import torch

        from simfl import neural

        torch.set_num_threads(1)
        sc = Scenario(
            task=neural.ImageClassification(
                neural.Digits(), neural.Shards(2), neural.MLP((32, 16))
            ),
            algorithm=neural.NeuralFedRep(head_epochs=1, body_epochs=1),
            fleet=Fleet.homogeneous(20, compute=dists.Exponential(mean=1.0), dropout_rate=0.05),
            policy=policies.Deadline(2.0, fraction=0.25),
            rounds=4,
        )
        return sc, {}

    c["neural-fedrep-digits"] = neural_case

    def neural_unequal(partial: bool) -> Case:
        """Unequal clients (log-normal sizes): steps some clients sit out."""
        import torch

        from simfl import neural

        torch.set_num_threads(1)
        sc = Scenario(
            task=neural.ImageClassification(
                neural.Digits(), neural.LogNormalSizes(1.0), neural.MLP((32, 16))
            ),
            algorithm=neural.FedProx(mu=0.1, epochs=2),
            fleet=Fleet.homogeneous(20, compute=dists.Exponential(mean=1.0)),
            policy=policies.Deadline(0.0012, fraction=0.25, partial=partial),
            rounds=4,
        )
        return sc, {}

    c["neural-fedprox-lognormal-digits"] = lambda: neural_unequal(False)
    c["neural-fedprox-lognormal-partial-digits"] = lambda: neural_unequal(True)

    # ---- the catalogue's policies and partial work
    fedat = policies.FedAT(tiers=3, count=4)
    c["t-fedat"] = lambda: (timing(fedat, dropout_rate=0.05), {})
    c["t-fedat-proc"] = lambda: (timing(fedat, dropout_rate=0.05), {"batched": False})
    c["t-oort"] = lambda: (timing(policies.Oort(count=5)), {})
    c["t-tifl"] = lambda: (timing(policies.TiFL(count=5, tiers=3, selection="adaptive")), {})
    c["t-fedcs"] = lambda: (timing(policies.FedCS(seconds=2.0, fraction=0.5)), {})
    c["lin-partial-fednova"] = lambda: (
        lin(
            algorithms.FedAvg(local_steps=5, aggregation="fednova"),
            policies.Deadline(4.0, count=10, partial=True),
        ),
        {},
    )
    c["lin-fedat-fedrep"] = lambda: (
        lin(fedrep, policies.FedAT(tiers=2, count=5), dropout_rate=0.05),
        {},
    )
    c["lin-oort-fedrep"] = lambda: (lin(fedrep, policies.Oort(count=5)), {})
    c["lin-srpfl-observed"] = lambda: (
        lin(fedrep, policies.SRPFL(n0=2, rounds_per_stage=3, speeds="observed")),
        {},
    )
    return c


def _scenario_files() -> dict[str, Callable[[], Case]]:
    """Every scenario and case of the files in ``scenarios/`` (first 30 rounds of each)."""
    out: dict[str, Callable[[], Case]] = {}
    for path in sorted((ROOT / "scenarios").glob("*.py")):
        ns = runpy.run_path(str(path))
        found: dict[str, Any] = {}
        if "SCENARIO" in ns:
            found[ns["SCENARIO"].name] = ns["SCENARIO"]
        found.update(ns.get("SCENARIOS", {}))
        for i, case in enumerate(ns.get("CASES", [])):
            found[f"case{i}"] = case.scenario
        for name, sc in found.items():
            short = dataclasses.replace(sc, rounds=min(sc.rounds or 30, 30))

            def build(short: Any = short) -> Case:
                return short, {}

            out[f"file:{path.stem}:{name}"] = build
    return out


def catalogue() -> dict[str, Callable[[], Case]]:
    """Every fingerprinted scenario by name."""
    return {**_catalogue(), **_scenario_files()}


def cpu_kind() -> str:
    """The kind of CPU as far as the frames' last bits go: SIMD levels and BLAS kernels.

    NumPy's dispatched SIMD levels (``X86_V3`` for AVX2, ``X86_V4`` and up for AVX-512; what
    ``NPY_DISABLE_CPU_FEATURES`` leaves) and OpenBLAS's kernel architecture (``threadpoolctl``,
    which scikit-learn brings; ``OPENBLAS_CORETYPE`` overrides it), e.g. ``"numpy X86_V3;
    openblas Haswell"``.
    """
    from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__

    simd = "+".join(f for f in __cpu_dispatch__ if __cpu_features__.get(f)) or "baseline"
    try:
        from threadpoolctl import threadpool_info
    except ImportError:  # pragma: no cover - scikit-learn (simfl[neural]) brings it
        blas = "unknown"
    else:
        libs = threadpool_info()
        arch = {i.get("architecture") for i in libs if i.get("internal_api") == "openblas"}
        blas = "/".join(sorted(a for a in arch if a)) or "unknown"
    return f"numpy {simd}; openblas {blas}"


def recorded_cases(recorded: dict[str, Any], kind: str) -> dict[str, Any] | None:
    """The fingerprints recorded for CPU ``kind`` (None: none for it).

    Its own set, else the one set recorded for the same NumPy SIMD levels (the part of
    ``kind`` before ``;``), else none.
    """
    cpus: dict[str, Any] = recorded.get("cpus", {})
    if kind in cpus:
        found: dict[str, Any] = cpus[kind]
        return found
    simd = kind.split(";")[0]
    same = [cases for k, cases in cpus.items() if k.split(";")[0] == simd]
    return same[0] if len(same) == 1 else None


def fingerprint_case(build: Callable[[], Case]) -> dict[str, Any]:
    """Run one case and fingerprint its frames."""
    import simfl

    scenario, kwargs = build()
    res = simfl.run(scenario, progress=False, **kwargs)
    return {
        "rounds": frame_digest(res.rounds),
        "clients": frame_digest(res.clients),
        "n_rounds": len(res.rounds),
        "n_jobs": len(res.clients),
        "stop_reason": res.meta.get("stop_reason"),
    }


def main(argv: list[str] | None = None) -> int:
    """Write or check the fingerprints (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="record the fingerprints")
    mode.add_argument("--check", action="store_true", help="compare with the recorded ones")
    p.add_argument("--only", default=None, help="'fast' (timing-only) or a name prefix")
    p.add_argument("--file", type=Path, default=OUT, help="fingerprint file")
    p.add_argument(
        "--others-stale",
        metavar="REASON",
        default=None,
        help="with --write --only: mark the cases written as stale in the other kinds' sets "
        "(a deliberate change that cannot be re-recorded on them here), giving the reason",
    )
    args = p.parse_args(argv)
    if args.others_stale is not None and not (args.write and args.only):
        p.error("--others-stale goes with --write --only NAME")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    cases = catalogue()
    if args.only == "fast":
        cases = {k: v for k, v in cases.items() if k.startswith("t-")}
    elif args.only:
        cases = {k: v for k, v in cases.items() if k.startswith(args.only)}
    recorded = json.loads(args.file.read_text()) if args.file.exists() else {}
    kind = cpu_kind()
    want_cases = recorded_cases(recorded, kind)
    if args.check and want_cases is None:
        kinds = ", ".join(recorded.get("cpus", {})) or "none"
        print(f"no fingerprints recorded for this CPU ({kind}); recorded: {kinds}")
        print("write those of the code before a change with --write (see the module docstring)")
        return 1
    results: dict[str, Any] = {}
    bad: list[str] = []
    for name, build in cases.items():
        t0 = time.perf_counter()
        got = fingerprint_case(build)
        results[name] = got
        status = ""
        if args.check:
            want = (want_cases or {}).get(name)
            if want is None:
                status = "NEW"
            elif "stale" in want:
                status = f"STALE ({want['stale']})"
            elif (want["rounds"], want["clients"]) != (got["rounds"], got["clients"]):
                status = "DIFFERENT"
                bad.append(name)
            else:
                status = "same"
        print(
            f"{name:40s} {got['n_rounds']:5d} rounds {got['n_jobs']:6d} jobs "
            f"{got['stop_reason']!s:9s} {got['rounds'][:12]} {got['clients'][:12]} "
            f"{time.perf_counter() - t0:6.2f}s {status}",
            flush=True,
        )
    if args.write:
        import simfl.engine as engine

        args.file.parent.mkdir(parents=True, exist_ok=True)
        if (recorded.get("numpy"), recorded.get("pandas")) != (np.__version__, pd.__version__):
            recorded = {}  # other versions: the other CPUs' sets are not comparable either
        cpus = dict(recorded.get("cpus", {}))
        # --only adds to this kind's own set (not to another kind's it was compared with)
        cpus[kind] = {**cpus.get(kind, {}), **results} if args.only else results
        if args.others_stale is not None:
            for other, cases_of in cpus.items():
                if other != kind:
                    stale = {"stale": args.others_stale, "recorded_on": kind}
                    cpus[other] = {**cases_of, **dict.fromkeys(results, stale)}
        payload = {
            "written_by": "analysis/fingerprints.py --write",
            "simfl_version": engine.simfl_version(),
            "numpy": np.__version__,
            "pandas": pd.__version__,
            "cpus": cpus,
        }
        args.file.write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n")
        print(f"wrote {len(results)} fingerprints for {kind} to {args.file}")
        return 0
    if bad:
        print(f"{len(bad)} of {len(results)} differ: {', '.join(bad)}")
        if len(bad) > len(results) // 2:
            print(
                "most differ: if the file was written on another kind of CPU, see the module "
                "docstring (fingerprints depend on its vector instructions)"
            )
        return 1
    print(f"all {len(results)} fingerprints identical")
    return 0


if __name__ == "__main__":
    sys.exit(main())
