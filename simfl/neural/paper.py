"""The seed papers' networks as ordinary ``torch.nn.Module`` s.

``MLP(...)`` and ``CNN(...)`` (:mod:`simfl.neural.models`) describe FedRep's MLP and CNNs,
LG-FedAvg's MLP and LeNet-5; :meth:`~simfl.neural.models.ModelSpec.factory` gives a factory of
the same network as a :class:`PaperModule`: ``torch.nn.Linear`` and ``torch.nn.Conv2d`` layers
under the same names (``"fc1.weight"``, ``"layer_input.bias"``), each followed by its 2x2
max-pooling and ReLU, initialised by torch's own default initialisation (the same
``U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` law the paper networks draw). It trains on the generic
path like any module; the paper networks' fast path (:class:`~simfl.neural.models.Net`) computes
the same function to float rounding (``tests/test_neural_module.py``), with its linear weights
stored transposed (:func:`to_module_params`, :func:`to_net_params` convert).

Pooling and ReLU go through :func:`~simfl.neural.kernels.pool2_relu` (``relu(max_pool2d(x,
2))`` bit for bit, faster on a CPU) except under ``vmap``, which a custom autograd function
cannot take; there they are ``max_pool2d`` then ReLU.
"""

from __future__ import annotations

import torch
import torch.nn.functional as nnf
from torch import Tensor, nn

from simfl.neural.kernels import pool2_relu
from simfl.neural.models import Layer, Net, Params

__all__ = ["PaperModule", "to_module_params", "to_net_params"]


class PaperModule(nn.Module):
    """A paper network's layers as torch modules (see the module docstring).

    Parameters
    ----------
    layers
        The resolved layers of the network (:attr:`Net.layers`).
    """

    def __init__(self, layers: tuple[Layer, ...]) -> None:
        super().__init__()
        self.specs = layers
        for layer in layers:
            module: nn.Module
            if layer.kind == "linear":
                module = nn.Linear(layer.fan_in, layer.out)
            else:
                module = nn.Conv2d(layer.fan_in, layer.out, layer.kernel, padding=layer.padding)
            self.add_module(layer.name, module)

    def forward(self, x: Tensor) -> Tensor:  # noqa: D102
        for layer in self.specs:
            if layer.kind == "linear" and x.dim() > 2:
                x = x.flatten(1)
            x = getattr(self, layer.name)(x)
            if layer.pool:
                if torch._C._functorch.is_batchedtensor(x):
                    x = nnf.max_pool2d(x, 2)
                    x = nnf.relu(x) if layer.relu else x
                else:
                    x = pool2_relu(x, layer.relu)
            elif layer.relu:
                x = nnf.relu(x)
        return x


def to_module_params(net: Net, params: Params) -> Params:
    """A paper network's parameters in :class:`PaperModule`'s layout (linear weights ``(out, in)``).

    Stacked tensors (a leading client axis) keep it.
    """
    out = dict(params)
    for layer in net.layers:
        if layer.kind == "linear":
            w = params[f"{layer.name}.weight"]
            out[f"{layer.name}.weight"] = w.transpose(-1, -2).contiguous()
    return out


def to_net_params(net: Net, params: Params) -> Params:
    """The inverse of :func:`to_module_params`."""
    return to_module_params(net, params)
