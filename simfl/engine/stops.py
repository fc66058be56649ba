"""The stop rules, in one place for every loop (a part of the run context).

The stop rules: ``rounds``, ``target`` and a diverged or failed aggregation (checked after
each aggregation), the stall rule (below), ``offline`` (no device will ever be online again)
and ``max_time`` (the clock reaches the budget; see :func:`simfl.engine.run`).

Stall rule: an aggregation is *idle* when it applied no update; a run stops as ``stalled``
after :data:`STALL_ROUNDS` idle aggregations in a row. An aggregation that applied updates
changed the model, so it is never idle, however little it moved the clock: a run limited by
``rounds`` never depends on ``max_time`` beyond the time it ends (the same stop reason and the
same rows under any larger budget). Such a run is finite whatever happens: every aggregation,
idle or not, counts towards ``rounds``.

A run without ``rounds`` is ended only by the clock reaching ``max_time`` (or by ``target``,
``offline``, a failure), so the rule must also see a clock that cannot get there. Then an
aggregation is also idle when it advances the clock by less than :data:`STALL_SHARE` times
``max_time`` (at that pace the budget is more than ``1 / STALL_SHARE`` aggregations away, more
than any host plays), and a synchronous round that leaves the clock where it was stops the run
at once (every round after it would too: the budget is never reached). Asynchronous arrivals
may share an instant (jobs of equal durations), so there a zero advance is an ordinary idle
aggregation. A run stopped by this clock rule says so in ``meta["warnings"]``, with the advice
to give it ``rounds``. Every run therefore ends: by ``rounds``, or by ``max_time`` after at most
``STALL_ROUNDS / STALL_SHARE`` non-idle aggregations (each one moves the clock by
``STALL_SHARE * max_time``) with fewer than ``STALL_ROUNDS`` idle ones between them.
"""

from __future__ import annotations

from simfl.scenario import Scenario

__all__ = ["STALL_ROUNDS", "STALL_SHARE", "StopRules"]

#: Idle aggregations in a row after which a run stops as ``stalled``.
STALL_ROUNDS = 1000
#: In a run without ``rounds``, an aggregation advancing the clock by less than this share of
#: ``max_time`` is idle.
STALL_SHARE = 1e-9


class StopRules:
    """Counting aggregations against the stop rules; stopping, failing (see the module doc)."""

    scenario: Scenario
    #: Number of aggregations so far (the index of the next one).
    round: int
    stop_reason: str | None
    error: str | None
    idle_rounds: int
    _slow_rounds: int  # idle rounds of the current stretch that applied updates
    _max_rounds: float
    #: whether the stall rule looks at the clock (only ``max_time`` ends the run)
    _clock_rules: bool
    #: whether aggregations may share an instant (asynchronous arrivals)
    _simultaneous: bool
    #: What the run found worth a word (``meta["warnings"]``).
    warnings: list[str]
    #: whether a bar or a callable follows the aggregations
    shows_progress: bool

    def count_aggregation(self, n_arrived: int, advance: float) -> None:
        """One more aggregation: the ``rounds`` and stall rules (see the module docstring).

        ``n_arrived``: the updates it applied. ``advance``: the simulated seconds since the
        previous aggregation. A loop that records its aggregations itself calls this (and
        :meth:`show_progress` where :attr:`shows_progress`) instead of :meth:`end_aggregation`.
        """
        self.round += 1
        if self.round >= self._max_rounds:
            self.stop("rounds")
        if n_arrived and not self._clock_rules:  # not idle: the common case, nothing to check
            self.idle_rounds = 0
            return
        idle = n_arrived == 0
        if self._clock_rules:  # only max_time ends the run: the clock must get there
            budget = self.scenario.max_time
            assert budget is not None  # a Scenario without rounds has a max_time
            if advance == 0 and not self._simultaneous:
                self._stall(bool(n_arrived), "a synchronous round took no time")
            slow = advance < STALL_SHARE * budget
            if slow and not idle:
                self._slow_rounds += 1  # idle by the clock alone
            idle = idle or slow
        if not idle:
            self.idle_rounds = self._slow_rounds = 0
            return
        self.idle_rounds += 1
        if self.idle_rounds >= STALL_ROUNDS:
            self._stall(
                self._slow_rounds > 0,
                f"{self._slow_rounds} of the last {STALL_ROUNDS} aggregations applied updates "
                f"but advanced the clock by less than {STALL_SHARE:g} x max_time",
            )

    def _stall(self, by_clock: bool, why: str) -> None:
        """Stop as ``stalled``; ``by_clock``: updates arrived (a warning says why it stopped)."""
        if by_clock and self.stop_reason is None:
            self.warnings.append(
                f"stalled although updates arrived: {why}, so max_time "
                f"({self.scenario.max_time:g} s) cannot be reached in a number of aggregations "
                f"a host can play; give the scenario a rounds limit to run on"
            )
        self.stop("stalled")

    def quiet_aggregations(self) -> int:
        """How many more aggregations, each applying an update, cannot fire a stop rule.

        A loop may count them in one step (:meth:`count_quiet`) instead of calling
        :meth:`count_aggregation` for each: the rules' state ends the same. None where the
        stall rule looks at the clock (no ``rounds``) or progress is shown.
        """
        if self._clock_rules or self.shows_progress:
            return 0
        return max(int(self._max_rounds) - self.round - 1, 0)

    def count_quiet(self, k: int) -> None:
        """Count ``k`` aggregations that :meth:`quiet_aggregations` allowed."""
        if k:
            self.round += k
            self.idle_rounds = self._slow_rounds = 0

    @property
    def stopped(self) -> bool:
        """Whether a stop rule has fired (the loop should not start another round)."""
        return self.stop_reason is not None

    def stop(self, reason: str) -> None:
        """Ask the run to stop after the current aggregation (the first reason wins)."""
        if self.stop_reason is None:
            self.stop_reason = reason

    def fail(self, error: str) -> None:
        """Record a failure (a traceback) and stop the run as ``error``."""
        if self.error is None:
            self.error = error
        self.stop("error")
