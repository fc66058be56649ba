"""Every constructor refuses a bad field by name, accepts good values, and never hangs.

Starting from valid defaults, one field at a time gets a wrong or out-of-range value: a string,
bytes, a bool (``np.bool_`` too), ``None``, a list, a dict, NaN, +-inf, an integer beyond 64 bits
or the float range, a negative number, a numpy scalar, a foreign object... The constructor
must either refuse it with a ``ValueError`` or ``TypeError`` whose message names the field, or
accept it, and then only if the value has the field's annotated type (a bool is not a number,
an ``int`` field fits in 64 bits, a number is never NaN or ``-inf``). Nothing else may escape,
and each construction runs under a timer, so a hang fails instead of blocking the suite.

The constructors are discovered: every exported distribution, task, policy and algorithm, and
with torch every exported dataclass of ``simfl.neural`` (algorithms, data sources, partitions,
models, the image task), plus the fleets and their factories, profiles, availabilities and their
generators, networks, servers, targets and scenarios. Their fields come from
``dataclasses.fields`` (or the signature of a hand-written ``__init__`` or factory), so a new
field or class is fuzzed without touching this file: a new class whose fields have no defaults
needs an entry in ``REQUIRED``, and a field whose annotation these rules cannot check one in
``EXEMPT``.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import math
import numbers
import signal
import types
import typing
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.typing import ArrayLike

from simfl import Fleet, Profile, Scenario, Server, Target, algorithms, dists, policies, tasks
from simfl._checks import INT64_MAX
from simfl.algorithms.base import Algorithm
from simfl.fleet import Availability
from simfl.network import Network
from simfl.policies.base import Policy

TORCH = importlib.util.find_spec("torch") is not None
E1 = dists.Exponential(1.0)
PROFILE = Profile(E1)
FLEET = Fleet.homogeneous(4, E1)


# ----------------------------------------------------------------- what is fuzzed
def _fleet_tier(
    count: int = 3, profile: Profile = PROFILE, redraw: str = "round", seed: int = 0
) -> Fleet:
    """``Fleet.tiers`` with one ``(count, profile)`` tier (its varargs, as named fields)."""
    return Fleet.tiers((count, profile), redraw=redraw, seed=seed)


def _fleet_tiers(tiers: tuple[tuple[int, Profile], ...] = ((3, PROFILE),)) -> Fleet:
    """``Fleet.tiers(*tiers)``: the tiers as one field."""
    return Fleet.tiers(*tiers) if isinstance(tiers, (list, tuple)) else Fleet.tiers(tiers)


def _mixture_component(weight: float = 1.0, profile: Profile = PROFILE) -> Fleet:
    """``Fleet.mixture`` with one ``(weight, profile)`` component."""
    return Fleet.mixture(3, [(weight, profile)])


#: Valid values of the fields without defaults (every other field starts at its default).
REQUIRED: dict[Callable[..., Any], dict[str, Any]] = {
    dists.Constant: {"value": 1.0},
    dists.Exponential: {"mean": 1.0},
    dists.ShiftedExponential: {"shift": 0.5, "scale": 1.0},
    dists.LogNormal: {"mu": 0.0, "sigma": 1.0},
    dists.LogNormal.from_mean_std: {"mean": 1.0, "std": 1.0},
    dists.Pareto: {"shape": 2.5, "scale": 1.0},
    dists.Uniform: {"low": 1.0, "high": 2.0},
    dists.Empirical: {"samples": [1.0, 2.0]},
    Profile: {"compute": E1},
    Fleet: {"compute": [E1], "group": [0, 0, 0]},
    Fleet.homogeneous: {"n": 3, "compute": E1},
    Fleet.mixture: {"n": 3, "components": [(1.0, PROFILE)]},
    Target: {"metric": "loss", "below": 1.0},
    Availability: {"intervals": [[(0.0, 5.0)], [(1.0, math.inf)]]},
    Availability.always: {"n": 3},
    Availability.exponential: {"n": 3, "mean_on": 1.0, "mean_off": 1.0, "horizon": 10.0},
    Availability.diurnal: {
        "n": 3,
        "mean_on": 1.0,
        "low": 0.2,
        "high": 0.8,
        "horizon": 10.0,
        "period": 10.0,
    },
    Availability.churn: {"n": 3, "lifetime": E1},
    Network.hierarchical: {"groups": [0, 0, 1]},
    tasks.ClientArrays: {
        "clients": [(np.zeros((2, 3)), np.array([0, 1]))],
        "test": (np.zeros((2, 3)), np.array([0, 1])),
    },
    policies.Deadline: {"seconds": 1.0},
    policies.FastestK: {"k": 2},
    policies.FedCS: {"seconds": 1.0},
    Scenario: {
        "task": None,
        "algorithm": algorithms.TimingOnly(),
        "fleet": FLEET,
        "policy": policies.WaitAll(),
        "rounds": 3,
    },
}

#: Fields that accept more than their annotation says, with the reason.
EXEMPT: dict[tuple[str, str], str] = {}
#: Exported classes that are not constructed by users, with the reason.
NOT_CONSTRUCTORS = {
    "Dataset": "simfl.neural.Dataset holds loaded arrays; the data sources build it",
    "NeuralState": "an algorithm's state, built by the algorithm",
    "ModuleNet": "a model bound to its data, built by the task",
    "ClientData": "a task bound to a fleet, built by the task",
    "ClientImages": "the former name of ClientData",
    "BaselineState": "a baseline algorithm's state, built by the algorithm",
    "Phase": "a training phase, built by the algorithms from their own checked fields",
}
#: Constructors fuzzed with the special values only, with the reason.
SPECIAL_ONLY = {
    "Availability.exponential": "a valid horizon near the period cap draws a million periods "
    "(a minute of host time: bounded, but too slow for random examples)",
    "Availability.diurnal": "as Availability.exponential",
}


def _exported(module: types.ModuleType, base: type) -> list[type]:
    """The concrete dataclasses of ``module.__all__`` that subclass ``base``."""
    found = [getattr(module, name) for name in module.__all__]
    return [
        c
        for c in found
        if isinstance(c, type)
        and issubclass(c, base)
        and dataclasses.is_dataclass(c)
        and not inspect.isabstract(c)
    ]


def _constructors() -> dict[str, Callable[..., Any]]:
    makes: list[Callable[..., Any]] = [
        *_exported(dists, dists.Dist),
        dists.LogNormal.from_mean_std,
        Profile,
        Fleet,
        Fleet.homogeneous,
        Fleet.mixture,
        _fleet_tier,
        _fleet_tiers,
        _mixture_component,
        Target,
        Scenario,
        Availability,
        Availability.always,
        Availability.exponential,
        Availability.diurnal,
        Availability.churn,
        Network.star,
        Network.hierarchical,
        Server,
        *_exported(tasks, tasks.Task),
        *_exported(policies, Policy),
        policies.Plateau,
        *_exported(algorithms, Algorithm),
    ]
    if TORCH:  # every exported dataclass: algorithms, data sources, partitions, models, task
        from simfl import neural

        missing = "/nonexistent/data"  # sources load lazily: a directory is only a name here
        REQUIRED.update({c: {"path": missing} for c in (neural.CIFAR10, neural.CIFAR100)})
        REQUIRED[neural.FEMNIST] = {"path": missing}
        REQUIRED[neural.Model] = {"factory": torch_module_factory()}
        REQUIRED[neural.Supervised] = {"dataset": neural.Digits(), "model": neural.MLP((4, 4))}
        EXEMPT[("Supervised", "model")] = "a module factory, Model or MLP/CNN (as_model checks)"
        EXEMPT[("ImageClassification", "model")] = EXEMPT[("Supervised", "model")]
        REQUIRED[neural.Shakespeare] = {"path": missing}
        pairs = {"x_train": np.zeros((4, 2)), "y_train": np.array([0, 1, 0, 1])}
        REQUIRED[neural.Tensors] = pairs
        REQUIRED[neural.FromDataset] = {"train": [(np.zeros(2), 0), (np.ones(2), 1)] * 2}
        found = _exported(neural, object)
        makes += [c for c in found if c.__name__ not in NOT_CONSTRUCTORS]
    named = {getattr(m, "__qualname__", repr(m)): m for m in makes}
    assert len(named) == len(makes), "two constructors share a name"
    return named


def torch_module_factory() -> Callable[[], Any]:
    """A zero-argument factory of a tiny ``torch.nn.Module``."""
    import functools

    from torch import nn

    return functools.partial(nn.Linear, 2, 2)


CONSTRUCTORS = _constructors()


def fields_of(make: Callable[..., Any]) -> list[str]:
    """The fields a constructor takes: its dataclass fields, or its signature's parameters.

    A dataclass with a hand-written ``__init__`` (``Exponential(mean)`` stores ``_mean``) or a
    factory method is described by its signature.
    """
    params = inspect.signature(make).parameters.values()
    names = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if isinstance(make, type) and dataclasses.is_dataclass(make):
        init_fields = [f.name for f in dataclasses.fields(make) if f.init]
        if init_fields == names:
            return init_fields
    return names


def hints_of(make: Callable[..., Any]) -> dict[str, Any]:
    """The annotated type of each field (of the ``__init__`` of a class, or of a factory)."""
    return typing.get_type_hints(make.__init__ if isinstance(make, type) else make)


def defaults_of(make: Callable[..., Any]) -> dict[str, Any]:
    """Valid keyword arguments: ``REQUIRED``'s, the rest left at their defaults."""
    return dict(REQUIRED.get(make, {}))


CASES = [(name, field) for name, make in CONSTRUCTORS.items() for field in fields_of(make)]


# ----------------------------------------------------------------- the values
class Opaque:
    """An object of no type simfl knows."""

    def __repr__(self) -> str:
        return "<opaque>"


#: Words some fields take (``"size"``, ``"stage"``, ...): the string defaults of every
#: constructor, so that choices and their combinations are reached too.
WORDS = sorted(
    {
        p.default
        for make in CONSTRUCTORS.values()
        for p in inspect.signature(make).parameters.values()
        if isinstance(p.default, str)
    }
    | {"size", "wa", "gd", "code", "average", "pause", "random", "zero", "train_loss"}
)
SPECIAL: list[Any] = [
    None,
    True,
    False,
    np.bool_(True),
    np.bool_(False),
    math.nan,
    math.inf,
    -math.inf,
    0,
    -1,
    1,
    2,
    -0.0,
    0.5,
    1.5,
    -2.5,
    1e-300,
    5e-324,
    1e300,
    1e308,
    -1e308,
    2**31,
    2**53 + 1,
    INT64_MAX,
    2**63,
    2**64,
    10**400,
    -(10**400),
    np.int64(-3),
    np.int64(3),
    np.int64(2**62),
    np.uint64(2**64 - 1),
    np.int8(1),
    np.float64(math.nan),
    np.float64(math.inf),
    np.float64(-1.0),
    np.float32(2.5),
    np.float16(0.5),
    "",
    "x",
    "5",
    "nan",
    b"5",
    [],
    [1, 2],
    [1, 2, 3],
    [[1, 2]],
    ["a", "b"],
    [True, False],
    [math.nan],
    (1,),
    (3, "x"),
    (3, PROFILE),
    ((3, PROFILE),),
    {},
    {"a": 1},
    set(),
    complex(1, 1),
    np.array([1.0, 2.0]),
    np.array(["a"]),
    np.array([True]),
    np.array(3),
    np.zeros((2, 2)),
    Opaque(),
    object,
    len,
    range(3),
    E1,
    PROFILE,
    FLEET,
    policies.WaitAll(),
    policies.Plateau(),
    algorithms.TimingOnly(),
    Target("loss", below=1.0),
]
VALUES = st.one_of(
    st.sampled_from(SPECIAL),
    st.sampled_from(WORDS),
    # small integers, and huge ones from SPECIAL: a valid count of a million devices is
    # legitimately slow to build, so the medium range is left out
    st.integers(-1000, 1000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.integers(-1000, 1000).map(np.int64),
    st.floats(allow_nan=True, allow_infinity=True).map(np.float64),
    st.lists(
        st.one_of(st.integers(-3, 3), st.floats(-1e3, 1e3), st.booleans(), st.text(max_size=2)),
        max_size=4,
    ),
    st.tuples(st.integers(-3, 3), st.sampled_from([PROFILE, E1, "x", None, 1.0])),
)


# ----------------------------------------------------------------- the rules
class HangError(Exception):
    """A construction ran past its time limit."""


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`HangError` in the main thread if the block runs longer than ``seconds``."""

    def alarm(signum: int, frame: Any) -> None:
        raise HangError(f"construction still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


_ARRAY_LIKE = set(typing.get_args(ArrayLike))


def _numeric_array(value: Any) -> bool:
    """A number or an array of numbers (int or float kinds, never bool, str or objects)."""
    try:
        return np.asarray(value).dtype.kind in "iuf"
    except (ValueError, TypeError):
        return False


def conforms(value: Any, hint: Any) -> bool:
    """Whether ``value`` has the annotated type ``hint`` under simfl's rules (``_checks``)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        if set(args) >= _ARRAY_LIKE:  # numpy's ArrayLike, maybe with other members
            rest = [h for h in args if h not in _ARRAY_LIKE]
            return _numeric_array(value) or any(conforms(value, h) for h in rest)
        return any(conforms(value, h) for h in args)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, (bool, np.bool_))
    if isinstance(value, (bool, np.bool_)):
        return False  # a bool is not a number, a string or anything else
    if hint is int:
        return isinstance(value, numbers.Integral) and -INT64_MAX - 1 <= int(value) <= INT64_MAX
    if hint is float:
        if not isinstance(value, numbers.Real):
            return False
        x = value  # an integer beyond the float range counts as infinite
        if isinstance(value, int) and abs(value) >= 2**1000:
            x = math.inf if value > 0 else -math.inf
        return not (math.isnan(x) or x == -math.inf)
    if hint is str:
        return isinstance(value, str)
    if origin is tuple:
        if not isinstance(value, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(conforms(v, args[0]) for v in value)
        return len(args) == len(value) and all(map(conforms, value, args))
    if origin is not None and isinstance(origin, type):
        if not isinstance(value, origin) or isinstance(value, (str, bytes)):
            return False
        if issubclass(origin, Sequence) and args:
            return all(conforms(v, args[0]) for v in value)
        return True
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True  # a hint these rules do not describe


def described(hint: Any) -> bool:
    """Whether :func:`conforms` fully describes ``hint`` (``Any`` and unknown forms it does not)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return False
    if origin in (typing.Union, types.UnionType):
        return all(described(h) for h in args if h not in _ARRAY_LIKE)
    if hint in (type(None), bool, int, float, str):
        return True
    if origin is not None:  # the items of tuples and sequences are checked, other parameters not
        if not isinstance(origin, type):
            return False
        checked = origin is tuple or issubclass(origin, Sequence)
        return not checked or all(described(h) for h in args if h is not Ellipsis)
    return isinstance(hint, type)


def check_one(name: str, field: str, value: Any) -> None:
    """Build ``name`` with ``field=value``: refused by name, or accepted as typed (the rules)."""
    make = CONSTRUCTORS[name]
    kwargs = {**defaults_of(make), field: value}
    try:
        with time_limit(5.0):
            make(**kwargs)
    except (ValueError, TypeError) as exc:
        assert field in str(exc), f"{name}({field}={value!r}) refused without naming {field}: {exc}"
        return
    if (name, field) in EXEMPT:
        return
    hint = hints_of(make).get(field, Any)
    assert conforms(value, hint), f"{name} accepted {field}={value!r}, not a {hint}"


# ----------------------------------------------------------------- the tests
def test_every_constructor_is_fuzzed_and_builds_from_its_defaults():
    names = set(CONSTRUCTORS)
    for expected in ("WaitAll", "Deadline", "FastestK", "AdaptiveDeadline", "SRPFL", "Plateau"):
        assert expected in names
    for expected in ("FedAsync", "FedBuff", "EdgeAggregation", "FedRep", "FedAvg", "TimingOnly"):
        assert expected in names
    assert {"Exponential", "Empirical", "Uniform", "Fleet", "Profile", "Scenario"} <= names
    for make in CONSTRUCTORS.values():
        make(**defaults_of(make))  # a new class without defaults needs an entry in REQUIRED
    assert len(CASES) > 150


def test_every_field_has_a_type_the_rules_describe_or_an_exemption():
    hints = {(n, f): hints_of(CONSTRUCTORS[n]).get(f, Any) for n, f in CASES}
    undescribed = {case: h for case, h in hints.items() if not described(h)}
    assert set(undescribed) == set(EXEMPT), undescribed


@pytest.mark.skipif(not TORCH, reason="torch is not installed: simfl.neural is not fuzzed")
def test_the_neural_constructors_are_fuzzed_too():
    neural = {"NeuralFedAvg", "FedPer", "LGFedAvg", "SGD", "ImageClassification", "Shards", "MLP"}
    assert neural <= set(CONSTRUCTORS)


@pytest.mark.parametrize(("name", "field"), CASES, ids=[f"{n}.{f}" for n, f in CASES])
def test_special_values_are_refused_by_name_or_accepted_as_typed(name, field):
    for value in SPECIAL:
        check_one(name, field, value)


RANDOM = sorted(n for n, m in CONSTRUCTORS.items() if n not in SPECIAL_ONLY and fields_of(m))


@pytest.mark.parametrize("name", RANDOM)
@settings(
    max_examples=30,
    deadline=None,
    derandomize=True,  # the same examples on every machine
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_random_values_are_refused_by_name_or_accepted_as_typed(name, data):
    field = data.draw(st.sampled_from(fields_of(CONSTRUCTORS[name])), label="field")
    check_one(name, field, data.draw(VALUES, label="value"))


def _twins(value: Any, hint: Any) -> list[Any]:
    """Other spellings of a valid value: numpy scalars, an int for an integral float."""
    if isinstance(value, bool):
        return [np.bool_(value)]
    if isinstance(value, int):
        return [np.int64(value), np.int32(value)] if abs(value) < 2**31 else [np.int64(value)]
    if isinstance(value, float):
        out: list[Any] = [np.float64(value)]
        if value.is_integer() and abs(value) < 2**53:
            out.append(int(value))
        return out
    if value is None:  # an optional number: 1 of its type
        args = set(typing.get_args(hint))
        if int in args:
            return [1, np.int64(1)]
        if float in args:
            return [1.0, np.float64(1.0), 1]
    return []


#: Valid values beyond the defaults and their twins.
VALID: dict[tuple[str, str], list[Any]] = {
    ("WaitAll", "weights"): ["size"],
    ("SRPFL", "stage_rule"): [policies.Plateau()],
    ("SRPFL", "resample"): ["round"],
    ("Fleet", "scale"): [np.array([1, 2, 3], dtype=np.int32), np.float32(2.0), dists.Uniform(1, 2)],
    ("Fleet", "latency"): [[0.1, 0.2, 0.3], (0, 1, 2)],
    ("Fleet", "group"): [np.zeros(3, dtype=np.uint8), (0, 0)],
    ("Fleet", "group_names"): [["fast"], ("fast",)],
    ("Profile", "name"): ["fast"],
    ("Empirical", "samples"): [np.array([1, 2], dtype=np.int16), 3.0, [[1.0], [2.0]]],
    ("Scenario", "max_time"): [10.0, np.float64(10.0)],
    ("Scenario", "seed"): [np.uint64(7)],
    ("ClientArrays", "n_classes"): [2, np.int64(3)],
    ("Tensors", "n_classes"): [2, np.int64(3)],
    ("FromDataset", "n_classes"): [2, np.int64(3)],
}
#: Fields whose automatic twins are not valid on their own (another field must change too).
NOT_ALONE = {
    ("Target", "above"): "a target takes exactly one of below= and above=",
    ("ClientArrays", "n_classes"): "at least 2 classes",
    ("Tensors", "n_classes"): "more classes than the largest label (1)",
    ("FromDataset", "n_classes"): "more classes than the largest label (1)",
}


@pytest.mark.parametrize(("name", "field"), CASES, ids=[f"{n}.{f}" for n, f in CASES])
def test_valid_values_are_accepted(name, field):
    make = CONSTRUCTORS[name]
    base = defaults_of(make)
    signature = inspect.signature(make).parameters
    default = base.get(field, signature[field].default if field in signature else None)
    if default is inspect.Parameter.empty:
        default = None
    hint = hints_of(make).get(field, Any)
    values = [*_twins(default, hint), *VALID.get((name, field), [])]
    if (name, field) in NOT_ALONE:
        values = VALID.get((name, field), [])
    for value in values:
        with time_limit(5.0):
            make(**{**base, field: value})
