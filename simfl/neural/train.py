"""Batched local training: a whole cohort's minibatch SGD as one vectorised computation.

Every client of the cohort has its own copy of the parameters that learn (a leading client axis)
and its own momentum buffers, and runs its own sequence of minibatches; one step of the cohort
is one forward and one backward pass over all clients' minibatches (:meth:`Net.forward`),
and the gradient of the SUM of the clients' mean losses splits into each client's own gradient.
Clients with fewer samples run fewer steps: in the steps they do not take they are masked out
(parameters and momentum untouched), so each client's result is what training it alone gives,
up to the rounding of batched matrix products. They also sit those steps out
(:data:`SIT_OUT`): the cohort is put in order of its clients' steps per epoch, most first, so
the clients that take a step are a leading block of it and the step computes only that block
(views of the stacked tensors, nothing copied), where every layer it computes is stacked
per client. With unequal clients the masked steps are most of the work (a Dirichlet(0.5) or
log-normal split of Fashion-MNIST: a third to three quarters of a cohort's client-steps);
``analysis/perf_neural_batching.py`` measures it.

The update is the client optimiser's step (:mod:`simfl.neural.optim`: ``torch.optim``'s SGD,
Adam or AdamW, element for element, weight decay on weights, not biases, as in the FedRep
code), with ``mu * (w - w0)`` added to the gradient for a proximal term (FedProx). The
optimiser state (momentum buffers, Adam's moments and step counts) starts at zero with each
local update (the code builds a new optimiser every round), or from the state given
(``opt_state``: a client optimiser with ``state="keep"``), and carries over between the phases
of one update.

Minibatches: in every epoch a client draws a permutation of its samples from its own keyed
generator and cuts it into batches of ``batch_size`` (the last one smaller), like a shuffling
``DataLoader`` without ``drop_last``. Layers below the lowest learning layer are frozen for the
whole phase, so their output is computed once per phase and reused by every epoch (FedRep's head
epochs then cost almost nothing); the device's simulated work still counts the forward pass
through them each epoch (:meth:`Net.train_macs`).

Everything runs on the device of the pooled images ``x`` (the task's ``device``): parameters
are moved there on entry (no copy on the CPU) and the results stay there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as nnf
from numpy.typing import NDArray
from torch import Tensor

from simfl.neural.models import Net, Params, param_layer
from simfl.neural.module import AnyNet, ModuleNet
from simfl.neural.optim import DEFAULT_SGD, SGD, ClientOptimizer, OptState

__all__ = [
    "DEFAULT_SGD",
    "SGD",
    "Phase",
    "epoch_order",
    "evaluate_cohort",
    "score_cohort",
    "train_cohort",
]

IntArray = NDArray[np.int64]
#: Samples (all clients together) per chunk when a frozen prefix or an evaluation runs over
#: whole client data sets; bounds the memory of convolution outputs.
CHUNK = 1024
#: Whether clients without a sample in a step sit it out (the module docstring); ``False``
#: computes every client every step, masking those without one: the same numbers (tested), a
#: switch for the tests and the benchmark, which compare the two.
SIT_OUT = True


@dataclass(frozen=True)
class Phase:
    """``epochs`` passes over the client's data in which only ``layers`` learn."""

    layers: tuple[str, ...]
    epochs: int


def epoch_order(rng: np.random.Generator, n: int, batch_size: int) -> IntArray:
    """One epoch of a client: a permutation of ``range(n)`` cut into rows of ``batch_size``.

    Shape ``(ceil(n / batch_size), batch_size)``; the last row is padded with -1.
    """
    steps = math.ceil(n / batch_size)
    order = np.full(steps * batch_size, -1, dtype=np.int64)
    order[:n] = rng.permutation(n)
    return order.reshape(steps, batch_size)


def _stack_orders(orders: list[IntArray], batch_size: int) -> IntArray:
    steps = max((o.shape[0] for o in orders), default=0)
    out = np.full((len(orders), steps, batch_size), -1, dtype=np.int64)
    for c, o in enumerate(orders):
        out[c, : o.shape[0]] = o
    return out


def _gather(x: Tensor, index: Tensor) -> Tensor:
    """``x[index]`` for a pooled tensor ``x`` and an index array of any shape (-1 -> 0)."""
    flat = index.clamp(min=0).reshape(-1)
    return x[flat].reshape(*index.shape, *x.shape[1:])


def _features(net: Net, params: Params, x: Tensor, index: Tensor, stop: int) -> Tensor:
    """Output of layers ``0:stop`` for every sample of every client: ``(C, Nmax, ...)``."""
    step = max(1, CHUNK // max(1, index.shape[0]))
    chunks = [
        net.forward(params, _gather(x, index[:, i : i + step]), 0, stop)
        for i in range(0, index.shape[1], step)
    ]
    return torch.cat(chunks, dim=1)


def train_cohort(
    net: AnyNet,
    params: Params,
    x: Tensor,
    y: Tensor,
    index: IntArray,
    phases: Sequence[Phase],
    sgd: ClientOptimizer,
    rngs: Sequence[np.random.Generator],
    prox: tuple[float, Params] | None = None,
    limit: NDArray[np.float64] | None = None,
    opt_state: OptState | None = None,
) -> tuple[Params, NDArray[np.float64]]:
    """Train a cohort of ``C`` clients, each on its own samples, in one batched computation.

    Parameters
    ----------
    net
        The network.
    params
        Starting parameters: each layer's either stacked ``(C, ...)`` or shared.
    x, y
        The pooled training images and labels.
    index
        ``(C, Nmax)`` indices into ``x`` of each client's samples, padded with -1.
    phases
        The local schedule, in order.
    sgd
        The client optimiser (:mod:`simfl.neural.optim`).
    rngs
        One generator per client; each epoch draws the client's permutation from it.
    prox
        ``(mu, w0)``: add the proximal term ``mu/2 ||w - w0||^2`` to every client's loss.
    limit
        Each client's number of minibatch steps (partial work): a client stops once it has
        taken that many, its batches drawn as without the limit (``None``: every step).
    opt_state
        The optimiser state to start from, by ``"<slot>/<parameter>"``, stacked ``(C, ...)``
        (entries it lacks start at zero); on return the dict holds the final state, on the
        device of ``x`` (it is updated in place). ``None``: a fresh state, not returned.

    Returns
    -------
    params, loss
        The parameters after training (trained ones stacked, others as given), on the device
        of ``x`` (the computation runs there), and each client's mean minibatch loss over the
        whole update (NaN for a client without data).

    Notes
    -----
    Clients without a sample in a step sit it out (:data:`SIT_OUT`): for the call the cohort
    is put in order of its clients' steps per epoch, most first (stable), and back after it.
    The results are those of computing every client every step and masking the idle ones: bit
    for bit where the cohort is already in that order (equal clients, W2's shards), to float32
    rounding where the reordering moves clients in memory (MKL's small batched products round
    by their output's alignment; ``tests/test_neural_train.py``).
    """
    if isinstance(net, ModuleNet) and net.trainer["path"] == "cohort":
        chunk = net.cohort_chunk(sgd.batch_size)
        if index.shape[0] > chunk:  # clients train independently: the cohort in pieces
            return _in_chunks(
                net, params, x, y, index, phases, sgd, rngs, prox, limit, chunk, opt_state
            )
    counts = (index >= 0).sum(axis=1)
    steps = -(-counts // sgd.batch_size)
    order = np.argsort(-steps, kind="stable")
    if SIT_OUT and (order != np.arange(order.size)).any():
        # the cohort in order of steps per epoch, most first (this call again), and back
        dev = x.device
        params = _on(params, dev)
        there = torch.from_numpy(order).to(dev)
        inner = None
        if opt_state is not None:
            inner = {k: v.to(dev).index_select(0, there) for k, v in opt_state.items()}
        got, loss = train_cohort(
            net,
            _in_order(net, params, there),
            x,
            y,
            index[order],
            phases,
            sgd,
            [rngs[i] for i in order],
            None if prox is None else (prox[0], _in_order(net, _on(prox[1], dev), there)),
            None if limit is None else limit[order],
            inner,
        )
        back = np.argsort(order)
        home = torch.from_numpy(back).to(dev)
        if opt_state is not None and inner is not None:
            opt_state.clear()
            opt_state.update({k: v.index_select(0, home) for k, v in inner.items()})
        trained = set(net.params_of({layer for p in phases for layer in p.layers}))
        trained |= set(getattr(net, "buffer_names", ()))
        return {
            n: got[n].index_select(0, home) if n in trained else p for n, p in params.items()
        }, loss[back]
    c = index.shape[0]
    dev = x.device
    if prox is not None:
        prox = (prox[0], _on(prox[1], dev))
    idx = torch.from_numpy(index).to(dev)
    cohort = _Cohort(net, x, y, idx, sgd, prox, np.zeros(c), np.zeros(c))
    if opt_state is not None:
        cohort.bufs = {k: v.to(dev, copy=True) for k, v in opt_state.items()}
    params = _on(params, dev)
    owned: set[str] = set()  # parameters copied into this call's own stacked tensors
    for n in getattr(net, "buffer_names", ()):  # each client's own buffers, updated in place
        p = params[n].detach()
        params[n] = p.clone() if _stacked(net, n, p) else p.expand(c, *p.shape).clone()
    if isinstance(net, ModuleNet) and net.random:  # each client's dropout seeds, keyed
        cohort.drop = [np.random.default_rng(r.integers(2**63)) for r in rngs]
    for phase in phases:
        names = net.params_of(phase.layers)
        _unfreeze(net, params, names, owned, c)
        first = min(net.layer_names.index(param_layer(n)) for n in names) if net.splittable else 0
        # clients sit steps out where every layer a step computes is stacked per client (a
        # shared one is one product over all the clients' rows, whose rounding may follow
        # their number)
        layers = set(net.layer_names[first:])
        cohort.sit_out = SIT_OUT and all(
            _stacked(net, n, p) for n, p in params.items() if param_layer(n) in layers
        )
        with torch.no_grad():
            feats = None
            if isinstance(net, Net) and first > 0:
                feats = _features(net, params, x, cohort.idx, first)
        for _ in range(phase.epochs):
            order = _stack_orders(
                [epoch_order(rngs[i], int(counts[i]), sgd.batch_size) for i in range(c)],
                sgd.batch_size,
            )
            for s in range(order.shape[1]):
                pos = order[:, s]
                if limit is not None:  # clients past their steps sit the rest out
                    going = cohort.steps_done < limit
                    if not going.any():
                        break
                    pos = np.where(going[:, None], pos, -1)
                cohort.step(params, names, pos, feats, first)
    out = {n: p.detach() for n, p in params.items()}
    if opt_state is not None:
        opt_state.clear()
        opt_state.update(cohort.bufs)
    with np.errstate(invalid="ignore"):
        return out, cohort.loss_sum / cohort.steps_done


def _in_chunks(
    net: ModuleNet,
    params: Params,
    x: Tensor,
    y: Tensor,
    index: IntArray,
    phases: Sequence[Phase],
    sgd: ClientOptimizer,
    rngs: Sequence[np.random.Generator],
    prox: tuple[float, Params] | None,
    limit: NDArray[np.float64] | None,
    chunk: int,
    opt_state: OptState | None = None,
) -> tuple[Params, NDArray[np.float64]]:
    """:func:`train_cohort` on pieces of ``chunk`` clients (the cohort path's memory bound)."""
    c = index.shape[0]
    outs: list[Params] = []
    losses = []
    states: list[OptState] = []
    for lo in range(0, c, chunk):
        part = slice(lo, min(c, lo + chunk))

        def piece(ps: Params, part: slice = part) -> Params:
            return {n: p[part] if net.stacked(n, p) else p for n, p in ps.items()}

        state = None if opt_state is None else {k: v[part] for k, v in opt_state.items()}
        if state is not None:
            states.append(state)
        got, loss = train_cohort(
            net,
            piece(params),
            x,
            y,
            index[part],
            phases,
            sgd,
            rngs[part],
            None if prox is None else (prox[0], piece(prox[1])),
            None if limit is None else limit[part],
            state,
        )
        outs.append(got)
        losses.append(loss)
    merged = {
        n: torch.cat([o[n] for o in outs]) if net.stacked(n, outs[0][n]) else outs[0][n]
        for n in outs[0]
    }
    if opt_state is not None:  # each piece filled its own state: the cohort's, in order
        opt_state.clear()
        opt_state.update({k: torch.cat([st[k] for st in states]) for k in states[0]})
    return merged, np.concatenate(losses)


def _stacked(net: AnyNet, name: str, p: Tensor) -> bool:
    """Whether the tensor ``p`` of parameter ``name`` is stacked per client (a leading axis)."""
    return p.dim() == len(net.shapes[name]) + 1


def _in_order(net: AnyNet, params: Params, order: Tensor) -> Params:
    """The stacked parameters' clients in ``order`` (copies); shared ones as they are."""
    return {n: p.index_select(0, order) if _stacked(net, n, p) else p for n, p in params.items()}


def _on(params: Params, device: torch.device) -> Params:
    """A copy of the dict with every tensor on ``device`` (no copy of one already there)."""
    return {n: p.to(device) for n, p in params.items()}


def _unfreeze(net: AnyNet, params: Params, names: Sequence[str], owned: set[str], c: int) -> None:
    """Make the parameters ``names`` of a phase trainable and detach the others (in place).

    A trainable parameter is first copied into a tensor of this call, stacked per client.
    """
    for n, p in params.items():
        if n not in names:
            params[n] = p.detach()  # frozen in this phase
        elif n not in owned:
            p = (
                p.detach().clone()
                if _stacked(net, n, p)
                else p.detach().expand(c, *p.shape).clone()
            )
            params[n] = p.requires_grad_(True)
            owned.add(n)
        else:
            params[n] = p.requires_grad_(True)


@dataclass
class _Cohort:
    """What one :func:`train_cohort` call trains on, its optimiser state and its losses."""

    net: AnyNet
    x: Tensor
    y: Tensor
    idx: Tensor
    sgd: ClientOptimizer
    prox: tuple[float, Params] | None
    loss_sum: NDArray[np.float64]
    steps_done: NDArray[np.float64]
    #: the optimiser state, by ``"<slot>/<parameter>"``, stacked per client
    bufs: OptState = field(default_factory=dict)
    #: each client's generator of dropout seeds (a module with random layers), else ``None``
    drop: list[np.random.Generator] | None = None
    #: whether idle clients sit this phase's steps out (:data:`SIT_OUT`, every layer from
    #: the phase's first stacked)
    sit_out: bool = False

    def step(
        self, params: Params, names: Sequence[str], pos: IntArray, feats: Tensor | None, first: int
    ) -> None:
        """One minibatch of every client (``pos``: its positions, -1 for none) and its update.

        Where :attr:`sit_out`, the clients after the last one with a sample sit the step out:
        it runs on views of the leading block of every stacked tensor, the same operations on
        the same memory as the whole cohort's step, so the same numbers bit for bit.
        """
        if isinstance(self.net, ModuleNet) and not (pos >= 0).any():
            return  # no client has a sample (partial work): a module computes nothing
        k = pos.shape[0]
        if self.sit_out:
            going = np.flatnonzero((pos >= 0).any(axis=1))
            k = int(going[-1]) + 1 if going.size else k
        lead = {n: self._lead(n, p, k) for n, p in params.items()}
        for n in names:
            lead[n].requires_grad_(True)
        bufs = {n: b[:k] for n, b in self.bufs.items()}
        prox = None
        if self.prox is not None:
            prox = (self.prox[0], {n: self._lead(n, w, k) for n, w in self.prox[1].items()})
        pos_t = torch.from_numpy(pos[:k]).to(self.idx.device)
        inp = None if feats is None else feats[:k]
        loss, n_valid = self.loss(lead, self.idx[:k], pos_t, inp, first)
        grads = torch.autograd.grad(loss.sum(), [lead[n] for n in names])
        active = n_valid > 0
        self.sgd.step(lead, bufs, names, grads, active, prox)
        for key, b in bufs.items():  # state the step made anew (the first, or a masked one)
            full = self.bufs.get(key)
            if k == pos.shape[0]:
                self.bufs[key] = b
                continue
            if full is None:  # the others' first state: zero, as a masked step makes it
                self.bufs[key] = full = b.new_zeros((pos.shape[0], *b.shape[1:]))
            if b.data_ptr() != full.data_ptr():
                with torch.no_grad():
                    full[:k] = b
        act = active.cpu().numpy()
        self.loss_sum[:k][act] += loss.detach().cpu().numpy()[act]
        self.steps_done[:k][act] += 1

    def _lead(self, name: str, p: Tensor, k: int) -> Tensor:
        """The leading ``k`` clients of a stacked tensor (a view); a shared one as it is."""
        return p.detach()[:k] if _stacked(self.net, name, p) else p.detach()

    def loss(
        self, params: Params, idx: Tensor, pos: Tensor, feats: Tensor | None, first: int
    ) -> tuple[Tensor, Tensor]:
        """Each client's mean cross-entropy on its minibatch, and the minibatch's size.

        ``idx``: the clients' sample indices (rows of :attr:`idx`), ``pos`` the minibatch's
        positions in them, ``feats`` their frozen prefix's output (``None``: from the images).
        """
        valid = pos >= 0
        ids = idx.gather(1, pos.clamp(min=0))
        if isinstance(self.net, ModuleNet):
            n_valid = valid.sum(dim=1)
            seeds = None
            if self.drop is not None:
                seeds = [int(g.integers(2**63)) for g in self.drop[: ids.shape[0]]]
            flat = ids.clamp(min=0)
            losses = self.net.losses(
                params, _gather(self.x, flat), self.y[flat], n_valid.cpu().numpy(), seeds
            )
            return losses, n_valid
        if feats is None:
            inp = _gather(self.x, ids)
        else:
            inp = feats[torch.arange(ids.shape[0], device=ids.device)[:, None], pos.clamp(min=0)]
        logits = self.net.forward(params, inp, first, None)
        ce = nnf.cross_entropy(
            logits.reshape(-1, logits.shape[-1]),
            self.y[ids.clamp(min=0)].reshape(-1),
            reduction="none",
        ).reshape(ids.shape)
        n_valid = valid.sum(dim=1)
        return (ce * valid).sum(dim=1) / n_valid.clamp(min=1), n_valid


def evaluate_cohort(
    net: Net, params: Params, x: Tensor, y: Tensor, index: IntArray
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Each client's number of correct predictions and summed cross-entropy on its samples.

    ``params`` as for :func:`train_cohort`; ``index`` ``(C, T)`` padded with -1. Runs on the
    device of ``x``.
    """
    dev = x.device
    params = _on(params, dev)
    idx = torch.from_numpy(index).to(dev)
    correct = torch.zeros(index.shape[0], dtype=torch.float64, device=dev)
    loss = torch.zeros(index.shape[0], dtype=torch.float64, device=dev)
    with torch.no_grad():
        step = max(1, CHUNK // max(1, index.shape[0]))
        for i in range(0, index.shape[1], step):
            ids = idx[:, i : i + step]
            valid = ids >= 0
            logits = net.forward(params, _gather(x, ids), 0, None)
            labels = y[ids.clamp(min=0)]
            ce = nnf.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="none"
            ).reshape(ids.shape)
            hit = (logits.argmax(dim=-1) == labels) & valid
            correct += hit.sum(dim=1).to(torch.float64)
            loss += (ce * valid).to(torch.float64).sum(dim=1)
    return correct.cpu().numpy(), loss.cpu().numpy()


def score_cohort(
    net: AnyNet, params: Params, x: Tensor, y: Tensor, index: IntArray
) -> dict[str, NDArray[np.float64]]:
    """Per client, each metric of the task summed over its samples (``index`` ``(C, T)``).

    A paper network (:class:`~simfl.neural.models.Net`) reports ``accuracy`` (correct
    predictions) and ``loss`` (summed cross-entropy); a module its objective's metrics
    (:meth:`~simfl.neural.module.ModuleNet.evaluate`). Divide by the samples for the means.
    """
    if isinstance(net, ModuleNet):
        dev = x.device
        return net.evaluate(_on(params, dev), x, y, index, CHUNK)
    hits, losses = evaluate_cohort(net, params, x, y, index)
    return {"accuracy": hits, "loss": losses}
