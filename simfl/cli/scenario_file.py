"""Scenario files: imported as ``python FILE`` would, their scenarios and cases by name.

``run``, ``sweep`` and ``tune`` import the scenario file with its folder first on
``sys.path``, so it can import modules beside it; those modules travel to the workers by
value, like the file's own classes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import re
import shlex
import sys
import traceback
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cloudpickle

from simfl.cli.errors import UsageError
from simfl.scenario import Scenario
from simfl.sweeps.grid import Case

__all__ = [
    "pick_scenario",
    "folder_name",
    "listing",
    "load_cases",
    "load_module",
    "load_scenarios",
    "scenarios_of",
]

#: Scenario names an error message lists before it says how many more there are.
_LISTED = 12
#: Longest scenario-derived folder name under ``runs/`` (a hash suffix keeps names distinct).
_NAME_LIMIT = 100


def load_module(path: str | Path) -> Any:
    """Import a scenario file as ``python FILE`` would: its folder first on ``sys.path``.

    The file's modules beside it (and packages below its folder) that it imports are then
    pickled by value (``cloudpickle.register_pickle_by_value``), like the file's own classes,
    so that workers that cannot import them (a Dask cluster's) still get them.
    """
    file = Path(path)
    if file.is_dir():
        raise ValueError(f"scenario file {file} is a directory; give a Python file in it")
    if not file.is_file():
        raise ValueError(f"scenario file {file} does not exist")
    folder = str(file.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    before = set(sys.modules)
    # not registered in sys.modules: cloudpickle then ships the file's own classes by value
    spec = importlib.util.spec_from_file_location(f"_simfl_scenario_{file.stem}", file)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot import scenario file {file}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the user's code: report where it failed, in one line
        raise ValueError(_import_error(file, exc)) from exc
    _ship_by_value([sys.modules[name] for name in set(sys.modules) - before], Path(folder))
    return module


def _ship_by_value(modules: list[Any], folder: Path) -> None:
    """Have cloudpickle pickle by value the top-level ``modules`` whose files are in ``folder``.

    simfl itself is never shipped (a scenario file beside a simfl checkout imports it from
    there), nor are modules inside a virtual environment's site-packages.
    """
    for module in modules:
        name = getattr(module, "__name__", "")
        origin = getattr(module, "__file__", None)
        installed = "site-packages" in str(origin) or "dist-packages" in str(origin)
        if "." in name or name == "simfl" or not origin or installed:
            continue
        try:
            inside = Path(origin).resolve().is_relative_to(folder)
        except OSError:
            continue
        if inside:
            cloudpickle.register_pickle_by_value(module)


def _import_error(file: Path, exc: Exception) -> str:
    """``FILE, line N: ErrorType: message`` for an exception raised while importing ``file``."""
    if isinstance(exc, SyntaxError):
        where, line, text = exc.filename or str(file), exc.lineno, exc.msg
    else:
        frames = traceback.extract_tb(exc.__traceback__)
        mine = [f for f in frames if Path(f.filename).resolve() == file.resolve()]
        last = mine[-1] if mine else frames[-1]
        where, line, text = str(file), last.lineno, str(exc)
    message = "; ".join(part.strip() for part in text.splitlines() if part.strip())
    return f"{where}, line {line}: {type(exc).__name__}: {message}"


def folder_name(text: str) -> str:
    """``text`` as one safe path component (no separators, no ``..``, at most 100 bytes).

    Characters other than ASCII letters, digits and ``._+-`` become ``_``, leading dots go;
    a name that had to change or be shortened gets ``-`` and 8 hex digits of its SHA-256.
    """
    safe = re.sub(r"[^A-Za-z0-9._+-]", "_", text).lstrip(".")
    if safe == text and len(safe) <= _NAME_LIMIT:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{safe[: _NAME_LIMIT - 9] or 'scenario'}-{digest}"


def load_scenarios(path: str | Path) -> dict[str, Scenario]:
    """The scenarios a Python file exposes, by name.

    ``SCENARIO`` and ``SCENARIOS``, or else the scenarios of its ``CASES``, named by their
    labels (``policy=srpfl,seed=2``; see ``simfl run --pick``).

    Raises
    ------
    ValueError
        If the file does not exist or defines none of these names with scenarios in it.
    """
    return scenarios_of(load_module(path), Path(path))


def scenarios_of(module: Any, file: Path) -> dict[str, Scenario]:
    """The scenarios of an imported scenario file (see :func:`load_scenarios`)."""
    found: dict[str, Scenario] = {}
    single = getattr(module, "SCENARIO", None)
    if isinstance(single, Scenario):
        found[single.name] = single
    many = getattr(module, "SCENARIOS", None)
    if isinstance(many, dict):
        found.update({str(k): v for k, v in many.items() if isinstance(v, Scenario)})
    cases = getattr(module, "CASES", None)
    if not found and isinstance(cases, (list, tuple)):
        found.update(_by_key([c for c in cases if isinstance(c, Case)]))
    if not found:
        raise ValueError(
            f"{file} must define SCENARIO (a simfl.Scenario), SCENARIOS (a dict of them) or "
            f"CASES (a list of simfl.sweeps.Case)"
        )
    return found


def _by_key(cases: list[Case]) -> dict[str, Scenario]:
    """The scenarios of ``cases`` by the name ``--pick`` takes: the case's labels.

    ``policy=srpfl,seed=2`` for a case of ``sweeps.grid`` (the scenario's name for a case
    without labels); a key shared by several cases gets ``#`` and the case's index.
    """
    keys = [",".join(f"{k}={v}" for k, v in c.labels.items()) or c.scenario.name for c in cases]
    count = Counter(keys)
    return {
        key if count[key] == 1 else f"{key}#{i}": case.scenario
        for i, (key, case) in enumerate(zip(keys, cases, strict=True))
    }


def load_cases(path: str | Path) -> list[Case]:
    """The cases of a sweep file.

    Its ``CASES`` (a list of ``simfl.sweeps.Case``, e.g. from ``sweeps.grid``, whose labels
    become columns), or else one unlabelled case per scenario of :func:`load_scenarios`.

    Raises
    ------
    ValueError
        If the file does not exist, ``CASES`` holds something else, or there are no scenarios.
    """
    module = load_module(path)
    cases = getattr(module, "CASES", None)
    if cases is None:
        return [Case(sc, {}) for sc in scenarios_of(module, Path(path)).values()]
    if not isinstance(cases, (list, tuple)) or not cases:
        raise ValueError(f"{path}: CASES must be a non-empty list of simfl.sweeps.Case")
    for i, case in enumerate(cases):
        if not isinstance(case, Case):
            raise ValueError(f"{path}: CASES[{i}] must be a simfl.sweeps.Case, got {case!r}")
    return list(cases)


def listing(names: Sequence[str] | dict[str, Any]) -> str:
    """Names as shell words, the first :data:`_LISTED` of them and how many more there are."""
    words = [shlex.quote(name) for name in names]
    more = f", ... ({len(words) - _LISTED} more)" if len(words) > _LISTED else ""
    return ", ".join(words[:_LISTED]) + more


def pick_scenario(
    scenarios: dict[str, Scenario],
    file: str,
    pick: str | None,
    seed: int | None,
    *,
    one: str,
    also: str = "",
) -> Scenario:
    """The scenario a one-run command plays: ``--pick``'s, or the file's only one.

    ``--seed`` is applied to it. ``one`` (e.g. ``"simfl run runs one"``) and ``also`` (what
    else the user can do) word the error that asks for ``--pick``.
    """
    if pick is not None:
        if pick not in scenarios:
            raise UsageError(f"--pick must be one of {listing(scenarios)}, got {pick!r}")
        scenario = scenarios[pick]
    elif len(scenarios) == 1:
        scenario = next(iter(scenarios.values()))
    else:
        raise UsageError(
            f"{file} defines {len(scenarios)} scenarios and {one}: choose it with --pick NAME "
            f"({listing(scenarios)}){also}"
        )
    return scenario if seed is None else dataclasses.replace(scenario, seed=seed)
