"""Device fleets as columnar tables: one row per device, numpy arrays, no per-device objects.

A device is described by

* its compute time per unit of work: a distribution (shared by a group of devices) times a
  per-device ``scale`` (so one Exponential(1) group with scales drawn from U[1, 100] gives every
  device its own mean, as in SRPFL's code),
* its downlink and uplink bandwidth (bytes per second, ``inf`` for a free link) and latency
  (seconds per transfer),
* its dropout hazard (failures per second while busy; 0 for a device that never drops).

``redraw`` says how often a device's speed is drawn: once for the whole run (``"run"``), once
per stage of a stage-based policy such as SRPFL (``"stage"``), or every round (``"round"``).

A fleet may carry an :class:`~simfl.fleet.Availability` (when each device is online)
and an ``offline`` mode saying whether a job whose device goes offline is aborted (``"abort"``,
recorded ``dropped``) or paused until the device is back (``"pause"``); see
:meth:`Fleet.with_availability`.

Two optional columns serve the analysis and never change what is simulated:

* each device's **group label** (:meth:`Fleet.device_groups`): by default the name of its tier or
  profile (``Profile.name``; ``"g0"``, ``"g1"``, ... when unnamed), or any labels given with
  :meth:`Fleet.with_groups`. Runs store it so that results can be read per group
  (``Results.participation``);
* its **energy model** (:class:`~simfl.fleet.energy.Energy`, :meth:`Fleet.with_energy` or
  ``Profile(energy=...)``): runs of a fleet that declares one record each job's energy.

Draws are keyed by the device index (see :mod:`simfl.rng`), so appending devices never changes
the draws of the devices already there.

Every device's compute draws stay finite: a fleet refuses a ``scale`` for which a device's
largest draw (:attr:`simfl.dists.Dist.max_draw`) or mean compute time, times its scale, exceeds
:data:`simfl.dists.MAX_DRAW` = ``1e300``, the rule every distribution already follows on its
own (it leaves room for the work multiplier, the transfers and the clock; see
:mod:`simfl.dists`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray

from simfl._checks import MAX_DEVICES, check_choice, check_int, check_real, check_str
from simfl.dists import MAX_DRAW, MIN_BANDWIDTH, Dist
from simfl.fleet.availability import Availability
from simfl.fleet.checks import (
    check_availability,
    check_dists,
    check_energy,
    check_group,
    check_group_names,
    check_labels,
    check_links,
    check_scale_keeps_draws_finite,
    draw_scale,
    factorize,
    sequence,
)
from simfl.fleet.energy import ENERGY_FIELDS, Energy, EnergySpec
from simfl.rng import Streams

__all__ = ["OFFLINE_MODES", "REDRAW_MODES", "Fleet", "Profile"]

REDRAW_MODES = ("round", "stage", "run")
OFFLINE_MODES = ("abort", "pause")
#: The per-device numeric columns of a fleet besides its group.
_DEVICE_COLUMNS = ("scale", "bandwidth_down", "bandwidth_up", "latency", "dropout_rate")


@dataclass(frozen=True)
class Profile:
    """One kind of device, for building tiered or mixed fleets.

    Parameters
    ----------
    compute
        Distribution of the compute time per unit of work, in seconds.
    bandwidth_down, bandwidth_up
        Link bandwidth in bytes per second (at least :data:`simfl.dists.MIN_BANDWIDTH`, about
        ``9.2e-282``, so that any payload crosses in finite time; ``inf`` means transfers cost
        only latency).
    latency
        Seconds added to every transfer (>= 0, at most :data:`simfl.dists.MAX_DRAW`).
    dropout_rate
        Failure hazard per busy second (>= 0): a job of length L survives with probability
        ``exp(-dropout_rate * L)``.
    name
        Label of the tier: its devices' group (:meth:`Fleet.device_groups`), shown in
        :meth:`Fleet.table` and in per-group results.
    energy
        What a device of this kind spends (``None``: no energy model); see
        :class:`~simfl.fleet.energy.Energy`.
    """

    compute: Dist
    bandwidth_down: float = math.inf
    bandwidth_up: float = math.inf
    latency: float = 0.0
    dropout_rate: float = 0.0
    name: str = ""
    energy: Energy | None = None

    def __post_init__(self) -> None:
        if self.energy is not None and not isinstance(self.energy, Energy):
            raise ValueError(f"Profile.energy must be a simfl Energy or None, got {self.energy!r}")
        if not isinstance(self.name, str):
            raise ValueError(f"Profile.name must be a string, got {self.name!r}")
        if not isinstance(self.compute, Dist):
            raise ValueError(
                f"Profile.compute must be a simfl.dists distribution, got {self.compute!r}"
            )
        for f in ("bandwidth_down", "bandwidth_up"):
            v = check_real(f"Profile.{f}", getattr(self, f), low=MIN_BANDWIDTH, allow_inf=True)
            object.__setattr__(self, f, v)
        latency = check_real("Profile.latency", self.latency, low=0.0, high=MAX_DRAW)
        object.__setattr__(self, "latency", latency)
        object.__setattr__(
            self, "dropout_rate", check_real("Profile.dropout_rate", self.dropout_rate, low=0.0)
        )
        check_str("Profile.name", self.name)


def _profile_pairs(
    owner: str, entries: Sequence[object], first: str
) -> list[tuple[object, Profile]]:
    """The ``(first, Profile)`` pairs of :meth:`Fleet.tiers` or :meth:`Fleet.mixture`, checked."""
    pairs = []
    for i, entry in enumerate(entries):
        if isinstance(entry, (str, bytes)) or not isinstance(entry, Sequence) or len(entry) != 2:
            raise ValueError(f"{owner}[{i}] must be a ({first}, Profile) pair, got {entry!r:.60}")
        value, profile = entry
        if not isinstance(profile, Profile):
            raise ValueError(f"{owner}[{i}] profile must be a simfl.Profile, got {profile!r:.60}")
        pairs.append((value, profile))
    return pairs


@dataclass(frozen=True, eq=False, init=False)
class Fleet:
    """A columnar table of devices.

    Most users build fleets with :meth:`homogeneous`, :meth:`tiers` or :meth:`mixture`; the
    constructor takes the columns directly.

    Parameters
    ----------
    compute
        The distinct compute-time distributions (seconds per unit of work).
    group
        For each device, the index into ``compute`` of its distribution.
    scale
        Per-device multiplier of the compute time (> 0), an array, a number, or a distribution
        to draw one value per device from (keyed by device with ``seed``). A device's largest
        compute draw (and mean) times its scale must be at most
        :data:`simfl.dists.MAX_DRAW` = ``1e300``, so that durations stay finite.
    bandwidth_down, bandwidth_up, latency, dropout_rate
        Per-device link and failure parameters (numbers or arrays); see :class:`Profile`.
    redraw
        ``"round"`` (a fresh speed every round), ``"stage"`` (fixed within a policy stage) or
        ``"run"`` (fixed for the whole run).
    group_names
        Labels of the groups (default ``"g0"``, ``"g1"``, ...).
    seed
        Seed of the fleet's own randomness (scales drawn from a distribution, mixtures), so the
        same fleet can be reused under different scenario seeds.
    availability, offline
        When devices are online, and what happens to a job whose device goes offline; see
        :meth:`with_availability`.
    groups
        One group label per device, for per-group results (default: each device's
        ``group_names`` entry); see :meth:`with_groups`.
    energy
        The devices' energy model: one :class:`~simfl.fleet.energy.Energy` for all, one per
        device, or their ``(size, 4)`` table (default ``None``: none); see :meth:`with_energy`.
    """

    dists: tuple[Dist, ...]
    group: NDArray[np.int64]
    scale: NDArray[np.float64]
    bandwidth_down: NDArray[np.float64]
    bandwidth_up: NDArray[np.float64]
    latency: NDArray[np.float64]
    dropout_rate: NDArray[np.float64]
    redraw: str
    group_names: tuple[str, ...]
    seed: int
    availability: Availability | None
    offline: str
    #: Group labels given with :meth:`with_groups`: the names and each device's index into
    #: them (``None``: the groups are ``group_names``; see :meth:`device_groups`).
    labels: tuple[tuple[str, ...], NDArray[np.int64]] | None
    #: Per-device energy model, shape ``(size, 4)`` in the order of
    #: :data:`~simfl.fleet.energy.ENERGY_FIELDS` (``None``: no energy model).
    energy: NDArray[np.float64] | None

    def __init__(
        self,
        compute: Sequence[Dist],
        group: ArrayLike,
        *,
        scale: ArrayLike | Dist = 1.0,
        bandwidth_down: ArrayLike = math.inf,
        bandwidth_up: ArrayLike = math.inf,
        latency: ArrayLike = 0.0,
        dropout_rate: ArrayLike = 0.0,
        redraw: str = "round",
        group_names: Sequence[str] | None = None,
        seed: int = 0,
        availability: Availability | None = None,
        offline: str = "abort",
        groups: Sequence[str] | NDArray[np.object_] | None = None,
        energy: EnergySpec | None = None,
    ) -> None:
        dists = check_dists(compute)
        g = check_group(group, len(dists))
        n = g.size
        seed = check_int("Fleet.seed", seed, low=0)
        names = check_group_names(group_names, len(dists))
        scales = draw_scale(scale, n, seed, "Fleet.scale")
        check_scale_keeps_draws_finite(dists, g, scales)
        values: dict[str, object] = {
            "dists": dists,
            "group": g,
            "scale": scales,
            **check_links(n, bandwidth_down, bandwidth_up, latency, dropout_rate),
            "redraw": check_choice("Fleet.redraw", redraw, REDRAW_MODES),
            "group_names": names,
            "seed": seed,
            "availability": check_availability(availability, n),
            "offline": check_choice("Fleet.offline", offline, OFFLINE_MODES),
            "labels": check_labels(groups, n),
            "energy": check_energy(energy, n),
        }
        for name, value in values.items():
            object.__setattr__(self, name, value)

    # ----------------------------------------------------------------- constructors
    @classmethod
    def homogeneous(
        cls,
        n: int,
        compute: Dist,
        *,
        scale: ArrayLike | Dist = 1.0,
        bandwidth_down: float = math.inf,
        bandwidth_up: float = math.inf,
        latency: float = 0.0,
        dropout_rate: float = 0.0,
        redraw: str = "round",
        seed: int = 0,
    ) -> Fleet:
        """``n`` devices sharing one compute distribution and link parameters.

        Examples
        --------
        >>> from simfl.dists import Exponential
        >>> Fleet.homogeneous(100, compute=Exponential(mean=1.0)).size
        100
        """
        n = check_int("Fleet.homogeneous n (number of devices)", n, low=1, high=MAX_DEVICES)
        links: dict[str, ArrayLike] = {
            "bandwidth_down": bandwidth_down,
            "bandwidth_up": bandwidth_up,
            "latency": latency,
            "dropout_rate": dropout_rate,
        }
        for name, value in links.items():
            if isinstance(value, np.ndarray) or np.ndim(value) != 0:  # Fleet checks the range
                raise ValueError(
                    f"Fleet.{name} of Fleet.homogeneous must be one number for every device "
                    f"(per-device arrays go to Fleet(...) or Fleet.with_scale), got {value!r:.60}"
                )
        return cls(
            [compute],
            np.zeros(n, dtype=np.int64),
            scale=scale,
            bandwidth_down=bandwidth_down,
            bandwidth_up=bandwidth_up,
            latency=latency,
            dropout_rate=dropout_rate,
            redraw=redraw,
            seed=seed,
        )

    @classmethod
    def tiers(
        cls,
        *tiers: tuple[int, Profile],
        redraw: str = "round",
        seed: int = 0,
    ) -> Fleet:
        """Consecutive blocks of devices, ``(count, profile)`` each, e.g. 80 fast and 20 slow."""
        if not tiers:
            raise ValueError("Fleet.tiers needs at least one (count, Profile) tier, got none")
        pairs = _profile_pairs("Fleet.tiers", tiers, "count")
        counts = [
            check_int(f"Fleet.tiers[{i}] count", c, low=1, high=MAX_DEVICES)
            for i, (c, _) in enumerate(pairs)
        ]
        if sum(counts) > MAX_DEVICES:
            raise ValueError(
                f"Fleet.tiers counts must add up to at most {MAX_DEVICES:,} devices, got "
                f"{sum(counts):,}"
            )
        profiles = [p for _, p in pairs]
        group = np.repeat(np.arange(len(tiers)), counts)
        return cls._from_profiles(profiles, group, redraw=redraw, seed=seed)

    @classmethod
    def mixture(
        cls,
        n: int,
        components: Sequence[tuple[float, Profile]],
        *,
        redraw: str = "round",
        seed: int = 0,
    ) -> Fleet:
        """``n`` devices, each of a profile drawn with the given weights (keyed by device)."""
        n = check_int("Fleet.mixture n (number of devices)", n, low=1, high=MAX_DEVICES)
        field = "Fleet.mixture components"
        pairs = _profile_pairs(
            field, sequence(field, components, "(weight, Profile) pairs"), "weight"
        )
        if not pairs:
            raise ValueError(f"{field} needs at least one (weight, Profile) pair, got none")
        w = np.array(
            [check_real(f"{field}[{i}] weight", c, low=0.0) for i, (c, _) in enumerate(pairs)]
        )
        if not 0 < w.sum() < math.inf:
            raise ValueError(f"{field} weights must have a positive, finite sum, got {w.sum()}")
        profiles = [p for _, p in pairs]
        u = Streams(check_int("Fleet.seed", seed, low=0)).uniform("fleet/mixture", np.arange(n))
        cum = np.cumsum(w / w.sum())
        group = np.minimum(np.searchsorted(cum, u, side="right"), len(profiles) - 1)
        return cls._from_profiles(profiles, group, redraw=redraw, seed=seed)

    @classmethod
    def _from_profiles(
        cls, profiles: Sequence[Profile], group: NDArray[np.int64], *, redraw: str, seed: int
    ) -> Fleet:
        def column(name: str) -> NDArray[np.float64]:
            return np.array([getattr(p, name) for p in profiles])[group]

        energy = None
        if any(p.energy is not None for p in profiles):
            energy = np.array([(p.energy or Energy()).row() for p in profiles])[group]
        return cls(
            [p.compute for p in profiles],
            group,
            bandwidth_down=column("bandwidth_down"),
            bandwidth_up=column("bandwidth_up"),
            latency=column("latency"),
            dropout_rate=column("dropout_rate"),
            redraw=redraw,
            group_names=[p.name or f"g{i}" for i, p in enumerate(profiles)],
            seed=seed,
            energy=energy,
        )

    # ----------------------------------------------------------------- derived fleets
    def with_redraw(self, redraw: str) -> Fleet:
        """The same devices with another speed re-draw mode."""
        return self._replace(redraw=redraw)

    def with_availability(self, availability: Availability | None, offline: str = "abort") -> Fleet:
        """The same devices online only within ``availability``'s intervals.

        ``offline="abort"`` ends a job whose device goes offline (recorded ``dropped``);
        ``"pause"`` suspends it until the device is back (its failure clock suspended too).
        """
        return self._replace(availability=availability, offline=offline)

    def with_scale(self, scale: ArrayLike | Dist, seed: int | None = None) -> Fleet:
        """The same devices with new compute-time multipliers (array, number or distribution)."""
        return self._replace(scale=scale, seed=self.seed if seed is None else seed)

    def with_groups(self, groups: Sequence[str] | NDArray[np.object_] | None) -> Fleet:
        """The same devices with group labels for per-group results (nothing simulated changes).

        Parameters
        ----------
        groups
            One non-empty string per device (e.g. ``["phone"] * 80 + ["laptop"] * 20``);
            ``None`` restores the default, each device's ``group_names`` entry (its tier).

        Raises
        ------
        ValueError
            If ``groups`` does not hold one string per device.

        Examples
        --------
        >>> from simfl.dists import Exponential
        >>> fleet = Fleet.homogeneous(4, Exponential(1.0)).with_groups(["a", "b", "a", "a"])
        >>> fleet.device_groups()[0]
        ('a', 'b')
        """
        return self._replace(groups=groups)

    def with_energy(self, energy: EnergySpec | None) -> Fleet:
        """The same devices with an energy model: every job of a run records its energy.

        Parameters
        ----------
        energy
            One :class:`~simfl.fleet.energy.Energy` for every device, one per device, their
            ``(size, 4)`` table (columns :data:`~simfl.fleet.energy.ENERGY_FIELDS`), or
            ``None`` (no energy model).

        Examples
        --------
        >>> from simfl.dists import Exponential
        >>> from simfl.fleet import Energy
        >>> fleet = Fleet.homogeneous(3, Exponential(1.0)).with_energy(Energy(per_work=2.0))
        >>> fleet.table()["per_work"].tolist()
        [2.0, 2.0, 2.0]
        """
        return self._replace(energy=energy)

    def _replace(self, **changes: object) -> Fleet:
        kw: dict[str, object] = {c: getattr(self, c) for c in _DEVICE_COLUMNS}
        kw.update(
            redraw=self.redraw,
            group_names=self.group_names,
            seed=self.seed,
            availability=self.availability,
            offline=self.offline,
            groups=None if self.labels is None else self.group_labels(),
            energy=self.energy,
        )
        kw.update(changes)
        return Fleet(self.dists, self.group, **kw)  # type: ignore[arg-type]

    def __add__(self, other: Fleet) -> Fleet:
        """Concatenate two fleets (the devices of ``other`` get the next indices)."""
        if not isinstance(other, Fleet):
            return NotImplemented
        if other.redraw != self.redraw:
            raise ValueError(
                f"Fleet.redraw differs between the fleets being joined ({self.redraw!r} and "
                f"{other.redraw!r})"
            )
        columns = {
            c: np.concatenate([getattr(self, c), getattr(other, c)]) for c in _DEVICE_COLUMNS
        }
        if other.offline != self.offline:
            raise ValueError(
                f"Fleet.offline differs between the fleets being joined ({self.offline!r} and "
                f"{other.offline!r})"
            )
        availability = None
        if self.availability is not None or other.availability is not None:
            availability = (self.availability or Availability.always(self.size)) + (
                other.availability or Availability.always(other.size)
            )
        groups = None
        if self.labels is not None or other.labels is not None:
            groups = np.concatenate([self.group_labels(), other.group_labels()])
        energy = None
        if self.energy is not None or other.energy is not None:
            energy = np.concatenate([self._energy_or_zeros(), other._energy_or_zeros()])
        return Fleet(
            self.dists + other.dists,
            np.concatenate([self.group, other.group + len(self.dists)]),
            redraw=self.redraw,
            group_names=self.group_names + other.group_names,
            seed=self.seed,
            availability=availability,
            offline=self.offline,
            groups=groups,
            energy=energy,
            **columns,
        )

    # ----------------------------------------------------------------- queries
    @property
    def size(self) -> int:
        """Number of devices."""
        return int(self.group.size)

    def __len__(self) -> int:
        return self.size

    @property
    def mean_compute(self) -> NDArray[np.float64]:
        """Mean compute seconds per unit of work of every device."""
        means = np.array([d.mean for d in self.dists])
        return np.asarray(means[self.group] * self.scale, dtype=np.float64)

    def device_groups(self) -> tuple[tuple[str, ...], NDArray[np.int64]]:
        """The devices' group labels: the names (in order of first appearance) and each index.

        The labels given with :meth:`with_groups`, else each device's ``group_names`` entry
        (its tier's ``Profile.name``; devices of equally named tiers share a group).
        """
        if self.labels is not None:
            return self.labels
        return factorize(np.array(self.group_names, dtype=object)[self.group])

    def group_labels(self) -> NDArray[np.object_]:
        """The group label of every device (see :meth:`device_groups`)."""
        names, index = self.device_groups()
        return np.array(names, dtype=object)[index]

    def _energy_or_zeros(self) -> NDArray[np.float64]:
        """The energy table, zeros without an energy model."""
        if self.energy is None:
            return np.zeros((self.size, len(ENERGY_FIELDS)))
        return self.energy

    def compute_draws(
        self,
        devices: NDArray[np.int64] | int,
        *,
        round: int | NDArray[np.int64],
        stage: int,
        streams: Streams,
    ) -> NDArray[np.float64]:
        """Seconds per unit of work of ``devices`` in this round (keyed by the redraw mode).

        ``round`` may be an array aligned with ``devices`` (one key per job: asynchronous runs
        plan a block of jobs, each keyed by its device's job index, in one step). One device
        given as an ``int`` (with an ``int`` key) is drawn through the streams' scalar path,
        much faster for a single job, with the same value (a 0-d array).
        """
        key = {"round": round, "stage": stage, "run": 0}[self.redraw]
        u = streams.uniform("compute/" + self.redraw, devices, key)
        if len(self.dists) == 1:
            draws = self.dists[0].ppf(u)
        else:
            draws = np.empty(np.shape(devices), dtype=np.float64)
            grp = self.group[devices]
            # a fleet with more distributions than jobs (e.g. one per device, as fitted from
            # measurements) visits only those of the jobs; the draws are the same either way
            present = range(len(self.dists)) if grp.size >= len(self.dists) else np.unique(grp)
            for gi in present:
                mask = grp == gi
                if mask.any():
                    draws[mask] = self.dists[gi].ppf(u[mask])
        return np.asarray(draws * self.scale[devices], dtype=np.float64)

    def table(self) -> pd.DataFrame:
        """The fleet as a DataFrame, one row per device."""
        return pd.DataFrame(
            {
                "device": np.arange(self.size),
                "group": self.group_labels(),
                "compute": np.array([repr(d) for d in self.dists], dtype=object)[self.group],
                "scale": self.scale,
                "mean_compute": self.mean_compute,
                "bandwidth_down": self.bandwidth_down,
                "bandwidth_up": self.bandwidth_up,
                "latency": self.latency,
                "dropout_rate": self.dropout_rate,
                **(
                    {}
                    if self.energy is None
                    else {f: self.energy[:, i] for i, f in enumerate(ENERGY_FIELDS)}
                ),
            }
        )

    def __repr__(self) -> str:
        groups = ", ".join(
            f"{self.group_names[i]}: {int((self.group == i).sum())} x {d!r}"
            for i, d in enumerate(self.dists)
        )
        extra = (
            ""
            if self.availability is None
            else f"; {self.availability!r}, offline={self.offline!r}"
        )
        if self.labels is not None:
            extra += f"; {len(self.labels[0])} labelled groups"
        if self.energy is not None:
            extra += "; energy model"
        return f"Fleet({self.size} devices; {groups}; redraw={self.redraw!r}{extra})"
