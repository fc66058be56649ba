"""The networks of the seed papers, as stacked-parameter models a whole cohort trains at once.

A :class:`Net` is a chain of layers (fully connected or 5x5-style convolutions, each
optionally followed by ReLU and a 2x2 max-pool). Its parameters are plain tensors named like
PyTorch's (``"fc1.weight"``, ``"fc1.bias"``) and it computes the forward pass of MANY clients'
models in one call: a parameter is either *stacked* (a leading client axis, one model per
client) or *shared* (no client axis, the same for every client), layer by layer. A linear layer
of a cohort is one ``torch.baddbmm``, so the cohort's local training is one vectorised computation
rather than a loop over clients; convolutions go client by client through oneDNN's ``conv2d``
(faster than one grouped convolution) or, for one input channel, through a product over the
images' patches (:func:`~simfl.neural.kernels.conv_one_channel`, ``CNN(conv_kernel=...)``).

Layouts: a linear weight is stored ``(in, out)`` (the transpose of ``torch.nn.Linear.weight``:
the batched matmul and its gradient are about twice as fast on CPUs in this layout), a
convolution weight ``(out, in, k, k)`` as in ``torch.nn.Conv2d``. Initialisation draws every
weight and bias from ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``, the distribution of PyTorch's
default initialisation of these layers, from an explicit ``torch.Generator``.

Specifications (frozen dataclasses, built for an input shape and a number of classes):

* :class:`MLP` -- ``MLP.fedrep()`` is the FedRep code's MNIST/FEMNIST MLP 784-512-256-64-C,
  ``MLP.lg()`` the LG-FedAvg MNIST MLP 784-512-256-256-128-C. Layers ``layer_input``,
  ``layer_hidden1``, ..., ``layer_out``.
* :class:`CNN` -- two 5x5 convolutions with 2x2 max-pooling and three linear layers
  (``conv1, conv2, fc1, fc2, fc3``). ``CNN.fedrep()`` is the FedRep code's CIFAR-10 CNN
  (64, 64 channels; 120, 64 units), ``CNN.fedrep100()`` its CIFAR-100 CNN (64, 128; 256, 128;
  the code's dropout 0.6 after ``fc2`` is left out: dropout would need a random mask per
  sample and step, and this implementation draws nothing outside the run's keyed streams),
  ``CNN.lenet5()`` LeNet-5 as LG-FedAvg uses it on CIFAR-10 (6, 16; 120, 100).

Every network declares its *head* (the last layer: FedRep's and FedPer's personal part, the
rest is the shared body) and LG-FedAvg's *global* layers under two names:

* ``"paper"``: LG-FedAvg's published splits. MLPs keep their first two layers local (the MNIST
  MLP's ``num_layers_keep=3``: 15.79% of the parameters are global); CNNs make the two
  convolutions global ("we use the two convolutional layers for the global model").
* ``"code"``: the FedRep and SRPFL code's LG-FedAvg, whose global layers are the last two
  (``fc2, fc3`` for the CNNs, ``layer_hidden2, layer_out`` for the FedRep MLP).

Costs: :attr:`Net.macs` holds each layer's multiply-accumulates per sample of the forward
pass; :meth:`Net.train_macs` the cost of one training pass of one sample when only some
layers learn (see there). simfl's neural work unit is 1e9 multiply-accumulates (GMAC).
"""

from __future__ import annotations

import fnmatch
import functools
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as nnf
from torch import Tensor, nn

from simfl._checks import check_choice, check_int
from simfl.neural.kernels import conv_one_channel, pool2_relu

__all__ = [
    "CNN",
    "MLP",
    "Layer",
    "ModelSpec",
    "Net",
    "PaperModule",
    "Params",
    "param_layer",
    "to_module_params",
    "to_net_params",
]

#: Parameters by name; stacked tensors carry a leading client axis.
Params = dict[str, Tensor]


def param_layer(name: str) -> str:
    """The layer a parameter belongs to: ``"fc1.weight"`` -> ``"fc1"``."""
    return name.rsplit(".", 1)[0]


@dataclass(frozen=True)
class Layer:
    """One layer of a :class:`Net` with its resolved sizes.

    ``kind`` is ``"linear"`` (``fan_in`` inputs, flattened first if the input is an image) or
    ``"conv"`` (``fan_in`` input channels, a ``kernel`` x ``kernel`` filter, no padding).
    """

    name: str
    kind: str
    fan_in: int
    out: int
    kernel: int = 1
    relu: bool = True
    pool: bool = False
    #: Zero padding on each side of a convolution's input.
    padding: int = 0
    #: A convolution computed as a product over its input's patches
    #: (:func:`~simfl.neural.kernels.conv_one_channel`; one input channel only), not oneDNN's.
    patches: bool = False
    #: Multiply-accumulates of the layer's forward pass, per sample.
    macs: int = 0

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Shapes of the layer's weight and bias (unstacked)."""
        if self.kind == "linear":
            weight: tuple[int, ...] = (self.fan_in, self.out)
        else:
            weight = (self.out, self.fan_in, self.kernel, self.kernel)
        return {f"{self.name}.weight": weight, f"{self.name}.bias": (self.out,)}

    @property
    def init_bound(self) -> float:
        """PyTorch's default init bound ``1/sqrt(fan_in)`` (fan_in counts the kernel)."""
        return 1.0 / math.sqrt(self.fan_in * self.kernel * self.kernel)


class Net:
    """A built network: its layers in order, its head and LG-FedAvg's global layers.

    The paper networks' fast path on a CPU: the trainer computes a cohort's frozen layers once
    per phase (:attr:`splittable`), its linear layers as batched products and its
    convolutions with :mod:`~simfl.neural.kernels`. It has no buffers.

    Parameters
    ----------
    name
        Label of the architecture.
    input_shape
        Shape of one sample, ``(channels, height, width)``.
    layers
        The layers, input to output.
    lg_global
        LG-FedAvg's global layers by split name (``"paper"``, ``"code"``).
    """

    def __init__(
        self,
        name: str,
        input_shape: tuple[int, ...],
        layers: tuple[Layer, ...],
        lg_global: Mapping[str, tuple[str, ...]],
    ) -> None:
        self.name = name
        self.input_shape = input_shape
        self.layers = layers
        self.lg_global = dict(lg_global)
        self.layer_names = tuple(layer.name for layer in layers)
        self.shapes: dict[str, tuple[int, ...]] = {}
        for layer in layers:
            self.shapes.update(layer.shapes())
        self.param_names = tuple(self.shapes)
        self.macs = {layer.name: layer.macs for layer in layers}

    #: The trainer may run layers ``0:k`` once and the rest per step (frozen prefixes).
    splittable = True
    #: A paper network has no buffers, and no layers that stay local whatever the algorithm.
    buffer_names: tuple[str, ...] = ()
    local_layers: tuple[str, ...] = ()

    @property
    def head(self) -> tuple[str, ...]:
        """The head layers (the last layer): FedRep's and FedPer's personal part."""
        return self.layer_names[-1:]

    @property
    def body(self) -> tuple[str, ...]:
        """Every layer but the head: the representation FedRep and FedPer share."""
        return self.layer_names[:-1]

    def params_of(self, layers: Iterable[str]) -> tuple[str, ...]:
        """Names of the parameters of ``layers``, in network order."""
        wanted = set(layers)
        return tuple(p for p in self.param_names if param_layer(p) in wanted)

    def names_of(self, layers: Iterable[str]) -> tuple[str, ...]:
        """Names of the tensors of ``layers`` (its parameters: a paper network has no buffers)."""
        return self.params_of(layers)

    def resolve_layers(self, owner: str, patterns: Iterable[str]) -> tuple[str, ...]:
        """The layers ``patterns`` name (:func:`fnmatch.fnmatchcase`; each must match one)."""
        patterns = tuple(patterns)
        for p in patterns:
            if not any(fnmatch.fnmatchcase(lay, p) for lay in self.layer_names):
                raise ValueError(
                    f"{owner} pattern {p!r} matches no layer of the model; its layers are "
                    f"{list(self.layer_names)}"
                )
        return tuple(
            lay for lay in self.layer_names if any(fnmatch.fnmatchcase(lay, p) for p in patterns)
        )

    def n_params(self, layers: Iterable[str] | None = None) -> int:
        """Number of parameters (of ``layers``, default all)."""
        names = self.param_names if layers is None else self.params_of(layers)
        return sum(math.prod(self.shapes[n]) for n in names)

    def init(self, generator: torch.Generator) -> Params:
        """Fresh parameters (unstacked), drawn layer by layer from ``generator``."""
        params: Params = {}
        for layer in self.layers:
            b = layer.init_bound
            for name, shape in layer.shapes().items():
                u = torch.rand(shape, generator=generator, dtype=torch.float32)
                params[name] = u * (2.0 * b) - b
        return params

    def train_macs(self, trained: Iterable[str]) -> int:
        """Multiply-accumulates of one training pass of one sample when ``trained`` learn.

        The full forward pass, plus for each trained layer its weight gradient (as many MACs
        as its forward), plus the gradient with respect to the input of every layer above the
        lowest trained one (again as many as its forward). With every layer trained this is
        ``3 F - f_1`` for a forward cost ``F`` and a first layer ``f_1``; with only the head,
        ``F + f_head``: the frozen body is still run forward each epoch, as the published
        FedRep code does.
        """
        wanted = set(trained)
        forward = sum(self.macs.values())
        index = [i for i, name in enumerate(self.layer_names) if name in wanted]
        if not index:
            return forward
        weight_grads = sum(self.macs[n] for n in self.layer_names if n in wanted)
        input_grads = sum(self.macs[n] for n in self.layer_names[min(index) + 1 :])
        return forward + weight_grads + input_grads

    # ------------------------------------------------------------------ forward
    def forward(self, params: Params, x: Tensor, start: int = 0, stop: int | None = None) -> Tensor:
        """Apply layers ``start:stop`` to ``x`` of shape ``(C, B, *sample_shape)``.

        Each layer's parameters are either all stacked (leading axis ``C``: client ``c`` of the
        cohort uses slice ``c``) or all shared (no client axis). Shared layers process the
        ``C * B`` samples as one batch; stacked linear layers are one batched matrix product.
        A run of stacked convolutions goes client by client (each client's images through its
        own filters and every conv layer, then one stack): oneDNN's plain convolution is about
        twice as fast as a grouped one with a group per client (a one-channel layer with
        ``patches`` uses :func:`~simfl.neural.kernels.conv_one_channel`), and the per-client
        slices come from
        ``unbind``, whose gradient is one stack (indexing ``x[i]`` would cost a zero-filled
        copy of the whole cohort's tensor per client in the backward pass).
        """
        layers = self.layers[start:stop]
        i = 0
        while i < len(layers):
            j = i
            while j < len(layers) and layers[j].kind == "conv" and x.shape[0] > 1:
                if params[f"{layers[j].name}.bias"].dim() != 2:  # shared: one batch
                    break
                j += 1
            if j > i:
                x = _conv_per_client(layers[i:j], params, x)
                i = j
            else:
                x = _layer(layers[i], params, x)
                i += 1
        return x

    def __repr__(self) -> str:
        return f"Net({self.name!r}, input={self.input_shape}, params={self.n_params()})"


def _post(layer: Layer, x: Tensor) -> Tensor:
    """A layer's max-pooling and ReLU on ``(N, channels, h, w)`` or ``(C, B, features)``.

    Pooling and ReLU are one fused kernel (:func:`~simfl.neural.kernels.pool2_relu`, the
    values and gradients of ``relu(max_pool2d(x, 2))`` bit for bit).
    """
    if layer.pool:
        return pool2_relu(x, layer.relu)
    if layer.relu:
        x = nnf.relu(x)
    return x


def _layer(layer: Layer, params: Params, x: Tensor) -> Tensor:
    """One layer for the whole cohort (its parameters stacked, or shared by every client)."""
    w = params[f"{layer.name}.weight"]
    b = params[f"{layer.name}.bias"]
    c = x.shape[0]
    if b.dim() == 1:  # one model for every client: merge the client and batch axes
        x = x.reshape(1, -1, *x.shape[2:])
        w, b = w.unsqueeze(0), b.unsqueeze(0)
    if layer.kind == "linear":
        if x.dim() > 3:
            x = x.flatten(2)
        x = _post(layer, torch.baddbmm(b.unsqueeze(1), x, w))
    elif layer.patches:  # shared one-channel filters: one product for the whole batch
        x = _post(layer, conv_one_channel(x, w, b, layer.padding))
    else:  # one client (or shared filters): a plain convolution of the whole batch
        y = nnf.conv2d(x[0], w[0], b[0], padding=layer.padding)
        x = _post(layer, y).unsqueeze(0)
    return x.reshape(c, -1, *x.shape[2:])


def _conv_per_client(layers: tuple[Layer, ...], params: Params, x: Tensor) -> Tensor:
    """Stacked convolution layers (with their pooling and ReLU), client by client.

    Each client's images go through every layer before the next client's, so its tensors stay
    in the CPU's caches (measured a little faster than each layer for the whole cohort).
    """
    banks = [
        (layer, params[f"{layer.name}.weight"].unbind(0), params[f"{layer.name}.bias"].unbind(0))
        for layer in layers
    ]
    outs = []
    for i, xi in enumerate(x.unbind(0)):
        for layer, ws, bs in banks:
            if layer.patches:
                # views in and out (indexing ``[0]`` would cost a zero-filled gradient)
                one = conv_one_channel(xi[None], ws[i][None], bs[i][None], layer.padding)
                y = one.squeeze(0)
            else:
                y = nnf.conv2d(xi, ws[i], bs[i], padding=layer.padding)
            xi = _post(layer, y)
        outs.append(xi)
    return torch.stack(outs)


class ModelSpec:
    """A network architecture, built for an input shape and a number of classes."""

    #: Layer names, input to output (known before the data are loaded).
    layer_names: tuple[str, ...]

    def build(self, input_shape: tuple[int, ...], n_classes: int) -> Net:
        """The network for samples of ``input_shape`` and ``n_classes`` classes."""
        raise NotImplementedError

    def lg_global(self, split: str) -> tuple[str, ...]:
        """LG-FedAvg's global layers under ``split`` (``"paper"`` or ``"code"``)."""
        raise NotImplementedError

    def factory(self, input_shape: tuple[int, ...], n_classes: int) -> Callable[[], nn.Module]:
        """A factory of the same network as an ordinary module (:mod:`simfl.neural.paper`).

        Give it to a task as ``Model(spec.factory(shape, classes))`` to train the network on
        the generic path; its LG-FedAvg splits are declared on it as on the paper network.
        """
        layers = self.build(input_shape, n_classes).layers
        return functools.partial(PaperModule, layers)


@dataclass(frozen=True)
class MLP(ModelSpec):
    """Fully connected ReLU network ``in -> hidden[0] -> ... -> n_classes``.

    The FedRep code ends it with a softmax and applies ``CrossEntropyLoss`` to those
    probabilities (a softmax twice); here the outputs are logits and the loss is the usual
    cross-entropy.
    """

    hidden: tuple[int, ...] = (512, 256, 64)

    def __post_init__(self) -> None:
        if not isinstance(self.hidden, tuple) or len(self.hidden) < 2:
            raise ValueError(
                f"MLP.hidden must be a tuple of >= 2 layer widths, got {self.hidden!r}"
            )
        for h in self.hidden:
            check_int("MLP.hidden[i]", h, low=1)

    @classmethod
    def fedrep(cls) -> MLP:
        """FedRep's MNIST/FEMNIST MLP: 784-512-256-64-C."""
        return cls((512, 256, 64))

    @classmethod
    def lg(cls) -> MLP:
        """LG-FedAvg's MNIST MLP: 784-512-256-256-128-C."""
        return cls((512, 256, 256, 128))

    @property
    def layer_names(self) -> tuple[str, ...]:  # type: ignore[override]  # noqa: D102
        hidden = tuple(f"layer_hidden{i}" for i in range(1, len(self.hidden)))
        return ("layer_input", *hidden, "layer_out")

    def lg_global(self, split: str) -> tuple[str, ...]:  # noqa: D102
        check_choice("LGFedAvg.global_layers", split, ("paper", "code"))
        return self.layer_names[2:] if split == "paper" else self.layer_names[-2:]

    def build(self, input_shape: tuple[int, ...], n_classes: int) -> Net:  # noqa: D102
        widths = (math.prod(input_shape), *self.hidden, n_classes)
        layers = tuple(
            Layer(name, "linear", a, b, relu=i < len(widths) - 2, macs=a * b)
            for i, (name, a, b) in enumerate(
                zip(self.layer_names, widths[:-1], widths[1:], strict=True)
            )
        )
        splits = {s: self.lg_global(s) for s in ("paper", "code")}
        return Net(f"MLP{self.hidden}", input_shape, layers, splits)


@dataclass(frozen=True)
class CNN(ModelSpec):
    """``conv1 -> pool -> conv2 -> pool -> fc1 -> fc2 -> fc3`` with 5x5 kernels and ReLUs.

    Parameters
    ----------
    channels
        Output channels of ``conv1`` and ``conv2``.
    hidden
        Widths of ``fc1`` and ``fc2``.
    kernel
        Side of the square convolution kernels.
    padding
        Zero padding of ``conv1`` and ``conv2`` on each side (default none; the classic
        LeNet-5 on 28x28 images pads ``conv1`` by 2: ``padding=(2, 0)``).
    conv_kernel
        How ``conv1`` of one-channel (grey) images is computed: ``"onednn"`` (default),
        PyTorch's ``conv2d``, bit for bit a ``torch.nn.Conv2d``; ``"patches"``, a matrix
        product over the images' patches (:func:`simfl.neural.kernels.conv_one_channel`),
        equal to ``conv2d`` to float32 rounding. ``"patches"`` makes W2's training steps
        about 10% faster on AVX2 CPUs and about 2% slower on AVX-512 ones, so it is an
        option. Images with more channels always use ``conv2d``.
    """

    channels: tuple[int, int] = (64, 64)
    hidden: tuple[int, int] = (120, 64)
    kernel: int = 5
    padding: tuple[int, int] = (0, 0)
    conv_kernel: str = "onednn"

    layer_names = ("conv1", "conv2", "fc1", "fc2", "fc3")

    def __post_init__(self) -> None:
        for field, value in (("channels", self.channels), ("hidden", self.hidden)):
            if not isinstance(value, tuple) or len(value) != 2:
                raise ValueError(f"CNN.{field} must be a pair of ints, got {value!r}")
            for v in value:
                check_int(f"CNN.{field}[i]", v, low=1)
        check_int("CNN.kernel", self.kernel, low=1)
        if not isinstance(self.padding, tuple) or len(self.padding) != 2:
            raise ValueError(f"CNN.padding must be a pair of ints >= 0, got {self.padding!r}")
        for v in self.padding:
            check_int("CNN.padding[i]", v, low=0)
        check_choice("CNN.conv_kernel", self.conv_kernel, ("patches", "onednn"))

    @classmethod
    def fedrep(cls) -> CNN:
        """The FedRep code's CIFAR-10 CNN (64, 64 channels; 120, 64 units)."""
        return cls((64, 64), (120, 64))

    @classmethod
    def fedrep100(cls) -> CNN:
        """The FedRep code's CIFAR-100 CNN (64, 128 channels; 256, 128 units; no dropout)."""
        return cls((64, 128), (256, 128))

    @classmethod
    def lenet5(cls) -> CNN:
        """LeNet-5 as LG-FedAvg uses it (6, 16 channels; 120, 100 units)."""
        return cls((6, 16), (120, 100))

    @classmethod
    def lenet5_classic(cls) -> CNN:
        """The classic LeNet-5 of 28x28 images (the peers' W2 model).

        ``conv1`` padded by 2, 6 and 16 channels, 120 and 84 units (61,706 parameters for
        10 classes).
        """
        return cls((6, 16), (120, 84), padding=(2, 0))

    def lg_global(self, split: str) -> tuple[str, ...]:  # noqa: D102
        check_choice("LGFedAvg.global_layers", split, ("paper", "code"))
        return ("conv1", "conv2") if split == "paper" else ("fc2", "fc3")

    def build(self, input_shape: tuple[int, ...], n_classes: int) -> Net:  # noqa: D102
        ch, side, _ = input_shape
        k = self.kernel
        p1, p2 = self.padding
        s1 = side + 2 * p1 - k + 1
        s2 = s1 // 2 + 2 * p2 - k + 1
        if s1 < 2 or s2 < 2:
            raise ValueError(
                f"Scenario.task: the CNN needs images of side >= {2 * (k + 1) + k - 2} for "
                f"{k}x{k} kernels (less with padding {self.padding}), got input shape "
                f"{input_shape}"
            )
        c1, c2 = self.channels
        flat = c2 * (s2 // 2) ** 2
        h1, h2 = self.hidden
        layers = (
            Layer(
                "conv1",
                "conv",
                ch,
                c1,
                k,
                pool=True,
                padding=p1,
                macs=c1 * ch * k * k * s1 * s1,
                patches=ch == 1 and self.conv_kernel == "patches",
            ),
            Layer(
                "conv2", "conv", c1, c2, k, pool=True, padding=p2, macs=c2 * c1 * k * k * s2 * s2
            ),
            Layer("fc1", "linear", flat, h1, macs=flat * h1),
            Layer("fc2", "linear", h1, h2, macs=h1 * h2),
            Layer("fc3", "linear", h2, n_classes, relu=False, macs=h2 * n_classes),
        )
        splits = {s: self.lg_global(s) for s in ("paper", "code")}
        name = f"CNN{self.channels}{self.hidden}"
        if self.padding != (0, 0):
            name += f"pad{self.padding}"
        return Net(name, input_shape, layers, splits)


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
