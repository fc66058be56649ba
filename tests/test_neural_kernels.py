"""The fast pooling kernel against PyTorch's own (simfl.neural.kernels)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as nnf

from simfl.neural.kernels import pool2_relu


@pytest.mark.parametrize("relu", [True, False])
@pytest.mark.parametrize("side", [(28, 28), (10, 10), (7, 9)])
def test_pool2_relu_is_max_pool2d_bit_for_bit(relu, side):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 4, *side, generator=gen)
    want = nnf.max_pool2d(x, 2)
    want = nnf.relu(want) if relu else want
    with torch.no_grad():  # the strided-maxima path
        assert torch.equal(pool2_relu(x, relu), want)
        # a strided view (channel-major memory)
        assert torch.equal(pool2_relu(x.transpose(0, 1), relu), want.transpose(0, 1))
    # recording autograd: max_pool2d's values and gradients (one input element per window)
    xg = x.clone().requires_grad_(True)
    got = pool2_relu(xg, relu)
    assert got.requires_grad and torch.equal(got, want)
    (grad,) = torch.autograd.grad(got.sum(), xg)
    assert int(grad.sum()) == int((want > 0).sum()) if relu else int(grad.sum()) == want.numel()
