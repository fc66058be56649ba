"""A stateful synchronous policy: skip devices that were late in two of their last three rounds."""

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from simfl.outcome import LATE, Outcome
from simfl.policies import RoundPlan, SyncPolicy, View, sample_uniform

History = dict[int, tuple[bool, ...]]  # device -> was it late, in each of its last rounds


@dataclass(frozen=True)
class SkipLate(SyncPolicy[History]):
    """Deadline rounds that leave out devices late in two of their last three rounds."""

    seconds: float = 1.5
    count: int = 10
    name: ClassVar[str] = "skip-late"

    def start(self, view: View) -> History:
        """No device has a history yet."""
        return {}

    def plan(self, state: History, view: View) -> tuple[History, RoundPlan]:
        """A uniform cohort of the online devices not late in two of their last three rounds."""
        ok = [d for d in view.online().tolist() if sum(state.get(d, ())) < 2]
        cohort = sample_uniform(view.round, np.array(ok, dtype=np.int64), self.count, view.streams)
        return state, RoundPlan(cohort, deadline=self.seconds)

    def observe(self, state: History, outcome: Outcome, view: View) -> History:
        """Remember, for each device of the round, whether it was late (its last three)."""
        new = dict(state)
        for device, status in zip(outcome.devices.tolist(), outcome.status.tolist(), strict=True):
            new[device] = (*new.get(device, ()), status == LATE)[-3:]
        return new
