"""The run context every server loop shares, and the read-only view policies see.

The loops (:mod:`simfl.engine.sync`, :mod:`simfl.engine.tiered`,
:mod:`simfl.engine.asynchronous`) decide *who* takes part, *when* each step happens and *what
arrives*; they never touch model parameters (the math is :mod:`simfl.engine.updates`').

:class:`RunContext` holds what one run shares and is made of parts, each in a module of its
own: the stop rules (:mod:`simfl.engine.stops`), the progress shown
(:mod:`simfl.engine.progress`), the job rows (:mod:`simfl.engine.records`) and the math
(:mod:`simfl.engine.updates`); policies see it through :class:`~simfl.engine.view.PolicyView`.
How its jobs are played is the playback's (:mod:`simfl.engine.playbacks`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from typing import Any

import numpy as np
import simpy
from numpy.typing import NDArray

from simfl.engine.jobs import JobPlan, plan_jobs
from simfl.engine.players import Jobs, build_jobs
from simfl.engine.progress import Progress, ShowsProgress, progress_bar
from simfl.engine.records import JobRecords
from simfl.engine.server import ServerClock
from simfl.engine.stops import StopRules
from simfl.engine.updates import Computation
from simfl.engine.view import PolicyView
from simfl.fleet import AvailabilityCursor
from simfl.policies.base import AsyncPolicy
from simfl.results import Recorder
from simfl.rng import Streams
from simfl.scenario import Scenario

__all__ = ["RunContext"]


class RunContext(StopRules, ShowsProgress, JobRecords, Computation):
    """Everything one run shares: clock, streams, data, state, playback, records, stop rules.

    Loops use its primitives: :meth:`plan` to plan device jobs, :attr:`playback` to play them,
    :meth:`record_jobs` to record them, :meth:`updates` and :meth:`apply` to compute and
    aggregate updates, and :meth:`end_aggregation` to record the aggregation, evaluate and check
    the stop rules. Built by :func:`simfl.engine.run`.
    """

    def __init__(
        self,
        scenario: Scenario,
        *,
        lazy: bool,
        progress: Progress,
        on_error: str,
        reference_links: bool = False,
    ) -> None:
        self.scenario = scenario
        self.lazy = lazy
        self.on_error = on_error
        self.env = simpy.Environment()
        self.streams = Streams(scenario.seed)
        self.fleet = scenario.fleet
        self.algorithm = scenario.algorithm
        task = scenario.task
        self.metrics: tuple[str, ...] = task.metrics if task is not None else ()
        self.goals: dict[str, str] = dict(task.goals) if task is not None else {}
        self.recorder = Recorder(self.metrics, energy=scenario.fleet.energy is not None)
        #: Number of aggregations so far (the index of the next one).
        self.round = 0
        self.stop_reason: str | None = None
        self.error: str | None = None
        self.idle_rounds = 0
        self._slow_rounds = 0  # idle rounds of the current stretch that applied updates
        self.bar = progress_bar(scenario, progress is True)
        #: Told the share of the run done after every aggregation (``run(progress=callable)``).
        self.report: Callable[[float], None] | None = (
            None if isinstance(progress, bool) else progress
        )
        self._shown = 0.0  # simulated seconds the time bar shows
        #: whether a bar or a callable follows the aggregations
        self.shows_progress = not self.bar.disable or self.report is not None
        self._max_rounds = math.inf if scenario.rounds is None else float(scenario.rounds)
        #: whether the stall rule looks at the clock (only ``max_time`` ends the run)
        self._clock_rules = scenario.rounds is None
        #: whether aggregations may share an instant (asynchronous arrivals)
        self._simultaneous = isinstance(scenario.policy, AsyncPolicy)
        #: What the run found worth a word (``meta["warnings"]``).
        self.warnings: list[str] = []
        fleet = scenario.fleet
        #: availability queries (None: every device always online)
        self.cursor = None if fleet.availability is None else AvailabilityCursor(fleet.availability)
        self._everyone = np.arange(fleet.size, dtype=np.int64)  # built once, not every round
        self._everyone.setflags(write=False)
        #: The server's own costs on the clock (``None``: the server takes no time); the job
        #: processes and the loops ask it for its time (:mod:`simfl.engine.server`).
        self.server = ServerClock.of(self.env, scenario.server)
        #: How one job unfolds: its shared network and live job processes, where it has them.
        self.jobs: Jobs = build_jobs(self.env, scenario, self.cursor, reference_links, self.server)
        self.view = PolicyView(self)
        self.data: Any = None if task is None else task.build(scenario.fleet.size, self.streams)
        self.state: Any = self.algorithm.initial_state(self.data, self.streams)
        #: Metrics of the initial state (before round 0), kept in ``Results.meta``.
        self.initial_metrics: dict[str, float] = (
            self.algorithm.evaluate(self.state, self.data) if self.metrics else {}
        )

    # ----------------------------------------------------------------- jobs
    def plan(self, devices: NDArray[np.int64], *, key: int, stage: int) -> JobPlan:
        """Jobs of ``devices`` starting now, keyed by ``key`` (the round, for synchronous runs).

        Nothing starts: policies observe speeds this way before choosing (the draws are keyed,
        so starting the same jobs later reproduces them exactly).
        """
        return plan_jobs(
            self.fleet,
            devices,
            round=key,
            stage=stage,
            t_start=self.env.now,
            work=self.algorithm.work(self.state, devices),
            payload=self.algorithm.payload(self.state),
            streams=self.streams,
            links=self.jobs.links,
        )

    def online(self) -> NDArray[np.int64]:
        """The devices online now, sorted (all of them without an availability)."""
        if self.cursor is None:
            return self._everyone
        return np.flatnonzero(self.cursor.online(self.env.now)).astype(np.int64)

    def wait_online(self) -> Generator[Any, Any, None]:
        """Wait until some device is online (stop the run as ``offline`` if none ever will be)."""
        while self.cursor is not None:
            t = self.cursor.next_online(self.env.now)
            if t <= self.env.now:
                return
            if math.isinf(t):
                self.stop("offline")
                return
            yield self.env.timeout(t - self.env.now)

    def end_aggregation(self, row: dict[str, Any]) -> None:
        """Record aggregation ``row``, then check the stop rules and evaluate if due."""
        row.setdefault("status", "ok")
        row.setdefault("duration", row["time"] - row["t_start"])
        self.recorder.add_round(row)
        self.count_aggregation(row["n_arrived"], row["time"] - row["t_start"])
        due = self.round % self.scenario.eval_every == 0 or self.stop_reason is not None
        if due and self.metrics and row["status"] in ("ok", "empty"):
            self._evaluate()
        self.show_progress()
