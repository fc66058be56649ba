"""The server's own costs on the clock: the one place they enter a run's time.

A :class:`ServerClock` is built for a run whose :class:`~simfl.server.Server` has costs
(:meth:`ServerClock.of`; ``None`` otherwise, and nothing below runs). The job machinery and the
server loops ask it for time:

* a job's process (:meth:`DeviceRuntime.process <simfl.engine.live.DeviceRuntime.process>`)
  has the server :meth:`send` the model before its download starts and :meth:`receive` its
  update after its upload ends; only then does the job report its arrival. An edge round's
  cloud-to-edge and edge-to-cloud transfers (:mod:`simfl.engine.edge`) do the same; a device's
  job to its edge server does not (the edge servers' own costs are not modelled);
* the loops (:mod:`simfl.engine.sync`, :mod:`simfl.engine.tiered`, :mod:`simfl.engine.edge`,
  :mod:`simfl.engine.asynchronous`) :meth:`aggregate` before the aggregation is computed and
  recorded, so the new model, and the round's ``time``, are the instant it is done.

Messages share ``concurrency`` slots in one first-come, first-served queue (a SimPy
``Resource``); aggregations, one at a time, another. A process stopped while it waits for a slot
or holds one (a job the server stops at a round's close, the end of the run) leaves the queue or
frees the slot at once: the server drops the messages of the jobs it stops. What the server did
is tallied for ``Results.meta["server"]`` (:meth:`summary`).

Only the reference playback plays these costs (every job a SimPy process): the table of
:mod:`simfl.engine.playbacks.choose` sends a run with server costs there, and
:func:`~simfl.engine.players.build_jobs` gives such a run live jobs, stage by stage.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import simpy

from simfl.server import Server

__all__ = ["ServerClock"]


class ServerClock:
    """The server's work in simulated time, for one run (see the module docstring).

    Parameters
    ----------
    env
        The run's environment.
    server
        The costs (not all zero).
    """

    def __init__(self, env: simpy.Environment, server: Server) -> None:
        self.env = env
        self.server = server
        #: the message slots (``None``: any number of messages at once)
        self.slots = None if server.concurrency is None else simpy.Resource(env, server.concurrency)
        #: aggregations, one at a time
        self.aggregator = simpy.Resource(env, 1)
        self.sent = 0
        self.received = 0
        self.message_seconds = 0.0
        self.queue_seconds = 0.0
        self.aggregations = 0
        self.aggregation_seconds = 0.0

    @classmethod
    def of(cls, env: simpy.Environment, server: Server | None) -> ServerClock | None:
        """The clock of ``server``'s costs, or ``None`` for a free server (or none)."""
        if server is None or server.free:
            return None
        return cls(env, server)

    def send(self, nbytes: float) -> Generator[Any, Any, None]:
        """The server handles a message of ``nbytes`` bytes it sends (queued for a slot)."""
        if (yield from self._handle(nbytes)):
            self.sent += 1

    def receive(self, nbytes: float) -> Generator[Any, Any, None]:
        """The server handles a message of ``nbytes`` bytes it received (queued for a slot)."""
        if (yield from self._handle(nbytes)):
            self.received += 1

    def _handle(self, nbytes: float) -> Generator[Any, Any, bool]:
        """Queue for a slot, then hold it while handling the message; whether it was handled.

        An interruption (:class:`simpy.Interrupt`) leaves the queue or frees the slot, counts
        the time spent so far and propagates to the caller.
        """
        env = self.env
        seconds = self.server.message_seconds(nbytes)
        asked = env.now
        request = None if self.slots is None else self.slots.request()
        began = None
        try:
            if request is not None:
                yield request
            began = env.now
            if seconds > 0.0:
                yield env.timeout(seconds)
        except simpy.Interrupt:
            self._account(asked, began)
            if request is not None:
                self._leave(request)
            raise
        self._account(asked, began)
        if request is not None:
            self._leave(request)
        return True

    def _account(self, asked: float, began: float | None) -> None:
        """Add a message's wait for a slot and its handling up to now to the tallies."""
        now = self.env.now
        self.queue_seconds += (now if began is None else began) - asked
        if began is not None:
            self.message_seconds += now - began

    def _leave(self, request: Any) -> None:
        """Free ``request``'s slot, or take it out of the queue if it was never granted."""
        assert self.slots is not None
        if request.triggered:
            self.slots.release(request)
        else:
            request.cancel()

    def aggregate(self, n_updates: int) -> Generator[Any, Any, None]:
        """The server aggregates ``n_updates`` updates (waiting for any aggregation under way).

        An aggregation with nothing to aggregate takes no time and adds no event.
        """
        seconds = self.server.aggregation_seconds(n_updates)
        if seconds <= 0.0:
            return
        env = self.env
        request = self.aggregator.request()
        yield request
        yield env.timeout(seconds)
        self.aggregator.release(request)
        self.aggregation_seconds += seconds
        self.aggregations += 1

    def summary(self) -> dict[str, float | int]:
        """``Results.meta["server"]``: what the server did in the run.

        ``messages_sent`` and ``messages_received`` count the messages handled to the end;
        ``message_seconds`` sums the seconds spent handling messages (over the slots, a
        message stopped part-way counting up to then), ``queue_seconds`` the seconds messages
        waited for a slot; ``aggregations`` and ``aggregation_seconds`` count the aggregations
        that took time.
        """
        return {
            "messages_sent": self.sent,
            "messages_received": self.received,
            "message_seconds": float(self.message_seconds),
            "queue_seconds": float(self.queue_seconds),
            "aggregations": self.aggregations,
            "aggregation_seconds": float(self.aggregation_seconds),
        }
