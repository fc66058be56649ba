"""Faster CPU kernels for the networks' pooling and first convolution, with their gradients.

Profiling W2 (LeNet-5, one thread) showed two of PyTorch's CPU kernels far slower than the
arithmetic they do:

* ``max_pool2d`` runs at a fraction of memory speed on the NCHW outputs of small
  convolutions (about half of W2's evaluation time); without a gradient to record,
  :func:`pool2_relu` does the 2x2 stride-2 pooling as three elementwise maxima of strided
  views (the pooling about 4x, a LeNet-5 evaluation chunk of 1,024 images about 2x faster,
  one thread). Where autograd records,
  ``max_pool2d`` stays: its saved indices make a backward pass no recomputation of the
  winners beat (a custom autograd Function that did was measured 1.5-2x slower).
* oneDNN's weight gradient of a convolution of one-channel images (``conv1`` on MNIST-like
  data) costs several times its forward pass; :func:`conv_cols` computes a convolution whose
  input needs no gradient as one matrix product over the unfolded input (im2col, by a strided
  view) and its weight gradient as another (about 1.6x faster for LeNet-5's ``conv1``, batch
  50; with 3 input channels oneDNN was as fast or faster, so :mod:`simfl.neural.models` uses
  it for one input channel only). Sums run in another order than oneDNN's: results agree to
  float rounding, not bit for bit.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

__all__ = ["conv_cols", "pool2_relu"]


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


class _ConvCols(torch.autograd.Function):
    """A convolution of a batch by one filter bank as im2col + one matrix product."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, w: Tensor, b: Tensor, padding: int) -> Tensor:
        n, ch, h, wd = x.shape
        out, _, k, _ = w.shape
        if padding:
            x = torch.nn.functional.pad(x, (padding,) * 4)
        ho, wo = h + 2 * padding - k + 1, wd + 2 * padding - k + 1
        s = x.stride()
        # (ch, k, k, n, ho, wo): every input pixel each output pixel sees, one copy
        cols = x.as_strided((ch, k, k, n, ho, wo), (s[1], s[2], s[3], s[0], s[2], s[3]))
        cols = cols.reshape(ch * k * k, n * ho * wo)
        y = torch.addmm(b.unsqueeze(1), w.reshape(out, -1), cols)
        ctx.save_for_backward(cols)
        ctx.w_shape = w.shape
        # (out, n, ho, wo) memory seen as (n, out, ho, wo): no copy
        return y.reshape(out, n, ho, wo).transpose(0, 1)

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[None, Tensor, Tensor, None]:
        (cols,) = ctx.saved_tensors
        g2 = g.transpose(0, 1).reshape(ctx.w_shape[0], -1)
        return None, (g2 @ cols.t()).reshape(ctx.w_shape), g2.sum(1), None


def conv_cols(x: Tensor, w: Tensor, b: Tensor, padding: int) -> Tensor:
    """``conv2d(x, w, b, padding=padding)`` for an ``x`` that needs no gradient.

    Parameters
    ----------
    x
        Images ``(n, ch, h, w)`` (no gradient flows to them).
    w, b
        Filters ``(out, ch, k, k)`` and biases ``(out,)``.
    padding
        Zero padding on each side.

    Returns
    -------
    Tensor
        ``(n, out, ho, wo)``, a view of channel-major memory.
    """
    if x.requires_grad:
        raise ValueError("conv_cols: the input must not need a gradient")
    out: Tensor = _ConvCols.apply(x, w, b, padding)  # type: ignore[no-untyped-call]
    return out
