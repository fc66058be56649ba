"""FedMAvg: model averaging for federated matrix factorisation.

Wang, Suwandi, Chang, "Demystifying Model Averaging for Communication-Efficient Federated Matrix
Factorization", ICASSP 2021 (Algorithm 1). The task (:mod:`simfl.tasks.matrix`) splits ``X``
column-wise over the clients; ``W`` (M x K) is shared, each client ``p`` keeps ``H_p`` (K x N_p),
and all ``H_p`` live in the algorithm state. In round ``s`` (``s = 1, 2, ...``) the server
broadcasts ``W^s`` and a client

1. runs ``Q1`` projected gradient steps on ``H_p`` with ``W^s`` fixed, step ``1 / L_H``,
   ``L_H = h_lipschitz * lambda_max(W_R^T W_R)`` (the paper's "half the largest eigenvalue of
   W^T W", ``h_lipschitz = 0.5``);
2. copies ``W_p = W^s`` and runs ``Q2^s`` plain gradient steps on it with ``H_p`` fixed, step
   ``1 / L_W``, ``L_W = w_lipschitz * lambda_max(H_p H_p^T)`` (the paper's "five times");
   ``Q2^s = floor(q_hat / s) + 1`` (diminishing, the paper's choice) or a constant ``q2``;
3. uploads ``W_p`` if it was sampled.

The server averages the uploaded ``W_p`` with equal weights and projects the mean onto the
feasible set of ``W``: ``W^(s+1) = Proj( (1/m) sum_{p in S^s} W_p )``.

Sampling ``m`` clients with replacement in proportion to their data size is the policy's job:
``policies.WaitAll(count=m, weights="size", replace=True)``. A client drawn twice runs one job
and its update is repeated, so the plain mean here is the paper's ``(1/m) sum`` over draws. Any
other policy (deadlines, fastest-k, SRPFL) simply changes which updates arrive.

Partial client communication (``communication="pcc"``, the paper's default): every client
updates ``H_p`` from the broadcast ``W^s`` each round; only the sampled ones upload. The
clients whose update is not aggregated (not sampled, late, dropped or cancelled) run their
``Q1`` steps in :meth:`FedMAvg.background` (the engine calls it right after ``aggregate``), in
one batched computation from the broadcast ``W^s`` (kept in the state as ``broadcast``); their
``W_p`` steps are skipped, since those copies are overwritten by the next
broadcast and never influence anything. This background work and the broadcast of ``W^s`` to the
clients outside the cohort are not simulated in time or bytes: the engine times the jobs of the
cohort only, and the paper's claim (fewer uploads) concerns the uplink; a non-sampled client's
``Q1`` steps run while the server waits for the cohort, so they do not gate the round.
Partial client participation (``"pcp"``, FedAvg-style): clients whose update is not aggregated
stay idle and their ``H_p`` goes stale (Fig. 1d compares the two).

Step sizes and normalisation. The gradients are those of the client's unnormalised loss
``1/2 ||X_p - W_R H_p||^2`` (plus the task's per-entry ridge), and ``lambda_max`` is taken of
that same loss's Hessian (``W_R^T W_R + ridge * n_p I`` for ``H``, ``H_p H_p^T + ridge * N_p I``
for ``W``), so the step times the gradient does not depend on how ``f_p`` is normalised
(``1/N_p``, ``N_p/N`` or ``1/P``); ``R`` are the rows the client observes. With the paper's
``h_lipschitz = 0.5`` the ``H`` step ``2 / lambda_max`` sits exactly at the stability edge of
the quadratic: the loss still cannot increase (the projected-gradient descent lemma holds with
equality) but the top eigen-direction does not contract; ``h_lipschitz = 1`` is the safe choice.
The third-party re-implementation (``nhatpd/FedMC-ADMM``, ``fd_mavg.py``) scales its gradients by
``1/P`` but not its Lipschitz estimates, which shrinks every step by ``P``; it also never
re-broadcasts ``W``, samples without replacement and fixes ``Q1 = 10``. None of that is copied.

Departures from the paper, each with its reason:

* ``s`` counts the aggregations done so far, plus one: a round in which no update arrives (all
  late or dropped) does not advance the ``Q2^s`` schedule.
* The ONMF clustering model of the paper also adds a sequentially increased orthogonality
  penalty (Wang et al., ICASSP 2019) before reading clusters off ``H``; it is not implemented
  (its schedule is not in the paper). The clustering objective is the fit
  ``||X - W H||^2 / (2N)`` over non-negative ``W`` and non-negative unit-norm columns of ``H``,
  and labels are ``argmax_k H_kj``.
* The paper stops at a relative objective change below 1e-8 or 500 rounds; here the scenario's
  stop rule decides.
* Clients that were selected but whose update is not aggregated (late, dropped, cancelled) are
  treated like non-sampled ones: under PCC they update ``H_p`` from the broadcast ``W^s``,
  under PCP they stay as they were. Lazy and eager runs therefore agree exactly.
* Work does not grow with ``N_p``: a device's speed is the fleet's business, and the paper
  charges communication, not computation.

Work is ``Q1 + Q2^s`` units per client per round (one unit = one local gradient step over the
client's block). The payload is ``W`` both ways (``M * K`` float64).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from simfl._checks import check_choice, check_int, check_real
from simfl.algorithms.base import Algorithm, Updates
from simfl.network import Payload, nbytes
from simfl.outcome import Outcome
from simfl.rng import Streams
from simfl.tasks.base import Task
from simfl.tasks.matrix import MatrixData, MatrixTask, project_h, project_w

__all__ = ["FedMAvg", "FedMAvgState", "h_steps", "w_steps"]

Array = NDArray[np.float64]
IntArray = NDArray[np.int64]

COMMUNICATION = ("pcc", "pcp")


@dataclass(frozen=True)
class FedMAvgState:
    """The server's ``W`` (M x K), every client's ``H_p`` stacked (K x N), aggregations done.

    No client data: the server knows only where each client's block of ``H`` is (``offsets``)
    and the constraint set of ``W`` (``nonnegative_w``). ``broadcast`` is the ``W^s`` the
    clients received in the round just aggregated, set by :meth:`FedMAvg.aggregate` for the
    background ``Q1`` steps of the clients outside the round (:meth:`FedMAvg.background`, which
    clears it again); ``None`` otherwise.
    """

    w: Array
    h: Array
    #: Client ``p`` owns columns ``offsets[p]:offsets[p + 1]`` of ``h``.
    offsets: IntArray
    #: Whether ``W`` is projected onto the non-negative orthant.
    nonnegative_w: bool
    aggregations: int = 0
    broadcast: Array | None = None

    def columns(self, p: int) -> slice:
        """Client ``p``'s columns of ``h``."""
        return slice(int(self.offsets[p]), int(self.offsets[p + 1]))


def _lipschitz(gram: Array, factor: float) -> Array:
    """``factor * lambda_max`` of each symmetric ``gram`` (``..., K, K``), shape ``(..., 1, 1)``."""
    top = np.asarray(np.linalg.eigvalsh(gram)[..., -1:, None], dtype=np.float64)
    return factor * top


def _inverse(lip: Array) -> Array:
    return np.where(lip > 0.0, 1.0 / np.where(lip > 0.0, lip, 1.0), 0.0)


def h_steps(gram: Array, rhs: Array, h: Array, steps: int, factor: float, constraint: str) -> Array:
    """``steps`` projected gradient steps on ``1/2 h^T G h - rhs^T h`` column by column.

    ``gram`` is ``(..., K, K)`` (ridge included), ``rhs`` and ``h`` are ``(..., K, n)``; the
    step is ``1 / (factor * lambda_max(gram))`` (no step if that is zero).
    """
    step = _inverse(_lipschitz(gram, factor))
    for _ in range(steps):
        h = project_h(h - step * (gram @ h - rhs), constraint)
    return h


def w_steps(w: Array, hht: Array, xht: Array, steps: int, factor: float) -> Array:
    """``steps`` gradient steps on ``1/2 ||X - W H||^2`` in ``W``: ``W <- W - (W HH^T - XH^T)/L``.

    ``hht`` is ``H H^T`` (ridge included) and ``xht`` is ``X H^T``; ``L = factor *
    lambda_max(hht)`` (no step if that is zero).
    """
    step = _inverse(_lipschitz(hht, factor))
    for _ in range(steps):
        w = w - step * (w @ hht - xht)
    return w


@dataclass(frozen=True)
class FedMAvg(Algorithm[FedMAvgState]):
    """Federated matrix factorisation by model averaging (see the module docstring).

    Parameters
    ----------
    q1
        Projected gradient steps on ``H_p`` per round (>= 1).
    q2
        Constant gradient steps on ``W_p`` per round (>= 1), or ``None`` (default) for the
        paper's diminishing ``Q2^s = floor(q_hat / s) + 1``.
    q_hat
        ``Q_hat`` of the diminishing schedule (>= 0; 100 as in the third-party code).
    communication
        ``"pcc"`` (partial client communication, the paper's default) or ``"pcp"`` (partial
        client participation: non-aggregated clients stay idle).
    h_lipschitz
        ``L_H / lambda_max(W^T W)`` (> 0); the paper's 0.5 gives the step ``2 / lambda_max``.
    w_lipschitz
        ``L_W / lambda_max(H H^T)`` (> 0); the paper's 5.
    """

    q1: int = 10
    q2: int | None = None
    q_hat: int = 100
    communication: str = "pcc"
    h_lipschitz: float = 0.5
    w_lipschitz: float = 5.0

    name: ClassVar[str] = "FedMAvg"

    def __post_init__(self) -> None:
        check_int("FedMAvg.q1", self.q1, low=1)
        if self.q2 is not None:
            check_int("FedMAvg.q2", self.q2, low=1)
        check_int("FedMAvg.q_hat", self.q_hat, low=0)
        check_choice("FedMAvg.communication", self.communication, COMMUNICATION)
        check_real("FedMAvg.h_lipschitz", self.h_lipschitz, low=0.0, low_open=True)
        check_real("FedMAvg.w_lipschitz", self.w_lipschitz, low=0.0, low_open=True)

    def q2_at(self, s: int) -> int:
        """``Q2^s`` for round ``s >= 1``: ``q2``, or ``floor(q_hat / s) + 1``."""
        return self.q2 if self.q2 is not None else self.q_hat // s + 1

    def check(self, task: Task | None) -> None:  # noqa: D102
        if not isinstance(task, MatrixTask):
            raise ValueError(
                f"Scenario.task must be a matrix factorisation task (tasks.matrix."
                f"SyntheticClustering, tasks.movielens.MovieLens) for FedMAvg, got {task!r}"
            )

    def initial_state(self, data: MatrixData, streams: Streams) -> FedMAvgState:  # noqa: D102
        w, h = data.initial_factors(streams)
        return FedMAvgState(w, h, data.offsets, data.nonnegative_w)

    def work(self, state: FedMAvgState, clients: IntArray) -> NDArray[np.float64]:
        """``Q1 + Q2^s`` local gradient steps per client."""
        return np.full(clients.shape, float(self.q1 + self.q2_at(state.aggregations + 1)))

    def payload(self, state: FedMAvgState) -> Payload:
        """``W`` travels both ways; ``H_p`` never leaves its client."""
        size = nbytes(state.w)
        return Payload(down=size, up=size)

    def _local_h(
        self, data: MatrixData, w: Array, h: Array, p: int
    ) -> tuple[Array, Array, Array, IntArray | None]:
        """Client ``p``'s ``H_p`` after ``Q1`` steps, with its block and rows (one client)."""
        rows, x = data.client_data(p)
        wr = w if rows is None else w[rows]
        gram = wr.T @ wr + data.ridge * wr.shape[0] * np.eye(data.rank)
        new = h_steps(gram, wr.T @ x, h, self.q1, self.h_lipschitz, data.h_constraint)
        return new, x, wr, rows

    def local_updates(
        self,
        state: FedMAvgState,
        data: MatrixData,
        clients: IntArray,
        round: int,
        streams: Streams,
    ) -> Updates:
        """Each client's ``H_p`` (padded to the widest client) and ``W_p``, one client at a time.

        Every client's numbers come from its own block and the state only (its own BLAS calls),
        so they do not depend on the rest of the batch.
        """
        q2 = self.q2_at(state.aggregations + 1)
        c, k = clients.size, data.rank
        width = int(data.client_cols().max())
        ws = np.broadcast_to(state.w, (c, *state.w.shape)).copy()
        hs = np.zeros((c, k, width))
        loss = np.zeros(c)
        for i, p in enumerate(clients.tolist()):
            cols = data.columns(p)
            h_old = state.h[:, cols]
            h, x, wr, rows = self._local_h(data, state.w, h_old, p)
            loss[i] = 0.5 * np.sum((x - wr @ h_old) ** 2) / h_old.shape[1]
            hht = h @ h.T + data.ridge * h.shape[1] * np.eye(k)
            new = w_steps(wr, hht, x @ h.T, q2, self.w_lipschitz)
            if rows is None:
                ws[i] = new
            else:
                ws[i, rows] = new
            hs[i, :, : h.shape[1]] = h
        return Updates(clients.astype(np.int64), {"w": ws, "h": hs}, loss=loss)

    def aggregate(self, state: FedMAvgState, updates: Updates, outcome: Outcome) -> FedMAvgState:
        """Mean of the uploaded ``W_p``, projected; store the new ``H_p``.

        The new state keeps the broadcast ``W^s`` (``state.w``) for :meth:`background`.
        """
        params = updates.params
        w = project_w(np.mean(params["w"], axis=0), state.nonnegative_w)
        h = state.h.copy()
        for i, p in enumerate(updates.clients.tolist()):
            cols = state.columns(p)
            h[:, cols] = params["h"][i, :, : cols.stop - cols.start]
        return replace(state, w=w, h=h, aggregations=state.aggregations + 1, broadcast=state.w)

    def background(self, state: FedMAvgState, data: MatrixData, outcome: Outcome) -> FedMAvgState:
        """PCC: every client not aggregated in ``outcome`` takes its ``Q1`` steps on ``H_p``.

        They start from the broadcast ``W^s`` (``state.broadcast``), in one batched computation;
        under PCP they stay idle. Either way the returned state no longer holds ``W^s``.
        """
        if state.broadcast is None:
            return state
        done = np.zeros(data.n_clients, dtype=bool)
        done[outcome.devices[outcome.arrived]] = True
        if self.communication != "pcc" or done.all():
            return replace(state, broadcast=None)
        h = state.h.copy()
        self._background(data, state.broadcast, h, np.flatnonzero(~done))
        return replace(state, h=h, broadcast=None)

    def _background(self, data: MatrixData, w: Array, h: Array, clients: IntArray) -> None:
        """PCC: ``Q1`` steps on the ``H_p`` of ``clients`` from ``w``, in place, batched."""
        k = data.rank
        xtw = data.xt_w(w)
        if xtw is not None:  # every client sees all rows: one Gram, one block of columns
            idx = np.concatenate([np.arange(data.offsets[p], data.offsets[p + 1]) for p in clients])
            gram = w.T @ w + data.ridge * data.n_rows * np.eye(k)
            h[:, idx] = h_steps(
                gram, xtw[idx].T, h[:, idx], self.q1, self.h_lipschitz, data.h_constraint
            )
            return
        blocks = [data.client_data(int(p)) for p in clients]
        width = max(x.shape[1] for _, x in blocks)
        grams = np.empty((clients.size, k, k))
        rhs = np.zeros((clients.size, k, width))
        hs = np.zeros((clients.size, k, width))
        for i, (rows, x) in enumerate(blocks):
            wr = w if rows is None else w[rows]
            grams[i] = wr.T @ wr + data.ridge * wr.shape[0] * np.eye(k)
            rhs[i, :, : x.shape[1]] = wr.T @ x
            hs[i, :, : x.shape[1]] = h[:, data.columns(int(clients[i]))]
        new = h_steps(grams, rhs, hs, self.q1, self.h_lipschitz, data.h_constraint)
        for i, p in enumerate(clients.tolist()):
            cols = data.columns(p)
            h[:, cols] = new[i, :, : cols.stop - cols.start]

    def evaluate(self, state: FedMAvgState, data: MatrixData) -> dict[str, float]:  # noqa: D102
        return data.evaluate(state.w, state.h)
