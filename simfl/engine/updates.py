"""The math side of a run: updates computed lazily, aggregated safely, the model evaluated.

Time and math are separate. The loops decide *who* takes part, *when* each step happens and
*what arrives*; they never touch model parameters. When updates are to be aggregated, the
algorithm computes those updates only, in one batched call (:meth:`Computation.updates`), and
aggregates them. Updates that would be discarded (late, dropped, cancelled) are never
computed, yet their time is simulated; ``run(..., lazy=False)`` computes them too and throws
them away, and gives identical results.
"""

from __future__ import annotations

import math
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np
import simpy
from numpy.typing import NDArray

from simfl.algorithms.base import Algorithm, Updates
from simfl.results import Recorder
from simfl.rng import Streams
from simfl.scenario import Scenario

__all__ = ["UPDATE_SLICE", "Computation"]

#: Cohorts larger than this compute their local updates in slices of this many clients.
UPDATE_SLICE = 512


class Computation:
    """Computing, applying and evaluating updates; a failure recorded, or raised."""

    scenario: Scenario
    env: simpy.Environment
    streams: Streams
    algorithm: Algorithm[Any]
    data: Any
    state: Any
    lazy: bool
    on_error: str
    metrics: tuple[str, ...]
    recorder: Recorder
    bar: Any

    error: str | None
    #: the stop rules' (:class:`~simfl.engine.stops.StopRules`)
    stop: Callable[[str], None]
    fail: Callable[[str], None]

    def updates(
        self,
        state: Any,
        clients: NDArray[np.int64],
        key: int,
        accepted: NDArray[np.bool_] | None = None,
        steps: NDArray[np.float64] | None = None,
    ) -> Updates:
        """The updates of ``clients[accepted]`` from ``state``, with data keyed by ``key``.

        ``steps`` (aligned with ``clients``) gives each client's local steps under partial
        work: the algorithm's ``partial_updates`` computes them. Lazy runs compute the accepted
        clients only. Eager runs also compute the discarded clients' updates, in a batch of
        their own, and throw them away: any side effect of discarded work would show as a
        difference between the two. (That a client's update does not depend on which clients
        share its batch is a property each algorithm's tests check directly; batched float
        kernels, e.g. in torch, may legitimately differ in the last bits with the batch size.)
        """
        if accepted is None:
            return self._local_updates(state, clients, key, steps)
        updates = self._local_updates(
            state, clients[accepted], key, None if steps is None else steps[accepted]
        )
        if not self.lazy and not accepted.all():
            rest = ~accepted
            self._local_updates(state, clients[rest], key, None if steps is None else steps[rest])
        return updates

    def discard(self, state: Any, clients: NDArray[np.int64], key: int) -> None:
        """Compute and throw away updates that will not be applied (eager runs only)."""
        if not self.lazy:
            self._local_updates(state, clients, key)

    def _local_updates(
        self,
        state: Any,
        clients: NDArray[np.int64],
        key: int,
        steps: NDArray[np.float64] | None = None,
    ) -> Updates:
        """The algorithm's updates of ``clients``, in slices of at most :data:`UPDATE_SLICE`.

        A client's update depends only on the state and its own data, so slicing changes
        nothing (for numpy algorithms, bit for bit: their tests check it) and keeps a large
        cohort's arrays in cache.
        """
        alg = self.algorithm

        def part(i: int, j: int) -> Updates:
            if steps is None:
                return alg.local_updates(state, self.data, clients[i:j], key, self.streams)
            return alg.partial_updates(
                state, self.data, clients[i:j], key, self.streams, steps[i:j]
            )

        if clients.size <= UPDATE_SLICE:
            if steps is None:  # the common path, without slicing copies
                return alg.local_updates(state, self.data, clients, key, self.streams)
            return part(0, clients.size)
        return Updates.concat(
            [part(i, i + UPDATE_SLICE) for i in range(0, clients.size, UPDATE_SLICE)]
        )

    def apply(self, row: dict[str, Any], compute: Callable[[], tuple[Any, Updates]]) -> None:
        """Run ``compute`` (which returns the new state and the updates it used) safely.

        A non-finite update marks ``row`` as ``diverged``; an exception marks it ``error`` (or
        re-raises with ``on_error="raise"``). Either way the state is left unchanged and the run
        stops after this aggregation. The mean ``loss`` of the updates becomes ``train_loss``.
        ``compute`` calls the algorithm's ``aggregate`` and then its ``background``.
        """
        try:
            # overflow is detected below and recorded as divergence, not warned about
            with np.errstate(over="ignore", invalid="ignore"):
                state, updates = compute()
            if not updates.finite():
                row["status"] = "diverged"
                self.stop("diverged")
                return
        except Exception:
            if self.on_error == "raise":
                raise
            row["status"] = "error"
            self.fail(traceback.format_exc())
            return
        self.state = state
        if updates.loss is not None and len(updates.loss):
            row["train_loss"] = float(np.mean(updates.loss))

    def _evaluate(self) -> None:
        try:
            with np.errstate(over="ignore", invalid="ignore"):
                metrics = self.algorithm.evaluate(self.state, self.data)
        except Exception:
            if self.on_error == "raise":
                raise
            self.fail(traceback.format_exc())
            return
        self.recorder.set_metrics(metrics)
        if not all(math.isfinite(v) for v in metrics.values()):
            self.recorder.set_status("diverged")  # the round that produced the model diverged
            self.stop("diverged")
        target = self.scenario.target
        if target is not None and target.reached(metrics):
            self.stop("target")
        if not self.bar.disable:
            self.bar.set_postfix(
                {"t": f"{self.env.now:.4g}s", **{k: f"{v:.3g}" for k, v in metrics.items()}},
                refresh=False,
            )

    def client_metrics(self) -> tuple[dict[str, Any] | None, str | None]:
        """The final state's metrics per evaluated client (``meta["client_metrics"]``).

        Returns them (``None`` where the algorithm does not evaluate per client, the run has no
        task, or it failed) and the traceback of an exception raised while computing them
        (with ``on_error="record"``; it does not change the run's status: the run itself is
        complete).
        """
        if not self.metrics or self.error is not None:
            return None, None
        try:
            with np.errstate(over="ignore", invalid="ignore"):
                found = self.algorithm.evaluate_clients(self.state, self.data)
        except Exception:
            if self.on_error == "raise":
                raise
            return None, traceback.format_exc()
        if found is None:
            return None, None
        clients, values = found
        return {
            "clients": np.asarray(clients, dtype=np.int64).tolist(),
            "metrics": {k: np.asarray(v, dtype=np.float64).tolist() for k, v in values.items()},
        }, None

    def finish(self) -> None:
        """Evaluate the final state if it was not (after the loop recorded what was in flight)."""
        rec = self.recorder
        if not self.metrics or rec.n_rounds == 0 or self.error is not None:
            return
        if rec.last_round("status") in ("ok", "empty") and all(
            math.isnan(rec.last_round(m)) for m in self.metrics
        ):
            self._evaluate()
