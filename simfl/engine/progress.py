"""A run's progress: a bar on stderr, or a callable told the share done (nothing depends on it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias

import simpy
from tqdm.auto import tqdm

from simfl.scenario import Scenario

__all__ = ["Progress", "ShowsProgress", "progress_bar"]

#: What ``simfl.run(progress=...)`` takes: a bar (``True``), nothing, or a callable told the
#: share of the run done (0 to 1) after every aggregation.
Progress: TypeAlias = bool | Callable[[float], None]
#: The progress bar of a run limited only by ``max_time``: simulated seconds out of the budget.
_TIME_BAR = "{l_bar}{bar}| {n:.4g}/{total:.4g} simulated s [{elapsed}<{remaining}{postfix}]"


class ShowsProgress:
    """Moving the bar and telling the callable after every aggregation."""

    scenario: Scenario
    env: simpy.Environment
    round: int
    bar: Any
    #: Told the share of the run done after every aggregation (``run(progress=callable)``).
    report: Callable[[float], None] | None
    _shown: float  # simulated seconds the time bar shows

    def done(self) -> float:
        """The share of the run done, in [0, 1]: rounds of ``rounds``, or time of ``max_time``.

        With both stop rules, the larger share (the run ends at whichever comes first).
        """
        sc = self.scenario
        by_rounds = 0.0 if sc.rounds is None else self.round / sc.rounds
        by_time = 0.0 if sc.max_time is None else float(self.env.now) / sc.max_time
        return min(1.0, max(by_rounds, by_time))

    def show_progress(self) -> None:
        """After an aggregation: move the bar and tell ``report`` (no recorded number changes).

        The bar counts rounds, or, for a run limited only by ``max_time``, simulated seconds
        out of ``max_time`` (so it has a total and an ETA).
        """
        if self.scenario.rounds is not None:
            self.bar.update(1)
        elif not self.bar.disable:
            now = min(float(self.env.now), float(self.bar.total))
            self.bar.update(now - self._shown)
            self._shown = now
        if self.report is not None:
            self.report(self.done())

    def close_progress(self) -> None:
        """Close the bar, a time bar moved to the clock where the run stopped."""
        if self.scenario.rounds is None and not self.bar.disable:
            self.bar.update(min(float(self.env.now), float(self.bar.total)) - self._shown)
        self.bar.close()


def progress_bar(scenario: Scenario, show: bool) -> Any:
    """The run's tqdm bar: over rounds, or over simulated seconds when only ``max_time`` ends it."""
    common: dict[str, Any] = {
        "desc": scenario.name,
        "disable": not show,
        "dynamic_ncols": True,
        "leave": True,
    }
    if scenario.rounds is None:
        return tqdm(total=scenario.max_time, unit="s", bar_format=_TIME_BAR, **common)
    return tqdm(total=scenario.rounds, unit="round", **common)
