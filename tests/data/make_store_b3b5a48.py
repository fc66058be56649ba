"""Writes ``tests/data/store_b3b5a48/``: a store as simfl b3b5a48 wrote it (kept as a fixture).

Run once, from the repository root at commit b3b5a48 (before run records held code identity)::

    python tests/data/make_store_b3b5a48.py

Two scenarios (two policies) x two seeds of a small linear task, three rounds each: a store of
a few kB that ``tests/test_code_identity.py`` reads, reports and resumes. Its ``CASES`` are the
cases of this file, so a sweep of this file over the fixture finds every run.
"""

from pathlib import Path

from simfl import Fleet, Scenario, algorithms, dists, policies, sweeps, tasks

BASE = Scenario(
    name="legacy",
    task=tasks.LinearRepresentation(d=4, k=2, samples_per_client=4, test_samples=10),
    algorithm=algorithms.FedAvg(),
    fleet=Fleet.homogeneous(4, compute=dists.Exponential(mean=1.0)),
    policy=policies.WaitAll(),
    rounds=3,
)
CASES = sweeps.grid(
    BASE, policy={"all": policies.WaitAll(), "fast": policies.FastestK(k=2)}, seed=[0, 1]
)

if __name__ == "__main__":
    import simfl

    out = simfl.sweep(
        CASES,
        store=Path(__file__).with_name("store_b3b5a48"),
        executor="inline",
        progress=False,
    )
    print(out.summary())
