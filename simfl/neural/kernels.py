"""Faster CPU kernels for LeNet-style networks: 2x2 max-pooling and one-channel convolutions.

PyTorch's CPU kernels run far below what the arithmetic needs for two parts of a LeNet-5
training step on small grey images (batch 50, one thread):

* ``max_pool2d_with_indices`` (forward). :func:`pool2_relu` finds each 2x2 window's winner by
  comparisons of strided views (the first maximum in the window's row-major order,
  ``max_pool2d``'s rule for ties), copies its value and lets PyTorch's own
  ``max_pool2d_with_indices_backward`` take the backward pass from those indices. Values and
  gradients are ``relu(max_pool2d(x, 2))``'s bit for bit (``tests/test_neural_kernels.py``),
  in about half the time on the CPUs measured.
* the backward pass of a convolution with one input channel (``conv1`` of a network on grey
  images), where oneDNN's weight gradient is slow on AVX2 CPUs.
  :func:`conv_one_channel` computes the convolution as a product over the images' 5x5
  patches (an *im2col* copy, patch-major) and its weight gradient as a product with the
  same patches. On AVX2 CPUs that makes W2's training steps about 10% faster; on AVX-512
  CPUs oneDNN's own kernel is as fast. It sums in another order than oneDNN, so its outputs
  equal ``conv2d``'s to float32 rounding, not bit for bit, and networks trained with it
  differ from oneDNN-trained ones in their last bits (as across CPUs). It is therefore an
  option, ``CNN(conv_kernel="patches")``; the default stays oneDNN's ``conv2d``.

Convolutions with more input channels stay oneDNN's: for ``conv2`` of LeNet-5 (6 to 16
channels) the patch copy alone takes about as long as oneDNN's whole forward pass.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any, cast

import torch
import torch.nn.functional as nnf
from torch import Tensor

__all__ = ["conv_one_channel", "pool2_relu"]

#: output pixels (images x pixels) whose patches are copied at once (a 13 MB buffer for 5x5)
_PIXELS = 1 << 17
_pool_backward = torch.ops.aten.max_pool2d_with_indices_backward
_bases: dict[tuple[int, int, int, torch.device], Tensor] = {}
_local = threading.local()  # each thread's buffer for patches


def _buffer(shape: tuple[int, ...], like: Tensor) -> Tensor:
    """A buffer of ``shape`` for the calling thread, reused (fresh memory costs page faults)."""
    key = (shape, like.dtype, like.device)
    buffers: dict[Any, Tensor] = _local.__dict__.setdefault("buffers", {})
    buf = buffers.get(key)
    if buf is None:
        buffers.clear()  # one buffer per thread: the shape of the last convolution
        buf = buffers[key] = like.new_empty(shape)
    return buf


def _windows(x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The four corners of every 2x2 window of ``x``'s last two axes (odd edges dropped)."""
    h, w = x.shape[-2] // 2 * 2, x.shape[-1] // 2 * 2
    return x[..., 0:h:2, 0:w:2], x[..., 0:h:2, 1:w:2], x[..., 1:h:2, 0:w:2], x[..., 1:h:2, 1:w:2]


def _base(rows: int, cols: int, width: int, device: torch.device) -> Tensor:
    """Flat index (in a plane ``width`` wide) of each 2x2 window's top-left corner."""
    key = (rows, cols, width, device)
    base = _bases.get(key)
    if base is None:
        r = torch.arange(rows, device=device).mul_(2 * width).view(-1, 1)
        base = _bases[key] = r + torch.arange(cols, device=device).mul_(2).view(1, -1)
    return base


class _MaxPool2(torch.autograd.Function):
    """``max_pool2d(x, 2)`` (then ReLU) on ``(N, C, H, W)``: strided comparisons, native backward.

    The window's winner is found by comparisons of its corners and its value copied from
    ``x`` (a gather): the same element ``max_pool2d`` picks, so the same bits, signed zeros
    included. A NaN or an infinity in ``x`` (its sum is not finite) hands the call to
    ``max_pool2d`` itself (whose rule for a window with a NaN is that the NaN wins).
    """

    @staticmethod
    def forward(ctx: Any, x: Tensor, relu: bool) -> Tensor:
        n, c, height, width = x.shape
        if not bool(torch.isfinite(x.sum())):  # a NaN (or an infinity) somewhere
            pooled = torch.ops.aten.max_pool2d_with_indices(x, [2, 2], [2, 2])
            out, index = cast(Tensor, pooled[0]), cast(Tensor, pooled[1])
        else:
            a, b, cc, d = _windows(x)
            top, bottom = torch.maximum(a, b), torch.maximum(cc, d)
            # the first maximum of the window's corners a, b, c, d in row-major order
            low = top < bottom  # it is in the bottom row
            right = (a < b) ^ (low & ((cc < d) ^ (a < b)))  # it is in the right column
            small = torch.uint8 if width < 255 else torch.int64  # the offset's type
            offset = low.to(small).mul_(width).add_(right)
            index = _base(top.shape[-2], top.shape[-1], width, x.device) + offset
            flat = x.reshape(n, c, height * width)
            out = flat.gather(2, index.view(n, c, -1)).view(index.shape)
        if relu:
            out = torch.relu(out)
        ctx.relu = relu
        ctx.save_for_backward(x, index, out)
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        x, index, out = ctx.saved_tensors
        if ctx.relu:  # ReLU's backward pass, as autograd takes it (from its output)
            grad = torch.ops.aten.threshold_backward(grad, out, 0.0)
        return _pool_backward(grad, x, [2, 2], [2, 2], [0, 0], [1, 1], False, index), None


def pool2_relu(x: Tensor, relu: bool) -> Tensor:
    """``relu(max_pool2d(x, 2))`` (or without ReLU), bit-identical values and gradients.

    Three elementwise maxima of strided views; where autograd records, the winners' indices
    too and ``max_pool2d``'s own backward pass from them. A window holding a NaN gives NaN
    either way (only its gradient's position may differ from ``max_pool2d``'s: a diverged
    step).

    Parameters
    ----------
    x
        Any shape ``(..., h, w)``; the pooling covers the last two axes.
    relu
        Whether ReLU follows (it commutes with the max).
    """
    if torch.is_grad_enabled() and x.requires_grad:
        lead = x.shape[:-2]
        x4 = x.reshape(-1, 1, *x.shape[-2:]) if x.dim() != 4 else x
        out = cast(Tensor, _MaxPool2.apply(x4, relu))  # type: ignore[no-untyped-call]
        return out.reshape(*lead, *out.shape[-2:]) if x.dim() != 4 else out
    a, b, c, d = _windows(x)
    out = torch.maximum(torch.maximum(a, b), torch.maximum(c, d))
    return out.clamp_(min=0.0) if relu else out


def _patch_view(planes: Tensor, kernel: int) -> Tensor:
    """``(B, kernel, kernel, h, w)`` view of every patch of contiguous ``(B, H, W)`` planes."""
    n, height, width = planes.shape
    h, w = height - kernel + 1, width - kernel + 1
    return planes.as_strided((n, kernel, kernel, h, w), (height * width, width, 1, width, 1))


class _ConvOneChannel(torch.autograd.Function):
    """Each client's convolution of one-channel planes as products over their patches.

    The patches (patch-major: ``(k * k, h * w)`` per image) are copied into one buffer,
    ``_PIXELS`` output pixels at a time, reused for every piece and client and copied again in
    the backward pass rather than kept: the copies cost little, while fresh memory for a whole
    cohort's patches (39 MB for W2's 10 x 50 images) is paid in page faults and was measured
    several times slower.
    """

    @staticmethod
    def forward(ctx: Any, planes: Tensor, weight: Tensor, bias: Tensor, kernel: int) -> Tensor:
        clients, batch = planes.shape[:2]
        out = weight.shape[1]
        y = planes.new_empty(clients, batch, out, _outputs(planes, kernel))
        for c, i, n, patches in _pieces(planes, kernel):
            filters = weight[c].expand(n, out, kernel * kernel)
            torch.bmm(filters, patches, out=y[c, i : i + n])
        y.add_(bias.view(clients, 1, out, 1))
        ctx.kernel = kernel
        ctx.save_for_backward(planes)
        return y

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[None, Tensor, Tensor, None]:
        (planes,) = ctx.saved_tensors
        kernel = ctx.kernel
        grad_w = grad.new_zeros(planes.shape[0], grad.shape[2], kernel * kernel)
        for c, i, n, patches in _pieces(planes, kernel):
            grad_w[c] += torch.bmm(grad[c, i : i + n], patches.transpose(1, 2)).sum(0)
        return None, grad_w, grad.sum((1, 3)), None


def _outputs(planes: Tensor, kernel: int) -> int:
    """Output pixels per image of a ``kernel``-wide convolution of ``(..., H, W)`` planes."""
    return (planes.shape[-2] - kernel + 1) * (planes.shape[-1] - kernel + 1)


def _pieces(planes: Tensor, kernel: int) -> Iterator[tuple[int, int, int, Tensor]]:
    """``(client, first image, images, patches)`` of ``(C, B, H, W)`` planes, piece by piece.

    ``patches`` is ``(images, kernel * kernel, pixels)``, copied into the calling thread's
    buffer (:func:`_buffer`): valid until the next piece.
    """
    clients, batch, height, width = planes.shape
    h, w = height - kernel + 1, width - kernel + 1
    step = max(1, min(batch, _PIXELS // (h * w)))
    buf = _buffer((step, kernel, kernel, h, w), planes)
    for c in range(clients):
        for i in range(0, batch, step):
            n = min(step, batch - i)
            patches = buf[:n]
            patches.copy_(_patch_view(planes[c, i : i + n], kernel))
            yield c, i, n, patches.view(n, kernel * kernel, h * w)


def conv_one_channel(x: Tensor, weight: Tensor, bias: Tensor, padding: int) -> Tensor:
    """Each client's convolution of one-channel images, as a product over 5x5-style patches.

    ``conv2d(x[c], weight[c], bias[c], padding=padding)`` for every client ``c`` of a cohort
    at once, equal to it to float32 rounding (see the module's note). The images themselves
    get no gradient (they are a network's input).

    Parameters
    ----------
    x
        ``(C, B, 1, H, W)``: ``B`` images of each of ``C`` clients.
    weight, bias
        ``(C, out, 1, k, k)`` and ``(C, out)``: each client's filters.
    padding
        Zero padding on each side of the images.

    Returns
    -------
    Tensor
        ``(C, B, out, H + 2 padding - k + 1, W + 2 padding - k + 1)``.
    """
    if x.requires_grad:
        raise ValueError("conv_one_channel: the images must not require a gradient")
    clients, batch = x.shape[:2]
    out, kernel = weight.shape[1], weight.shape[-1]
    planes = x.reshape(clients, batch, x.shape[-2], x.shape[-1])
    if padding:
        planes = nnf.pad(planes, (padding,) * 4)
    h, w = planes.shape[-2] - kernel + 1, planes.shape[-1] - kernel + 1
    flat = weight.reshape(clients, out, kernel * kernel)
    y = cast(Tensor, _ConvOneChannel.apply(planes.contiguous(), flat, bias, kernel))  # type: ignore[no-untyped-call]
    return y.view(clients, batch, out, h, w)
