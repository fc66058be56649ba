"""Workload W3's model: the small ResNet of the docs example ``docs/examples/resnet_fmnist.py``.

``Block`` and ``ResNet`` are that example's classes, copied verbatim (the docs example is the
reference; keep the two identical, ``tests/test_w3_perf.py`` compares them where both are in the
checkout): 1x28x28 Fashion-MNIST images -> a 3x3 convolution to 16 channels and a ReLU -> two
residual blocks (two 3x3 convolutions with GroupNorm(4), the first of stride 2, added to a
strided 1x1 convolution of the input) to 16x14x14 and 32x7x7 -> a linear layer to 10 classes;
35,242 parameters and no buffers (GroupNorm keeps no running statistics, so averaging the
parameters averages the whole model).

:func:`make_model` gives every framework the same initial weights, as the peers'
``w2_data.make_model`` does for LeNet-5: torch's default initialisation drawn right after
``torch.manual_seed(seed)`` inside ``torch.random.fork_rng`` (the caller's torch RNG is left
untouched). Imports torch only, so pfl-research's virtualenv can import it too.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["Block", "ResNet", "make_model"]


class Block(nn.Module):
    """Two 3x3 convolutions with GroupNorm (the first halves the image) and a 1x1 shortcut."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv1, self.norm1 = nn.Conv2d(cin, cout, 3, 2, 1, bias=False), nn.GroupNorm(4, cout)
        self.conv2, self.norm2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.GroupNorm(4, cout)
        self.skip = nn.Conv2d(cin, cout, 1, stride=2, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        """The two convolutions' path plus the shortcut, through a ReLU."""
        h = self.norm1(self.conv1(x)).relu()
        return (self.norm2(self.conv2(h)) + self.skip(x)).relu()


class ResNet(nn.Module):
    """1x28x28 images -> 16x28x28 -> blocks to 16x14x14 and 32x7x7 -> 10 class logits."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(1, 16, 3, 1, 1), nn.ReLU(), Block(16, 16), Block(16, 32))
        self.fc = nn.Linear(32 * 7 * 7, 10)

    def forward(self, x: Tensor) -> Tensor:
        """Class logits of a batch of images."""
        return self.fc(self.net(x).flatten(1))


def make_model(seed: int = 0) -> ResNet:
    """The ResNet with torch's default init right after ``torch.manual_seed(seed)``.

    Drawn inside ``torch.random.fork_rng``, so the caller's torch RNG stream is left untouched.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return ResNet()
