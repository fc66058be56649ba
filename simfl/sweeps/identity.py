"""The code behind a run: digests of simfl's sources and of the user code a scenario reaches.

A run's values are identified by :func:`~simfl.sweeps.fingerprint.fingerprint`; the code that
computes them by :func:`code_parts`, a dict ``{name: SHA-256}`` with one entry per piece:

* ``simfl``: simfl's own installed ``.py`` sources (sorted relative paths and bytes), computed
  once per process (:func:`simfl_digest`). A version string or a git revision would not do: an
  edited checkout keeps its version, and a store's folder need not be a git checkout.
* one entry per user-defined function and method the scenario reaches: ``PickK.plan``,
  ``Net.__init__``, ``helper``, ``<lambda> in scenario.py``; and one per user-defined class
  (``PickK``: its bases and its attributes other than functions). User-defined means defined
  outside simfl, the standard library and installed packages (``site-packages``,
  ``dist-packages``): a scenario file, a module beside it, a notebook (``__main__``), a test.

What is reached: every value of the scenario (dataclass fields, slots, attributes of simfl and
user objects, containers, ``functools.partial``, bound methods), every class of those values
and class given as a value, with its user-defined bases and all its methods, properties,
classmethods and staticmethods; from each function, its code object with the code objects
nested in it (generator expressions, comprehensions, inner functions), its defaults and closure
cells, and the globals its code names (through ``__globals__``): user functions and classes
are walked in turn (each once), other globals enter the function's digest by value (numbers,
strings, arrays: :func:`~simfl.sweeps.fingerprint.canonical`) or, for stdlib and third-party
functions, classes and modules, by name; an attribute read from a user module (``cfg.WIDTH``)
counts as a global of that module.

A function's digest covers its bytecode, constants, names and argument layout, not its file,
line numbers or position, so moving a function or adding a blank line above it changes
nothing, while any edit of what it computes does (a docstring edit counts too, and so does
another Python minor version, whose bytecode differs). Nothing depends on memory addresses,
hash seeds or the process: identical code gives identical digests everywhere.

Why not a library: joblib's ``Memory`` (``func_inspect.get_func_code``) hashes a function's
source text, which does not reach the helpers and globals a function reads (nor the nested
code of a lambda written on a line with others); cloudpickle pickles user code by value only
when its module cannot be imported (a helper in an importable module travels by name) and its
bytes hold file names and line numbers. Both inspire the walk, neither gives the identity.

>>> old = {"simfl": "5e1f...", "PickK.plan": "a0c3...", "helper": "77d2..."}
>>> new = {"simfl": "5e1f...", "PickK.plan": "9b41...", "helper": "77d2..."}
>>> changed_parts(old, new)
['PickK.plan']
>>> code_digest(old) == code_digest(dict(reversed(old.items()))) != code_digest(new)
True
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import sys
import sysconfig
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from simfl.sweeps.fingerprint import canonical

__all__ = ["changed_parts", "code_digest", "code_parts", "simfl_digest", "source_digest"]

#: Name of the part that stands for simfl's own sources.
SIMFL = "simfl"
_SIMFL_ROOT = Path(__file__).resolve().parents[1]  # the simfl package
_THIRD_PARTY = ("site-packages", "dist-packages")
#: Types whose values hold no code (their subclasses may).
_PLAIN = frozenset({type(None), bool, int, float, complex, str, bytes})


def source_digest(root: str | Path) -> str:
    """SHA-256 (hex) of the ``.py`` files under ``root``: their sorted relative paths and bytes."""
    folder = Path(root)
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*.py"), key=lambda p: p.relative_to(folder).as_posix()):
        data = path.read_bytes()
        name = path.relative_to(folder).as_posix().encode()
        digest.update(b"%d:%s\0%d:" % (len(name), name, len(data)))
        digest.update(data)
    return digest.hexdigest()


@functools.cache
def _simfl_digest() -> str:
    return source_digest(_SIMFL_ROOT)


def simfl_digest() -> str:
    """SHA-256 of simfl's installed sources (:func:`source_digest`), once per process."""
    return _simfl_digest()


def code_digest(parts: Mapping[str, str]) -> str:
    """SHA-256 (hex) of a run's code parts (see :func:`code_parts`)."""
    text = json.dumps(dict(sorted(parts.items())), separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def changed_parts(old: Mapping[str, str], new: Mapping[str, str]) -> list[str]:
    """The names of the parts that differ between two :func:`code_parts` (added, removed too)."""
    return sorted(k for k in {*old, *new} if old.get(k) != new.get(k))


def code_parts(obj: Any) -> dict[str, str]:
    """``{name: SHA-256}`` of simfl's sources and of every user code piece ``obj`` reaches.

    Never raises: a value that cannot be rendered enters by its type's name.
    """
    walker = _Walker()
    walker.value(obj)
    return {SIMFL: simfl_digest(), **walker.parts()}


# ------------------------------------------------------------------------ what is user code
@functools.lru_cache(maxsize=4096)
def _file_is_user(filename: str) -> bool:
    """Whether code of this file is the user's (not simfl, the stdlib or a package)."""
    if filename.startswith("<"):  # <string>, <stdin>, a notebook cell, a doctest
        return True
    path = Path(filename).resolve()
    if any(part in _THIRD_PARTY for part in path.parts):
        return False
    return not any(path.is_relative_to(root) for root in _closed_roots())


@functools.cache
def _closed_roots() -> tuple[Path, ...]:
    """Folders whose code is not the user's: simfl's and the standard library's."""
    paths = sysconfig.get_paths()
    stdlib = {Path(paths[k]).resolve() for k in ("stdlib", "platstdlib") if k in paths}
    return (_SIMFL_ROOT, *sorted(stdlib))


def _module_is_user(name: str) -> bool:
    if name == "simfl" or name.startswith("simfl."):
        return False
    module = sys.modules.get(name)
    if module is None:  # a scenario file loaded by simfl's CLI (it is not registered)
        return name != "builtins"
    filename = getattr(module, "__file__", None)
    return filename is not None and _file_is_user(filename)


def _module_of(obj: Any) -> str:
    name = getattr(obj, "__module__", None)
    return name if isinstance(name, str) else ""


def _is_simfl(obj: Any) -> bool:
    module = _module_of(obj)
    return module == "simfl" or module.startswith("simfl.")


def _is_user_function(fn: types.FunctionType) -> bool:
    return not _is_simfl(fn) and _file_is_user(fn.__code__.co_filename)


def _is_user_class(cls: type) -> bool:
    return _module_is_user(_module_of(cls))


def _short_file(filename: str) -> str:
    return filename if filename.startswith("<") else Path(filename).name


# ------------------------------------------------------------------------------- the walk
class _Walker:
    """Collects the digests of the user code reachable from values (each piece once)."""

    def __init__(self) -> None:
        self._pieces: dict[str, set[str]] = {}
        self._seen: set[int] = set()
        self._alive: list[Any] = []  # keeps walked objects alive, so that no id is reused

    def _first(self, obj: Any) -> bool:
        if id(obj) in self._seen:
            return False
        self._seen.add(id(obj))
        self._alive.append(obj)
        return True

    def _add(self, name: str, structure: Any) -> None:
        digest = hashlib.sha256(
            json.dumps(structure, sort_keys=True, separators=(",", ":")).encode()
        ).hexdigest()
        self._pieces.setdefault(name, set()).add(digest)

    def parts(self) -> dict[str, str]:
        """``{name: digest}`` of the pieces walked.

        Pieces that share a name (two lambdas of one file) get `` (2)``, `` (3)``, ... in the
        order of their digests, so that names do not depend on the order of the walk (the
        order of a set).
        """
        out = {}
        for name, digests in sorted(self._pieces.items()):
            for n, digest in enumerate(sorted(digests), start=1):
                out[name if n == 1 else f"{name} ({n})"] = digest
        return out

    # values --------------------------------------------------------------------------
    def value(self, obj: Any) -> None:
        """Walk a value: find the user classes and functions it holds."""
        if type(obj) in _PLAIN or isinstance(obj, np.generic):
            return
        if isinstance(obj, np.ndarray):
            if obj.dtype.hasobject and self._first(obj):
                for item in obj.flat:
                    self.value(item)
            return
        if isinstance(obj, type):
            self.klass(obj)
            return
        if isinstance(obj, types.FunctionType):
            self.function(obj)
            return
        if not self._first(obj):
            return
        cls = type(obj)
        if _is_user_class(cls):  # an int or a dict subclass too
            self.klass(cls)
        if isinstance(obj, types.MethodType):
            self.value(obj.__func__)
            self.value(obj.__self__)
        elif isinstance(obj, functools.partial):
            self.value(obj.func)
            self.value(obj.args)
            self.value(obj.keywords)
        elif isinstance(obj, (list, tuple, set, frozenset)):
            for item in obj:
                self.value(item)
        elif isinstance(obj, dict):
            for k, v in obj.items():
                self.value(k)
                self.value(v)
        elif isinstance(obj, (types.ModuleType, types.BuiltinFunctionType)):
            return
        elif _is_user_class(cls) or _is_simfl(cls):
            for item in _attributes(obj):
                self.value(item)

    # classes -------------------------------------------------------------------------
    def klass(self, cls: type) -> None:
        """Walk a class: its digest, and its methods', if it is the user's."""
        if not _is_user_class(cls) or not self._first(cls):
            return
        own: dict[str, Any] = {"bases": [_qualified(b) for b in cls.__bases__]}
        functions: list[types.FunctionType] = []
        for name, member in sorted(cls.__dict__.items()):
            found = _functions_of(member)
            if found:
                functions += found
                own[name] = [type(member).__name__, [f.__qualname__ for f in found]]
            elif not name.startswith("__") and not isinstance(member, type):
                own[name] = self.global_value(member)
            elif isinstance(member, type):
                own[name] = _qualified(member)
                self.klass(member)
        self._add(cls.__qualname__, own)
        for base in cls.__bases__:
            self.klass(base)
        for fn in functions:
            self.function(fn, check=False)

    # functions -----------------------------------------------------------------------
    def function(self, fn: types.FunctionType, *, check: bool = True) -> None:
        """Walk a function: its digest, and the user code its globals and cells reach."""
        if (check and not _is_user_function(fn)) or not self._first(fn):
            return
        code = fn.__code__
        names = sorted(_names(code))
        scope = fn.__globals__
        modules = [v for v in (scope.get(n) for n in names) if isinstance(v, types.ModuleType)]
        user_modules = [m for m in modules if _module_is_user(m.__name__)]
        reads: dict[str, Any] = {}
        for name in names:
            if name in scope:
                reads[name] = self.global_value(scope[name])
                continue
            for module in user_modules:  # ``cfg.WIDTH`` with ``cfg`` a module beside the file
                if name in vars(module):
                    reads[f"{module.__name__}.{name}"] = self.global_value(vars(module)[name])
        cells = [c.cell_contents if _filled(c) else "<empty>" for c in fn.__closure__ or ()]
        structure = {
            "code": _code(code),
            "defaults": [self.global_value(v) for v in fn.__defaults__ or ()],
            "kwdefaults": {k: self.global_value(v) for k, v in (fn.__kwdefaults__ or {}).items()},
            "closure": [self.global_value(v) for v in cells],
            "globals": reads,
        }
        name = fn.__qualname__
        if "<" in name:  # a lambda or a function defined in another function
            name = f"{name} in {_short_file(code.co_filename)}"
        self._add(name, structure)

    def global_value(self, value: Any) -> Any:
        """How a value read by user code enters its digest (user code is walked, and named)."""
        if isinstance(value, types.FunctionType) and _is_user_function(value):
            self.function(value)
            return {"user function": value.__qualname__}
        if isinstance(value, type) and _is_user_class(value):
            self.klass(value)
            return {"user class": value.__qualname__}
        if isinstance(value, type):
            return {"class": _qualified(value)}
        if isinstance(value, types.ModuleType):
            return {"module": value.__name__}
        if isinstance(value, (types.FunctionType, types.BuiltinFunctionType)):
            return {"function": f"{getattr(value, '__module__', None)}.{value.__qualname__}"}
        self.value(value)
        try:
            return {"value": hashlib.sha256(canonical(value).encode()).hexdigest()}
        except Exception:  # an opaque object: its type stands for it
            return {"opaque": _qualified(type(value))}


def _functions_of(member: Any) -> list[types.FunctionType]:
    """The functions behind a class member (method, property, classmethod, staticmethod)."""
    if isinstance(member, types.FunctionType):
        return [member]
    if isinstance(member, (classmethod, staticmethod)):
        inner = member.__func__
        return [inner] if isinstance(inner, types.FunctionType) else []
    if isinstance(member, property):
        return [
            f for f in (member.fget, member.fset, member.fdel) if isinstance(f, types.FunctionType)
        ]
    if isinstance(member, functools.cached_property):
        return [member.func] if isinstance(member.func, types.FunctionType) else []
    return []


def _attributes(obj: Any) -> list[Any]:
    """The values an object holds: dataclass fields, slots and instance attributes."""
    out: list[Any] = []
    if dataclasses.is_dataclass(obj):
        out += [getattr(obj, f.name, None) for f in dataclasses.fields(obj)]
    for cls in type(obj).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for slot in (slots,) if isinstance(slots, str) else slots:
            if slot not in ("__dict__", "__weakref__") and hasattr(obj, slot):
                out.append(getattr(obj, slot))
    attributes = getattr(obj, "__dict__", None)
    if isinstance(attributes, dict):
        out += [v for k, v in sorted(attributes.items()) if not k.startswith("__")]
    return out


def _filled(cell: types.CellType) -> bool:
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:
        return False
    return True


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _names(code: types.CodeType) -> set[str]:
    """The global and attribute names a code object and the code nested in it use."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def _code(code: types.CodeType) -> dict[str, Any]:
    """A code object without its file, line numbers or position: what it computes."""
    return {
        "name": code.co_name,
        "bytecode": hashlib.sha256(code.co_code).hexdigest(),
        "consts": [_const(c) for c in code.co_consts],
        "names": list(code.co_names),
        "varnames": list(code.co_varnames),
        "freevars": list(code.co_freevars),
        "cellvars": list(code.co_cellvars),
        "args": [code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount],
        "flags": code.co_flags,
    }


def _const(value: Any) -> Any:
    if isinstance(value, types.CodeType):
        return _code(value)
    if isinstance(value, (tuple, frozenset)):
        items = [_const(v) for v in value]
        if isinstance(value, frozenset):
            items.sort(key=lambda v: json.dumps(v, sort_keys=True))
        return {type(value).__name__: items}
    try:
        return json.loads(canonical(value))
    except Exception:  # e.g. Ellipsis
        return {"repr": repr(value)}
