"""Stable fingerprints of scenarios: equal scenarios give equal hashes on every machine.

``repr`` is not enough: a fleet's repr summarises its columns and numpy abbreviates long arrays,
so two different fleets can print alike. :func:`canonical` walks the object instead and writes
every value that defines it (dataclass fields that take part in ``==``, slots, attributes, the
bytes of numpy arrays, the code of functions) as JSON-able data; :func:`fingerprint` is the
SHA-256 of that JSON. Nothing in it depends on memory addresses, hash seeds or the process.

>>> from simfl import dists
>>> fingerprint(dists.Exponential(1.0)) == fingerprint(dists.Exponential(1.0))
True
>>> fingerprint(dists.Exponential(1.0)) == fingerprint(dists.Exponential(2.0))
False
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import inspect
import json
import re
import types
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["canonical", "defining_fields", "fingerprint"]

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


# Classes and functions are named as they were when fingerprints were first recorded, so that
# moving a module or renaming a class keeps every fingerprint (and so the run ids of stores).
_FORMER_MODULES = {
    "simfl.fleet.availability": "simfl.availability",
    "simfl.fleet.devices": "simfl.fleet",
    "simfl.fleet.traces": "simfl.traces",
    "simfl.neural.datasets": "simfl.neural.data",
    "simfl.neural.objective": "simfl.neural.module",
    "simfl.neural.own_data": "simfl.neural.data",
    "simfl.network.flows": "simfl.flows",
    "simfl.network.payload": "simfl.network",
    "simfl.network.topology": "simfl.topology",
}
_FORMER_NAMES = {
    "simfl.neural.algorithms.NeuralFedAvg": "simfl.neural.algorithms.FedAvg",
    "simfl.neural.algorithms.NeuralFedRep": "simfl.neural.algorithms.FedRep",
    "simfl.neural.algorithms.NeuralLocalOnly": "simfl.neural.algorithms.LocalOnly",
    "simfl.neural.models.Net": "simfl.neural.models.Network",
    "simfl.neural.optim.SGD": "simfl.neural.train.SGD",
    "simfl.neural.partition.LogNormalSizes": "simfl.neural.partition.LogNormal",
}


#: In :data:`_ADDED_FIELDS`: the field's own dataclass default (for defaults that need torch).
FIELD_DEFAULT = object()

# Dataclass fields added after fingerprints were first recorded, left out while they hold
# their default (given here), so that the objects that existed before keep their fingerprints.
_ADDED_FIELDS: dict[str, dict[str, Any]] = {
    "simfl.fleet.Fleet": {"labels": None, "energy": None},
    "simfl.fleet.Profile": {"energy": None},
    "simfl.neural.task.ImageClassification": {
        "device": "cpu",
        "threads": 1,
        "objective": FIELD_DEFAULT,
        "augment": None,
    },
    "simfl.neural.models.CNN": {"padding": (0, 0), "conv_kernel": "onednn"},
    "simfl.neural.train.SGD": {"state": "reset"},
    "simfl.scenario.Scenario": {"server": None},
}
# The same for fields added to a base class: left out, at their default, of the fingerprint of
# every class that derives from it (``server_optimizer`` of every neural algorithm).
_ADDED_BASE_FIELDS: dict[str, dict[str, Any]] = {
    "simfl.neural.base.NeuralAlgorithm": {"server_optimizer": None},
}


def _is_default(value: Any, default: Any) -> bool:
    """Whether an added field holds its default (same type and equal, or both ``None``)."""
    return value is default or (type(value) is type(default) and value == default)


def _qualified(module: str, qualname: str) -> str:
    """``module.qualname`` under the names of the first fingerprints (see above)."""
    module = _FORMER_MODULES.get(module, module)
    owner, dot, rest = qualname.partition(".")
    owner = _FORMER_NAMES.get(f"{module}.{owner}", f"{module}.{owner}")
    return owner + dot + rest


def _name(obj: Any) -> str:
    cls = obj if isinstance(obj, type) else type(obj)
    return _qualified(cls.__module__, cls.__qualname__)


def _function(fn: types.FunctionType, seen: set[int]) -> Any:
    code = fn.__code__
    cells = [c.cell_contents for c in fn.__closure__ or ()]
    return {
        "function": _qualified(fn.__module__, fn.__qualname__),
        "code": hashlib.sha256(code.co_code).hexdigest(),
        "consts": _walk(
            tuple(c for c in code.co_consts if not isinstance(c, types.CodeType)), seen
        ),
        "names": list(code.co_names),
        "defaults": _walk(fn.__defaults__, seen),
        "kwdefaults": _walk(fn.__kwdefaults__, seen),
        "closure": _walk(cells, seen),
    }


def _attributes(obj: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(obj):
        added = dict(_ADDED_FIELDS.get(_name(obj), {}))
        for cls in inspect.getmro(type(obj))[1:]:
            added.update(_ADDED_BASE_FIELDS.get(_name(cls), {}))
        return {
            f.name: getattr(obj, f.name)
            for f in dataclasses.fields(obj)
            if f.compare
            and not (
                f.name in added
                and _is_default(
                    getattr(obj, f.name),
                    f.default if added[f.name] is FIELD_DEFAULT else added[f.name],
                )
            )
        }
    out: dict[str, Any] = {}
    for cls in type(obj).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for slot in (slots,) if isinstance(slots, str) else slots:
            if slot not in ("__dict__", "__weakref__") and hasattr(obj, slot):
                out[slot] = getattr(obj, slot)
    # dunder attributes are caches and bookkeeping (networkx's __networkx_cache__), not values
    out.update({k: v for k, v in getattr(obj, "__dict__", {}).items() if not k.startswith("__")})
    return out


def defining_fields(obj: Any) -> dict[str, Any]:
    """The fields of the dataclass instance ``obj`` that its fingerprint is made of.

    Its fields that take part in ``==``, less those added after the first fingerprints that
    hold their default (``Scenario.server`` at ``None``, for example), so that objects that
    existed before keep their fingerprints.
    """
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        raise TypeError(f"defining_fields needs a dataclass instance, got {obj!r}")
    return _attributes(obj)


def _walk(obj: Any, seen: set[int]) -> Any:
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, enum.Enum):
        return {"enum": _name(obj), "value": obj.name}
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return {"float": float(obj).hex()}
    if isinstance(obj, complex):
        return {"complex": [obj.real.hex(), obj.imag.hex()]}
    if isinstance(obj, bytes):
        return {"bytes": hashlib.sha256(obj).hexdigest()}
    if isinstance(obj, np.ndarray):
        if obj.dtype.hasobject:
            return {"array": obj.dtype.str, "shape": obj.shape, "items": _walk(obj.tolist(), seen)}
        data = np.ascontiguousarray(obj).tobytes()
        return {
            "array": obj.dtype.str,
            "shape": obj.shape,
            "sha256": hashlib.sha256(data).hexdigest(),
        }
    if isinstance(obj, type):
        return {"class": _name(obj)}
    if isinstance(obj, types.FunctionType):
        return _function(obj, seen)
    if isinstance(obj, (types.BuiltinFunctionType, types.ModuleType)):
        return {"ref": f"{getattr(obj, '__module__', None)}.{obj.__name__}"}
    if id(obj) in seen:
        raise ValueError(f"cannot fingerprint a self-referencing object: {_name(obj)}")
    seen = seen | {id(obj)}
    if isinstance(obj, (list, tuple)):
        return {type(obj).__name__: [_walk(v, seen) for v in obj]}
    if isinstance(obj, (set, frozenset)):
        items = [_walk(v, seen) for v in obj]
        return {"set": sorted(items, key=lambda v: json.dumps(v, sort_keys=True))}
    if isinstance(obj, Mapping):
        pairs = [[_walk(k, seen), _walk(v, seen)] for k, v in obj.items()]
        return {"map": sorted(pairs, key=lambda p: json.dumps(p[0], sort_keys=True))}
    if isinstance(obj, types.MethodType):
        return {"method": obj.__func__.__qualname__, "self": _walk(obj.__self__, seen)}
    attributes = _attributes(obj)
    if attributes or dataclasses.is_dataclass(obj) or hasattr(obj, "__slots__"):
        return {"object": _name(obj), "fields": {k: _walk(v, seen) for k, v in attributes.items()}}
    text = repr(obj)
    if _ADDRESS.search(text):
        raise ValueError(
            f"cannot fingerprint {_name(obj)}: it has no fields, slots or attributes and its "
            f"repr holds a memory address ({text}); make it a dataclass"
        )
    return {"repr": _name(obj), "text": text}


def canonical(obj: Any) -> str:
    """A JSON text that identifies ``obj`` by value (see the module docstring).

    Raises
    ------
    ValueError
        If ``obj`` contains a reference cycle or an opaque object whose repr is a memory address.
    """
    return json.dumps(_walk(obj, set()), sort_keys=True, separators=(",", ":"))


def fingerprint(obj: Any) -> str:
    """SHA-256 (hex) of :func:`canonical`: equal for equal scenarios, on every machine."""
    return hashlib.sha256(canonical(obj).encode()).hexdigest()
