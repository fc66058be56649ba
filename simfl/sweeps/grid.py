"""Grids of scenarios: every combination of the values of some of a base scenario's fields.

>>> from simfl import policies, sweeps
>>> # cases = sweeps.grid(base, policy={"wait-all": policies.WaitAll(count=10),
>>> #                                   "srpfl": policies.SRPFL(n0=5)}, seed=range(10))

A grid axis is a ``Scenario`` field (``policy``, ``fleet``, ``algorithm``, ``seed``, ...) given
as a list of values or as a ``{label: value}`` dict; labels become columns of the tidy frame
of :func:`simfl.sweep`.

Seeds follow one rule (:func:`with_seeds`, behind ``simfl.sweep(cases, seeds=...)`` and
``simfl sweep FILE --seeds``): a case with a ``seed`` label (a grid with a ``seed`` axis) keeps
its own seed, and asking for seeds on top of it is an error that names those cases; every other
case runs once per seed asked for.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from simfl._checks import check_int
from simfl.scenario import Scenario

__all__ = ["Case", "grid", "ranges_text", "with_seeds"]


@dataclass(frozen=True)
class Case:
    """One scenario of a grid, with the labels of its grid coordinates."""

    scenario: Scenario
    labels: dict[str, Any] = field(default_factory=dict)


def _label(value: Any) -> Any:
    if isinstance(value, (int, float, str)):
        return value
    name = getattr(value, "name", None)
    return name if isinstance(name, str) else repr(value)


def grid(base: Scenario, **axes: Sequence[Any] | Mapping[str, Any] | range) -> list[Case]:
    """Every combination of the given values of ``base``'s fields.

    Raises
    ------
    ValueError
        If an axis is not a Scenario field or has no values.
    """
    fields = {f.name for f in dataclasses.fields(Scenario)}
    labelled: list[list[tuple[Any, Any]]] = []
    for name, values in axes.items():
        if name not in fields:
            raise ValueError(f"grid axis {name!r} must be a Scenario field: {sorted(fields)}")
        pairs = (
            list(values.items())
            if isinstance(values, Mapping)
            else [(_label(v), v) for v in values]
        )
        if not pairs:
            raise ValueError(f"grid axis {name!r} has no values")
        labelled.append(pairs)
    cases = []
    for combo in itertools.product(*labelled):
        changes = {name: value for name, (_, value) in zip(axes, combo, strict=True)}
        labels = {name: label for name, (label, _) in zip(axes, combo, strict=True)}
        name = ",".join(f"{k}={v}" for k, v in labels.items() if k != "seed") or base.name
        cases.append(Case(dataclasses.replace(base, name=name, **changes), labels))
    return cases


def with_seeds(
    cases: Sequence[Case],
    seeds: Iterable[int],
    *,
    where: str = "simfl.sweep",
    option: str = "seeds=",
) -> list[Case]:
    """Every case once per seed, for cases that have no seed axis of their own.

    The one rule for seeds of :func:`simfl.sweep` and ``simfl sweep --seeds``: a case whose
    labels include ``seed`` (from ``grid(base, ..., seed=...)``) sets its own seed, so ``seeds``
    must not be given for it; every other case becomes one case per seed, in the order of
    ``seeds``, with the scenario's seed replaced and a ``seed`` label added.

    Parameters
    ----------
    cases
        The cases.
    seeds
        The seeds (integers >= 0, at least one, no repeats).
    where, option
        How the error message names where the cases come from and the option (e.g.
        ``"scenarios/x.py defines CASES"`` and ``"--seeds"``).

    Raises
    ------
    ValueError
        If a case has a ``seed`` label (the message lists those cases and their seeds), or the
        seeds are empty, repeated or not integers >= 0.
    """
    wanted = [check_int(f"sweep {option} values", s, low=0, high=2**63 - 1) for s in seeds]
    if not wanted:
        raise ValueError(f"sweep {option} must list at least one seed")
    if len(set(wanted)) < len(wanted):
        raise ValueError(f"sweep {option} lists a seed twice: {ranges_text(wanted)}")
    seeded = [i for i, c in enumerate(cases) if "seed" in c.labels]
    if seeded:
        own = [cases[i].scenario.seed for i in seeded]
        raise ValueError(
            f"{where}: cases {ranges_text(seeded)} set their own seeds {ranges_text(own)} (a "
            f"'seed' axis of sweeps.grid, or a 'seed' label), so {option} would replace them; "
            f"drop {option} to run their own seeds, or drop their seed axis"
        )
    return [
        Case(dataclasses.replace(c.scenario, seed=seed), {**c.labels, "seed": seed})
        for c in cases
        for seed in wanted
    ]


def ranges_text(values: Iterable[int]) -> str:
    """Integers as short text: ``[0, 1, 2, 5]`` -> ``"0-2,5"`` (sorted, without repeats)."""
    runs: list[list[int]] = []
    for v in sorted(set(values)):
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return ",".join(f"{lo}" if lo == hi else f"{lo}-{hi}" for lo, hi in runs)
