"""Asynchronous aggregation: FedAsync and FedBuff.

The server keeps ``concurrency`` jobs in flight. Whenever one ends, it starts another on a device
drawn uniformly among the idle ones. Each job downloads the current model version; its update is
computed (lazily, when it is about to be applied) from *that* version, kept as a snapshot while a
job still refers to it. An update's staleness is the number of server versions created between
its download and its application.

FedAsync (Xie, Koyejo, Gupta, "Asynchronous Federated Optimization", 2019): every arrival is
mixed into the model at once, ``x <- (1 - a_s) x + a_s x_i`` with ``a_s = mixing * (1 + s)^-e``
(their polynomial staleness function; ``e = staleness_exponent``).

FedBuff (Nguyen et al., "Federated Learning with Buffered Asynchronous Aggregation", AISTATS
2022): arrivals wait in a buffer; every ``buffer_size`` arrivals the server applies
``x <- x + server_lr * (1/K) * sum_i w(s_i) (x_i - x_base(i))`` with ``w(s) = (1 + s)^-e``,
``e = 0.5`` by default (``1/sqrt(1 + s)``).

Both mix the algorithm's server-side parameters (:meth:`~simfl.algorithms.Algorithm.shared`):
the policy computes the staleness weights only (:meth:`AsyncPolicy.mixer`), the arithmetic of
the mix is on the algorithm side (:mod:`simfl.algorithms.mixing`), and the result goes back
through :meth:`~simfl.algorithms.Algorithm.with_shared` (linear FedRep re-orthonormalises
there). Records: one ``rounds`` row per aggregation (``n_selected`` and
``n_dropped`` count the jobs started and dropped since the previous one; ``t_start`` is the
previous aggregation's time); in ``clients`` a job's ``round`` is the version it downloaded and
``staleness`` is recorded for every applied update. Updates in the buffer or in flight when the
run ends are recorded ``cancelled``; updates staler than ``max_staleness`` are discarded as
``late``.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import simpy
from numpy.typing import NDArray

from simfl._checks import check_int, check_real
from simfl.algorithms.base import Algorithm, Updates
from simfl.algorithms.mixing import BufferedMix, SequentialMix
from simfl.jobs import ARRIVED, CANCELLED, DROPPED, LATE, JobPlan, concat_plans
from simfl.outcome import Outcome
from simfl.policies.base import Policy

if TYPE_CHECKING:
    from simfl.engine import RunContext

__all__ = ["AsyncPolicy", "FedAsync", "FedBuff"]

#: A run stops as "stalled" after this many jobs in a row end without an update arriving.
STALL_JOBS = 10_000


@dataclass(eq=False)
class _Job:
    device: int
    key: int  # the device's job index: keys its speed draw, dropout and data
    version: int  # the model version it downloaded
    plan: JobPlan
    proc: simpy.Process | None = None
    status: int = CANCELLED
    t_end: float = float("nan")
    staleness: float = float("nan")


class AsyncPolicy(Policy):
    """Common machinery of the asynchronous policies (see the module docstring)."""

    concurrency: int
    max_staleness: int | None

    def buffer(self) -> int:
        """Arrivals per aggregation."""
        return 1

    def check(self, n_devices: int) -> None:  # noqa: D102
        if self.concurrency > n_devices:
            raise ValueError(
                f"{type(self).__name__}.concurrency must be <= the fleet size {n_devices}, got "
                f"{self.concurrency}"
            )

    def check_algorithm(self, algorithm: Algorithm[Any]) -> None:  # noqa: D102
        cls = type(algorithm)
        if cls.shared is Algorithm.shared or cls.with_shared is Algorithm.with_shared:
            raise ValueError(
                f"Scenario.algorithm {cls.__name__} does not support asynchronous policies such "
                f"as {type(self).__name__}: it must define shared() and with_shared()"
            )

    def mixer(self, staleness: NDArray[np.int64]) -> SequentialMix | BufferedMix:
        """How the applied updates, of these staleness values (in order), are mixed in."""
        raise NotImplementedError

    def serve(self, run: RunContext) -> Generator[Any, Any, None]:  # noqa: D102
        return _AsyncServer(run, self).process()


def _check_common(owner: str, concurrency: int, exponent: float, max_staleness: int | None) -> None:
    check_int(f"{owner}.concurrency", concurrency, low=1)
    check_real(f"{owner}.staleness_exponent", exponent, low=0.0)
    if max_staleness is not None:
        check_int(f"{owner}.max_staleness", max_staleness, low=0)


@dataclass(frozen=True)
class FedAsync(AsyncPolicy):
    """Mix every arrival into the model at once, weighted by its staleness.

    Parameters
    ----------
    mixing
        Base mixing weight ``alpha`` in (0, 1].
    staleness_exponent
        ``e`` in ``alpha * (1 + s)^-e`` (>= 0; 0 ignores staleness).
    concurrency
        Jobs in flight at any time (>= 1, at most the fleet size).
    max_staleness
        Discard updates staler than this (``None``: apply all).
    """

    mixing: float = 0.6
    staleness_exponent: float = 0.5
    concurrency: int = 10
    max_staleness: int | None = None

    name: ClassVar[str] = "fedasync"

    def __post_init__(self) -> None:
        check_real("FedAsync.mixing", self.mixing, low=0.0, high=1.0, low_open=True)
        _check_common("FedAsync", self.concurrency, self.staleness_exponent, self.max_staleness)

    def mixer(self, staleness: NDArray[np.int64]) -> SequentialMix:
        """One update after the other, ``a_i = mixing * (1 + s_i)^-e``."""
        return SequentialMix(
            tuple(self.mixing * (1.0 + float(s)) ** -self.staleness_exponent for s in staleness)
        )


@dataclass(frozen=True)
class FedBuff(AsyncPolicy):
    """Aggregate every ``buffer_size`` arrivals: staleness-weighted mean of their deltas.

    Parameters
    ----------
    buffer_size
        ``K``, arrivals per aggregation (>= 1).
    concurrency
        Jobs in flight at any time (>= 1, at most the fleet size).
    server_lr
        Server step on the mean delta (> 0).
    staleness_exponent
        ``e`` in the weight ``(1 + s)^-e`` (0.5 gives FedBuff's ``1/sqrt(1 + s)``).
    max_staleness
        Discard updates staler than this (``None``: apply all).
    """

    buffer_size: int = 10
    concurrency: int = 20
    server_lr: float = 1.0
    staleness_exponent: float = 0.5
    max_staleness: int | None = None

    name: ClassVar[str] = "fedbuff"

    def __post_init__(self) -> None:
        check_int("FedBuff.buffer_size", self.buffer_size, low=1)
        check_real("FedBuff.server_lr", self.server_lr, low=0.0, low_open=True)
        _check_common("FedBuff", self.concurrency, self.staleness_exponent, self.max_staleness)

    def buffer(self) -> int:  # noqa: D102
        return self.buffer_size

    def mixer(self, staleness: NDArray[np.int64]) -> BufferedMix:
        """Weights ``w_i = (1 + s_i)^-e`` and scale ``server_lr / K`` on the deltas' sum."""
        w = (1.0 + staleness.astype(np.float64)) ** -self.staleness_exponent
        return BufferedMix(w, self.server_lr / staleness.size)


class _AsyncServer:
    """The server process of an asynchronous run (state kept in this object's attributes)."""

    def __init__(self, run: RunContext, policy: AsyncPolicy) -> None:
        self.run = run
        self.policy = policy
        self.env = run.env
        self.inbox = simpy.Store(run.env)
        n = run.fleet.size
        self.busy = np.zeros(n, dtype=bool)
        self.job_index = np.zeros(n, dtype=np.int64)
        self.snapshots: dict[int, list[Any]] = {0: [run.state, 0]}  # version -> [state, refs]
        self.in_flight: dict[int, _Job] = {}
        self.buffer: list[_Job] = []
        self.ended: list[_Job] = []  # jobs that ended since the last aggregation
        self.n_started = 0
        self.started_since = 0
        self.last_time = 0.0
        self.drops_in_row = 0
        self.wake_at = math.nan

    @property
    def version(self) -> int:
        return self.run.round

    # ----------------------------------------------------------------- jobs
    def pick(self) -> int | None:
        """A device drawn uniformly among the idle online ones (``None`` if there is none)."""
        n = self.busy.size
        cursor = self.run.cursor
        if cursor is None:
            if self.busy.all():
                return None
        else:
            free = cursor.online(self.env.now) & ~self.busy
            if not free.any():
                return None
            if free.sum() < n // 8:  # few candidates: draw among them directly
                idle = np.flatnonzero(free)
                u = float(self.run.streams.uniform("async/select", self.n_started, 0))
                return int(idle[min(int(u * idle.size), idle.size - 1)])
        attempt = 0
        while True:  # keyed rejection sampling: O(1) draws while most devices are free
            u = float(self.run.streams.uniform("async/select", self.n_started, attempt))
            device = min(int(u * n), n - 1)
            if not self.busy[device] and (cursor is None or cursor.window(device, self.env.now)[0]):
                return device
            attempt += 1

    def launch(self) -> None:
        """Start jobs until ``concurrency`` are in flight (or no idle device is online)."""
        run = self.run
        while len(self.in_flight) < self.policy.concurrency:
            device = self.pick()
            if device is None:
                self.wake_when_online()
                return
            self.busy[device] = True
            key = int(self.job_index[device])
            self.job_index[device] += 1
            plan = run.plan(np.array([device], dtype=np.int64), key=key, stage=0)
            job = _Job(device, key, self.version, plan)
            self.snapshots[self.version][1] += 1

            def arrive(_: int, job: _Job = job) -> None:
                self.inbox.put(("arrive", job))

            def drop(_: int, job: _Job = job) -> None:
                self.inbox.put(("drop", job))

            job.proc = run.start_jobs(plan, arrive, drop)[0]
            self.in_flight[id(job)] = job
            self.n_started += 1
            self.started_since += 1

    def wake_when_online(self) -> None:
        """Come back to :meth:`launch` when an offline device comes online."""
        cursor = self.run.cursor
        if cursor is None:
            return
        at = cursor.next_arrival(self.env.now)
        if math.isinf(at) or at == self.wake_at:
            if math.isinf(at) and not self.in_flight:
                self.run.stop("offline")
                self.inbox.put(("wake", None))
            return
        self.wake_at = at

        def wake() -> Any:
            yield self.env.timeout(at - self.env.now)
            self.inbox.put(("wake", None))

        self.env.process(wake())

    def release(self, job: _Job) -> None:
        """Forget the snapshot of ``job``'s version once nothing refers to it."""
        snap = self.snapshots[job.version]
        snap[1] -= 1
        if snap[1] == 0 and job.version != self.version:
            del self.snapshots[job.version]

    def record(self, jobs: list[_Job]) -> tuple[float, float]:
        if not jobs:
            return 0.0, 0.0
        return self.run.record_jobs(
            concat_plans([j.plan for j in jobs]),
            np.array([j.status for j in jobs], dtype=np.int8),
            np.array([j.t_end for j in jobs]),
            round=np.array([j.version for j in jobs], dtype=np.int64),
            stage=0,
            staleness=np.array([j.staleness for j in jobs]),
        )

    # ----------------------------------------------------------------- aggregation
    def outcome(self) -> Outcome:
        """The jobs of the aggregation now due: the drops since the last one, then the buffer."""
        jobs = self.ended + self.buffer
        return Outcome(
            round=self.version,
            stage=0,
            t_start=self.last_time,
            time=self.env.now,
            devices=np.array([j.device for j in jobs], dtype=np.int64),
            status=np.array([j.status for j in jobs], dtype=np.int8),
            job_start=np.array([j.plan.start(0) for j in jobs], dtype=np.float64),
            job_end=np.array([j.t_end for j in jobs], dtype=np.float64),
            staleness=np.array([j.staleness for j in jobs], dtype=np.float64),
        )

    def aggregate(self) -> None:
        run, policy, alg = self.run, self.policy, self.run.algorithm
        version = self.version
        limit = policy.max_staleness
        applied = [j for j in self.buffer if limit is None or version - j.version <= limit]
        for job in self.buffer:
            job.status = ARRIVED if job in applied else LATE
            if job in applied:
                job.staleness = float(version - job.version)
        staleness = np.array([version - j.version for j in applied], dtype=np.int64)
        row: dict[str, Any] = {
            "round": version,
            "stage": 0,
            "t_start": self.last_time,
            "time": self.env.now,
            "status": "ok" if applied else "empty",
            "n_selected": self.started_since,
            "n_arrived": len(applied),
            "n_dropped": sum(j.status == DROPPED for j in self.ended),
            "n_late": len(self.buffer) - len(applied),
            "n_cancelled": 0,
            "staleness_mean": float(staleness.mean()) if applied else float("nan"),
        }
        if applied:
            state = run.state
            outcome = self.outcome()

            def compute() -> tuple[Any, Any]:
                parts = [
                    run.updates(
                        self.snapshots[j.version][0], np.array([j.device], dtype=np.int64), j.key
                    )
                    for j in applied
                ]
                updates = Updates.concat(parts)
                bases = [alg.shared(self.snapshots[j.version][0]) for j in applied]
                new = policy.mixer(staleness).apply(alg.shared(state), updates, bases)
                mixed = alg.with_shared(state, new)
                return alg.background(mixed, run.data, outcome), updates

            run.apply(row, compute)
        row["bytes_down"], row["bytes_up"] = self.record(self.ended + self.buffer)
        for job in self.buffer:
            self.release(job)
        self.buffer, self.ended = [], []
        self.started_since = 0
        self.last_time = self.env.now
        run.end_aggregation(row)  # the version number moves on
        self.snapshots[self.version] = [run.state, 0]

    def abandon(self) -> None:
        """At the end of the run: jobs in flight and buffered updates are cancelled."""
        for job in self.in_flight.values():
            job.t_end = self.env.now
            if job.proc is not None and job.proc.is_alive:
                job.proc.interrupt("end of run")
        for job in self.buffer:
            job.status = CANCELLED
        self.record(self.ended + self.buffer + list(self.in_flight.values()))
        self.in_flight.clear()
        self.buffer, self.ended = [], []

    def process(self) -> Generator[Any, Any, None]:
        run = self.run
        run.abandon = self.abandon
        self.launch()
        while run.stop_reason is None:
            kind, job = yield self.inbox.get()
            if kind == "wake":
                if run.stop_reason is None:
                    self.launch()
                continue
            del self.in_flight[id(job)]
            self.busy[job.device] = False
            job.t_end = self.env.now
            if kind == "drop":
                job.status = DROPPED
                self.ended.append(job)
                if not run.lazy:  # eager runs compute the discarded update too
                    run.updates(
                        self.snapshots[job.version][0],
                        np.array([job.device], dtype=np.int64),
                        job.key,
                    )
                self.release(job)
                self.drops_in_row += 1
                if self.drops_in_row >= STALL_JOBS:
                    run.stop("stalled")
            else:
                self.drops_in_row = 0
                self.buffer.append(job)
                if len(self.buffer) >= self.policy.buffer():
                    self.aggregate()
            if run.stop_reason is None:
                self.launch()
