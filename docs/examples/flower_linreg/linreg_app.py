"""A small Flower app (Message API) for the twin and its fidelity study: Flower and numpy only.

Linear regression: partition ``p`` of ``n`` holds 200 training and 100 test samples
``y = x @ W + noise`` (``x`` standard normal in 20 dimensions, noise standard deviation 0.5,
the same ``W`` everywhere), generated from the partition id; a job runs one epoch of
mini-batch SGD (batches of 20, learning rate 0.01) from the global model. The smallest test
mean squared error any model can reach is the noise variance, 0.25. It imports numpy and
Flower only, so each of Flower's ClientApp processes starts fast.
"""

from __future__ import annotations

import numpy as np
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

DIM, TRAIN, TEST, NOISE = 20, 200, 100, 0.5
W = np.linspace(-1.0, 1.0, DIM)

app = ClientApp()


def load_data(partition_id: int) -> tuple[np.ndarray, ...]:
    """The partition's training and test samples (the same on every call)."""
    rng = np.random.default_rng(1000 + partition_id)
    x = rng.standard_normal((TRAIN + TEST, DIM))
    y = x @ W + NOISE * rng.standard_normal(TRAIN + TEST)
    return x[:TRAIN], y[:TRAIN], x[TRAIN:], y[TRAIN:]


def _model(msg: Message) -> np.ndarray:
    return msg.content["arrays"].to_numpy_ndarrays()[0]


@app.train()
def train(msg: Message, context: Context) -> Message:
    """One epoch of mini-batch SGD from the global model."""
    x, y, _, _ = load_data(int(context.node_config["partition-id"]))
    w = _model(msg).copy()
    order = np.random.permutation(TRAIN)  # noqa: NPY002 - global, as Flower apps shuffle
    for _ in range(1):
        for start in range(0, TRAIN, 20):
            batch = order[start : start + 20]
            grad = 2 * x[batch].T @ (x[batch] @ w - y[batch]) / len(batch)
            w -= 0.01 * grad
    loss = float(np.mean((x @ w - y) ** 2))
    content = RecordDict(
        {
            "arrays": ArrayRecord([w]),
            "metrics": MetricRecord({"train_loss": loss, "num-examples": TRAIN}),
        }
    )
    return Message(content, reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """Test mean squared error of the global model."""
    _, _, x, y = load_data(int(context.node_config["partition-id"]))
    mse = float(np.mean((x @ _model(msg) - y) ** 2))
    metrics = MetricRecord({"eval_mse": mse, "num-examples": TEST})
    return Message(RecordDict({"metrics": metrics}), reply_to=msg)
