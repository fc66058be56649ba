"""The knobs of a search: ranges and choices of a scenario's fields, named as dataclass paths.

A knob path names a field through the scenario's frozen dataclasses, ``"policy.seconds"`` (the
deadline of :class:`~simfl.policies.Deadline`), ``"policy.count"``, ``"algorithm.lr"``,
``"task.samples_per_client"``, ``"rounds"``, or a whole part (``"fleet"``, ``"policy"``) given
as a :class:`Choice` of values. :func:`apply` returns the scenario with the knobs set, through
``dataclasses.replace`` at every level, so every value passes the same checks as a scenario
written by hand.

>>> from simfl.tuning import Float, Int, Choice
>>> Float(0.5, 20.0, log=True)
Float(low=0.5, high=20.0, log=True)
>>> Int(5, 50).values()
(5, 50)
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import optuna

from simfl._checks import check_bool, check_int, check_real
from simfl.scenario import Scenario

__all__ = ["Choice", "Float", "Int", "Knob", "apply", "check_knobs", "distribution", "label"]

#: At most this many knobs have every corner of their ranges checked before a search starts.
_CORNER_KNOBS = 6


@dataclass(frozen=True)
class Float:
    """A real-valued knob in ``[low, high]`` (``log``: searched on a log scale, ``low > 0``)."""

    low: float
    high: float
    log: bool = False

    def __post_init__(self) -> None:
        low = check_real("Float.low", self.low)
        high = check_real("Float.high", self.high, low=low, low_open=True)
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)
        object.__setattr__(self, "log", check_bool("Float.log", self.log))
        if self.log and low <= 0:
            raise ValueError(f"Float.low must be > 0 on a log scale (log=True), got {low}")

    def values(self) -> tuple[Any, ...]:
        """The values checked before a search: both ends of the range."""
        return (self.low, self.high)


@dataclass(frozen=True)
class Int:
    """An integer knob in ``[low, high]`` by ``step`` (``log``: log scale, ``low >= 1``)."""

    low: int
    high: int
    step: int = 1
    log: bool = False

    def __post_init__(self) -> None:
        low = check_int("Int.low", self.low)
        high = check_int("Int.high", self.high, low=low + 1)
        step = check_int("Int.step", self.step, low=1)
        object.__setattr__(self, "log", check_bool("Int.log", self.log))
        if self.log and (low < 1 or step != 1):
            raise ValueError(f"Int on a log scale needs low >= 1 and step 1, got {low}, {step}")
        if (high - low) % step:
            raise ValueError(
                f"Int.high - Int.low must be a multiple of step {step}, got {low}-{high}"
            )
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)
        object.__setattr__(self, "step", step)

    def values(self) -> tuple[Any, ...]:
        """The values checked before a search: both ends of the range."""
        return (self.low, self.high)


@dataclass(frozen=True)
class Choice:
    """A knob that takes one of ``options``: plain values, or ``{label: value}`` for objects.

    Objects (fleets, policies, tasks) need labels, which name them in the trials' table, the
    store's columns and the figures: ``Choice({"tiers-2": fleet_a, "tiers-3": fleet_b})``.
    """

    options: Mapping[str, Any] | Sequence[Any]

    def __post_init__(self) -> None:
        if isinstance(self.options, Mapping):
            pairs = [(k, v) for k, v in self.options.items()]
            if not all(isinstance(k, str) and k for k in self.options):
                raise ValueError("Choice labels must be non-empty strings")
        elif isinstance(self.options, (str, bytes)) or not isinstance(self.options, Sequence):
            raise ValueError(f"Choice.options must be a list or a dict, got {self.options!r}")
        else:
            bad = [v for v in self.options if not _plain(v)]
            if bad:
                raise ValueError(
                    f"Choice.options holds objects ({bad[0]!r}): give them labels, "
                    f"Choice({{'name': value, ...}})"
                )
            pairs = [(v, v) for v in self.options]
        if len(pairs) < 2:
            raise ValueError(f"Choice needs at least two options, got {len(pairs)}")
        labels = [k for k, _ in pairs]
        if len(set(map(repr, labels))) < len(labels):
            raise ValueError(f"Choice options repeat: {labels}")
        object.__setattr__(self, "options", dict(pairs))

    def labels(self) -> tuple[Any, ...]:
        """The options' labels (the values themselves for plain values)."""
        return tuple(dict(self.options))

    def values(self) -> tuple[Any, ...]:
        """Every option (all of them are checked before a search)."""
        return tuple(dict(self.options).values())


Knob = Float | Int | Choice


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def distribution(knob: Knob) -> optuna.distributions.BaseDistribution:
    """The Optuna distribution of ``knob`` (a choice samples its labels)."""
    if isinstance(knob, Float):
        return optuna.distributions.FloatDistribution(knob.low, knob.high, log=knob.log)
    if isinstance(knob, Int):
        return optuna.distributions.IntDistribution(
            knob.low, knob.high, step=knob.step, log=knob.log
        )
    return optuna.distributions.CategoricalDistribution(list(knob.labels()))


def value_of(knob: Knob, sampled: Any) -> Any:
    """The field's value for a sampled parameter (a choice's label becomes its option)."""
    if isinstance(knob, Choice):
        return dict(knob.options)[sampled]
    return sampled


def label(value: Any) -> Any:
    """How a value names itself in a table: plain values as they are, else its name or repr."""
    if _plain(value):
        return value
    name = getattr(value, "name", None)
    return name if isinstance(name, str) else repr(value)


def _field_type(owner: Any, name: str) -> Any:
    try:
        hints = typing.get_type_hints(type(owner))
    except Exception:
        return None
    return hints.get(name)


def _accepts(hint: Any) -> set[type]:
    """The plain types a field's annotation names (``float | None`` -> {float, NoneType})."""
    if hint is None:
        return set()
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, __import__("types").UnionType):
        return {a for a in args if isinstance(a, type)}
    return {hint} if isinstance(hint, type) else set()


def _resolve(scenario: Scenario, path: str) -> tuple[Any, str, Any]:
    """The object owning the field ``path`` names, the field's name and its current value."""
    if not isinstance(path, str) or not path or any(not p for p in path.split(".")):
        raise ValueError(
            f"knob path must be dotted field names such as 'policy.seconds', got {path!r}"
        )
    obj: Any = scenario
    parts = path.split(".")
    for depth, part in enumerate(parts):
        if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
            where = ".".join(parts[:depth]) or "the scenario"
            raise ValueError(
                f"knob {path!r}: {where} is a {type(obj).__name__}, not a dataclass, so it has "
                f"no field {part!r}"
            )
        params = getattr(type(obj), "__dataclass_params__", None)
        if params is not None and not params.init:
            where = ".".join(parts[:depth]) or "the scenario"
            raise ValueError(
                f"knob {path!r}: {where} ({type(obj).__name__}) is built by its constructors, "
                f"not field by field; search whole values with Choice({{label: value}}), e.g. "
                f"{{'20 slow': Fleet.tiers(...), '40 slow': Fleet.tiers(...)}}"
            )
        names = [f.name for f in dataclasses.fields(obj) if f.init]
        if part not in names:
            where = ".".join(parts[:depth]) or "Scenario"
            raise ValueError(
                f"knob {path!r}: {where} ({type(obj).__name__}) has no field {part!r}; its "
                f"fields are {names}"
            )
        if depth == len(parts) - 1:
            return obj, part, getattr(obj, part)
        obj = getattr(obj, part)
    raise AssertionError("unreachable")  # pragma: no cover


def _check_type(path: str, knob: Knob, owner: Any, name: str, current: Any) -> None:
    hint = _accepts(_field_type(owner, name))
    where = f"knob {path!r} ({type(owner).__name__}.{name}"
    if isinstance(knob, Choice):
        return  # each option is checked by building the scenario with it
    numeric = hint & {int, float} or {type(current)} & {int, float}
    if isinstance(current, bool) or bool in hint:
        raise ValueError(f"{where} is a bool): search it with Choice([False, True])")
    if not numeric:
        raise ValueError(
            f"{where} holds {type(current).__name__} values): a range needs a number field; "
            f"search whole values with Choice({{label: value}})"
        )
    if isinstance(knob, Float) and float not in numeric:
        raise ValueError(f"{where} is an int): search it with Int(low, high), not Float")


def apply(scenario: Scenario, settings: Mapping[str, Any]) -> Scenario:
    """``scenario`` with every ``path: value`` of ``settings`` set (each path resolved anew).

    Raises
    ------
    ValueError
        If a path names no field, or the field's own checks refuse a value.
    """
    out = scenario
    for path, value in settings.items():
        out = _set(out, path.split("."), value, path)
    return out


def _set(obj: Any, parts: list[str], value: Any, path: str) -> Any:
    head, rest = parts[0], parts[1:]
    inner = value if not rest else _set(getattr(obj, head), rest, value, path)
    try:
        return dataclasses.replace(obj, **{head: inner})
    except TypeError as exc:  # a field the constructor does not take
        raise ValueError(f"knob {path!r}: {exc}") from exc


def check_knobs(scenario: Scenario, knobs: Mapping[str, Knob]) -> None:
    """Refuse knobs that name no field, have the wrong type, or reach a value that is refused.

    Every knob's ends (every option of a :class:`Choice`) are set on the scenario, with the
    other knobs at their ends too when there are at most six knobs (every corner of the box), so
    a range that crosses a field's limits is refused before any run, with the field's message.

    Raises
    ------
    ValueError
        Naming the knob, the field and the valid range.
    """
    if not isinstance(knobs, Mapping) or not knobs:
        raise ValueError("tune needs at least one knob: {'policy.seconds': Float(1, 60), ...}")
    for path, knob in knobs.items():
        if not isinstance(knob, (Float, Int, Choice)):
            raise ValueError(f"knob {path!r} must be a tuning.Float, Int or Choice, got {knob!r}")
        owner, name, current = _resolve(scenario, path)
        _check_type(path, knob, owner, name, current)
    paths = list(knobs)
    if len(paths) <= _CORNER_KNOBS:
        combos: list[tuple[Any, ...]] = list(itertools.product(*(knobs[p].values() for p in paths)))
    else:
        combos = [
            tuple(v if q == p else knobs[q].values()[0] for q in paths)
            for p in paths
            for v in knobs[p].values()
        ]
    for combo in combos:
        settings = dict(zip(paths, combo, strict=True))
        try:
            apply(scenario, settings)
        except (ValueError, TypeError) as exc:
            shown = {p: label(v) for p, v in settings.items()}
            raise ValueError(f"knob values {shown} are refused by the scenario: {exc}") from exc


def grid_size(knob: Knob) -> float:
    """How many values the knob can take (``inf`` for a real range)."""
    if isinstance(knob, Choice):
        return len(knob.options)
    if isinstance(knob, Int):
        return (knob.high - knob.low) // knob.step + 1
    return math.inf
