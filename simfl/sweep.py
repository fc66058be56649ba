"""Grids of scenarios run over local processes.

>>> import dataclasses, simfl
>>> from simfl import policies, sweep
>>> # cases = sweep.grid(base, policy={"wait-all": policies.WaitAll(count=10),
>>> #                                  "srpfl": policies.SRPFL(n0=5)}, seed=range(10))
>>> # out = sweep.run_all(cases, workers=2)
>>> # out.frame   # tidy rounds of every run, with a column per grid axis

A grid axis is a ``Scenario`` field (``policy``, ``fleet``, ``algorithm``, ``seed``, ...) given
as a list of values or as a ``{label: value}`` dict; labels become columns of the tidy frame.
Runs are independent and deterministic, so the same grid gives the same frames whatever the
number of workers. Multi-machine execution and a resumable results store are separate.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from tqdm.auto import tqdm

from simfl.compare import collect
from simfl.engine import run
from simfl.results import Results
from simfl.scenario import Scenario

__all__ = ["Case", "SweepResults", "grid", "run_all"]


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


@dataclass
class SweepResults:
    """The outcome of :func:`run_all`: one Results per case, and a tidy frame of all rounds."""

    cases: list[Case]
    results: list[Results]

    @property
    def frame(self) -> pd.DataFrame:
        """Rounds of every run with the initial row (see :func:`simfl.compare.collect`).

        Columns ``label`` (the scenario name) and ``seed``, and one column per grid axis.
        """
        frames = []
        for case, res in zip(self.cases, self.results, strict=True):
            labels = {k: v for k, v in case.labels.items() if k != "seed"}
            frames.append(collect({case.scenario.name: [res]}, **labels))
        return pd.concat(frames, ignore_index=True)


def _run_case(scenario: Scenario) -> Results:
    return run(scenario, progress=False)


def run_all(
    cases: Iterable[Case] | Iterable[Scenario],
    *,
    workers: int | None = None,
    progress: bool = True,
) -> SweepResults:
    """Run every case, on ``workers`` local processes (default: all CPUs; 1 runs inline)."""
    items = [c if isinstance(c, Case) else Case(c, {"seed": c.seed}) for c in cases]
    n = workers or os.cpu_count() or 1
    bar = tqdm(total=len(items), desc="sweep", unit="run", disable=not progress)
    results: list[Results] = []
    try:
        if n == 1 or len(items) <= 1:
            for case in items:
                results.append(_run_case(case.scenario))
                bar.update(1)
        else:
            with ProcessPoolExecutor(max_workers=n) as pool:
                for res in pool.map(_run_case, [c.scenario for c in items]):
                    results.append(res)
                    bar.update(1)
    finally:
        bar.close()
    return SweepResults(items, results)
