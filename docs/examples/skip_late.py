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
        return {}

    def plan(self, state: History, view: View) -> tuple[History, RoundPlan]:
        ok = [d for d in view.online().tolist() if sum(state.get(d, ())) < 2]
        cohort = sample_uniform(view.round, np.array(ok, dtype=np.int64), self.count, view.streams)
        return state, RoundPlan(cohort, deadline=self.seconds)

    def observe(self, state: History, outcome: Outcome, view: View) -> History:
        new = dict(state)
        for device, status in zip(outcome.devices.tolist(), outcome.status.tolist()):
            new[device] = (*new.get(device, ()), status == LATE)[-3:]
        return new
