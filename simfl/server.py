"""The server's own costs: what handling messages and aggregating updates takes it.

By default the server is free: it sends the model, receives updates and aggregates them in no
time, and handles any number of messages at once. :class:`Server` puts its work on the clock
(``Scenario(server=Server(...))``)::

    Server(aggregate_seconds=0.5, per_update=0.01, overhead_per_message=2e-3,
           per_byte=1e-9, concurrency=8)

* **A message** the server sends (the model, to each device of a job) or receives (an update)
  takes it ``overhead_per_message + per_byte * bytes`` seconds. It handles at most
  ``concurrency`` messages at once (``None``: any number); the others wait their turn in one
  first-come, first-served queue, sends and receipts alike. A job's download starts once the
  server has handled its outgoing message; its update counts as arrived (for a deadline, a
  quota, a round's close, an asynchronous buffer) once the server has handled the incoming one,
  which it starts when the upload has ended.
* **An aggregation** of ``n >= 1`` updates takes ``aggregate_seconds + per_update * n`` seconds,
  one aggregation at a time; an aggregation with nothing to aggregate takes none. A synchronous
  round's next round starts only when it is done; in an asynchronous run the new model version,
  and the dispatch of the jobs that start from it, exist only then.

``Server()`` (every cost zero) is the free server, exactly as ``Scenario(server=None)``.
How the engine plays these costs, and what it records of them, is told in the documentation
page "Scenarios and results" (the server's own costs).
"""

from __future__ import annotations

from dataclasses import dataclass

from simfl._checks import check_int, check_real

__all__ = ["Server"]


@dataclass(frozen=True, kw_only=True)
class Server:
    """The server's own costs on the simulated clock (see the module docstring).

    Parameters
    ----------
    aggregate_seconds
        Seconds of server compute per aggregation that aggregates at least one update
        (>= 0).
    per_update
        Extra seconds per update aggregated (>= 0): an aggregation of ``n`` updates takes
        ``aggregate_seconds + per_update * n``.
    overhead_per_message
        Seconds the server spends handling each message it sends (the model, to a device) or
        receives (an update) (>= 0).
    per_byte
        Seconds per byte of each message it sends or receives (>= 0; serialisation).
    concurrency
        At most this many messages handled at once (>= 1), the others queued first come, first
        served; ``None``: any number at once.
    """

    aggregate_seconds: float = 0.0
    per_update: float = 0.0
    overhead_per_message: float = 0.0
    per_byte: float = 0.0
    concurrency: int | None = None

    def __post_init__(self) -> None:
        for field in ("aggregate_seconds", "per_update", "overhead_per_message", "per_byte"):
            value = check_real(f"Server.{field}", getattr(self, field), low=0.0)
            object.__setattr__(self, field, value)
        if self.concurrency is not None:
            object.__setattr__(
                self, "concurrency", check_int("Server.concurrency", self.concurrency, low=1)
            )

    @property
    def free(self) -> bool:
        """Whether every cost is zero: the server takes no time (as ``Scenario(server=None)``).

        Then ``concurrency`` changes nothing either: messages that take no time never wait.
        """
        return not (
            self.aggregate_seconds or self.per_update or self.overhead_per_message or self.per_byte
        )

    def message_seconds(self, nbytes: float) -> float:
        """Seconds to handle one message of ``nbytes`` bytes (sent or received)."""
        return self.overhead_per_message + self.per_byte * nbytes

    def aggregation_seconds(self, n_updates: int) -> float:
        """Seconds to aggregate ``n_updates`` updates (none for an empty aggregation)."""
        if n_updates <= 0:
            return 0.0
        return self.aggregate_seconds + self.per_update * n_updates
