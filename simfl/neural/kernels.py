"""A faster CPU kernel for the networks' 2x2 max-pooling where no gradient is recorded.

Profiling W2 (LeNet-5, one thread) showed PyTorch's CPU ``max_pool2d`` running at a fraction of
memory speed on the NCHW outputs of small convolutions (about half of W2's evaluation time).
Without a gradient to record, :func:`pool2_relu` does the 2x2 stride-2 pooling as three
elementwise maxima of strided views (the pooling about 4x, a LeNet-5 evaluation chunk of 1,024
images about 2x faster, one thread), bit for bit ``max_pool2d``'s values. Where autograd
records, ``max_pool2d`` stays: its saved indices make a backward pass no recomputation of the
winners beat (a custom autograd Function that did was measured 1.5-2x slower).

An im2col first convolution (one matrix product for one-channel images, about 1.6x faster for
LeNet-5's ``conv1`` in training) was measured too and left out: it sums in another order than
oneDNN, so trained networks would differ from the recorded results in their last bits for
about 5% of W2's time.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["pool2_relu"]


def _windows(x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The four corners of every 2x2 window of ``x``'s last two axes (odd edges dropped)."""
    h, w = x.shape[-2] // 2 * 2, x.shape[-1] // 2 * 2
    return x[..., 0:h:2, 0:w:2], x[..., 0:h:2, 1:w:2], x[..., 1:h:2, 0:w:2], x[..., 1:h:2, 1:w:2]


def pool2_relu(x: Tensor, relu: bool) -> Tensor:
    """``relu(max_pool2d(x, 2))`` (or without ReLU), bit-identical values and gradients.

    Without a gradient to record (evaluation, frozen layers), three elementwise maxima of
    strided views; otherwise ``max_pool2d`` itself, whose saved indices make its backward pass
    cheaper than any recomputation of the winners (measured).

    Parameters
    ----------
    x
        Any shape ``(..., h, w)``; the pooling covers the last two axes.
    relu
        Whether ReLU follows (it commutes with the max).
    """
    if torch.is_grad_enabled() and x.requires_grad:
        out = torch.nn.functional.max_pool2d(x, 2)
        return torch.nn.functional.relu(out) if relu else out
    a, b, c, d = _windows(x)
    out = torch.maximum(torch.maximum(a, b), torch.maximum(c, d))
    return out.clamp_(min=0.0) if relu else out
