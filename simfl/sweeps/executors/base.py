"""The executor interface, and :class:`Inline`, which runs every item here."""

from __future__ import annotations

import functools
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from typing import ClassVar, TypeAlias, TypeVar

__all__ = ["EXECUTORS", "PROGRESS_EVERY", "Executor", "Inline", "Report"]

T = TypeVar("T")
R = TypeVar("R")

#: Names accepted by :func:`make_executor` and ``simfl sweep --executor``.
EXECUTORS = ("processes", "dask", "inline")
#: Seconds between two progress reports of the same run (:meth:`Executor.map_reporting`).
PROGRESS_EVERY = 0.5
#: What a reporting function is given: a callable taking the share of its item done, or None.
Report: TypeAlias = Callable[[float], None] | None


class Executor(ABC):
    """Runs a function over items somewhere, yielding results as they complete."""

    name: ClassVar[str]

    @abstractmethod
    def map_unordered(
        self, fn: Callable[[T], R], items: Sequence[T], *, keys: Sequence[str] | None = None
    ) -> Iterator[tuple[int, R | Exception]]:
        """Call ``fn`` on every item; yield ``(index, result or executor error)`` as each ends.

        ``keys`` name the items for the executor's own monitoring (Dask's dashboard).
        """

    def map_reporting(
        self,
        fn: Callable[[T, Report], R],
        items: Sequence[T],
        *,
        keys: Sequence[str] | None = None,
        progress: Callable[[int, float], None],
    ) -> Iterator[tuple[int, R | Exception]]:
        """As :meth:`map_unordered`, for ``fn(item, report)`` that reports its progress.

        ``report(share)`` (``share`` in [0, 1]) called in the worker reaches
        ``progress(index, share)`` in this process, at most every :data:`PROGRESS_EVERY`
        seconds per item, before that item's result is yielded. This default gives
        ``report=None`` (nothing is reported) and calls :meth:`map_unordered`.
        """
        return self.map_unordered(functools.partial(_unreported, fn), items, keys=keys)

    def describe(self) -> str:
        """A short description for summaries, e.g. ``"processes (4 workers)"``."""
        return self.name

    def fresh(self) -> Executor:
        """Return this executor with workers that inherit nothing from this process.

        For runs that cannot go in a forked process (see "Fresh workers" in
        :mod:`simfl.sweeps.executors`). The default returns ``self``: its workers are fresh
        already, or it runs here.
        """
        return self

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release workers and connections (idempotent)."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Inline(Executor):
    """Run every item here, one after the other."""

    name = "inline"

    def map_unordered(
        self, fn: Callable[[T], R], items: Sequence[T], *, keys: Sequence[str] | None = None
    ) -> Iterator[tuple[int, R | Exception]]:
        """See :meth:`Executor.map_unordered`."""
        for i, item in enumerate(items):
            try:
                value: R | Exception = fn(item)
            except Exception as exc:
                value = exc
            yield i, value

    def map_reporting(
        self,
        fn: Callable[[T, Report], R],
        items: Sequence[T],
        *,
        keys: Sequence[str] | None = None,
        progress: Callable[[int, float], None],
    ) -> Iterator[tuple[int, R | Exception]]:
        """See :meth:`Executor.map_reporting`: the reports are passed on here, throttled."""
        indexed = list(enumerate(items))
        call = functools.partial(_call_indexed, fn, _Throttled(progress))
        return self.map_unordered(call, indexed, keys=keys)


def _unreported(fn: Callable[[T, Report], R], item: T) -> R:
    """``fn(item, None)``: a reporting function run where reports cannot travel."""
    return fn(item, None)


class _Throttled:
    """Passes ``(index, share)`` reports on to ``progress``, each index every PROGRESS_EVERY s."""

    def __init__(self, progress: Callable[[int, float], None]) -> None:
        self.progress = progress
        self.last: dict[int, float] = {}

    def __call__(self, index: int, share: float) -> None:
        now = time.monotonic()
        if now - self.last.get(index, -math.inf) >= PROGRESS_EVERY:
            self.last[index] = now
            self.progress(index, share)


def _call_indexed(
    fn: Callable[[T, Report], R], reporter: Callable[[int, float], None], pair: tuple[int, T]
) -> R:
    """``fn(item, report)`` where ``report`` tells ``reporter`` the item's index too."""
    index, item = pair
    return fn(item, functools.partial(reporter, index))
