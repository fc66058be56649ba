"""A hierarchical, diurnal fleet: 200 phones behind 10 edge servers, online on a daily cycle.

Linear FedRep (d=200, k=4: a 6.4 KB representation each way) on devices with slow uplinks,
edge servers with a shared link to the cloud, and a cloud ingress link shared by everyone. The
devices follow a compressed day (period one hour of simulated time): each is online with a
probability between 0.3 and 0.9 following its own phase, in spells of about 5 minutes; a job
whose device goes offline pauses until it is back, so every policy here has a deadline (a
paused device can otherwise hold a round for minutes).

    simfl run scenarios/edge_diurnal.py --pick fedrep-edge
    simfl sweep scenarios/edge_diurnal.py --seeds 0-2 --target "distance<1e-3"
"""

import dataclasses

import numpy as np

from simfl import Fleet, Scenario, algorithms, dists, policies, tasks
from simfl.fleet import Availability
from simfl.network import Network

N_DEVICES, N_EDGES = 200, 10

FLEET = Fleet.homogeneous(
    N_DEVICES,
    compute=dists.LogNormal.from_mean_std(mean=5.0, std=3.0),  # seconds per local round
    bandwidth_down=200e3,  # bytes/s
    bandwidth_up=20e3,
    latency=0.05,
).with_availability(
    Availability.diurnal(
        N_DEVICES, mean_on=300.0, low=0.3, high=0.9, period=3600.0, horizon=10 * 3600.0, seed=1
    ),
    offline="pause",
)

NETWORK = Network.hierarchical(
    np.arange(N_DEVICES) % N_EDGES,
    edge_up=100e3,
    edge_down=1e6,
    edge_latency=0.02,
    server_up=50e3,
    server_down=1e6,
)

BASE = Scenario(
    name="fedrep-edge",
    task=tasks.LinearRepresentation(d=200, k=4, samples_per_client=20, noise_std=1e-3),
    algorithm=algorithms.FedRep(),
    fleet=FLEET,
    network=NETWORK,
    policy=policies.EdgeAggregation(count=20, edge_deadline=60.0),
    rounds=150,
    eval_every=5,
)

SCENARIOS = {
    s.name: s
    for s in (
        BASE,
        dataclasses.replace(BASE, name="fedrep-flat", policy=policies.Deadline(60.0, count=20)),
        dataclasses.replace(
            BASE, name="fedrep-adaptive", policy=policies.AdaptiveDeadline(quantile=0.9, count=20)
        ),
    )
}
