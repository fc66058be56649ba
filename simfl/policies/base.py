"""What a participation / straggler-mitigation policy is: a decision, never a process.

The engine (:mod:`simfl.engine`) owns every server loop. At each decision point it shows the
policy a small read-only :class:`View` of the run and asks what to do next; after each round it
tells the policy what happened (:class:`~simfl.outcome.Outcome`). A policy is a frozen
dataclass of its parameters; whatever it learns while a run goes on lives in a *policy state*
that the engine threads through its methods (state in, new state out), so one policy object
can drive any number of runs.

Four families, one loop each in the engine:

:class:`SyncPolicy`
    Synchronous rounds. ``start(view)`` gives the initial state; ``plan(state, view)`` returns
    ``(state, RoundPlan)`` (cohort, quota, deadline, stage, speed epoch); ``observe(state,
    outcome, view)`` learns from the round's outcome.
:class:`EdgePolicy`
    Synchronous rounds aggregated at edge servers first; the plan also carries the edges'
    deadline. Needs a network with edge servers.
:class:`TieredPolicy`
    Semi-asynchronous: synchronous rounds within groups of devices (tiers), asynchronous
    across groups. ``plan(state, view, group)`` decides a group's next round; when it closes,
    the group's updates are aggregated into the group's model and the server mixes the latest
    model of every group with :meth:`TieredPolicy.mixer`'s weights.
:class:`AsyncPolicy`
    Asynchronous aggregation: how many jobs are in flight, which device starts next
    (``pick(state, view, busy, n_started)``), how many arrivals make an aggregation, which
    updates are too stale, and the staleness weights of the mixing (:meth:`AsyncPolicy.mixer`;
    the math itself is the algorithm side's, :mod:`simfl.algorithms.mixing`). ``start(view)``
    and ``observe(state, outcome, view)`` (after each aggregation) learn, as in
    :class:`SyncPolicy`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

import numpy as np
from numpy.typing import NDArray

from simfl._checks import check_int, check_real
from simfl.algorithms.base import Algorithm
from simfl.algorithms.mixing import BufferedMix, GroupMix, SequentialMix
from simfl.outcome import Outcome
from simfl.rng import Streams

if TYPE_CHECKING:
    from simfl.network import Network
    from simfl.tasks.base import Task

__all__ = [
    "AsyncPolicy",
    "EdgePolicy",
    "Policy",
    "RoundPlan",
    "SyncPolicy",
    "TieredPolicy",
    "View",
    "check_partial_work",
    "check_sampling",
    "cohort_size",
    "sample_uniform",
    "sample_weighted",
]

S = TypeVar("S")


class View(Protocol):
    """What a policy may see of a run (read-only; provided by the engine).

    ``round`` is the index of the next aggregation, ``now`` the simulated time in seconds.
    """

    @property
    def round(self) -> int:
        """Index of the next aggregation (the model version in asynchronous runs)."""

    @property
    def now(self) -> float:
        """Simulated seconds."""

    @property
    def n_devices(self) -> int:
        """Fleet size."""

    @property
    def streams(self) -> Streams:
        """The run's keyed random streams (policies key their draws by purpose and round)."""

    @property
    def goals(self) -> dict[str, str]:
        """``"min"`` or ``"max"`` per task metric (empty without a task)."""

    def online(self) -> NDArray[np.int64]:
        """Devices online now, sorted (all of them without an availability)."""

    def online_mask(self) -> NDArray[np.bool_] | None:
        """Which devices are online now (``None``: every device, always)."""

    def is_online(self, device: int) -> bool:
        """Whether ``device`` is online now."""

    def durations(self, devices: NDArray[np.int64], *, stage: int) -> NDArray[np.float64]:
        """Planned seconds of a job of each of ``devices`` started now in this round.

        Download + compute + upload on uncontended links, from the same keyed draws the jobs
        will use: an oracle of device speed, for policies that may observe speeds (SRPFL).
        ``stage`` is the speed epoch of fleets that re-draw speeds per stage.
        """

    def expected_times(
        self, devices: NDArray[np.int64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
        """Expected download, compute and upload seconds of a job of each of ``devices``.

        From the devices' profiles (mean compute time per work unit times the algorithm's
        work; the payload over each device's uncontended path), not from any draw: what a
        device can report about its own resources (FedCS's resource request).
        """

    def client_sizes(self) -> NDArray[np.float64] | None:
        """Samples held by each client (``None`` if the task does not say)."""

    def last(self, column: str) -> float:
        """The last recorded round's value of ``column`` (e.g. ``"train_loss"``, a metric)."""


@dataclass(frozen=True, slots=True)
class RoundPlan:
    """A synchronous policy's decision for one round.

    Attributes
    ----------
    cohort
        Devices taking part, sorted ascending. A device listed several times (sampling with
        replacement) runs one job whose update counts that many times.
    quota
        Close the round after this many arrivals (``None``: the whole cohort).
    deadline
        Close it this many seconds after it starts at the latest (``None``: no deadline). For
        an :class:`EdgePolicy`, the cloud's deadline.
    stage
        Stage index recorded with the round.
    speed_epoch
        Stage index by which fleets with ``redraw="stage"`` key their speed draws (``None``:
        ``stage``).
    edge_deadline
        Seconds after the start at which each edge server forwards what it has
        (:class:`EdgePolicy` only; ``None``: each edge waits for all its devices).
    partial
        Partial work (FedProx's gamma-inexact local solutions, Li et al., MLSys 2020): under
        a ``deadline``, each job does as many whole work units (local steps) as fit before it
        instead of its full work, and arrives in time; a device that cannot fit one unit does
        its full job and is late. Needs an algorithm whose ``partial_work`` is true; the
        algorithm is told each job's units (:attr:`~simfl.outcome.Outcome.work`). The device
        decides from its own planned (uncontended) times when the job starts.
    """

    cohort: NDArray[np.int64]
    quota: int | None = None
    deadline: float | None = None
    stage: int = 0
    speed_epoch: int | None = None
    edge_deadline: float | None = None
    partial: bool = False


class Policy:
    """Decides who takes part and when the server aggregates (see the module docstring)."""

    name: ClassVar[str] = "policy"

    def check(self, n_devices: int) -> None:
        """Raise ``ValueError`` naming the field if the policy cannot run on ``n_devices``."""

    def check_algorithm(self, algorithm: Algorithm[Any]) -> None:
        """Raise ``ValueError`` if the policy cannot drive ``algorithm``."""

    def check_network(self, network: Network | None) -> None:
        """Raise ``ValueError`` if the policy cannot work with the scenario's ``network``."""

    def check_task(self, task: Task | None) -> None:
        """Raise ``ValueError`` if the policy cannot work with the scenario's ``task``.

        E.g. a metric the policy watches that the task does not report, or client sizes that a
        task-less (timing-only) scenario cannot give.
        """


class SyncPolicy(Policy, ABC, Generic[S]):
    """Synchronous rounds: the policy plans each round and observes its outcome.

    A round closes at the earliest of: ``quota`` arrivals; every job resolved (arrived or
    dropped; dropouts are noticed by the server when they happen, like a broken connection);
    the ``deadline``. Jobs still running then are recorded ``late`` if the deadline closed the
    round and ``cancelled`` otherwise (over-selection); their updates are never computed.

    Subclasses implement :meth:`plan`; stateful ones also :meth:`start` and :meth:`observe`.
    """

    def start(self, view: View) -> S:
        """The policy state before the first round (default: ``None``, stateless)."""
        return None  # type: ignore[return-value]

    @abstractmethod
    def plan(self, state: S, view: View) -> tuple[S, RoundPlan]:
        """The next round (``view.round``): the policy's new state and its decision.

        Called when at least one device is online.
        """

    def observe(self, state: S, outcome: Outcome, view: View) -> S:
        """Learn from a finished round (``view.last`` reads its recorded row); default: nothing."""
        return state


class EdgePolicy(SyncPolicy[S]):
    """Synchronous rounds whose updates are aggregated at edge servers before the cloud.

    The plan's ``deadline`` is the cloud's and ``edge_deadline`` the edges'; the engine plays
    each round through the network's edge servers.
    """


def _check_mixable(policy: Policy, algorithm: Algorithm[Any]) -> None:
    """Refuse an algorithm whose server-side parameters cannot be mixed (no shared())."""
    cls = type(algorithm)
    reason = algorithm.synchronous_only_reason()
    if reason is not None:
        raise ValueError(
            f"Scenario.algorithm {cls.__name__} cannot run under {type(policy).__name__} "
            f"(asynchronous and tiered policies mix only the server's model): "
            f"{reason}; use a synchronous or edge policy"
        )
    if cls.shared is Algorithm.shared or cls.with_shared is Algorithm.with_shared:
        raise ValueError(
            f"Scenario.algorithm {cls.__name__} does not support asynchronous policies such "
            f"as {type(policy).__name__}: it must define shared() and with_shared()"
        )


class TieredPolicy(Policy, ABC, Generic[S]):
    """Semi-asynchronous rounds: synchronous within groups of devices, asynchronous across.

    Every group runs synchronous rounds one after another, each starting from the server's
    model of the moment; the groups do not wait for each other. When a group's round closes
    (quota, every job resolved, or the deadline, as for :class:`SyncPolicy`), the algorithm
    aggregates the group's arrived updates from the model the round started from (its own
    ``aggregate``): that is the group's new model. The server's model becomes the mix of the
    latest model of every group (:meth:`mixer`; a group that has not reported yet counts with
    the initial model), through the algorithm's ``shared`` / ``with_shared`` like the
    asynchronous policies. Each group round is one aggregation (a ``rounds`` row whose
    ``stage`` is the group index).

    Subclasses implement :meth:`start`, :meth:`groups`, :meth:`plan` and :meth:`mixer`.
    """

    @abstractmethod
    def start(self, view: View) -> S:
        """The policy state before the first round (it fixes the groups)."""

    @abstractmethod
    def groups(self, state: S) -> int:
        """Number of groups (each runs its own rounds)."""

    @abstractmethod
    def plan(self, state: S, view: View, group: int) -> tuple[S, RoundPlan]:
        """The next round of ``group``: the new state and the decision (devices of the group).

        An empty cohort means the group has nobody online: it waits until a device comes
        online (or retires if none ever will).
        """

    def observe(self, state: S, outcome: Outcome, view: View, group: int) -> S:
        """Learn from a finished round of ``group``; default: nothing."""
        return state

    @abstractmethod
    def mixer(self, state: S, group: int) -> GroupMix:
        """How the groups' latest models mix into the server's, once ``group`` has reported.

        Called when a round of ``group`` is aggregated, before :meth:`observe` of that round.
        """

    def check_algorithm(self, algorithm: Algorithm[Any]) -> None:  # noqa: D102
        _check_mixable(self, algorithm)


class AsyncPolicy(Policy, ABC, Generic[S]):
    """Asynchronous aggregation (see :mod:`simfl.policies.asynchronous`).

    The engine keeps :attr:`concurrency` jobs in flight, starting each on the device
    :meth:`pick` names; every :meth:`buffer` arrivals it aggregates the updates not staler than
    :attr:`max_staleness`, mixing them with :meth:`mixer`'s weights.

    A policy that learns while the run goes on keeps what it learns in a *policy state*, as a
    :class:`SyncPolicy` does: :meth:`start` gives the initial one, :meth:`pick` reads it and
    :meth:`observe` returns the next one after each aggregation. The engine threads the state
    (the policy object stays frozen). Such a policy, like one that overrides :meth:`pick`, is
    played by the reference loop (:class:`~simfl.engine.asynchronous.AsyncLoop`), which asks
    it for every pick. FedAsync and FedBuff are stateless (their state is ``None``).
    """

    concurrency: int
    max_staleness: int | None

    def start(self, view: View) -> S:
        """The policy state before the first job starts (default: ``None``, stateless)."""
        return None  # type: ignore[return-value]

    def observe(self, state: S, outcome: Outcome, view: View) -> S:
        """Learn from an aggregation; default: nothing.

        Called after each aggregation is recorded (``view.last`` reads its row; ``view.round``
        is the next one), empty ones included (every buffered update discarded as too stale).
        ``outcome`` holds the jobs of the aggregation: the jobs dropped since the previous one,
        then the buffered ones, with final statuses (``ARRIVED``, or ``LATE`` if discarded as
        staler than :attr:`max_staleness`), their ``job_start``, ``job_end`` and (applied
        updates) ``staleness``; its ``round`` is the aggregation's index. Jobs that end
        without an aggregation after them are never observed: the drops and buffered updates
        when the run ends (recorded ``dropped`` and ``cancelled``), and the drops of a run
        that stops as ``stalled`` (:data:`~simfl.engine.asynchronous.STALL_JOBS` in a row
        with no aggregation) or ``offline``.
        """
        return state

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
        _check_mixable(self, algorithm)

    def pick(self, state: S, view: View, busy: NDArray[np.bool_], n_started: int) -> int | None:
        """The device the next job starts on: uniform among the idle online ones.

        ``state`` is the policy state (unused here), ``busy`` marks the devices with a job in
        flight and ``n_started`` counts the jobs started so far (it keys the draw). ``None`` if
        no idle device is online (the engine asks again when a job ends or a device comes
        online).
        """
        n = busy.size
        online = view.online_mask()
        streams = view.streams
        if online is None:
            if busy.all():
                return None
        else:
            free = online & ~busy
            if not free.any():
                return None
            if free.sum() < n // 8:  # few candidates: draw among them directly
                idle = np.flatnonzero(free)
                u = float(streams.uniform("async/select", n_started, 0))
                return int(idle[min(int(u * idle.size), idle.size - 1)])
        attempt = 0
        while True:  # keyed rejection sampling: O(1) draws while most devices are free
            u = float(streams.uniform("async/select", n_started, attempt))
            device = min(int(u * n), n - 1)
            if not busy[device] and (online is None or view.is_online(device)):
                return device
            attempt += 1

    def first_picks(
        self, view: View, first: int, count: int, attempt: int = 0
    ) -> NDArray[np.int64] | None:
        """The devices :meth:`pick` names for jobs ``first .. first + count - 1``, if idle.

        Every device online: the first draw of :meth:`pick`'s rejection sampling for each job
        number, drawn in one vectorised step (:meth:`pick` returns it whenever that device is
        idle, and must be asked otherwise); ``attempt=1``: its second draw (returned when the
        first device is busy and this one idle). ``None`` where a subclass picks otherwise (it
        overrides :meth:`pick` and not this method): the engine then asks :meth:`pick` for
        every job. Only the fast loops use it, and only for policies that keep no state
        (:meth:`start` and :meth:`observe` not overridden).
        """
        if type(self).pick is not AsyncPolicy.pick:
            return None
        n = view.n_devices
        u = view.streams.uniform("async/select", np.arange(first, first + count), attempt)
        return np.minimum((u * n).astype(np.int64), n - 1)

    @abstractmethod
    def mixer(self, staleness: NDArray[np.int64]) -> SequentialMix | BufferedMix:
        """How the applied updates, of these staleness values (in order), are mixed in.

        A rule of :mod:`simfl.algorithms.mixing`, whose ``apply`` does the parameter math.
        """


def cohort_size(owner: str, fraction: float | None, count: int | None, n_devices: int) -> int:
    """``count``, or ``max(floor(fraction * n_devices), 1)`` as in the FedRep code."""
    if count is not None:
        if count > n_devices:
            raise ValueError(f"{owner}.count must be <= the fleet size {n_devices}, got {count}")
        return count
    frac = 1.0 if fraction is None else fraction
    return max(math.floor(frac * n_devices + 1e-9), 1)


def check_partial_work(field: str, algorithm: Algorithm[Any]) -> None:
    """Refuse partial work (``field``) with an algorithm that cannot stop after any step."""
    if not type(algorithm).partial_work:
        raise ValueError(
            f"{field}=True needs an algorithm that supports partial work (partial_work = True: "
            f"linear FedAvg and FedRep, the simfl.neural algorithms, TimingOnly); "
            f"{type(algorithm).__name__} does not"
        )


def check_sampling(owner: str, fraction: float | None, count: int | None) -> None:
    """Validate a ``fraction`` / ``count`` pair (at most one of them)."""
    if fraction is not None and count is not None:
        raise ValueError(f"{owner}: give fraction or count, not both (got {fraction}, {count})")
    if fraction is not None:
        check_real(f"{owner}.fraction", fraction, low=0.0, high=1.0, low_open=True)
    if count is not None:
        check_int(f"{owner}.count", count, low=1)


def sample_uniform(
    round: int, population: NDArray[np.int64], size: int, streams: Streams
) -> NDArray[np.int64]:
    """``size`` distinct devices of ``population`` (sorted ids) drawn uniformly, sorted.

    All of them if ``size`` is not smaller than the population (e.g. when few are online).
    """
    if size >= population.size:
        return population
    pick = streams.generator("select", round).choice(population.size, size=size, replace=False)
    return np.sort(population[pick]).astype(np.int64)


def sample_weighted(
    round: int,
    population: NDArray[np.int64],
    weights: NDArray[np.float64],
    size: int,
    replace: bool,
    streams: Streams,
) -> NDArray[np.int64]:
    """``size`` devices of ``population`` drawn in proportion to their ``weights``, sorted.

    ``weights`` has one entry per device of the fleet. With ``replace`` a device can be drawn
    several times (FedMAvg's sampling in proportion to data size); without, at most ``size``
    distinct devices are drawn.
    """
    p = np.asarray(weights, dtype=np.float64)[population]
    p = p / p.sum()
    if not replace:
        size = min(size, population.size)
    rng = streams.generator("select/weighted", round)
    pick = rng.choice(p.size, size=size, replace=replace, p=p)
    return np.sort(population[pick]).astype(np.int64)
