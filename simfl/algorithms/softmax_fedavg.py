"""FedAvg for a linear softmax classifier (multinomial logistic regression) on client arrays.

McMahan, Moore, Ramage, Hampson, Agüera y Arcas, "Communication-Efficient Learning of Deep
Networks from Decentralized Data", AISTATS 2017 (Algorithm 1, FederatedAveraging): every
participating client runs ``epochs`` passes of minibatch SGD (batch ``batch_size``, step ``lr``)
on the mean softmax cross-entropy of its own samples, starting from the server model
``(W, b)`` (``W``: d x k, ``b``: k, logits ``x W + b``); the server replaces the model by the
average of the returned models weighted by the clients' sample counts ``n_k / sum n``.

Batching: the clients of a cohort that hold the same number of samples take their SGD steps
together, each step one stack of matrix products (``np.matmul`` over a leading client axis), so
a round costs ``epochs * ceil(n / batch_size)`` vectorised steps per distinct sample count, not
per client. Every client keeps its own parameters, samples and batch order; the products are
computed matrix by matrix, so a client's update is bit-for-bit the same alone or in any cohort
(the engine's lazy exactness).

Minibatches: in epoch ``e`` of round ``r`` client ``i`` visits its samples in the order of
:func:`epoch_rows` (a permutation keyed by ``(seed, r, i, e)``), cut into batches of
``batch_size``, the last one smaller when ``batch_size`` does not divide ``n_i``, as a shuffling
``torch.utils.data.DataLoader`` without ``drop_last`` does.

Departures from the paper and notes:

* The arithmetic is float32, like the PyTorch models the paper and the peer simulators train;
  only the server's weighted average is accumulated in float64 (then stored as float32).
* The initial model mirrors ``torch.nn.Linear``'s default initialisation: every entry of ``W``
  and ``b`` uniform on ``(-1/sqrt(d), 1/sqrt(d))``, drawn from the run's keyed streams.
* The paper samples a fraction C of clients per round; here the policy chooses the cohort and
  the engine decides which updates arrive (stragglers, dropouts): the average is over the
  arrived updates only, weighted by their sample counts.
* ``work`` counts SGD steps (``epochs * ceil(n_i / batch_size)``), so a device's compute time
  in a round is its seconds-per-unit draw times its number of steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from simfl._checks import check_int, check_real
from simfl.algorithms.base import Algorithm, Updates
from simfl.network import Payload, nbytes
from simfl.outcome import Outcome
from simfl.rng import Streams
from simfl.tasks.base import Task
from simfl.tasks.classification import ClassificationData, ClassificationTask

__all__ = ["SoftmaxFedAvg", "SoftmaxFedAvgState", "epoch_rows", "init_softmax"]

Array = NDArray[np.float32]
IntArray = NDArray[np.int64]


@dataclass(frozen=True)
class SoftmaxFedAvgState:
    """The server model and each client's SGD steps per round.

    Attributes
    ----------
    weight
        ``W``, float32 ``(d, k)``.
    bias
        ``b``, float32 ``(k,)``.
    steps
        SGD steps each client takes in a round, ``(n_clients,)`` (the same for every state of
        a run; kept here because :meth:`SoftmaxFedAvg.work` sees the state, not the data).
    """

    weight: Array
    bias: Array
    steps: IntArray


def epoch_rows(streams: Streams, clients: IntArray, round: int, epoch: int, n: int) -> IntArray:
    """The order in which each of ``clients`` (all holding ``n`` samples) visits them.

    Row ``c`` is a permutation of ``range(n)``: the ranks of uniform draws keyed by
    ``("sgd/shuffle", client, round, epoch, sample)``, so a client's order depends on nothing
    but the seed and these keys.
    """
    u = streams.uniform("sgd/shuffle", clients[:, None], round, epoch, np.arange(n)[None, :])
    return np.argsort(u, axis=1).astype(np.int64)


def init_softmax(streams: Streams, d: int, k: int) -> tuple[Array, Array]:
    """``torch.nn.Linear(d, k)``'s initial distribution: ``U(-1/sqrt(d), 1/sqrt(d))`` entries."""
    bound = 1.0 / math.sqrt(d)
    u_w = streams.uniform("init/softmax_weight", np.arange(d)[:, None], np.arange(k)[None, :])
    u_b = streams.uniform("init/softmax_bias", np.arange(k))
    return (
        ((2.0 * u_w - 1.0) * bound).astype(np.float32),
        ((2.0 * u_b - 1.0) * bound).astype(np.float32),
    )


def sgd_epoch(
    params: Array, x: Array, y: IntArray, lr: float, batch_size: int
) -> NDArray[np.float64]:
    """One epoch of minibatch SGD for a stack of clients, in place; returns summed batch losses.

    Parameters
    ----------
    params
        ``(C, k, d + 1)``: each client's ``W^T`` with ``b`` as its last column (updated in place).
    x
        ``(C, n, d + 1)``: each client's samples in visiting order, with a last column of ones.
    y
        ``(C, n)``: their labels.
    lr, batch_size
        Step size and batch size; the last batch holds the ``n mod batch_size`` leftovers.

    Returns
    -------
    numpy.ndarray
        ``(C,)``: the sum over the epoch's batches of each batch's mean cross-entropy, at the
        parameters the batch's step started from.
    """
    c, n, _ = x.shape
    k = params.shape[1]
    hot = (y[:, None, :] == np.arange(k)[:, None]).astype(np.float32)  # (C, k, n)
    xt = x.transpose(0, 2, 1)
    ones = np.ones((1, 1, k), dtype=np.float32)  # sums over the classes as (fast) products
    # per-sample log-sum-exp and label logit (both shifted), reduced at the end of the epoch
    lse = np.empty((c, 1, n), dtype=np.float32)
    z_label = np.empty((c, 1, n), dtype=np.float32)
    for lo in range(0, n, batch_size):
        hi = min(lo + batch_size, n)
        hot_b = hot[:, :, lo:hi]
        z = params @ xt[:, :, lo:hi]  # logits (C, k, m), the bias through the ones column
        z -= z.max(axis=1, keepdims=True)
        np.matmul(ones, z * hot_b, out=z_label[:, :, lo:hi])
        np.exp(z, out=z)
        total = ones @ z
        np.log(total, out=lse[:, :, lo:hi])
        step = np.float32(lr / (hi - lo))
        z *= step / total  # softmax probabilities, times lr / m
        z -= step * hot_b  # lr x the gradient of the batch's mean loss with respect to z
        params -= z @ x[:, lo:hi]
    per_sample = (lse - z_label)[:, 0].astype(np.float64)
    starts = np.arange(0, n, batch_size)
    sizes = np.diff(np.append(starts, n))
    return np.asarray((np.add.reduceat(per_sample, starts, axis=1) / sizes).sum(axis=1))


@dataclass(frozen=True)
class SoftmaxFedAvg(Algorithm[SoftmaxFedAvgState]):
    """FedAvg of a linear softmax classifier with local minibatch SGD.

    Parameters
    ----------
    lr
        Local SGD step size (> 0).
    batch_size
        Samples per minibatch (>= 1); the last batch of an epoch may be smaller.
    epochs
        Local passes over the client's samples per round (>= 1).
    """

    lr: float = 0.1
    batch_size: int = 20
    epochs: int = 1

    name: ClassVar[str] = "FedAvg-softmax"

    def __post_init__(self) -> None:
        check_real("SoftmaxFedAvg.lr", self.lr, low=0.0, low_open=True)
        check_int("SoftmaxFedAvg.batch_size", self.batch_size, low=1)
        check_int("SoftmaxFedAvg.epochs", self.epochs, low=1)

    def check(self, task: Task | None) -> None:  # noqa: D102
        if not isinstance(task, ClassificationTask):
            raise ValueError(
                "Scenario.task must be a classification task such as tasks.SyntheticSoftmax or "
                f"tasks.ClientArrays for SoftmaxFedAvg, got {task!r}"
            )

    def initial_state(self, data: ClassificationData, streams: Streams) -> SoftmaxFedAvgState:
        """The ``torch.nn.Linear``-like initial model (see :func:`init_softmax`)."""
        weight, bias = init_softmax(streams, data.d, data.n_classes)
        steps = self.epochs * -(-data.sizes // self.batch_size)
        steps.setflags(write=False)
        return SoftmaxFedAvgState(weight, bias, steps)

    def work(self, state: SoftmaxFedAvgState, clients: IntArray) -> NDArray[np.float64]:
        """SGD steps of each client in a round: ``epochs * ceil(n_i / batch_size)``."""
        return state.steps[clients].astype(np.float64)

    def payload(self, state: SoftmaxFedAvgState) -> Payload:
        """The float32 ``W`` and ``b`` travel both ways."""
        size = nbytes(state.weight, state.bias)
        return Payload(down=size, up=size)

    def local_updates(
        self,
        state: SoftmaxFedAvgState,
        data: ClassificationData,
        clients: IntArray,
        round: int,
        streams: Streams,
    ) -> Updates:
        """Each client's model after its local epochs, its sample count and mean batch loss.

        Clients are trained in stacks of equal sample counts; the results come back in the
        order of ``clients``.
        """
        c = clients.size
        d, k = state.weight.shape
        start = np.concatenate([state.weight.T, state.bias[:, None]], axis=1)  # (k, d + 1)
        out = np.empty((c, k, d + 1), dtype=np.float32)
        loss = np.empty(c)
        sizes = data.sizes[clients]
        for n in np.unique(sizes):
            pos = np.flatnonzero(sizes == n)
            group = clients[pos]
            params = np.repeat(start[None], group.size, axis=0)
            total = np.zeros(group.size)
            for epoch in range(self.epochs):
                rows = epoch_rows(streams, group, round, epoch, int(n))
                x, y = data.gather(group, rows, ones=True)
                total += sgd_epoch(params, x, y, self.lr, self.batch_size)
            out[pos] = params
            loss[pos] = total / state.steps[group]
        out_w = np.ascontiguousarray(out[:, :, :d].transpose(0, 2, 1))
        out_b = out[:, :, d]
        # params["weight"] is the model's W; Updates.weight the aggregation weight (sample count)
        return Updates(
            clients.astype(np.int64),
            {"weight": out_w, "bias": out_b},
            loss=loss,
            weight=sizes.astype(np.float64),
        )

    def aggregate(
        self, state: SoftmaxFedAvgState, updates: Updates, outcome: Outcome
    ) -> SoftmaxFedAvgState:
        """The sample-size-weighted average of the clients' models."""
        n_samples = updates.weight
        assert n_samples is not None
        share = n_samples / n_samples.sum()
        params = updates.params
        c, d, k = params["weight"].shape
        weight = (share @ params["weight"].reshape(c, d * k).astype(np.float64)).reshape(d, k)
        bias = share @ params["bias"].astype(np.float64)
        return SoftmaxFedAvgState(weight.astype(np.float32), bias.astype(np.float32), state.steps)

    def evaluate(self, state: SoftmaxFedAvgState, data: ClassificationData) -> dict[str, float]:
        """Test ``accuracy`` and ``loss`` of the server model."""
        return data.evaluate(state.weight, state.bias)

    def shared(self, state: SoftmaxFedAvgState) -> dict[str, NDArray[Any]]:  # noqa: D102
        return {"weight": state.weight, "bias": state.bias}

    def with_shared(  # noqa: D102
        self, state: SoftmaxFedAvgState, shared: dict[str, NDArray[Any]]
    ) -> SoftmaxFedAvgState:
        return SoftmaxFedAvgState(
            np.asarray(shared["weight"], dtype=np.float32),
            np.asarray(shared["bias"], dtype=np.float32),
            state.steps,
        )
