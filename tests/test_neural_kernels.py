"""The fast pooling and first-convolution kernels against PyTorch's own (simfl.neural.kernels)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as nnf

from simfl.neural import CNN, models
from simfl.neural.kernels import conv_cols, pool2_relu


@pytest.mark.parametrize("relu", [True, False])
@pytest.mark.parametrize("side", [(28, 28), (10, 10), (7, 9)])
def test_pool2_relu_is_max_pool2d_bit_for_bit(relu, side):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 4, *side, generator=gen)
    want = nnf.max_pool2d(x, 2)
    want = nnf.relu(want) if relu else want
    with torch.no_grad():  # the strided-maxima path
        assert torch.equal(pool2_relu(x, relu), want)
        # a strided view (channel-major memory, as conv_cols returns)
        assert torch.equal(pool2_relu(x.transpose(0, 1), relu), want.transpose(0, 1))
    # recording autograd: max_pool2d's values and gradients (one input element per window)
    xg = x.clone().requires_grad_(True)
    got = pool2_relu(xg, relu)
    assert got.requires_grad and torch.equal(got, want)
    (grad,) = torch.autograd.grad(got.sum(), xg)
    assert int(grad.sum()) == int((want > 0).sum()) if relu else int(grad.sum()) == want.numel()


@pytest.mark.parametrize(("ch", "padding"), [(1, 2), (3, 0)])
def test_conv_cols_matches_conv2d_and_its_gradients(ch, padding):
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(7, ch, 12, 12, generator=gen)
    w = torch.randn(5, ch, 5, 5, generator=gen, requires_grad=True)
    b = torch.randn(5, generator=gen, requires_grad=True)
    want = nnf.conv2d(x, w, b, padding=padding)
    got = conv_cols(x, w, b, padding)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    g = torch.randn(want.shape, generator=gen)
    got_grads = torch.autograd.grad(got, [w, b], g)
    want_grads = torch.autograd.grad(want, [w, b], g)
    for a, e in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-4)


def test_conv_cols_refuses_an_input_that_needs_a_gradient():
    x = torch.zeros(1, 1, 6, 6, requires_grad=True)
    with pytest.raises(ValueError, match="conv_cols: the input must not need a gradient"):
        conv_cols(x, torch.zeros(2, 1, 3, 3), torch.zeros(2), 0)


@pytest.mark.parametrize(("channels", "path"), [(1, "_ConvColsBackward"), (3, "Convolution")])
def test_training_the_first_convolution_uses_im2col_on_one_channel_only(channels, path):
    net = CNN.lenet5_classic().build((channels, 28, 28), 10)
    p = net.init(torch.Generator().manual_seed(3))
    layer = net.layers[0]
    w = p["conv1.weight"].requires_grad_(True)
    x = torch.randn(4, channels, 28, 28, generator=torch.Generator().manual_seed(4))
    out = models._conv(layer, x, w, p["conv1.bias"])
    assert path in out.grad_fn.name()
    torch.testing.assert_close(out, nnf.conv2d(x, w, p["conv1.bias"], padding=2))
    with torch.no_grad():  # evaluation: oneDNN's forward
        assert models._conv(layer, x, w, p["conv1.bias"]).grad_fn is None
