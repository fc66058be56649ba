"""FedDAR for the domain-mixed linear task: a shared representation and one head per domain.

Zhong, He, Ren, Li, Li, "FedDAR: Federated Domain-Aware Representation Learning", ICLR 2023
(arXiv 2209.04007), Algorithm 1 with the linear model of its Section 3 / Appendix A. The
objective is ``(1/M) sum_m R_m`` (equal weight per domain); a client's empirical risk re-weights
every sample of domain ``m`` by ``u_m = L / (L_m M)`` so that ``sum_i (L_i/L) R_i`` equals it.
Each round, every participating client, given the server's ``B`` (d x k) and heads ``w_m``:

1. Head step, with ``B`` frozen: for each domain ``m`` it holds (``L_{i,m} > 0``), a local head
   ``w_{m,i}`` on ``R_{i,m}(w) = (1/2 L_{i,m}) ||X_{i,m} B w - y_{i,m}||^2`` by
   ``head_solver``:

   * ``"lstsq"``: exact least squares, the minimum-norm solution when the client holds fewer
     than ``k`` samples of the domain (the solution of the linear analysis, Alg. 2);
   * ``"gd"``: ``head_steps`` gradient steps of size ``head_step_size`` started from the
     server's head ``w_m`` (Alg. 1's ``tau_h`` GRD steps).

2. Encoder step, with the client's new heads fixed (Alg. 1 uses the freshly updated heads): one
   gradient step on the re-weighted risk
   ``R_i(B) = (1/2 L_i) sum_j u_{z_j} (x_j^T B w_{z_j,i} - y_j)^2`` (the linear analysis'
   single GD step on ``B``): ``B_i = B - step_size * grad``.

The server averages ``B_i`` with weights ``L_i / L`` over the accepted clients, orthonormalises
(QR, as in the linear analysis) and aggregates each domain's heads over the clients holding it:

* ``"wa"`` (weighted average): ``w_m = sum_i (L_{i,m} / L_m) w_{m,i}``;
* ``"sa"`` (second-order aggregation):
  ``w_m = (sum_i a_{i,m} H_{i,m} + ridge I)^{-1} sum_i a_{i,m} H_{i,m} w_{m,i}`` with
  ``a_{i,m} = L_{i,m} / L_m`` and ``H_{i,m} = B^T X_{i,m}^T X_{i,m} B / L_{i,m}``, the k x k
  Hessian of ``R_{i,m}``. If every local update were a Newton step ``w - H_i^{-1} g_i``, this is
  the global Newton step, since ``sum_i a_i H_i w_i = H w - g``. With exact local least squares
  (any ``L_{i,m}``, also below ``k``) ``H_{i,m} w_{m,i} = B^T X_{i,m}^T y_{i,m} / L_{i,m}``,
  so SA returns the pooled least-squares head over all clients' domain-m data.

What WA does depends on the head solver. With ``"lstsq"``, a client holding ``L_{i,m} < k``
samples of a domain returns the minimum-norm fit, the projection of the target on the span of
its features (half the true head in expectation for one sample, k = 2), so WA settles on a
biased point however long it runs (the paper's "FedDAR-WA fails to converge"). With ``"gd"``
from the server head, the average of one gradient step is the global gradient step on
``R_m``, and the true head is a fixed point of any number of steps, so WA converges. SA with
``"gd"`` weights by Hessians local heads that are not Newton steps (the paper's virtual-objective
argument would then weight by ``I / eta``, i.e. average); the true head is still a fixed point
and, in ``analysis/feddar.py``, SA and WA with ``"gd"`` end at the same error as SA with
``"lstsq"`` (the minimum-norm solver only breaks WA).

Departures and choices:

* ``L_m`` and ``L`` in the aggregation weights are the totals over the accepted clients of the
  round (the weights sum to one); with full participation they are the paper's. A domain that no
  accepted client holds keeps its head. ``u_m`` uses the global counts, shared once at set-up
  (with fresh samples, their expectations); domains absent from every client get ``u_m = 0`` and
  ``M`` counts the domains present. ``reweight=False`` sets ``u_m = 1`` (the RW ablation).
* The QR after averaging (``B = Q R``, signs fixed so that ``diag(R) > 0``) is a change of basis:
  the aggregated heads are re-expressed as ``R w_m`` so the model ``B w_m`` is unchanged (this
  matters when the next round starts from the server heads, ``head_solver="gd"``).
* The encoder step uses the client's local heads (Alg. 1), not the aggregated heads of the same
  round (the linear analysis' Alg. 2 recomputes global heads first, which needs a second
  exchange per round). With ``"lstsq"`` and ``aggregation="sa"`` the heads are still exactly
  the pooled least-squares heads; only ``B``'s step differs from Alg. 2.
* Defaults ``step_size=1.0`` and, for ``"gd"``, 5 head steps of 0.1 were picked on a grid on
  the synthetic task (unit-norm heads, so ``(1/M) sum_m w_m w_m^T`` has eigenvalues below 1);
  the paper gives no step sizes for its synthetic experiment.
* ``ridge`` (default 1e-8) is added to ``sum_i a_{i,m} H_{i,m}`` (the pooled mean Hessian, near
  the identity here) when SA inverts it.
* ``init="mom"`` (default): the method-of-moments start of FedRep's Alg. 2
  (``E[y^2 x x^T]`` has the top-k eigenspace ``col(B*)`` under any domain mixture); the paper
  says only "MoM-type". The server heads start at 0.
* Payload: down ``B`` and the ``M`` heads; up ``B``, the ``M`` heads, the ``M`` domain counts
  of the round (8 bytes each) and, for SA, one k x k Hessian per domain head. Every client is
  charged for all ``M`` domains (an upper bound for clients holding fewer).
* Work: one unit per round with either head solver, as :class:`~simfl.algorithms.FedRep`: the
  features ``X B`` are computed once per round in an ``O(m d k)`` pass, and each head gradient
  step on them costs only ``O(m k)``. (:class:`~simfl.algorithms.GDGD` counts one unit per
  gradient step instead.)
* Synchronous policies only (no ``shared``/``with_shared``): SA has no staleness-mixing form.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from simfl._checks import check_bool, check_choice, check_int, check_real
from simfl.algorithms._linear import check_init, initial_representation
from simfl.algorithms.base import Algorithm, Updates
from simfl.network import Payload, nbytes
from simfl.outcome import Outcome
from simfl.rng import Streams
from simfl.tasks.base import Task
from simfl.tasks.domain_mixture import DomainMixture, DomainMixtureData, DomainModel

__all__ = ["FedDAR", "FedDARState", "domain_reweighting"]

Array = NDArray[np.float64]
IntArray = NDArray[np.int64]


def domain_reweighting(totals: Array) -> Array:
    """``u_m = L / (L_m M)`` from the global domain counts ``L_m`` (0 for absent domains).

    ``M`` counts the domains present, so that ``sum_m (L_m / L) u_m = 1``.
    """
    totals = np.asarray(totals, dtype=np.float64)
    present = totals > 0
    u = np.zeros_like(totals)
    u[present] = totals.sum() / (totals[present] * present.sum())
    return u


@dataclass(frozen=True)
class FedDARState:
    """Representation ``B`` (d x k), domain heads (M x k) and the re-weighting ``u`` (M)."""

    representation: Array
    heads: Array
    reweighting: Array


@dataclass(frozen=True)
class FedDAR(Algorithm[FedDARState]):
    """Linear FedDAR: per-domain local heads, one re-weighted step on ``B``, WA or SA heads.

    Parameters
    ----------
    aggregation
        Head aggregation: ``"sa"`` (second-order) or ``"wa"`` (weighted average).
    head_solver
        ``"lstsq"`` (exact, minimum-norm) or ``"gd"`` (gradient steps from the server head).
    head_steps
        Gradient steps on each head with ``head_solver="gd"`` (>= 1).
    head_step_size
        Step on the heads with ``head_solver="gd"`` (> 0).
    step_size
        Gradient step on the representation (> 0).
    reweight
        Re-weight each sample by ``u_m`` (the paper) or not (``False``, the RW ablation).
    init, init_clients
        Initial representation, as for :class:`~simfl.algorithms.FedRep`.
    ridge
        Ridge added to the aggregated Hessian when SA inverts it (>= 0).
    """

    aggregation: str = "sa"
    head_solver: str = "lstsq"
    head_steps: int = 5
    head_step_size: float = 0.1
    step_size: float = 1.0
    reweight: bool = True
    init: str = "mom"
    init_clients: int | None = None
    ridge: float = 1e-8

    name: ClassVar[str] = "FedDAR"

    def __post_init__(self) -> None:
        check_choice("FedDAR.aggregation", self.aggregation, ("sa", "wa"))
        check_choice("FedDAR.head_solver", self.head_solver, ("lstsq", "gd"))
        check_int("FedDAR.head_steps", self.head_steps, low=1)
        check_real("FedDAR.head_step_size", self.head_step_size, low=0.0, low_open=True)
        check_real("FedDAR.step_size", self.step_size, low=0.0, low_open=True)
        object.__setattr__(self, "reweight", check_bool("FedDAR.reweight", self.reweight))
        check_init("FedDAR", self.init, self.init_clients)
        check_real("FedDAR.ridge", self.ridge, low=0.0)

    @property
    def label(self) -> str:
        """A short label such as ``"FedDAR-SA"`` (``"FedDAR-WA (gd)"`` with the GD solver)."""
        solver = "" if self.head_solver == "lstsq" else f" ({self.head_solver})"
        return f"FedDAR-{self.aggregation.upper()}{solver}"

    def check(self, task: Task | None) -> None:  # noqa: D102
        if not isinstance(task, DomainMixture):
            raise ValueError(
                f"Scenario.task must be a DomainMixture (simfl.tasks.domain_mixture: samples "
                f"with domain labels) for FedDAR, got {task!r}"
            )

    def initial_state(self, data: DomainMixtureData, streams: Streams) -> FedDARState:  # noqa: D102
        b = initial_representation(self.init, self.init_clients, data, streams)
        u = domain_reweighting(data.domain_totals()) if self.reweight else None
        if u is None:
            u = np.ones(data.n_domains)
        return FedDARState(b, np.zeros((data.n_domains, data.k)), u)

    def payload(self, state: FedDARState) -> Payload:
        """``B`` and the heads down; ``B``, heads, counts (and SA's Hessians) up."""
        b, w = state.representation, state.heads
        n_dom, k = w.shape
        up = nbytes(b, w) + 8 * n_dom
        if self.aggregation == "sa":
            up += nbytes(np.empty((n_dom, k, k)))
        return Payload(down=nbytes(b, w), up=up)

    def local_updates(  # noqa: D102
        self,
        state: FedDARState,
        data: DomainMixtureData,
        clients: NDArray[np.int64],
        round: int,
        streams: Streams,
    ) -> Updates:
        b, w_server, u = state.representation, state.heads, state.reweighting
        n_dom = w_server.shape[0]
        x, y, z = data.train_samples(clients, round)  # z: (C, L) domain labels
        size = z.shape[1]
        mask = (z[:, None, :] == np.arange(n_dom)[None, :, None]).astype(np.float64)  # (C, M, L)
        counts = mask.sum(axis=2)  # (C, M)
        feats = x @ b  # (C, L, k)
        fm = mask[:, :, :, None] * feats[:, None, :, :]  # (C, M, L, k): domain-m rows only
        fmt = fm.transpose(0, 1, 3, 2)
        gram = fmt @ fm  # (C, M, k, k)
        moment = (fmt @ y[:, None, :, None])[:, :, :, 0]  # (C, M, k)
        held = counts > 0
        per = np.where(held, counts, 1.0)[:, :, None]  # guards 0/0 for domains not held

        # training loss of the server model (re-weighted), before the local updates
        pred = np.take_along_axis(feats @ w_server.T, z[:, :, None], axis=2)[:, :, 0]
        loss = 0.5 * np.mean(u[z] * (pred - y) ** 2, axis=1)

        if self.head_solver == "lstsq":
            heads = (np.linalg.pinv(fm) @ y[:, None, :, None])[:, :, :, 0]  # (C, M, k)
            heads = np.where(held[:, :, None], heads, w_server[None, :, :])
        else:
            heads = np.broadcast_to(w_server, (clients.size, *w_server.shape)).copy()
            for _ in range(self.head_steps):
                grad_w = ((gram @ heads[:, :, :, None])[:, :, :, 0] - moment) / per
                heads = heads - self.head_step_size * grad_w

        w_z = np.take_along_axis(heads, z[:, :, None], axis=1)  # (C, L, k): head of each sample
        residual = (feats[:, :, None, :] @ w_z[:, :, :, None])[:, :, 0, 0] - y  # (C, L)
        weighted = (u[z] * residual)[:, None, :]  # (C, 1, L)
        grad_b = (x.transpose(0, 2, 1) * weighted) @ w_z / size  # (C, d, k)
        params = {
            "representation": b[None, :, :] - self.step_size * grad_b,
            "heads": heads,
            "counts": counts,
        }
        if self.aggregation == "sa":
            params["hessians"] = gram / per[:, :, :, None]
        # the aggregation weight of B is the client's sample count L_i
        return Updates(
            clients.astype(np.int64), params, loss=loss, weight=np.full(clients.size, float(size))
        )

    def aggregate(self, state: FedDARState, updates: Updates, outcome: Outcome) -> FedDARState:
        """Average ``B`` (weights ``L_i``), QR, and aggregate each domain's heads (WA or SA)."""
        size = updates.weight
        assert size is not None
        params = updates.params
        b_bar = np.sum(size[:, None, None] * params["representation"], axis=0) / size.sum()
        counts = params["counts"]  # (C, M)
        totals = counts.sum(axis=0)  # (M,)
        present = totals > 0
        weights = counts / np.where(present, totals, 1.0)  # a_{i,m}, zero where not held
        heads = params["heads"]
        if self.aggregation == "wa":
            agg = np.sum(weights[:, :, None] * heads, axis=0)  # (M, k)
        else:
            weighted_h = weights[:, :, None, None] * params["hessians"]  # (C, M, k, k)
            eye = np.eye(heads.shape[2])
            lhs = np.sum(weighted_h, axis=0) + self.ridge * eye
            lhs[~present] = eye  # domains nobody held: any invertible matrix (kept below)
            rhs = np.sum((weighted_h @ heads[:, :, :, None])[:, :, :, 0], axis=0)
            inverse = np.linalg.pinv(lhs) if self.ridge == 0 else np.linalg.inv(lhs)
            agg = (inverse @ rhs[:, :, None])[:, :, 0]
        new_heads = np.where(present[:, None], agg, state.heads)
        q, r = np.linalg.qr(b_bar)
        signs = np.where(np.diag(r) < 0, -1.0, 1.0)
        q, r = q * signs, signs[:, None] * r
        return FedDARState(np.asarray(q), np.asarray(new_heads @ r.T), state.reweighting)

    def evaluate(self, state: FedDARState, data: Any) -> dict[str, float]:
        """The task's metrics, every test point predicted with its domain's head."""
        metrics: dict[str, float] = data.evaluate(DomainModel(state.representation, state.heads))
        return metrics
