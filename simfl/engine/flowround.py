"""Synchronous rounds on shared links without SimPy job processes (issue 13, target 2).

A flat synchronous round on a :class:`~simfl.engine.links.FlowNetwork`, its devices always
online, is played out by a small discrete-event loop in plain Python (:class:`Clock`): a heap of
``(time, priority, id)`` events with callbacks, the same order SimPy keeps (urgent before
normal at one instant, then first scheduled first). Each job is a chain of callbacks
(:class:`_Job`) that makes exactly the calls, schedules exactly the events and writes exactly
the records that :meth:`~simfl.engine.live.DeviceRuntime.process` makes, schedules and writes
(the job's start, latency and compute timeouts, its flows' completions, the race with its
failure clock), and the round's closing is the server's wait on "round done" or the deadline.
The network's own wake-ups are scheduled on the same clock while the round plays (its
:attr:`~simfl.engine.links.Links.env` points at it; its next completion is the clock's one
cancellable :meth:`Clock.alarm`, ordered as the live path's timeout would be, so an outdated
one costs nothing), so every flow starts, stops and finishes
in the order, at the instants and with the arithmetic of the live path: the frames are
identical, not just close (``tests/test_flow_round.py``).

The server then sleeps on the SimPy clock until the round closes; jobs still transferring
then keep their flows in :attr:`~simfl.engine.live.DeviceRuntime.live`, stopped by
``finalize`` as the live path stops them. A run ending (``max_time``) while the round is in
flight leaves the round as the live path leaves it at that instant: events at or after
``max_time`` are not played.
"""

from __future__ import annotations

import gc
import heapq
import math
from collections.abc import Callable
from itertools import count
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np
from numpy.typing import NDArray

from simfl.engine.jobs import JobPlan
from simfl.engine.links import Flow, FlowNetwork
from simfl.outcome import ARRIVED, DROPPED

if TYPE_CHECKING:
    from simfl.engine.live import DeviceRuntime

__all__ = ["Clock", "Event", "applies", "play_flow_round"]

_URGENT, _NORMAL = 0, 1
Callback = Callable[["Event"], None]


class RoundRecord(Protocol):
    """What the round keeps while it plays (``simfl.engine.sync.RoundState``)."""

    env: Any
    plan: JobPlan
    quota: int
    status: NDArray[np.int8]
    t_end: NDArray[np.float64]
    n_arrived: int
    n_resolved: int
    closed: bool


class Event:
    """A pending happening on a :class:`Clock` (the part of ``simpy.Event`` the round uses)."""

    __slots__ = ("callbacks", "clock", "triggered")

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        #: called in order when the event is processed; ``None`` once it has been
        self.callbacks: list[Callback] | None = []
        self.triggered = False

    def succeed(self) -> None:
        """Trigger the event now (processed after the events already due now)."""
        self.triggered = True
        self.clock.schedule(self, _NORMAL, 0.0)


class Clock:
    """A discrete-event clock with SimPy's ordering (see the module docstring)."""

    def __init__(self, now: float) -> None:
        self.now = now
        self._queue: list[tuple[float, int, int, Event | Callable[[], None]]] = []
        self._eid = count()
        #: the one cancellable wake-up (:meth:`alarm`), kept out of the heap
        self._alarm: tuple[float, int, int, Callable[[], None]] | None = None

    def schedule(self, event: Event, priority: int, delay: float) -> None:
        """Process ``event`` ``delay`` seconds from now."""
        heapq.heappush(self._queue, (self.now + delay, priority, next(self._eid), event))

    def call_in(self, delay: float, callback: Callable[[], None]) -> None:
        """Call ``callback`` ``delay`` seconds from now (a timeout only one job waits for)."""
        heapq.heappush(self._queue, (self.now + delay, _NORMAL, next(self._eid), callback))

    def call_now(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` now, before any normal event (a process starting)."""
        heapq.heappush(self._queue, (self.now, _URGENT, next(self._eid), callback))

    def alarm(self, delay: float, callback: Callable[[], None]) -> None:
        """Call ``callback`` ``delay`` seconds from now instead of the pending alarm, if any.

        The clock holds one alarm (the network's next completion, ``delay = inf``: none). It
        is ordered like a timeout scheduled now, and the one it replaces is dropped at no
        cost, where an outdated timeout would stay in the heap until its time.
        """
        if math.isinf(delay):
            self._alarm = None
        else:
            self._alarm = (self.now + delay, _NORMAL, next(self._eid), callback)

    def event(self) -> Event:
        """A new untriggered event."""
        return Event(self)

    def timeout(self, delay: float) -> Event:
        """An event processed ``delay`` seconds from now."""
        event = Event(self)
        event.triggered = True
        self.schedule(event, _NORMAL, delay)
        return event

    def any_of(self, first: Event, second: Event) -> Event:
        """An event triggered (and processed later) when the first of two is processed."""
        either = Event(self)

        def check(_: Event) -> None:
            if not either.triggered:
                either.succeed()

        for event in (first, second):
            assert event.callbacks is not None
            event.callbacks.append(check)
        return either

    def peek(self) -> float:
        """When the next event is processed (``inf``: none left)."""
        t = self._queue[0][0] if self._queue else math.inf
        alarm = self._alarm
        return t if alarm is None or alarm[0] > t else alarm[0]

    def step(self) -> None:
        """Process the next event (the alarm if it comes first)."""
        queue, alarm = self._queue, self._alarm
        if alarm is not None and (not queue or alarm < queue[0]):
            self._alarm = None
            self.now = alarm[0]
            alarm[3]()
            return
        t, _, _, event = heapq.heappop(queue)
        self.now = t
        if not isinstance(event, Event):
            event()
            return
        callbacks, event.callbacks = event.callbacks, None
        assert callbacks is not None
        for callback in callbacks:
            callback(event)


class _Job:
    """One job as callbacks: what ``DeviceRuntime.process`` does, devices always online."""

    __slots__ = ("busy", "device", "fail_after", "j", "round")

    def __init__(self, rnd: _Round, j: int) -> None:
        self.round = rnd
        self.j = j
        self.device = rnd.devices[j]
        self.busy = 0.0  # busy seconds used so far
        self.fail_after = rnd.fail_after[j]

    # ------------------------------------------------------------- the job
    def start(self) -> None:
        self._timed(0, self.round.latency[self.device])

    def _stage_done(self, ok: bool) -> None:
        rnd, j = self.round, self.j
        if not ok:
            rnd.active[j] = math.nan
            rnd.resolve(j, arrived=False)
            return
        s = rnd.progress[j] = rnd.progress[j] + 1
        rnd.active[j] = rnd.clock.now
        if s == 1:
            self._timed(1, rnd.compute[j])
        elif s == 2:
            self._timed(2, rnd.latency[self.device])
        else:
            rnd.active[j] = math.nan
            rnd.resolve(j, arrived=True)

    # ------------------------------------------------------------- timed stages
    def _timed(self, s: int, seconds: float) -> None:
        """Busy ``seconds`` in stage ``s`` (a latency or the compute) unless the job fails."""
        rnd, j = self.round, self.j
        clock = rnd.clock
        began = clock.now
        rnd.active[j] = began
        stop = began + (self.fail_after - self.busy)
        done = began + seconds <= stop
        used = seconds if done else stop - began

        def over() -> None:
            self.busy += used
            rnd.spent[j][s] += used
            rnd.active[j] = clock.now
            if s == 1:
                self._stage_done(done)
            else:
                self._latency_done(s, done)

        clock.call_in(used, over)

    # ------------------------------------------------------------- transfers
    def _latency_done(self, s: int, ok: bool) -> None:
        """The path's latency is over (``ok``): the flow starts (``DeviceRuntime._transfer``)."""
        rnd, j = self.round, self.j
        if not ok:
            rnd.moved[j][s // 2] = 0.0
            self._stage_done(False)
            return
        size = rnd.size_down[j] if s == 0 else rnd.size_up[j]
        flow = rnd.net.start(self.device, "down" if s == 0 else "up", size)
        rnd.live[(rnd.plan_id, j)] = flow
        self._wait(s, flow)

    def _wait(self, s: int, flow: Flow) -> None:
        """The transfer loop of ``DeviceRuntime._transfer`` from its guard."""
        rnd, j = self.round, self.j
        clock = rnd.clock
        done = cast(Event, flow.done)  # created on the clock while the round plays
        if done.triggered:
            del rnd.live[(rnd.plan_id, j)]
            self._stage_done(True)
            return
        began = clock.now
        rnd.active[j] = began
        fail_at = began + (self.fail_after - self.busy)

        def resumed(_: Event) -> None:
            now = clock.now
            self.busy += now - began
            rnd.spent[j][s] += now - began
            rnd.active[j] = now
            if done.triggered:
                del rnd.live[(rnd.plan_id, j)]
                self._stage_done(True)
                return
            rnd.net.stop(flow)
            if now >= fail_at or rnd.offline == "abort":
                del rnd.live[(rnd.plan_id, j)]
                rnd.moved[j][s // 2] = flow.delivered
                self._stage_done(False)
                return
            rnd.active[j] = math.nan  # _wait_online(now): a zero timeout, then resumed
            clock.call_in(0.0, lambda: self._resume(s, flow))

        # the race with the failure clock: ``flow.done | env.timeout(...)`` in the live path
        race = math.isfinite(fail_at)
        wake = clock.any_of(done, clock.timeout(fail_at - began)) if race else done
        assert wake.callbacks is not None
        wake.callbacks.append(resumed)

    def _resume(self, s: int, flow: Flow) -> None:
        self.round.active[self.j] = self.round.clock.now
        self.round.net.resume(flow)
        self._wait(s, flow)


class _Round:
    """The round's state while its events play (what ``RoundState`` keeps, on the clock).

    The plan's records are kept in lists while the round plays and written back by
    :meth:`flush`.
    """

    def __init__(self, rnd: RoundRecord, net: FlowNetwork, devices: DeviceRuntime) -> None:
        self.rnd = rnd
        plan = self.plan = rnd.plan
        self.plan_id = id(plan)
        self.net = net
        self.live = devices.live
        self.offline = devices.offline
        assert devices.path_latency is not None
        self.latency: list[float] = devices.path_latency.tolist()
        self.devices: list[int] = plan.devices.tolist()
        self.fail_after: list[float] = plan.fail_after.tolist()
        self.compute: list[float] = plan.compute.tolist()
        self.size_down: list[float] = plan.size_down.tolist()
        self.size_up: list[float] = plan.size_up.tolist()
        self.spent: list[list[float]] = plan.spent.tolist()
        self.active: list[float] = plan.active_since.tolist()
        self.progress: list[int] = plan.progress.tolist()
        self.moved: list[list[float]] = plan.moved.tolist()
        self.clock = Clock(float(rnd.env.now))
        self.done = self.clock.event()
        self.closed_at: float | None = None  # when the server woke up to close the round

    def flush(self) -> None:
        """Write the records kept in lists back into the plan."""
        plan = self.plan
        plan.spent[:] = self.spent
        plan.active_since[:] = self.active
        plan.progress[:] = self.progress
        plan.moved[:] = self.moved

    def resolve(self, j: int, *, arrived: bool) -> None:
        """``RoundState.arrive``/``drop``, the "round done" event on the clock."""
        rnd = self.rnd
        if rnd.closed:
            return
        rnd.status[j] = ARRIVED if arrived else DROPPED
        rnd.t_end[j] = self.clock.now
        rnd.n_arrived += arrived
        rnd.n_resolved += 1
        if rnd.n_arrived >= rnd.quota or rnd.n_resolved == self.plan.size:
            rnd.closed = True
            self.done.succeed()

    def wake_server(self, _: Event) -> None:
        self.closed_at = self.clock.now


def applies(kind: str, network: Any, devices: DeviceRuntime) -> bool:
    """Whether flat rounds on ``network`` (of ``Network.kind`` ``kind``) play on a clock.

    The fast links on a star or a hierarchy (every flow fits one shared link, nested at
    most once: the links never hand over to the reference algorithm), every link with some
    capacity (every flow finishes), devices always online.
    """
    return (
        kind in ("star", "hierarchical")
        and isinstance(network, FlowNetwork)
        and network.reference is None
        and bool((network.capacity > 0).all())
        and devices.cursor is None
        and devices.path_latency is not None
    )


def play_flow_round(
    rnd: RoundRecord,
    net: FlowNetwork,
    devices: DeviceRuntime,
    deadline: float | None,
    max_time: float | None,
) -> tuple[float, bool]:
    """Play the round's events on a :class:`Clock` until the server would close it.

    Returns ``(t, closes)``: the instant the server wakes to close the round (``closes``), or
    else the first instant left unplayed because the run ends before it (``t >= max_time``)
    or, if nothing is left to happen, the last instant played. The round's and the plan's
    records are left as the live path leaves them then.
    """
    state = _Round(rnd, net, devices)
    clock = state.clock
    jobs = [_Job(state, j) for j in range(rnd.plan.size)]
    for job in jobs:
        clock.call_now(job.start)
    wait = state.done if deadline is None else clock.any_of(state.done, clock.timeout(deadline))
    assert wait.callbacks is not None
    wait.callbacks.append(state.wake_server)
    budget = math.inf if max_time is None else max_time
    env = net.env
    net.env = clock  # type: ignore[assignment]
    net.alarm = clock.alarm
    collect = gc.isenabled()
    gc.disable()  # the round allocates many short-lived objects and frees them itself
    try:
        while state.closed_at is None:
            t = clock.peek()
            if math.isinf(t):
                return clock.now, False
            if t >= budget:
                return t, False
            clock.step()
    finally:
        if collect:
            gc.enable()
        net.env = env
        net.alarm = None
        state.flush()
    return state.closed_at, True
