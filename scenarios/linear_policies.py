"""FedRep and FedAvg on the linear task under the synchronous policies, on one seeded fleet.

simfl run scenarios/linear_policies.py --pick fedrep-fastest-k --seed 2
"""

import dataclasses

from simfl import Fleet, Scenario, algorithms, dists, policies, tasks

BASE = Scenario(
    name="fedrep-wait-all",
    task=tasks.LinearRepresentation(d=20, k=2, samples_per_client=10, noise_std=1e-3),
    algorithm=algorithms.FedRep(),
    fleet=Fleet.homogeneous(100, compute=dists.Exponential(mean=1.0), dropout_rate=0.05),
    policy=policies.WaitAll(count=10),
    rounds=200,
)

SCENARIOS = {
    s.name: s
    for s in (
        BASE,
        dataclasses.replace(BASE, name="fedrep-deadline", policy=policies.Deadline(1.5, count=10)),
        dataclasses.replace(
            BASE, name="fedrep-fastest-k", policy=policies.FastestK(k=10, overcommit=0.3)
        ),
        dataclasses.replace(BASE, name="fedavg-wait-all", algorithm=algorithms.FedAvg()),
    )
}
