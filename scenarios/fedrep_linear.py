"""FedRep on the linear representation task, on a mixed fleet of phones with dropouts.

The main job of the README: 100 clients (d=20, k=2, 10 fresh samples per round, noise std 1e-3)
on a fleet of 80 ordinary devices and 20 slow, flaky ones, with a 4-second round deadline and
10% of the fleet selected per round.

    simfl run scenarios/fedrep_linear.py --seed 1 --out runs/fedrep_linear
"""

from simfl import Fleet, Profile, Scenario, algorithms, dists, policies, tasks

FLEET = Fleet.tiers(
    (
        80,
        Profile(
            compute=dists.ShiftedExponential(shift=0.2, scale=1.0),  # seconds per local round
            bandwidth_down=2e6,
            bandwidth_up=5e5,
            latency=0.05,  # bytes/s, seconds
            dropout_rate=0.01,
            name="regular",
        ),
    ),
    (
        20,
        Profile(
            compute=dists.LogNormal.from_mean_std(mean=5.0, std=3.0),
            bandwidth_down=2e5,
            bandwidth_up=5e4,
            latency=0.3,
            dropout_rate=0.1,
            name="slow-flaky",
        ),
    ),
)

SCENARIO = Scenario(
    name="fedrep_linear",
    task=tasks.LinearRepresentation(d=20, k=2, samples_per_client=10, noise_std=1e-3),
    algorithm=algorithms.FedRep(),
    fleet=FLEET,
    policy=policies.Deadline(seconds=4.0, fraction=0.1),
    rounds=200,
    seed=0,
)
