"""Grids of scenarios: every combination of the values of some of a base scenario's fields.

>>> from simfl import policies, sweeps
>>> # cases = sweeps.grid(base, policy={"wait-all": policies.WaitAll(count=10),
>>> #                                   "srpfl": policies.SRPFL(n0=5)}, seed=range(10))

A grid axis is a ``Scenario`` field (``policy``, ``fleet``, ``algorithm``, ``seed``, ...) given
as a list of values or as a ``{label: value}`` dict; labels become columns of the tidy frame
of :func:`simfl.sweep`.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from simfl.scenario import Scenario

__all__ = ["Case", "grid"]


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
