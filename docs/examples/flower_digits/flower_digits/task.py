"""flower_digits: the model, the data of each partition, training and testing.

Written the way Flower's quickstart-pytorch writes its ``task.py``: a small ``Net``,
``load_data(partition_id, num_partitions)`` giving each partition's train and test loaders,
and plain PyTorch ``train``/``test`` loops. The data are scikit-learn's 8x8 digits (shipped
with scikit-learn, nothing downloaded), shuffled once with a fixed seed and split IID.
"""

from collections import OrderedDict
from functools import cache, lru_cache

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    """A small multilayer perceptron for 8x8 digits."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(64, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Class scores of a batch of flattened images."""
        return self.fc2(F.relu(self.fc1(x)))


@lru_cache(maxsize=1)
def _digits() -> tuple[np.ndarray, np.ndarray]:
    """The 1,797 digits scaled to [0, 1], shuffled once (seed 42)."""
    x, y = load_digits(return_X_y=True)
    order = np.random.default_rng(42).permutation(len(y))
    return (x[order] / 16.0).astype(np.float32), y[order].astype(np.int64)


@cache
def _partition(partition_id: int, num_partitions: int) -> tuple[TensorDataset, TensorDataset]:
    """The partition's samples, 80% for training and 20% for testing."""
    x, y = _digits()
    part = np.array_split(np.arange(len(y)), num_partitions)[partition_id]
    cut = int(0.8 * len(part))
    train, test = part[:cut], part[cut:]
    return (
        TensorDataset(torch.from_numpy(x[train]), torch.from_numpy(y[train])),
        TensorDataset(torch.from_numpy(x[test]), torch.from_numpy(y[test])),
    )


def load_data(partition_id: int, num_partitions: int) -> tuple[DataLoader, DataLoader]:
    """The train and test loaders of one partition of the digits."""
    train, test = _partition(partition_id, num_partitions)
    return DataLoader(train, batch_size=32, shuffle=True), DataLoader(test, batch_size=64)


def train(
    net: nn.Module,
    trainloader: DataLoader,
    epochs: int,
    lr: float,
    device: torch.device,
    proximal_mu: float = 0.0,
) -> float:
    """Train the model on the training set; the mean training loss.

    ``proximal_mu > 0`` adds FedProx's proximal term ``mu / 2 * ||w - w_global||^2``.
    """
    net.to(device)
    global_params = [p.detach().clone() for p in net.parameters()]
    criterion = nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    net.train()
    running_loss = 0.0
    for _ in range(epochs):
        for images, labels in trainloader:
            optimizer.zero_grad()
            loss = criterion(net(images.to(device)), labels.to(device))
            if proximal_mu > 0.0:
                prox = sum(
                    ((p - g) ** 2).sum()
                    for p, g in zip(net.parameters(), global_params, strict=True)
                )
                loss = loss + proximal_mu / 2 * prox
            loss.backward()
            optimizer.step()
            running_loss += loss.item()
    return running_loss / (epochs * len(trainloader))


def test(net: nn.Module, testloader: DataLoader, device: torch.device) -> tuple[float, float]:
    """Validate the model on the test set: the mean loss and the accuracy."""
    net.to(device)
    criterion = nn.CrossEntropyLoss()
    correct, loss = 0, 0.0
    net.eval()
    with torch.no_grad():
        for images, labels in testloader:
            outputs = net(images.to(device))
            labels = labels.to(device)
            loss += criterion(outputs, labels).item()
            correct += (torch.max(outputs.data, 1)[1] == labels).sum().item()
    return loss / len(testloader), correct / len(testloader.dataset)


def get_weights(net: nn.Module) -> list[np.ndarray]:
    """The model's parameters as a list of NumPy arrays (the NumPyClient form)."""
    return [val.cpu().numpy() for _, val in net.state_dict().items()]


def set_weights(net: nn.Module, parameters: list[np.ndarray]) -> None:
    """Load a list of NumPy arrays into the model."""
    params_dict = zip(net.state_dict().keys(), parameters, strict=True)
    state_dict = OrderedDict({k: torch.tensor(v) for k, v in params_dict})
    net.load_state_dict(state_dict, strict=True)
