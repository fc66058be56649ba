"""Straggler policies x fleet sizes on the linear FedRep task: a grid for sweeps and reports.

Every policy runs on fleets of 50, 100 and 200 devices with heterogeneous mean speeds
(log-normal scales), 20 devices per round (FedBuff: 20 in flight, aggregating every 10).

    simfl sweep scenarios/policy_grid.py --seeds 0-4 --store runs/policy-grid
    simfl report runs/policy-grid --target "distance<1e-3"
"""

from simfl import Fleet, Scenario, algorithms, dists, policies, sweeps, tasks


def fleet(n: int) -> Fleet:
    return Fleet.homogeneous(
        n,
        compute=dists.Exponential(mean=1.0),
        scale=dists.LogNormal.from_mean_std(mean=1.0, std=1.0),
        latency=0.05,
        dropout_rate=0.02,
        seed=7,
    )


BASE = Scenario(
    name="policy-grid",
    task=tasks.LinearRepresentation(d=20, k=2, samples_per_client=10, noise_std=1e-3),
    algorithm=algorithms.FedRep(),
    fleet=fleet(100),
    policy=policies.WaitAll(count=20),
    rounds=150,
    eval_every=5,
)

POLICIES = {
    "wait-all": policies.WaitAll(count=20),
    "deadline": policies.Deadline(2.0, count=20),
    "fastest-k": policies.FastestK(k=10, overcommit=1.0),
    "fedbuff": policies.FedBuff(buffer_size=10, concurrency=20),
}

CASES = sweeps.grid(BASE, policy=POLICIES, fleet={n: fleet(n) for n in (50, 100, 200)})
