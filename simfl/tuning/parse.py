"""The text forms of knobs, measures and constraints, as ``simfl tune`` takes them.

========================  =========================================================
``--knob PATH=SPEC``      the knob
========================  =========================================================
``policy.seconds=1:60``   ``Float(1, 60)``; ``1:60:log``: on a log scale
``policy.count=5..50``    ``Int(5, 50)``; ``5..50:5``: by steps of 5; ``1..64:log``
``policy.partial=a,b,c``  ``Choice([a, b, c])`` of plain values: ``None``, ``True``,
                          ``False``, integers, reals, else the text itself
``fleet=@FLEETS``         ``Choice(FLEETS)``: a dict ``{label: value}`` the scenario
                          file defines under that name
========================  =========================================================

=============================================  ===============================================
measure (``--objective``)                      what it is (:mod:`simfl.tuning.measures`)
=============================================  ===============================================
``time:METRIC<=X``, ``time:METRIC>=X``         ``TimeToTarget(METRIC, below=X)`` / ``above=X``
``energy:METRIC<=X``, ``energy:METRIC>=X``     ``EnergyToTarget(METRIC, below=X)`` / ``above=X``
``updates_per_hour``                           ``UpdatesPerHour()``
``final:METRIC``                               ``Final(METRIC)``
``round_time``, ``round_time:Q``               ``RoundTime(0.95)``, ``RoundTime(Q)``
``jain``, ``jain:groups``, ``jain:devices``    ``Jain("groups")``, ``Jain(over)``
``share:GROUP``                                ``UpdateShare(GROUP)``
``sim_time``                                   ``SimTime()``
=============================================  ===============================================

A constraint (``--constraint``) is a measure, then ``<=`` or ``>=`` and a number: the last
comparison in the text is the bound, so ``round_time:0.95<=60``, ``jain:groups>=0.8``,
``share:slow>=0.1``, ``sim_time<=3600`` and ``time:accuracy>=0.8<=500`` (the time to an
accuracy of 0.8 at most 500 s). As in ``simfl sweep --target``, ``<`` reads as ``<=`` and
``>`` as ``>=``.

>>> from simfl.tuning.parse import parse_constraint, parse_knob, parse_measure
>>> parse_knob("policy.count=5..50:5")
('policy.count', Int(low=5, high=50, step=5, log=False))
>>> parse_measure("time:distance<=1e-3")
TimeToTarget(metric='distance', below=0.001, above=None)
>>> parse_constraint("round_time:0.95<=60").name
'round_time_q0.95<=60'
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from simfl.tuning.measures import (
    Constraint,
    EnergyToTarget,
    Final,
    Jain,
    Measure,
    RoundTime,
    SimTime,
    TimeToTarget,
    UpdateShare,
    UpdatesPerHour,
)
from simfl.tuning.space import Choice, Float, Int, Knob

__all__ = [
    "CONSTRAINT_FORMS",
    "KNOB_FORMS",
    "MEASURE_FORMS",
    "parse_constraint",
    "parse_knob",
    "parse_knobs",
    "parse_measure",
    "parse_value",
]

#: The knob forms, as error messages list them.
KNOB_FORMS = (
    "PATH=LOW:HIGH (a real range), PATH=LOW:HIGH:log, PATH=LOW..HIGH (integers), "
    "PATH=LOW..HIGH:STEP, PATH=LOW..HIGH:log, PATH=A,B,C (a choice of values), "
    "PATH=@NAME (a choice from the dict NAME of the scenario file)"
)
#: The measure forms, as error messages list them.
MEASURE_FORMS = (
    "time:METRIC<=X, time:METRIC>=X, energy:METRIC<=X, energy:METRIC>=X, updates_per_hour, "
    "final:METRIC, round_time, round_time:Q, jain, jain:groups, jain:devices, share:GROUP, "
    "sim_time"
)
#: The constraint forms, as error messages list them.
CONSTRAINT_FORMS = "MEASURE<=NUMBER or MEASURE>=NUMBER (e.g. round_time:0.95<=60, jain>=0.8)"

_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: A comparison: ``<=``, ``>=``, or ``<`` / ``>`` (read as ``<=`` / ``>=``).
_COMPARISON = re.compile(r"<=|>=|<|>")
_INT = re.compile(r"[+-]?\d+")


def parse_value(text: str) -> Any:
    """A plain value from its text: ``None``, ``True``/``False``, an int, a real, else the text.

    Quotes around a value (``'5'``) keep it text.
    """
    word = text.strip()
    if len(word) >= 2 and word[0] == word[-1] and word[0] in "'\"":
        return word[1:-1]
    if word == "None":
        return None
    if word in ("True", "true"):
        return True
    if word in ("False", "false"):
        return False
    if _INT.fullmatch(word):
        return int(word)
    try:
        value = float(word)
    except ValueError:
        return word
    return word if math.isnan(value) else value


def _number(option: str, text: str, what: str, forms: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(
            f"{option}: {what} must be a number, got {text!r}; valid: {forms}"
        ) from None
    if math.isnan(value):
        raise ValueError(f"{option}: {what} must be a number, got {text!r}; valid: {forms}")
    return value


def _integer(option: str, text: str, what: str) -> int:
    word = text.strip()
    if not _INT.fullmatch(word):
        raise ValueError(f"{option}: {what} must be an integer, got {text!r}; valid: {KNOB_FORMS}")
    return int(word)


def parse_knob(
    text: str, names: Mapping[str, Any] | None = None, *, option: str = "--knob"
) -> tuple[str, Knob]:
    """``(path, knob)`` from ``PATH=SPEC`` (forms in the module docstring).

    Parameters
    ----------
    text
        E.g. ``"policy.seconds=1:60:log"``.
    names
        The scenario file's names, for ``PATH=@NAME`` (a dict ``{label: value}`` there).
    option
        The option named in error messages.

    Raises
    ------
    ValueError
        Naming the option, what is wrong, and the valid forms.
    """
    path, eq, spec = text.partition("=")
    path, spec = path.strip(), spec.strip()
    if not eq or not path or not spec:
        raise ValueError(f"{option} must be PATH=SPEC, got {text!r}; valid: {KNOB_FORMS}")
    if not _PATH.fullmatch(path):
        raise ValueError(
            f"{option} {text!r}: the path must be dotted field names such as "
            f"policy.seconds, got {path!r}"
        )
    where = f"{option} {path}"
    try:
        return path, _knob(where, spec, names)
    except ValueError as exc:
        if str(exc).startswith(where):
            raise
        raise ValueError(f"{where}={spec}: {exc}") from None


def _knob(where: str, spec: str, names: Mapping[str, Any] | None) -> Knob:
    if spec.startswith("@"):
        name = spec[1:]
        if not _NAME.fullmatch(name):
            raise ValueError(f"{where}: @NAME must name a dict of the scenario file, got {spec!r}")
        if names is None or name not in names:
            raise ValueError(
                f"{where}: the scenario file defines no {name!r}; @{name} needs a dict "
                f"{{label: value}} of that name there"
            )
        options = names[name]
        if not isinstance(options, Mapping):
            raise ValueError(
                f"{where}: {name} in the scenario file is a {type(options).__name__}, not a "
                f"dict {{label: value}}"
            )
        return Choice(dict(options))
    if "," in spec:
        words = spec.split(",")
        if any(not w.strip() for w in words):
            raise ValueError(f"{where}={spec}: a choice lists values A,B,C, none of them empty")
        return Choice([parse_value(w) for w in words])
    if ".." in spec:
        bounds, _, tail = spec.partition(":")
        low, _, high = bounds.partition("..")
        lo = _integer(where, low, "LOW of LOW..HIGH")
        hi = _integer(where, high, "HIGH of LOW..HIGH")
        if not tail:
            return Int(lo, hi)
        if tail == "log":
            return Int(lo, hi, log=True)
        return Int(lo, hi, step=_integer(where, tail, "STEP of LOW..HIGH:STEP (or log)"))
    if ":" in spec:
        parts = spec.split(":")
        if len(parts) > 3 or (len(parts) == 3 and parts[2] != "log"):
            raise ValueError(
                f"{where}={spec}: a real range is LOW:HIGH or LOW:HIGH:log; valid: {KNOB_FORMS}"
            )
        lo_f = _number(where, parts[0], "LOW of LOW:HIGH", KNOB_FORMS)
        hi_f = _number(where, parts[1], "HIGH of LOW:HIGH", KNOB_FORMS)
        return Float(lo_f, hi_f, log=len(parts) == 3)
    raise ValueError(f"{where}={spec}: one value is not a range or a choice; valid: {KNOB_FORMS}")


def parse_knobs(
    texts: list[str], names: Mapping[str, Any] | None = None, *, option: str = "--knob"
) -> dict[str, Knob]:
    """``{path: knob}`` of several ``PATH=SPEC`` (a path given twice is refused)."""
    out: dict[str, Knob] = {}
    for text in texts:
        path, knob = parse_knob(text, names, option=option)
        if path in out:
            raise ValueError(f"{option} {path} is given twice")
        out[path] = knob
    return out


def _target(kind: str, option: str, text: str, arg: str) -> Measure:
    """``time:METRIC<=X`` and ``energy:METRIC>=X``."""
    found = _COMPARISON.search(arg)
    if found is None:
        raise ValueError(
            f"{option} {text!r}: {kind}: needs a target METRIC<=X or METRIC>=X, e.g. "
            f"{kind}:distance<=1e-3"
        )
    metric, value = arg[: found.start()].strip(), arg[found.end() :].strip()
    if not metric:
        raise ValueError(f"{option} {text!r}: {kind}: names no metric before {found.group()}")
    x = _number(f"{option} {text!r}", value, "the target", MEASURE_FORMS)
    below = x if found.group().startswith("<") else None
    above = x if found.group().startswith(">") else None
    if kind == "time":
        return TimeToTarget(metric, below=below, above=above)
    return EnergyToTarget(metric, below=below, above=above)


def _no_arg(make: Callable[[], Measure]) -> Callable[[str, str, str | None], Measure]:
    def build(option: str, text: str, arg: str | None) -> Measure:
        if arg is not None:
            name = text.partition(":")[0]
            raise ValueError(f"{option} {text!r}: {name} takes no argument (give {name})")
        return make()

    return build


def _needs_arg(
    what: str, make: Callable[[str], Measure]
) -> Callable[[str, str, str | None], Measure]:
    def build(option: str, text: str, arg: str | None) -> Measure:
        name = text.strip().partition(":")[0]
        if not arg:
            raise ValueError(f"{option} {text!r}: {name} needs a {what}: {name}:{what.upper()}")
        return make(arg)

    return build


def _round_time(option: str, text: str, arg: str | None) -> Measure:
    if arg is None:
        return RoundTime()
    return RoundTime(_number(f"{option} {text!r}", arg, "the quantile Q", MEASURE_FORMS))


def _jain(option: str, text: str, arg: str | None) -> Measure:
    if arg is None:
        return Jain()
    if arg not in ("groups", "devices"):
        raise ValueError(f"{option} {text!r}: jain is jain:groups or jain:devices, got {arg!r}")
    return Jain(arg)


_MEASURES: dict[str, Callable[[str, str, str | None], Measure]] = {
    "updates_per_hour": _no_arg(UpdatesPerHour),
    "sim_time": _no_arg(SimTime),
    "final": _needs_arg("metric", Final),
    "share": _needs_arg("group", UpdateShare),
    "round_time": _round_time,
    "jain": _jain,
}


def parse_measure(text: str, *, option: str = "--objective") -> Measure:
    """A measure from its text (forms in the module docstring).

    Raises
    ------
    ValueError
        Naming the option, what is wrong, and the valid forms.
    """
    word = text.strip()
    name, colon, arg = word.partition(":")
    name = name.strip()
    if name in ("time", "energy"):
        if not colon:
            raise ValueError(
                f"{option} {text!r}: {name} needs a target, e.g. {name}:distance<=1e-3"
            )
        return _target(name, option, text, arg)
    build = _MEASURES.get(name)
    if build is None:
        raise ValueError(f"{option} must be a measure, got {text!r}; valid: {MEASURE_FORMS}")
    try:
        return build(option, text, arg.strip() if colon else None)
    except ValueError as exc:
        if str(exc).startswith(option):
            raise
        raise ValueError(f"{option} {text!r}: {exc}") from None


def parse_constraint(text: str, *, option: str = "--constraint") -> Constraint:
    """A constraint ``MEASURE<=NUMBER`` or ``MEASURE>=NUMBER`` (the last comparison bounds).

    Raises
    ------
    ValueError
        Naming the option, what is wrong, and the valid forms.
    """
    found = list(_COMPARISON.finditer(text))
    if not found:
        raise ValueError(
            f"{option} must be a measure and a bound, got {text!r}; valid: {CONSTRAINT_FORMS}"
        )
    last = found[-1]
    left, right = text[: last.start()].strip(), text[last.end() :].strip()
    if not left:
        raise ValueError(f"{option} {text!r} names no measure; valid: {CONSTRAINT_FORMS}")
    bound = _number(f"{option} {text!r}", right, "the bound", CONSTRAINT_FORMS)
    kind = left.partition(":")[0].strip()
    if kind in ("time", "energy") and not _COMPARISON.search(left):
        raise ValueError(
            f"{option} {text!r}: a bound on the {kind} to a target names the target, then the "
            f"bound: {kind}:METRIC<=X<=BOUND, e.g. {kind}:distance<=1e-3<=500"
        )
    measure = parse_measure(left, option=option)
    try:
        if last.group().startswith("<"):
            return Constraint(measure, at_most=bound)
        return Constraint(measure, at_least=bound)
    except ValueError as exc:
        raise ValueError(f"{option} {text!r}: {exc}") from None
