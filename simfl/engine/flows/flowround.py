"""Synchronous rounds on shared links played without job processes or event objects.

A flat synchronous round on a :class:`~simfl.engine.flows.network.FlowNetwork` whose devices are
always online is played by :func:`play_flow_round` in one loop over a heap of plain tuples,
``(time, order, kind, job, ...)``: no SimPy process, no event object, no callback per job. A
job is a row of lists (busy seconds, stage, the segment in progress); its timed stages (the
path's latency, the compute) are one heap entry each, its transfers are members of the
network's own :class:`~simfl.engine.flows.sharedlink.SharedLink` objects (the same links, routes and
nesting :class:`~simfl.engine.flows.network.FlowNetwork` uses), and the network's next completion is
one *alarm* beside the heap.

The loop makes the calls of the live job processes (:meth:`DeviceRuntime.process
<simfl.engine.live.DeviceRuntime.process>`), with the same arithmetic, in the same order:

* a timed stage ends at ``began + used``, ``used`` being the stage's seconds or, if the device
  fails first, ``began + (fail_after - busy) - began``; a transfer races the failure clock the
  same way, and on a failure its flow is taken off its link at that instant;
* a flow starts on its shared link at the instant its latency ends (``SharedLink.add``), and
  on every completion the links whose completion it is are finished and the links that lost
  members settled, as :meth:`FlowNetwork._wake <simfl.engine.flows.network.FlowNetwork._wake>` does;
* entries at one instant are taken in the order the live clock would take them: each carries
  the id its event would get there (``order``: one per timeout, ``done`` event, ``any_of``
  firing, alarm), so a flow's job goes on at its ``done`` event, or one step later (its
  race's ``any_of``) if a failure clock runs beside it;
* the round is done at the ``quota``-th arrival or when every job has resolved; the server
  wakes at that event, or one step after it or after the deadline (its ``any_of``): entries
  due before then are still played.
  Transfers still in progress are then taken off their links at that instant, job by job, as
  ``DeviceRuntime.finalize`` takes them off when the server closes the round (or at
  ``max_time``, when the run ends first: entries at or after it are not played).

Entries the heap would hand out next anyway are taken at once: a wake-up's ``done`` events
and a zero latency after the compute when nothing else is due at that instant, and the first
latencies of jobs whose path has none.

So the frames equal the live processes' (``tests/test_flow_round.py`` compares them exactly
over random stars and hierarchies, ties included, and with the reference links to a relative
``1e-9``). What the loop leaves out is the machinery: one heap entry per timed stage instead
of a process, a timeout and its callbacks; an event's one waiter called directly.
"""

from __future__ import annotations

import heapq
import math
from operator import attrgetter, itemgetter
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from simfl.engine.flows.network import FlowNetwork
from simfl.engine.flows.sharedlink import Member, SharedLink
from simfl.engine.jobs import JobPlan
from simfl.outcome import ARRIVED, DROPPED

__all__ = ["applies", "play_flow_round"]

# what a heap entry is: a timed stage ending (its stage is the kind); a flow's ``done`` event;
# a transfer's failure clock running out; a raced transfer's ``any_of`` firing; a paused
# transfer resuming; the round's "done" event; the round's deadline
_LATENCY_DOWN, _COMPUTE, _LATENCY_UP, _DONE, _TIMEOUT, _EITHER, _RESUME, _ROUND_DONE, _DEADLINE = (
    range(9)
)
_NAN = math.nan
_seq_of = attrgetter("seq")
_order_of = itemgetter(1)


class Devices(Protocol):
    """What the round reads of the run's devices (``simfl.engine.live.DeviceRuntime``)."""

    #: what a device going offline does to its job (``"abort"``, or ``"pause"``)
    offline: str
    #: the latency of every device's path (``None``: no network)
    path_latency: NDArray[np.float64] | None
    #: the devices' availability (``None``: always online)
    cursor: Any


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


class _Transfer(Member):
    """A job's flow on a shared link (what a :class:`~simfl.engine.flows.links.Flow` keeps).

    No event: the round's loop calls the job's next step itself.
    """

    __slots__ = (
        "delivered",
        "done",
        "fired",
        "job",
        "race",
        "remaining",
        "segment",
        "stage",
    )

    def __init__(self, size: float, cap: float, job: int, stage: int):
        super().__init__(size, cap)
        self.remaining = size
        self.delivered = 0.0
        self.job = job
        self.stage = stage
        self.done = False  # all its bytes have arrived
        self.race = False  # a failure clock runs beside the segment in progress
        self.fired = False  # the segment's race has been decided (its ``any_of`` fired)
        self.segment = 0  # segments waited so far (a paused flow waits again)


class _Round:
    """One round's jobs, the network's links and the loop that plays them."""

    def __init__(self, rnd: RoundRecord, net: FlowNetwork, devices: Devices) -> None:
        self.rnd = rnd
        plan = self.plan = rnd.plan
        self.net = net
        self.abort = devices.offline == "abort"
        assert devices.path_latency is not None
        self.device: list[int] = plan.devices.tolist()
        self.latency: list[float] = devices.path_latency[plan.devices].tolist()
        self.fail_after: list[float] = plan.fail_after.tolist()
        self.compute: list[float] = plan.compute.tolist()
        self.sizes: tuple[list[float], list[float]] = (
            plan.size_down.tolist(),
            plan.size_up.tolist(),
        )
        #: per stage, each job's busy seconds in it (``plan.spent`` by columns: cheaper to
        #: convert than rows of three)
        self.spent: list[list[float]] = plan.spent.T.tolist()
        self.active: list[float] = plan.active_since.tolist()
        self.progress: list[int] = plan.progress.tolist()
        self.moved: list[list[float]] = plan.moved.T.tolist()  # per direction, by job
        n = self.n_jobs = plan.size
        self.busy = [0.0] * n  # busy seconds used so far
        self.began = [0.0] * n  # when the transfer segment in progress began
        self.fail_at = [math.inf] * n  # when that segment's failure clock runs out
        self.flows: list[_Transfer | None] = [None] * n  # each job's transfer in progress
        self.heap: list[tuple[Any, ...]] = []
        self.order = 0  # the order of the next entry (the live clock's event ids)
        self.alarm: tuple[float, int] | None = None  # the network's next completion
        self.wake_at = net.wake_at
        self.calendar = net.calendar  # the network's links and their next completions
        self.deadline = False  # whether the server also waits for a deadline
        self.decided = False  # whether the server's wait has fired (``any_of``, deadline)
        self.closes: tuple[float, int] | None = None  # (instant, order) the server wakes at
        self.transfers: list[_Transfer] = []  # every flow the round started
        self.status: list[int] = rnd.status.tolist()  # the round's records, written back
        self.t_end: list[float] = rnd.t_end.tolist()
        paths = (net.fleet["down"], net.fleet["up"])
        #: per direction, each job's pair of contended resources and its cap (its own link)
        self.pairs: tuple[list[int], list[int]] = (
            paths[0].pair[plan.devices].tolist(),
            paths[1].pair[plan.devices].tolist(),
        )
        self.caps: tuple[list[float], list[float]] = (
            paths[0].caps[plan.devices].tolist(),
            paths[1].caps[plan.devices].tolist(),
        )

    # ------------------------------------------------------------------ the network
    def _route(self, j: int, up: int) -> tuple[SharedLink | None, float]:
        """Job ``j``'s shared link in direction ``up`` (``None``: it finishes at once), its cap.

        A device's link follows from the pair of contended resources on its path (the
        network's ``_joins``); the first flow of a pair works it out as
        :meth:`FlowNetwork.start <simfl.engine.flows.network.FlowNetwork.start>` does (so an edge's
        link is attached to the cloud's when its first flow starts, as in the live path).
        """
        cap = self.caps[up][j]
        pair = self.pairs[up][j]
        links = self.net.flow_links
        if pair in links:
            contended = links[pair]
        else:
            path = self.net.path(self.device[j], "up" if up else "down")
            contended = links[pair] = path[1][0]
            if contended == -2:  # pragma: no cover - stars and hierarchies nest at most once
                raise AssertionError("a flow round on a network its links cannot share")
        if contended >= 0:
            return self.net.shared_link(contended), cap
        return (None if cap == math.inf else self.net.free_link), cap

    def _reschedule(self, now: float) -> None:
        """``FlowNetwork._reschedule`` with the clock's alarm: the next completion."""
        t = self.calendar.earliest()
        if t == self.wake_at:
            return
        self.wake_at = t
        if t == math.inf:  # next_at is never -inf
            self.alarm = None
        else:
            ahead = t - now  # max(t - now, 0.0), without the call
            self.alarm = (now + (ahead if ahead > 0.0 else 0.0), self.order)
            self.order += 1

    def _carry(self, m: _Transfer, left: float) -> None:
        """``FlowNetwork._settle``: book the bytes ``m`` moved since it was last touched.

        The network's ``carried`` is booked later, many rounds at once (``FlowNetwork.book_later``).
        """
        m.delivered += m.remaining - left
        m.remaining = left

    def _admit(self, m: _Transfer, link: SharedLink | None, now: float) -> bool:
        """``FlowNetwork.resume``: whether ``m`` is done at once, else it joins ``link``."""
        if link is None or m.done_by(m.remaining):
            self._carry(m, 0.0)
            m.done = True
            self.order += 1  # its ``done`` event, which nothing waits for yet
            return True
        link.add(m, m.remaining, now)
        self._reschedule(now)
        return False

    def _wake(self, now: float) -> None:
        """``FlowNetwork._wake``: the flows done now leave their links, their events fire.

        Each finished flow's ``done`` event is an entry at ``now``; when nothing else is due
        now (no entry at ``now``, the server not about to wake), those entries would be the
        next ones taken, in order, so they are taken at once.
        """
        at, self.wake_at = self.wake_at, math.inf
        # every member of a flow round's links is a _Transfer
        finished: list[_Transfer] = self.calendar.wake_up(at, now)  # type: ignore[assignment]
        if len(finished) > 1:
            finished.sort(key=_seq_of)
        for m in finished:
            self._carry(m, 0.0)
            m.done = True
        heap = self.heap
        if self.closes is not None or (heap and heap[0][0] <= now):
            for m in finished:
                self._push(now, _DONE, m.job, m)
            self._reschedule(now)
            return
        self.order += len(finished)  # the ``done`` events' ids
        self._reschedule(now)
        for m in finished:
            self._done(m, now)

    # ------------------------------------------------------------------ the jobs
    def _push(self, t: float, kind: int, j: int, a: Any = None, b: Any = None) -> None:
        heapq.heappush(self.heap, (t, self.order, kind, j, a, b))
        self.order += 1

    def _timed(self, j: int, s: int, seconds: float, now: float) -> None:
        """Busy ``seconds`` in stage ``s`` unless the device fails first (``_timed``)."""
        self.active[j] = now
        stop = now + (self.fail_after[j] - self.busy[j])
        done = now + seconds <= stop
        used = seconds if done else stop - now
        self._push(now + used, s, j, used, done)

    def _start_at_once(self, t0: float) -> None:
        """Take the entries of jobs whose path has no latency now, in order.

        They are all due at ``t0``, before anything they lead to (which is ordered after
        every job's first entry), and nothing else is due then but the deadline (if it is
        ``t0``, the caller does not come here): the heap would hand them out in this order.
        """
        heap = self.heap
        if not heap or heap[0][0] != t0:
            return
        due = [entry for entry in heap if entry[0] == t0]
        if any(entry[2] != _LATENCY_DOWN or not entry[5] for entry in due):
            return  # a device failing at once: its entry's place among them matters
        if len(due) == len(heap):
            heap.clear()
        else:
            heap[:] = [entry for entry in heap if entry[0] != t0]
            heapq.heapify(heap)
        due.sort(key=_order_of)
        for _, _, _, j, used, _ in due:
            self._timed_over(j, 0, used, True, t0)

    def _timed_over(self, j: int, s: int, used: float, done: bool, now: float) -> None:
        self.busy[j] += used
        self.spent[s][j] += used
        self.active[j] = now
        if s == 1:
            self._stage_done(j, done, now)
        elif not done:  # the device failed during the path's latency
            self.moved[s // 2][j] = 0.0
            self._stage_done(j, False, now)
        else:
            self._begin(j, s, now)

    def _begin(self, j: int, s: int, now: float) -> None:
        """Job ``j``'s transfer after the latency stage ``s``: it starts on its link."""
        up = s // 2
        link, cap = self._route(j, up)
        m = _Transfer(self.sizes[up][j], cap, j, s)
        self.transfers.append(m)
        if self._admit(m, link, now):
            self._stage_done(j, True, now)
        else:
            self.flows[j] = m
            self._wait(m, now)

    def _wait(self, m: _Transfer, now: float) -> None:
        """A segment of the transfer: until it is done or the failure clock runs out."""
        j = m.job
        self.began[j] = now
        self.active[j] = now
        fail_at = self.fail_at[j] = now + (self.fail_after[j] - self.busy[j])
        m.segment += 1
        m.fired = False
        m.race = not math.isinf(fail_at)
        if m.race:
            self._push(now + (fail_at - now), _TIMEOUT, j, m, m.segment)

    def _done(self, m: _Transfer, now: float) -> None:
        """``m``'s ``done`` event fires: its job goes on (after its race, if one runs)."""
        if m.race:
            self._fire(m, now)
        else:
            self._resumed(m, now)

    def _fire(self, m: _Transfer, now: float) -> None:
        """The first of a raced segment's two events fires its ``any_of`` (one step later)."""
        if not m.fired:
            m.fired = True
            self._push(now, _EITHER, m.job, m)

    def _resumed(self, m: _Transfer, now: float) -> None:
        """The job wakes from a transfer segment: it is done, or the device failed."""
        j = m.job
        took = now - self.began[j]
        self.busy[j] += took
        self.spent[m.stage][j] += took
        self.active[j] = now
        if m.done:
            self.flows[j] = None
            self._stage_done(j, True, now)
            return
        assert m.link is not None
        self._carry(m, m.link.remove(m, now))
        self._reschedule(now)
        if now >= self.fail_at[j] or self.abort:
            self.flows[j] = None
            self.moved[m.stage // 2][j] = m.delivered
            self._stage_done(j, False, now)
        else:  # a hair short of the failure (rounding): paused, and resumed at once
            self.active[j] = _NAN
            self._push(now + 0.0, _RESUME, j, m)

    def _resume(self, m: _Transfer, now: float) -> None:
        j = m.job
        self.active[j] = now
        link = self._route(j, m.stage // 2)[0]
        if self._admit(m, link, now):
            self.flows[j] = None
            self._stage_done(j, True, now)
        else:
            self._wait(m, now)

    def _stage_done(self, j: int, ok: bool, now: float) -> None:
        if not ok:
            self.active[j] = _NAN
            self._resolve(j, False, now)
            return
        s = self.progress[j] = self.progress[j] + 1
        self.active[j] = now
        if s == 1:
            self._timed(j, 1, self.compute[j], now)
        elif s == 2:
            self._timed(j, 2, self.latency[j], now)
        else:
            self.active[j] = _NAN
            self._resolve(j, True, now)

    def _resolve(self, j: int, arrived: bool, now: float) -> None:
        """``RoundState.arrive``/``drop``; the round is done once enough jobs have."""
        rnd = self.rnd
        if rnd.closed:
            return
        self.status[j] = ARRIVED if arrived else DROPPED
        self.t_end[j] = now
        rnd.n_arrived += arrived
        rnd.n_resolved += 1
        if rnd.n_arrived >= rnd.quota or rnd.n_resolved == self.n_jobs:
            rnd.closed = True
            self._push(now, _ROUND_DONE, -1)  # the "round done" event

    def _server(self, now: float) -> None:
        """The server's wait fires (round done, or the deadline): it wakes one step later."""
        if not self.decided:
            self.decided = True
            self.closes = (now, self.order)
            self.order += 1

    # ------------------------------------------------------------------ the loop
    def play(self, t0: float, deadline: float | None, budget: float) -> tuple[float, bool]:
        """Play the round from ``t0``; see :func:`play_flow_round`."""
        n = self.plan.size
        # the live round starts every job (event ids 0..n-1), then the deadline's timeout
        # (n); each job's start schedules the end of its first latency
        self.order = n
        if deadline is not None:
            self.deadline = True
            self._push(t0 + deadline, _DEADLINE, -1)
        # _timed(j, 0, latency, t0) of every job, inline; the heap made at once (entries are
        # told apart by their order, so the heap's layout does not change what it hands out)
        heap, order = self.heap, self.order
        active, busy, fail_after, latency = self.active, self.busy, self.fail_after, self.latency
        for j in range(n):
            active[j] = t0
            seconds = latency[j]
            stop = t0 + (fail_after[j] - busy[j])
            done = t0 + seconds <= stop
            used = seconds if done else stop - t0
            heap.append((t0 + used, order, _LATENCY_DOWN, j, used, done))
            order += 1
        heapq.heapify(heap)
        self.order = order
        if deadline is None or deadline > 0.0:
            self._start_at_once(t0)
        # the common steps are inline (the same arithmetic as the methods they stand for)
        pop, push = heapq.heappop, heapq.heappush
        spent, progress = self.spent, self.progress
        inf = math.inf
        while True:
            alarm = self.alarm
            if heap:
                top = heap[0]
                t = top[0]
                if alarm is not None and (alarm[0] < t or (alarm[0] == t and alarm[1] < top[1])):
                    t = alarm[0]
                else:
                    alarm = None
            elif alarm is not None:
                t = alarm[0]
            else:  # pragma: no cover - every job of a flat round resolves
                return inf, False
            closes = self.closes
            if closes is not None and (t, heap[0][1] if alarm is None else alarm[1]) >= closes:
                return closes[0], True
            if t >= budget:
                return t, False
            if alarm is not None:  # the network's next completion comes first
                self.alarm = None
                self._wake(t)
                continue
            _, _, kind, j, a, b = pop(heap)
            if kind <= _LATENCY_UP and b:  # a timed stage over: _timed_over
                busy[j] += a
                spent[kind][j] += a
                active[j] = t
                if kind == _COMPUTE:  # _stage_done(j, True), then _timed(j, 2, latency)
                    progress[j] = 2
                    active[j] = t
                    seconds = latency[j]
                    stop = t + (fail_after[j] - busy[j])
                    done = t + seconds <= stop
                    used = seconds if done else stop - t
                    alarm = self.alarm
                    if not (
                        used == 0.0
                        and done
                        and self.closes is None
                        and (not heap or heap[0][0] > t)
                        and (alarm is None or alarm[0] > t)
                    ):
                        push(heap, (t + used, self.order, _LATENCY_UP, j, used, done))
                        self.order += 1
                        continue
                    # no latency and nothing else due now: the entry would be taken next
                    self.order += 1
                    kind, a = _LATENCY_UP, used
                    busy[j] += a
                    spent[kind][j] += a
                    active[j] = t
                self._begin(j, kind, t)
            elif kind <= _LATENCY_UP:
                self._timed_over(j, kind, a, b, t)
            elif kind == _DONE:
                self._done(a, t)
            elif kind == _TIMEOUT:
                if b == a.segment:
                    self._fire(a, t)
            elif kind == _EITHER:
                self._resumed(a, t)
            elif kind == _RESUME:
                self._resume(a, t)
            elif kind == _ROUND_DONE and not self.deadline:
                return t, True  # the server waits on the round alone: it wakes now
            else:  # the deadline, or the round done: the server's ``any_of`` fires
                self._server(t)

    def finish(self, t: float) -> None:
        """Take the transfers still in progress off their links at ``t``; write the records.

        ``DeviceRuntime.finalize`` does this job by job when the server closes the round (or
        the run ends): each flow's bytes so far are its ``moved``.
        """
        for j, m in enumerate(self.flows):
            if m is None:
                continue
            if m.link is not None:
                self._carry(m, m.link.remove(m, t))
                self._reschedule(t)
            self.moved[self.progress[j] // 2][j] = m.delivered
        self.net.wake_at = self.wake_at
        self.net.token += 1  # a wake-up pending from before the round is out of date
        self.net.book_later(self.transfers, self.plan.devices)
        self.rnd.status[:] = self.status
        self.rnd.t_end[:] = self.t_end
        plan = self.plan
        plan.spent.T[:] = self.spent
        plan.active_since[:] = self.active
        plan.progress[:] = self.progress
        plan.moved.T[:] = self.moved


def applies(kind: str, network: Any, devices: Devices) -> bool:
    """Whether flat rounds on ``network`` (of ``Network.kind`` ``kind``) play in one loop.

    The fast links on a star or a hierarchy (every flow fits one shared link, nested at
    most once: the links never hand over to the reference algorithm; every device's path
    worked out for the fleet), every link with some capacity (every flow finishes), devices
    always online.
    """
    return (
        kind in ("star", "hierarchical")
        and isinstance(network, FlowNetwork)
        and network.reference is None
        and bool(network.fleet)
        and bool((network.capacity > 0).all())
        and devices.cursor is None
        and devices.path_latency is not None
    )


def play_flow_round(
    rnd: RoundRecord,
    net: FlowNetwork,
    devices: Devices,
    deadline: float | None,
    max_time: float | None,
) -> tuple[float, bool]:
    """Play the round's jobs until the server would close it.

    Returns ``(t, closes)``: the instant the server wakes to close the round (``closes``), or
    else the first instant left unplayed because the run ends before it (``t >= max_time``).
    The round's and the plan's records are left as the live path leaves them then, its
    transfers in progress taken off their links (at ``t``, or at ``max_time``).
    """
    state = _Round(rnd, net, devices)
    budget = math.inf if max_time is None else max_time
    t, closes = state.play(float(rnd.env.now), deadline, budget)
    state.finish(t if closes else budget)
    return t, closes
