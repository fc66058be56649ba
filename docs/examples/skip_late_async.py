"""An asynchronous policy that learns: FedBuff that stops picking devices late too often."""

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

import simfl
from simfl import Fleet, Profile, Scenario, algorithms, dists
from simfl._checks import check_int, check_real
from simfl.outcome import ARRIVED, LATE, Outcome
from simfl.policies import FedBuff, View

Strikes = NDArray[np.int64]  # late jobs per device, read-only (a new array when one is added)


@dataclass(frozen=True)
class SkipLateAsync(FedBuff):
    """FedBuff that stops picking a device once ``strikes`` of its jobs were late.

    A job is late if it came back more than ``late_after`` seconds after it started, or was
    discarded as too stale (a drop is not lateness). Until a device strikes out, the picks are
    FedBuff's; then it is never picked again (fewer jobs are in flight while every device left
    is busy), unless every device has struck out: the strikes are then ignored.
    """

    late_after: float = 3.0
    strikes: int = 2
    name: ClassVar[str] = "skip-late-async"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_real("SkipLateAsync.late_after", self.late_after, low=0.0, low_open=True)
        check_int("SkipLateAsync.strikes", self.strikes, low=1)

    def start(self, view: View) -> Strikes:
        """No device has a strike yet."""
        return _frozen(np.zeros(view.n_devices, dtype=np.int64))

    def pick(
        self, state: Strikes, view: View, busy: NDArray[np.bool_], n_started: int
    ) -> int | None:
        """FedBuff's keyed uniform pick, among the devices that have not struck out."""
        out = state >= self.strikes
        return super().pick(state, view, busy if out.all() else busy | out, n_started)

    def observe(self, state: Strikes, outcome: Outcome, view: View) -> Strikes:
        """One strike per late job of the aggregation."""
        returned = outcome.status == ARRIVED
        late = (outcome.status == LATE) | (returned & (outcome.durations > self.late_after))
        if not late.any():
            return state
        new = state.copy()
        np.add.at(new, outcome.devices[late], 1)
        return _frozen(new)


def _frozen(strikes: Strikes) -> Strikes:
    strikes.flags.writeable = False
    return strikes


def slow_share(policy: FedBuff, rounds: int = 300, seed: int = 3) -> tuple[float, float]:
    """The slow tier's share of the jobs started in the first and in the second half of a run.

    A fleet of 30 fast devices (mean compute 0.5 s) and 10 slow ones (4 s), timing only.
    """
    fast, slow = Profile(compute=dists.Exponential(0.5)), Profile(compute=dists.Exponential(4.0))
    fleet = Fleet.tiers((30, fast), (10, slow))
    alg = algorithms.TimingOnly()
    sc = Scenario(task=None, algorithm=alg, fleet=fleet, policy=policy, rounds=rounds, seed=seed)
    jobs = simfl.run(sc, progress=False).clients
    on_slow, first = jobs["device"] >= 30, jobs["round"] < rounds // 2
    return float(on_slow[first].mean()), float(on_slow[~first].mean())


if __name__ == "__main__":
    plain = FedBuff(buffer_size=4, concurrency=8)
    for policy in (plain, SkipLateAsync(buffer_size=4, concurrency=8, late_after=3.0)):
        before, after = slow_share(policy)
        print(f"{policy.name}: slow tier {before:.0%} of the jobs, then {after:.0%}")
