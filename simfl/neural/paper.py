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

from simfl.neural.models import PaperModule, to_module_params, to_net_params

__all__ = ["PaperModule", "to_module_params", "to_net_params"]
