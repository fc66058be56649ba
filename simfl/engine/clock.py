"""Landing SimPy's clock exactly on an instant worked out in floating point.

A delay ``d`` from ``now`` lands the clock on ``now + d``, which need not equal the instant
``t`` a playback worked out (``t - now`` rounds). These helpers find delays that land on ``t``
exactly, so that a round played without job events closes at the very instant job processes
would close it.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import Any

import numpy as np
import simpy

__all__ = ["delay_below", "landing_delay", "sleep_until"]


def landing_delay(now: float, t: float) -> float:
    """A delay ``d >= 0`` with ``now + d == t`` in floating point (so the clock lands on ``t``)."""
    d = t - now
    for _ in range(8):
        reached = now + d
        if reached == t:
            return d
        d = float(np.nextafter(d, math.inf if reached < t else -math.inf))
    raise AssertionError(f"cannot land the clock on {t!r} from {now!r}")  # pragma: no cover


def delay_below(now: float, t: float) -> float:
    """The largest delay ``d >= 0`` with ``now + d <= t`` in floating point (``t >= now``).

    ``now + d`` may fall a few units in the last place short of ``t`` (when no delay lands on
    ``t`` exactly); from there ``t - (now + d)`` is exact, so a second delay lands on ``t``.
    """
    d = t - now
    while d > 0.0 and now + d > t:
        d = float(np.nextafter(d, -math.inf))
    return d


def sleep_until(env: simpy.Environment, t: float) -> Generator[Any, Any, None]:
    """Sleep until the clock is exactly ``t`` (in two steps where one cannot land on it)."""
    yield env.timeout(delay_below(env.now, t))
    if env.now < t:
        yield env.timeout(t - env.now)  # exact: now is within a few ulps of t


def land(env: simpy.Environment, t: float) -> None:
    """Move the clock to ``t`` (``>= now``) by stepping over a timeout that ends there.

    For a server loop that is its run's only SimPy process and handles its jobs' instants
    itself (:mod:`simfl.engine.async_planned`, :mod:`simfl.engine.async_timing`): nothing else
    is scheduled before ``t``, so the step runs no other event. Such a loop lands the clock
    only where something reads it (an aggregation, a policy's pick, the loop's end), not at
    every instant it handles.
    """
    now = env.now
    if t == now:
        return
    if env.peek() < t:
        raise AssertionError(f"an event is scheduled before {t!r}: the clock cannot jump there")
    env.timeout(delay_below(now, t))
    env.step()
    if env.now < t:  # a few ulps short (no delay lands on t): from there t - now is exact
        env.timeout(t - env.now)
        env.step()
