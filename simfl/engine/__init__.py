"""The engine: the only code that knows SimPy. It owns every server loop and every stop rule.

:func:`run` builds a :class:`~simfl.engine.context.RunContext` (clock, keyed streams, task
data, algorithm state, the job playback chosen once for the run, records), picks the loop of the
policy's family, plays it until a stop rule fires, records whatever is still in flight and
returns :class:`~simfl.results.Results`.

* :mod:`~simfl.engine.jobs` plans device jobs (download, compute, upload, failure clock) in one
  vectorised step; the run's playback plays them (:mod:`~simfl.engine.playbacks`: what each
  playback does, and the one table it is chosen from); :mod:`~simfl.engine.live` and
  :mod:`~simfl.engine.flows` are the live machinery (availability, max-min fair shared
  links); :mod:`~simfl.engine.offline` resolves jobs under availability on private links
  from their plans.
* :mod:`~simfl.engine.sync` is the synchronous loop (and :mod:`~simfl.engine.edge` its rounds
  through edge servers); :mod:`~simfl.engine.asynchronous` the asynchronous one;
  :mod:`~simfl.engine.tiered` the semi-asynchronous one (synchronous within groups).
"""

from __future__ import annotations

import functools
import math
import time
import traceback
from contextlib import nullcontext
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from simfl._checks import check_bool, check_choice
from simfl.engine.context import RunContext
from simfl.engine.playbacks import Playback, ServerLoop, choose
from simfl.engine.progress import Progress
from simfl.engine.sync import SyncLoop
from simfl.engine.tiered import TieredLoop
from simfl.policies.base import AsyncPolicy, SyncPolicy, TieredPolicy
from simfl.results import Results
from simfl.results.groups import encode_groups
from simfl.scenario import Scenario

__all__ = ["run", "simfl_version"]


@functools.cache  # reading the package metadata costs milliseconds: once per process
def simfl_version() -> str:
    """The installed simfl version (``"unknown"`` when running from a bare source tree)."""
    try:
        return version("simfl")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "unknown"


def run(
    scenario: Scenario,
    *,
    progress: Progress = True,
    lazy: bool = True,
    on_error: str = "record",
    batched: bool = True,
    reference_links: bool = False,
) -> Results:
    """Simulate ``scenario`` and return its :class:`~simfl.results.Results`.

    Deterministic: the same scenario (including its seed) gives identical DataFrames. Every run
    ends with a stop reason in ``meta["stop_reason"]``: ``rounds``, ``max_time``, ``target``,
    ``stalled``, ``offline`` (no device will ever be online again, or paused jobs wait for
    devices that never return), ``diverged``, ``error`` or ``interrupted``; the rows recorded up
    to then are kept. ``meta["status"]`` is ``ok`` unless the run ``diverged`` (a non-finite
    update or metric: that round's ``status`` is ``diverged`` too), failed (``error``) or was
    ``interrupted``; :attr:`Results.ok <simfl.results.Results.ok>` is true only for ``ok``.
    ``meta["warnings"]`` lists what an ``ok`` run found worth a word: a stall although updates
    arrived (see :mod:`simfl.engine.stops`), more than half of its rounds empty
    (``meta["empty_rounds"]`` of ``meta["n_rounds"]``). A scenario whose
    :class:`~simfl.server.Server` has costs adds ``meta["server"]``: what the server did
    (:meth:`ServerClock.summary <simfl.engine.server.ServerClock.summary>`).

    Parameters
    ----------
    scenario
        What to run.
    progress
        ``True``: a progress bar on stderr, over rounds, or over simulated seconds (with a total
        and an ETA) for a run limited only by ``max_time``. ``False``: none. A callable: called
        after every aggregation with the share of the run done, in [0, 1] (rounds done of
        ``rounds``, or simulated time of ``max_time``, the larger of the two); how sweeps show
        the progress of the runs in flight. Nothing recorded depends on it. ``lazy`` and
        ``batched`` must be ``True`` or ``False`` (a ``ValueError`` names the flag otherwise).
    lazy
        Compute only the updates that are aggregated (default). ``False`` computes every started
        job's update and discards the rest; the results are identical, only slower.
    on_error
        ``"record"`` (default): an exception (in the algorithm, the task, the policy) ends the
        run, is stored in ``meta["error"]`` and everything computed so far is returned.
        ``"raise"``: re-raise it.
    batched
        Play the run with the fastest playback that applies (default; see
        :mod:`simfl.engine.playbacks`). ``False`` plays every job as a SimPy process, stage
        by stage under availability: the straightforward reference; the results are
        identical. ``meta["playback"]`` names the playback that played the run and
        ``meta["playback_fallbacks"]`` counts, by reason, what it handed to the reference
        mid-way.
    reference_links
        Play shared links with the straightforward reference algorithm (every flow event
        recomputes every rate over every flow) instead of the fast one (the default); the
        times agree to a relative ``1e-9``. For tests and benchmarks.
    """
    if not isinstance(scenario, Scenario):
        raise ValueError(f"simfl.run needs a simfl.Scenario, got {scenario!r}")
    check_choice("simfl.run on_error", on_error, ("record", "raise"))
    if not callable(progress):
        try:
            progress = check_bool("simfl.run progress", progress)
        except ValueError as exc:
            raise ValueError(f"{exc} (or a callable taking the share of the run done)") from None
    lazy = check_bool("simfl.run lazy", lazy)
    batched = check_bool("simfl.run batched", batched)
    reference_links = check_bool("simfl.run reference_links", reference_links)
    started = time.perf_counter()
    with nullcontext() if scenario.task is None else scenario.task.session():
        ctx = RunContext(
            scenario,
            lazy=lazy,
            progress=progress,
            on_error=on_error,
            reference_links=reference_links,
        )
        playback = choose(ctx, batched=batched)
        loop = _loop(ctx, playback)
        status = _play(ctx, loop)
        if loop.in_flight:
            ctx.stop("max_time")
        loop.abandon()
        ctx.finish()
        client_metrics, client_metrics_error = ctx.client_metrics()
    if ctx.error is not None:
        status = "error"
    elif ctx.stop_reason == "diverged":
        status = "diverged"
    meta: dict[str, Any] = {
        "scenario": scenario.name,
        "scenario_repr": repr(scenario),
        "seed": scenario.seed,
        "n_devices": scenario.fleet.size,
        "algorithm": scenario.algorithm.name,
        "policy": scenario.policy.name,
        "metrics": list(ctx.metrics),
        "goals": ctx.goals,
        "initial_metrics": ctx.initial_metrics,
        "lazy": lazy,
        "batched": batched,
        "playback": playback.name,
        "playback_fallbacks": playback.fallbacks(),
        "stop_reason": ctx.stop_reason or "max_time",
        "status": status,
        "error": ctx.error,
        "sim_time": float(ctx.env.now),
        "host_seconds": time.perf_counter() - started,
        "simfl_version": simfl_version(),
        "groups": encode_groups(*scenario.fleet.device_groups()),
        "warnings": list(ctx.warnings),
    }
    if ctx.server is not None:  # what the server's own costs took (a Server with costs)
        meta["server"] = ctx.server.summary()
    describe = getattr(ctx.data, "describe", None)
    if callable(describe):  # what the task's data say about the run (a neural model's trainer)
        meta["training"] = describe()
    if client_metrics is not None:
        meta["client_metrics"] = client_metrics
    if client_metrics_error is not None:
        meta["client_metrics_error"] = client_metrics_error
    return ctx.recorder.results(meta, ctx.state)


def _loop(ctx: RunContext, playback: Playback) -> ServerLoop:
    """The server loop of the scenario's policy family, played by ``playback``."""
    policy = ctx.scenario.policy
    if isinstance(policy, AsyncPolicy):
        return playback.async_loop(ctx, policy)
    if isinstance(policy, TieredPolicy):
        return TieredLoop(ctx, policy, playback)
    if isinstance(policy, SyncPolicy):
        return SyncLoop(ctx, policy, playback)
    raise ValueError(  # pragma: no cover - Scenario accepts only these families
        f"Scenario.policy must be a SyncPolicy, EdgePolicy, TieredPolicy or AsyncPolicy, got "
        f"{policy!r}"
    )


def _play(ctx: RunContext, loop: ServerLoop) -> str:
    """Run the event loop until the server stops or the clock reaches ``max_time``.

    Returns the run's status. Nothing escapes with ``on_error="record"``: an exception anywhere
    in the loop is recorded (``error``), and a schedule that runs dry while the server still
    waits (paused jobs whose devices never return) ends the run as ``offline`` at the time of
    the last event, with or without a ``max_time``.

    Events at exactly ``max_time`` are not processed: the run stops at the budget before them
    (as if a timer set at the start fired first).
    """
    env = ctx.env
    server = env.process(loop.serve())
    budget = math.inf if ctx.scenario.max_time is None else ctx.scenario.max_time
    peek, step = env.peek, env.step
    try:
        while server.callbacks is not None:  # the server has not finished
            t = peek()
            if t >= budget:
                if math.isinf(t):
                    break  # nothing left to happen (without a max_time)
                env.run(until=budget)  # lands the clock on the budget before events there
                return "ok"
            step()
        if server.callbacks is not None:
            ctx.stop("offline")  # nothing will ever happen again: paused jobs wait for ever
    except KeyboardInterrupt:
        ctx.stop("interrupted")
        return "interrupted"
    except Exception:
        if ctx.on_error == "raise":
            raise
        ctx.fail(traceback.format_exc())
    finally:
        ctx.close_progress()
    return "ok"
