"""When devices are online: per-device on/off intervals, generators, and a run-time cursor.

An :class:`Availability` holds, for every device, its sorted, disjoint on-intervals
``[start, end)`` (``end`` may be ``inf``), stored columnar (CSR: ``offsets``, ``starts``,
``ends``). Attach one to a fleet with :meth:`simfl.Fleet.with_availability`. During a run:

* only online devices can be selected (a round waits if none is online);
* a device that goes offline in the middle of a job either *aborts* it (recorded ``dropped``)
  or *pauses* it until it is back online, by the fleet's ``offline`` mode. A pause also stops
  the device's failure clock (its hazard is per busy second).

Generators (each keyed by its own ``seed`` and the device index, so adding devices keeps the
others' intervals): :meth:`Availability.exponential` (alternating Exp on and off periods,
started in the stationary state), :meth:`Availability.diurnal` (the on-probability follows a
daily cycle with a per-device phase), :meth:`Availability.churn` (each device joins once and
leaves for good), :meth:`Availability.correlated` (devices go down together with their group,
e.g. all devices behind one edge server); a trace's intervals go to the constructor,
``Availability(intervals)``.

The exponential and diurnal generators draw period after period up to their horizon, so they
refuse parameters that would need more than :data:`MAX_PERIODS_PER_DEVICE` periods of one
device, or :data:`MAX_PERIODS` of all devices together, on average (e.g. ``mean_on=1e-6`` and
``mean_off=1e-6`` over a day, or a diurnal ``high`` so close to 1 that the off periods are
drawn by ever finer thinning): they would run for hours, or for ever, instead of failing. The
other generators give each device one period and so take at most :data:`MAX_PERIODS` devices.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike, NDArray

from simfl._checks import MAX_DEVICES, check_int, check_real
from simfl.dists import MAX_DRAW, Dist
from simfl.rng import Streams

__all__ = ["MAX_PERIODS", "MAX_PERIODS_PER_DEVICE", "Availability", "AvailabilityCursor"]

Array = NDArray[np.float64]

#: The longest time (seconds) a generator takes as a mean, horizon, period or window: the times
#: it adds up stay finite (:data:`simfl.dists.MAX_DRAW`).
MAX_SECONDS = MAX_DRAW
#: The most on/off periods (draws) a generator may need for one device, on average.
MAX_PERIODS_PER_DEVICE = 10**6
#: The most on/off periods a generator may need for all its devices together, on average.
MAX_PERIODS = 10**7


def _check_periods(owner: str, n: int, per_device: float, params: str) -> None:
    """Refuse a generator call expected to draw too many periods (see the module docstring)."""
    total = n * per_device
    if not (per_device <= MAX_PERIODS_PER_DEVICE and total <= MAX_PERIODS):
        raise ValueError(
            f"{owner} with {params} would draw about {per_device:.3g} on/off periods per device "
            f"({total:.3g} for the {n} devices); the generators stop at "
            f"{MAX_PERIODS_PER_DEVICE:.0e} per device and {MAX_PERIODS:.0e} in all: use a shorter "
            f"horizon or longer periods"
        )


def _device_intervals(i: int, iv: ArrayLike) -> Array:
    """One device's intervals as an ``(m, 2)`` float array of ``(start, end)`` rows."""
    try:
        raw = np.asarray(iv)
        if raw.size == 0:
            return np.empty((0, 2))
        if raw.dtype.kind not in "iuf":
            raise TypeError(f"dtype {raw.dtype}")
        return raw.astype(np.float64).reshape(-1, 2)
    except (ValueError, TypeError) as exc:
        raise ValueError(
            f"Availability intervals of device {i} must be (start, end) pairs of numbers, got "
            f"{iv!r:.60}"
        ) from exc


def _clean(starts: Array, ends: Array) -> tuple[Array, Array]:
    """Sort, drop empty intervals and merge overlapping or touching ones."""
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    if starts.size <= 1:
        return starts, ends
    out_s, out_e = [float(starts[0])], [float(ends[0])]
    for s, e in zip(starts[1:], ends[1:], strict=True):
        if s <= out_e[-1]:
            out_e[-1] = max(out_e[-1], float(e))
        else:
            out_s.append(float(s))
            out_e.append(float(e))
    return np.array(out_s), np.array(out_e)


@dataclass(frozen=True, eq=False, init=False)
class Availability:
    """On-intervals of every device (see the module docstring).

    Parameters
    ----------
    intervals
        One entry per device: a sequence of ``(start, end)`` pairs (seconds, ``end > start``,
        ``start >= 0``; ``end`` may be ``inf``), e.g. from a trace. Overlapping or touching
        intervals are merged.
    known_until
        The time up to which the intervals describe the devices (> 0; ``inf``, the default:
        the intervals are complete, a device whose last interval ended never comes back, as in
        :meth:`churn`). The generators and traces cut at a horizon give that horizon: after
        it their devices would look gone for good, so a scenario refuses a ``max_time``
        beyond it.

    Attributes
    ----------
    offsets
        Device ``d``'s intervals are ``starts[offsets[d]:offsets[d + 1]]`` (and ``ends``).
    starts, ends
        Every device's merged on-intervals, sorted within each device (read-only arrays).
    """

    offsets: NDArray[np.int64]
    starts: Array
    ends: Array
    #: not part of the value (fingerprints of scenarios): it changes no run, only what is valid
    known_until: float = field(default=math.inf, compare=False)

    def __init__(self, intervals: Sequence[ArrayLike], known_until: float = math.inf) -> None:
        until = check_real(
            "Availability.known_until", known_until, low=0.0, low_open=True, allow_inf=True
        )
        if isinstance(intervals, (str, bytes)) or not isinstance(intervals, Sequence):
            raise ValueError(
                f"Availability intervals must be a list with one entry per device, got "
                f"{intervals!r:.60}"
            )
        if len(intervals) == 0:
            raise ValueError("Availability needs the intervals of at least one device, got none")
        if len(intervals) > MAX_DEVICES:
            raise ValueError(
                f"Availability intervals must cover at most {MAX_DEVICES:,} devices, got "
                f"{len(intervals):,}"
            )
        starts, ends, offsets = [], [], [0]
        for i, iv in enumerate(intervals):
            arr = _device_intervals(i, iv)
            if np.isnan(arr).any() or (arr[:, 0] < 0).any() or np.isinf(arr[:, 0]).any():
                raise ValueError(
                    f"Availability intervals of device {i} must have finite starts >= 0 and no "
                    f"NaN, got {arr.tolist()[:3]}..."
                )
            if (arr[:, 1] < arr[:, 0]).any():
                raise ValueError(f"Availability interval of device {i} ends before it starts")
            s, e = _clean(arr[:, 0], arr[:, 1])
            starts.append(s)
            ends.append(e)
            offsets.append(offsets[-1] + s.size)
        set_ = object.__setattr__
        set_(self, "offsets", np.asarray(offsets, dtype=np.int64))
        set_(self, "starts", np.concatenate(starts) if starts else np.empty(0))
        set_(self, "ends", np.concatenate(ends) if ends else np.empty(0))
        set_(self, "known_until", until)
        for a in (self.offsets, self.starts, self.ends):
            a.setflags(write=False)

    def __repr__(self) -> str:
        return (
            f"Availability({self.size} devices, {self.starts.size} on-intervals, "
            f"{self.on_fraction(0.0, self.horizon):.3g} of [0, {self.horizon:.4g}) on)"
        )

    # ----------------------------------------------------------------- queries
    @property
    def size(self) -> int:
        """Number of devices."""
        return int(self.offsets.size - 1)

    @property
    def horizon(self) -> float:
        """The last finite interval end (or start), i.e. how far the intervals were generated."""
        finite = np.concatenate([self.starts, self.ends[np.isfinite(self.ends)]])
        return float(finite.max()) if finite.size else 0.0

    def intervals(self, device: int) -> tuple[Array, Array]:
        """The on-intervals ``(starts, ends)`` of one device."""
        lo, hi = self.offsets[device], self.offsets[device + 1]
        return self.starts[lo:hi], self.ends[lo:hi]

    def is_on(self, device: int, t: float) -> bool:
        """Whether ``device`` is online at time ``t``."""
        s, e = self.intervals(device)
        i = int(np.searchsorted(s, t, side="right")) - 1
        return i >= 0 and t < e[i]

    def on_fraction(self, t0: float, t1: float) -> float:
        """Mean over devices of the fraction of ``[t0, t1)`` each spends online."""
        if t1 <= t0:
            return math.nan
        overlap = np.clip(np.minimum(self.ends, t1) - np.maximum(self.starts, t0), 0.0, None)
        return float(overlap.sum() / (self.size * (t1 - t0)))

    # ----------------------------------------------------------------- combinators
    def take(self, devices: ArrayLike) -> Availability:
        """The availability of some devices, in the given order (e.g. to match a fleet)."""
        rows = [np.column_stack(self.intervals(int(d))) for d in np.asarray(devices)]
        return Availability(rows, self.known_until)

    def __add__(self, other: Availability) -> Availability:
        """Concatenate the devices of two availabilities."""
        rows = [np.column_stack(a.intervals(d)) for a in (self, other) for d in range(a.size)]
        return Availability(rows, min(self.known_until, other.known_until))

    def intersect(self, other: Availability) -> Availability:
        """Devices online only when online in both (same number of devices)."""
        if other.size != self.size:
            raise ValueError(
                f"Availability.intersect needs the same number of devices, got "
                f"{self.size} and {other.size}"
            )
        rows = []
        for d in range(self.size):
            s1, e1 = self.intervals(d)
            s2, e2 = other.intervals(d)
            s = np.maximum.outer(s1, s2).ravel()
            e = np.minimum.outer(e1, e2).ravel()
            rows.append(np.column_stack([s, e])[e > s])
        return Availability(rows, min(self.known_until, other.known_until))

    # ----------------------------------------------------------------- generators
    @classmethod
    def always(cls, n: int) -> Availability:
        """``n`` devices that are always online."""
        n = check_int("Availability.always n", n, low=1, high=MAX_DEVICES)
        _check_periods("Availability.always", n, 1.0, f"n={n}")
        return cls([[(0.0, math.inf)]] * n)

    @classmethod
    def exponential(
        cls, n: int, *, mean_on: float, mean_off: float, horizon: float, seed: int = 0
    ) -> Availability:
        """Alternating on and off periods, Exp(``mean_on``) and Exp(``mean_off``).

        Each device starts in the stationary state (online with probability
        ``mean_on / (mean_on + mean_off)``); being memoryless, the first period is a fresh draw.
        A device is online a fraction ``mean_on / (mean_on + mean_off)`` of the time, and a job
        of length ``L`` started while online survives ``exp(-L / mean_on)`` of the time.
        """
        n = check_int("Availability.exponential n", n, low=1, high=MAX_DEVICES)
        a = check_real(
            "Availability.exponential mean_on", mean_on, low=0.0, low_open=True, high=MAX_SECONDS
        )
        b = check_real(
            "Availability.exponential mean_off", mean_off, low=0.0, low_open=True, high=MAX_SECONDS
        )
        h = check_real(
            "Availability.exponential horizon", horizon, low=0.0, low_open=True, high=MAX_SECONDS
        )
        # one on and one off period per mean cycle a + b (the first period may be either)
        _check_periods(
            "Availability.exponential",
            n,
            2.0 * h / (a + b) + 1.0,
            f"horizon={h:g}, mean_on={a:g}, mean_off={b:g}",
        )
        streams = Streams(check_int("Availability seed", seed, low=0))
        dev = np.arange(n)
        on = streams.uniform("avail/exp/start", dev) < a / (a + b)
        t = np.zeros(n)
        rows: list[list[tuple[float, float]]] = [[] for _ in range(n)]
        cycle = 0
        while (t < h).any():
            u = streams.uniform("avail/exp/period", dev, cycle)
            length = -np.where(on, a, b) * np.log(u)
            for d in np.flatnonzero(on & (t < h)):
                rows[d].append((t[d], t[d] + length[d]))
            t = t + length
            on = ~on
            cycle += 1
        return cls(rows, h)

    @classmethod
    def diurnal(
        cls,
        n: int,
        *,
        mean_on: float,
        low: float,
        high: float,
        horizon: float,
        period: float = 86_400.0,
        seed: int = 0,
    ) -> Availability:
        """On-probability following a daily cycle, with a per-device phase.

        Device ``i`` is online with (approximately, when ``mean_on`` is short next to the
        period) probability ``p_i(t) = low + (high - low) * (1 + cos(2 pi (t - phi_i) / P)) / 2``,
        its phase ``phi_i`` uniform over the period ``P``. On periods are Exp(``mean_on``);
        off periods end at rate ``p(t) / (1 - p(t)) / mean_on`` (drawn by thinning), so that
        the on-probability tracks ``p(t)``.
        """
        n = check_int("Availability.diurnal n", n, low=1, high=MAX_DEVICES)
        a = check_real(
            "Availability.diurnal mean_on", mean_on, low=0.0, low_open=True, high=MAX_SECONDS
        )
        lo = check_real(
            "Availability.diurnal low", low, low=0.0, high=1.0, low_open=True, high_open=True
        )
        hi = check_real(
            f"Availability.diurnal high (>= low = {lo:g})", high, low=lo, high=1.0, high_open=True
        )
        h = check_real(
            "Availability.diurnal horizon", horizon, low=0.0, low_open=True, high=MAX_SECONDS
        )
        per = check_real(
            "Availability.diurnal period",
            period,
            low=h / MAX_SECONDS,  # the phase 2 pi t / period stays finite
            low_open=True,
            high=MAX_SECONDS,
        )
        # each draw is an Exp(mean_on) on period or a thinning candidate of rate at most
        # rate_max = high / (1 - high) / mean_on, so about h / mean_on + h * rate_max
        # = h / (mean_on * (1 - high)) draws per device
        _check_periods(
            "Availability.diurnal",
            n,
            h / a / (1.0 - hi) + 1.0,
            f"horizon={h:g}, mean_on={a:g}, high={hi:g}",
        )
        streams = Streams(check_int("Availability seed", seed, low=0))
        dev = np.arange(n)
        phase = per * streams.uniform("avail/diurnal/phase", dev)

        def prob(t: Array) -> Array:
            return lo + (hi - lo) * (1.0 + np.cos(2.0 * np.pi * (t - phase) / per)) / 2.0

        rate_max = hi / (1.0 - hi) / a
        on = streams.uniform("avail/diurnal/start", dev) < prob(np.zeros(n))
        t = np.zeros(n)
        rows: list[list[tuple[float, float]]] = [[] for _ in range(n)]
        step = 0
        while (t < h).any():
            active = t < h
            u = streams.uniform("avail/diurnal/period", dev, step)
            # online: an Exp(mean_on) period; offline: a thinning candidate for coming back
            cand = np.where(on, -a * np.log(u), -np.log(u) / rate_max)
            accept_u = streams.uniform("avail/diurnal/accept", dev, step)
            p = prob(t + cand)
            accept = accept_u < (p / (1.0 - p)) / a / rate_max
            for d in np.flatnonzero(on & active):
                rows[d].append((t[d], t[d] + cand[d]))
            t = t + cand
            on = np.where(on, False, accept)  # an on period always ends; off ends if accepted
            step += 1
        return cls(rows, h)

    @classmethod
    def churn(
        cls, n: int, *, lifetime: Dist, join_window: float = 0.0, seed: int = 0
    ) -> Availability:
        """Each device joins once and leaves for good.

        It joins at a uniform time in ``[0, join_window]`` and leaves after a ``lifetime`` drawn
        from the given distribution.
        """
        n = check_int("Availability.churn n", n, low=1, high=MAX_DEVICES)
        if not isinstance(lifetime, Dist):
            raise ValueError(
                f"Availability.churn lifetime must be a distribution, got {lifetime!r}"
            )
        w = check_real("Availability.churn join_window", join_window, low=0.0, high=MAX_SECONDS)
        _check_periods("Availability.churn", n, 1.0, f"n={n}")
        streams = Streams(check_int("Availability seed", seed, low=0))
        dev = np.arange(n)
        join = w * streams.uniform("avail/churn/join", dev)
        life = lifetime.ppf(streams.uniform("avail/churn/life", dev))
        return cls([[(join[d], join[d] + life[d])] for d in range(n)])

    @classmethod
    def correlated(
        cls,
        groups: ArrayLike,
        group_availability: Availability,
        base: Availability | None = None,
    ) -> Availability:
        """Devices that go down with their group (e.g. all devices behind one edge server).

        Device ``i`` is online when group ``groups[i]`` is online in ``group_availability``
        (one row per group) and, if given, when it is online in ``base`` itself.
        """
        if not isinstance(group_availability, Availability):
            raise ValueError(
                f"Availability.correlated group_availability must be an Availability, got "
                f"{group_availability!r:.60}"
            )
        if base is not None and not isinstance(base, Availability):
            raise ValueError(
                f"Availability.correlated base must be an Availability or None, got {base!r:.60}"
            )
        g = np.asarray(groups)
        if (
            g.ndim != 1
            or g.size == 0
            or g.dtype.kind not in "iu"
            or g.min() < 0
            or g.max() >= group_availability.size
        ):
            raise ValueError(
                f"Availability.correlated groups must be indices in [0, "
                f"{group_availability.size - 1}], one per device"
            )
        shared = group_availability.take(g)
        return shared if base is None else base.intersect(shared)


class AvailabilityCursor:
    """Fast availability queries at a clock that only moves forward (one per run).

    It keeps, for every device, its first interval not yet ended (``start``, ``end``; both
    ``inf`` once the device has no interval left), so a query only moves the devices whose
    interval has ended since the last one, and none before the earliest such end.
    """

    __slots__ = ("_change", "av", "end", "hi", "ptr", "start")

    def __init__(self, av: Availability) -> None:
        self.av = av
        self.hi = av.offsets[1:]
        self.ptr = av.offsets[:-1].copy()  # first interval of each device not yet ended
        self.start, self.end = self._at(self.ptr, self.hi)
        #: No interval ends before this time (a lower bound: nothing to move before it).
        self._change = float(self.end.min()) if self.end.size else math.inf

    def _at(self, p: NDArray[np.int64], hi: NDArray[np.int64]) -> tuple[Array, Array]:
        """The interval ``p`` of each device (``inf`` where ``p`` is past its last one)."""
        av = self.av
        if av.starts.size == 0:
            return np.full(p.size, math.inf), np.full(p.size, math.inf)
        left = p < hi
        q = np.minimum(p, av.starts.size - 1)
        return np.where(left, av.starts[q], math.inf), np.where(left, av.ends[q], math.inf)

    def _move(self, rows: NDArray[np.int64], t: float) -> None:
        """Move the pointers of devices ``rows`` (whose interval ended by ``t``) past ``t``."""
        ends = self.av.ends
        p, hi = self.ptr[rows] + 1, self.hi[rows]  # each row's interval has ended by t
        while True:
            move = (p < hi) & (ends[np.minimum(p, ends.size - 1)] <= t)
            if not move.any():
                break
            p = p + move
        self.ptr[rows] = p
        self.start[rows], self.end[rows] = self._at(p, hi)

    def _advance_all(self, t: float) -> None:
        if t < self._change:
            return
        self._move(np.flatnonzero(self.end <= t), t)
        self._change = float(self.end.min())

    def current(
        self, devices: NDArray[np.int64], t: float
    ) -> tuple[NDArray[np.int64], Array, Array]:
        """Each device's first interval not ended at ``t``: its index, start and end.

        The index is into ``av.starts`` and ``av.ends``; ``av.offsets[device + 1]`` (and an
        ``inf`` start and end) means the device has no interval left. ``t`` must not be
        earlier than any time queried before (the cursor only moves forward).
        """
        if t >= self._change:
            stale = devices[self.end[devices] <= t]
            if stale.size:
                self._move(stale, t)
        return self.ptr[devices], self.start[devices], self.end[devices]

    def online(self, t: float) -> NDArray[np.bool_]:
        """Which devices are online at ``t``."""
        self._advance_all(t)
        return np.asarray(self.start <= t, dtype=bool)

    def window(self, device: int, t: float) -> tuple[bool, float, float]:
        """``(online, next_off, next_on)`` of one device at time ``t``.

        Online: ``next_off`` is when the current interval ends. Offline: ``next_on`` is when the
        next interval starts (``inf`` if never).
        """
        if self.end[device] <= t:
            self._move(np.array([device]), t)
        start = float(self.start[device])
        if math.isinf(start):
            return False, t, math.inf
        if start <= t:
            return True, float(self.end[device]), t
        return False, t, start

    def next_arrival(self, t: float) -> float:
        """The earliest time after ``t`` at which a device that is offline at ``t`` comes on."""
        self._advance_all(t)
        later = self.start[self.start > t]
        return float(later.min()) if later.size else math.inf

    def next_online(self, t: float) -> float:
        """The earliest time at or after ``t`` at which some device is online."""
        self._advance_all(t)
        first = float(self.start.min()) if self.start.size else math.inf
        return first if math.isinf(first) else max(t, first)
