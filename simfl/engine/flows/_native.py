"""Which build of the flows package's modules runs: mypyc's, or their Python sources.

``setup.py`` compiles :data:`MODULES` (modules of :mod:`simfl.engine.flows`, the only ones
compiled) with mypyc where it can and records the SHA-256 of each source it compiled
(``_native_sources.txt``, beside this module). The package imports this module before any of
its others, so the choice is made when the package is first imported, once. The compiled
modules run when all of them are there and their sources are the ones compiled; otherwise
(``SIMFL_PURE_PYTHON=1``, no compiler at install, or a source edited since: an editable
install's extensions would go stale) all of them run from their ``.py`` files, which this
module arranges by putting a finder for them first on ``sys.meta_path``. It is all or
nothing: a class defined in Python cannot subclass a compiled one.

Both give the same results bit for bit (``tests/test_native.py``); the compiled ones are about
twice as fast. :data:`ACTIVE` says which runs, :data:`WHY_PURE` why not the compiled.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

__all__ = ["ACTIVE", "MODULES", "RECORD", "WHY_PURE", "why_pure"]

#: the modules ``setup.py`` compiles (keep in step with its ``NATIVE``)
MODULES = (
    "simfl.engine.flows.sharedlink",
    "simfl.engine.flows.calendar",
    "simfl.engine.flows.links",
    "simfl.engine.flows.reference",
    "simfl.engine.flows.network",
    "simfl.engine.flows.flowround",
)
_ROOT = Path(__file__).resolve().parents[3]  # the folder holding the simfl package
#: where the build's record lies, relative to that folder
RECORD = "simfl/engine/flows/_native_sources.txt"


def _source(name: str) -> Path:
    return _ROOT / (name.replace(".", "/") + ".py")


def _compiled(source: Path) -> bool:
    """Whether an extension module built from ``source`` lies beside it."""
    return any(source.with_suffix(x).is_file() for x in importlib.machinery.EXTENSION_SUFFIXES)


def why_pure(root: Path = _ROOT, env: dict[str, str] | None = None) -> str | None:
    """Why the Python sources run instead of the compiled modules (``None``: they do not).

    ``root`` is the folder holding the ``simfl`` package, ``env`` the environment (both for
    tests).
    """
    env = dict(os.environ) if env is None else env
    if env.get("SIMFL_PURE_PYTHON", "") not in ("", "0"):
        return "SIMFL_PURE_PYTHON is set"
    sources = [root / (m.replace(".", "/") + ".py") for m in MODULES]
    built = [_compiled(s) for s in sources]
    if not any(built):
        return "not compiled (installed without mypy or a C compiler, or with SIMFL_PURE_PYTHON)"
    record = root / RECORD
    try:
        lines = record.read_text().splitlines()
    except OSError:
        return f"{record.name} is missing: the build is incomplete"
    compiled: dict[str, str] = {}  # path: the SHA-256 of the source compiled
    for line in lines:
        digest, _, path = line.strip().partition(" ")
        compiled[path] = digest
    for source, ok in zip(sources, built, strict=True):
        rel = source.relative_to(root).as_posix()
        if not ok:
            return f"{rel} was not compiled"
        if compiled.get(rel) != hashlib.sha256(source.read_bytes()).hexdigest():
            return f"{rel} changed since it was compiled (pip install -e . compiles it again)"
    return None


class _Sources(importlib.abc.MetaPathFinder):
    """Finds :data:`MODULES` as their ``.py`` files (ahead of the compiled extensions)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MODULES:
            return None
        return importlib.util.spec_from_file_location(fullname, _source(fullname))


#: why the Python sources run (``None`` when the compiled modules do)
WHY_PURE = why_pure()
#: whether the compiled modules run
ACTIVE = WHY_PURE is None

if WHY_PURE is not None:
    if any(_compiled(_source(m)) for m in MODULES) and not WHY_PURE.startswith("SIMFL_PURE"):
        warnings.warn(
            f"simfl runs its compiled modules as Python (same results, slower): {WHY_PURE}",
            stacklevel=2,
        )
    sys.meta_path.insert(0, _Sources())
