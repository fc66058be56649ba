"""The fast kernels against PyTorch's own (simfl.neural.kernels)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as nnf

from simfl.neural import CNN, kernels
from simfl.neural.kernels import conv_one_channel, pool2_relu


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The float32 bit patterns (``torch.equal`` takes -0.0 for 0.0; this does not)."""
    return t.contiguous().view(torch.int32)


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


@pytest.mark.parametrize("relu", [True, False])
@pytest.mark.parametrize(
    "shape", [(5, 6, 28, 28), (2, 3, 7, 9), (4, 5, 6), (2, 3, 4, 10, 11), (1, 1, 2, 2)]
)
def test_pool2_relu_gradients_are_max_pool2d_s_with_ties(relu, shape):
    """Values and gradients bit for bit, whatever the upstream gradient, ties included.

    Values on a grid of quarters tie often inside a window (the constant background of an
    image gives equal convolution outputs too): the gradient must go to the first maximum in
    row-major order, as ``max_pool2d``'s saved indices send it.
    """
    gen = torch.Generator().manual_seed(1)
    x = (torch.randn(*shape, generator=gen) * 2).round() / 4
    ref_in = x.clone().requires_grad_(True)
    got_in = x.clone().requires_grad_(True)
    flat = ref_in.reshape(-1, *shape[-3:]) if len(shape) > 4 else ref_in
    want = nnf.max_pool2d(flat, 2)
    want = (nnf.relu(want) if relu else want).reshape(*shape[:-2], *want.shape[-2:])
    got = pool2_relu(got_in, relu)
    assert got.shape == want.shape and torch.equal(_bits(got), _bits(want))
    upstream = torch.randn(want.shape, generator=gen)
    (g_want,) = torch.autograd.grad(want, ref_in, upstream)
    (g_got,) = torch.autograd.grad(got, got_in, upstream)
    assert torch.equal(_bits(g_got), _bits(g_want))
    # the test has power: windows with tied maxima are there and get the gradient
    corners = x[..., : shape[-2] // 2 * 2, : shape[-1] // 2 * 2]
    if corners.numel() >= 64:
        windows = corners.unfold(-2, 2, 2).unfold(-2, 2, 2).flatten(-2)
        assert ((windows == windows.amax(-1, keepdim=True)).sum(-1) > 1).any()


def test_pool2_relu_of_a_non_contiguous_input_is_max_pool2d_s():
    x = torch.randn(6, 4, 12, 10).transpose(0, 1)  # channel-major memory
    a, b = x.clone().requires_grad_(True), x.requires_grad_(True)
    want, got = nnf.relu(nnf.max_pool2d(a, 2)), pool2_relu(b, True)
    assert torch.equal(got, want)
    up = torch.randn(want.shape)
    assert torch.equal(torch.autograd.grad(got, b, up)[0], torch.autograd.grad(want, a, up)[0])


def _conv_ref(x, w, b, padding):
    return torch.stack([nnf.conv2d(x[c], w[c], b[c], padding=padding) for c in range(x.shape[0])])


@pytest.mark.parametrize(
    ("clients", "batch", "side", "kernel", "padding"),
    [(3, 7, (12, 13), 5, 2), (1, 50, (28, 28), 5, 2), (2, 4, (9, 9), 3, 0), (4, 1, (5, 6), 5, 0)],
)
def test_conv_one_channel_is_conv2d_to_rounding(clients, batch, side, kernel, padding):
    """Forward pass and the filters' and biases' gradients against oneDNN's ``conv2d``.

    Both compute each output as the same sum of ``kernel**2`` products (each weight gradient
    as a sum of ``batch * h * w``), in another order: in float32 the two differ by a few ulps
    of the sums' terms. The tolerance, 1e-5 of the largest absolute value, is about 100
    float32 ulps; a wrong patch, filter or bias gives errors of the order of the values.
    """
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(clients, batch, 1, *side, generator=gen)
    w = torch.randn(clients, 6, 1, kernel, kernel, generator=gen).requires_grad_(True)
    b = torch.randn(clients, 6, generator=gen).requires_grad_(True)
    got, want = conv_one_channel(x, w, b, padding), _conv_ref(x, w, b, padding)
    assert got.shape == want.shape
    scale = float(want.detach().abs().max())
    torch.testing.assert_close(got, want, rtol=0.0, atol=1e-5 * scale)
    up = torch.randn(want.shape, generator=gen)
    for g_got, g_want in zip(
        torch.autograd.grad(got, (w, b), up), torch.autograd.grad(want, (w, b), up), strict=True
    ):
        torch.testing.assert_close(g_got, g_want, rtol=0.0, atol=1e-5 * float(g_want.abs().max()))
    with torch.no_grad():
        torch.testing.assert_close(conv_one_channel(x, w, b, padding), got, rtol=0.0, atol=0.0)


def test_conv_one_channel_in_pieces_is_the_same(monkeypatch):
    """Patches copied a few images at a time (the buffer's bound) give the same numbers."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 9, 1, 10, 10, generator=gen)
    w = torch.randn(2, 4, 1, 5, 5, generator=gen).requires_grad_(True)
    b = torch.randn(2, 4, generator=gen).requires_grad_(True)
    whole = conv_one_channel(x, w, b, 2)
    grads = torch.autograd.grad(whole, (w, b), torch.ones_like(whole))
    monkeypatch.setattr(kernels, "_PIXELS", 2 * 100)  # two images' outputs per piece
    pieces = conv_one_channel(x, w, b, 2)
    assert torch.equal(pieces, whole)
    for got, want in zip(
        torch.autograd.grad(pieces, (w, b), torch.ones_like(pieces)), grads, strict=True
    ):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-5)
    with torch.no_grad():
        assert torch.equal(conv_one_channel(x, w, b, 2), whole)


def test_conv_one_channel_refuses_images_that_need_a_gradient():
    x = torch.randn(1, 2, 1, 8, 8, requires_grad=True)
    with pytest.raises(ValueError, match="must not require a gradient"):
        conv_one_channel(x, torch.randn(1, 3, 1, 5, 5), torch.randn(1, 3), 0)


def test_cnn_conv_kernel_picks_the_first_convolution_s_kernel():
    # the default is oneDNN's conv2d (bit for bit torch.nn.Conv2d)
    assert not any(layer.patches for layer in CNN.lenet5_classic().build((1, 28, 28), 10).layers)
    patches = CNN((6, 16), (120, 84), padding=(2, 0), conv_kernel="patches")
    assert patches.build((1, 28, 28), 10).layers[0].patches
    # colour images and the second convolution always take conv2d
    colour = CNN((6, 16), (120, 100), conv_kernel="patches").build((3, 32, 32), 10)
    assert not any(layer.patches for layer in colour.layers)
    assert not patches.build((1, 28, 28), 10).layers[1].patches
    with pytest.raises(ValueError, match=r"CNN.conv_kernel"):
        CNN(conv_kernel="im2col")


def test_the_two_kernels_give_the_same_network_to_rounding():
    """A cohort's forward pass and gradients under ``patches`` and ``onednn``.

    Outputs to 1e-5 of their largest value (``conv1``'s rounding carried through four more
    layers); gradients to 1e-4, since they pass back through the network and ``conv1``'s
    weight gradient sums 4 x 784 products per weight (order-of-summation differences grow
    about as the square root of the terms). A wrong layer gives errors of order one.
    """
    net = CNN((6, 16), (120, 84), padding=(2, 0), conv_kernel="patches").build((1, 28, 28), 10)
    ref = CNN.lenet5_classic().build((1, 28, 28), 10)
    assert net.layers[0].patches and not ref.layers[0].patches
    gen = torch.Generator().manual_seed(5)
    params = {
        n: v.expand(3, *v.shape).clone().requires_grad_(True) for n, v in net.init(gen).items()
    }
    x = torch.randn(3, 4, 1, 28, 28, generator=gen)
    got, want = net.forward(params, x), ref.forward(params, x)
    torch.testing.assert_close(got, want, rtol=0.0, atol=1e-5 * float(want.detach().abs().max()))
    names = list(params)
    g_got = torch.autograd.grad(got.square().sum(), [params[n] for n in names])
    g_want = torch.autograd.grad(want.square().sum(), [params[n] for n in names])
    for n, a, b in zip(names, g_got, g_want, strict=True):
        torch.testing.assert_close(a, b, rtol=0.0, atol=1e-4 * float(b.abs().max()), msg=n)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_pool2_relu_with_a_nan_or_an_infinity_is_max_pool2d_s(bad):
    """Such inputs take ``max_pool2d`` itself: a NaN wins its window, as there."""
    x = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(6))
    x[1, 2, 3, 4] = bad
    a, b = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    want, got = nnf.relu(nnf.max_pool2d(a, 2)), pool2_relu(b, True)
    assert torch.equal(_bits(got), _bits(want))
    up = torch.randn(want.shape, generator=torch.Generator().manual_seed(7))
    g_want, g_got = torch.autograd.grad(want, a, up)[0], torch.autograd.grad(got, b, up)[0]
    assert torch.equal(_bits(g_got), _bits(g_want))
