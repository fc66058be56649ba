"""Any ``torch.nn.Module`` as a model a whole cohort trains: :class:`Model` and :class:`ModuleNet`.

A model is a *factory*: a class or a zero-argument function that returns a fresh
``torch.nn.Module``. :class:`Model` wraps one with what simfl needs to know about it (which
layers are the head, whether normalisation layers stay on the clients, which trainer path);
a bare factory given to a task is ``Model(factory)``. Binding it to the data gives a
:class:`ModuleNet`, which the trainer (:mod:`simfl.neural.train`) and every neural algorithm
use as they use the paper networks' :class:`~simfl.neural.models.Net`:

* **Parameters and buffers by name.** The module's parameters and buffers (BatchNorm's running
  statistics) are plain tensors in one dict named as ``module.state_dict()`` names them; a
  *layer* is the submodule that owns them (``"layer1.0.conv1.weight"`` belongs to
  ``"layer1.0.conv1"``). Algorithms split layers into shared and local ones by these names.
* **The head** (FedRep's and FedPer's personal part) is the last layer with parameters unless
  :attr:`Model.head` names it by patterns (:func:`fnmatch.fnmatch` over layer and parameter
  names); a pattern that matches nothing is an error naming the module's layers.
* **Buffers** are averaged with the parameters (weighted by training-set size; integer ones,
  such as ``num_batches_tracked``, rounded), or with ``Model(norm="local")`` the normalisation
  layers (their parameters and buffers) stay on each client: FedBN (Li et al., ICLR 2021).
  During a local update every client has its own copy of every buffer, updated in place by the
  module's forward pass as in ``torch.nn``.
* **Initialisation** runs the factory with torch's random generator seeded from the run's
  keyed stream (inside :func:`torch.random.fork_rng`, so the process's own torch stream is
  left as it was): every run of a scenario starts from the same weights, drawn by the module's
  own initialisation code.
* **Forward passes** go through :func:`torch.func.functional_call`: on a cohort either client
  by client (``"loop"``) or all clients at once with :func:`torch.func.vmap` over their stacked
  parameters (``"cohort"``). A step's clients are grouped by the number of samples in their
  minibatch, so every client computes exactly its own samples (no padding: a BatchNorm layer
  sees only the client's samples) and clients without a sample sit the step out.
* **Randomness in the module** (dropout: ``nn.Dropout`` modules, and any other draw from
  torch's generator that a training-mode forward pass makes, such as functional dropout or
  ``nn.GRU(dropout=...)``): each training step seeds torch's generator from the
  clients' keyed streams (:func:`torch.random.fork_rng` again). In the loop every client draws
  from its own seed; the cohort path draws one set of masks for the group (``vmap``'s
  ``randomness="different"``), so with dropout the two paths draw different masks (both
  reproducible).
* **Work** is counted from the module itself: :meth:`ModuleNet.train_macs` runs one training
  step on two samples under :class:`torch.utils.flop_counter.FlopCounterMode` (multiply-
  accumulates are half its floating-point operations) with only the trained layers requiring a
  gradient, so frozen layers cost their forward pass and the gradients autograd skips cost
  nothing.

The trainer path (:attr:`Model.trainer`): ``"auto"`` takes the cohort path on a GPU, where
small per-client models are launch-bound and one ``vmap`` kernel trains many clients, and the
loop on a CPU, where the arithmetic dominates and ``vmap`` turns per-client convolutions into
grouped ones that oneDNN runs slower (``analysis/perf/module_paths.py`` measures both). The
choice is a rule, not a timing taken at run time: the two paths round differently, so a path
chosen by a stopwatch would make a scenario's numbers depend on the machine's load.
A module ``vmap`` cannot take (in-place updates of unbatched state, data-dependent control
flow, ``.item()``) falls back to the loop; :attr:`ModuleNet.trainer` holds the path and the
reason, and ``res.meta["training"]`` reports it.
"""

from __future__ import annotations

import fnmatch
import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.func import functional_call, vmap
from torch.utils.flop_counter import FlopCounterMode

from simfl._checks import check_choice
from simfl.neural.models import Net, Params, param_layer
from simfl.neural.objective import Objective

__all__ = [
    "AnyNet",
    "Model",
    "ModelCheckError",
    "ModuleNet",
    "Objective",
    "as_model",
    "module_seed",
]

#: Normalisation layers (FedBN's local layers under ``Model(norm="local")``).
NORM_TYPES: tuple[type[nn.Module], ...] = (
    nn.modules.batchnorm._NormBase,
    nn.GroupNorm,
    nn.LayerNorm,
    nn.modules.instancenorm._InstanceNorm,
)
#: Bytes a client's training may take in one cohort call beyond its parameters (the cohort
#: path is chunked to fit :func:`memory_budget`).
_SAFETY = 0.5


class ModelCheckError(ValueError):
    """A model that does not suit its data or algorithm (the message says what and how)."""


@dataclass(frozen=True)
class Model:
    """A ``torch.nn.Module`` factory and what simfl needs to know about the module.

    Parameters
    ----------
    factory
        A class or zero-argument function returning a fresh ``torch.nn.Module`` whose forward
        pass takes a batch of samples and returns the batch's outputs (logits for
        classification and next-token prediction, predictions for regression).
    head
        Patterns (:func:`fnmatch.fnmatch`) over layer names (``"fc"``, ``"classifier.*"``) or
        parameter names (``"fc.weight"``) naming the head: FedRep's and FedPer's personal part
        and what "+FT" fine-tunes (default: the last layer with parameters). Every pattern must
        match at least one layer.
    norm
        ``"shared"`` (default): normalisation layers are averaged like every layer, their
        running statistics with them. ``"local"``: their parameters and buffers stay on each
        client, whatever the algorithm shares (FedBN).
    trainer
        ``"auto"`` (the cohort path on a GPU, the loop on a CPU), ``"cohort"`` (``vmap`` over
        the clients) or ``"loop"`` (client by client).
    global_layers
        Patterns naming LG-FedAvg's global layers for ``LGFedAvg(global_layers="paper")``
        (default: none declared; ``"code"`` is the last two layers of any module).
    """

    factory: Callable[[], nn.Module]
    head: tuple[str, ...] | None = None
    norm: str = "shared"
    trainer: str = "auto"
    global_layers: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.factory, nn.Module) or not callable(self.factory):
            raise ValueError(
                f"Model.factory must be a class or a zero-argument function returning a "
                f"torch.nn.Module (so that every run builds its own copy), got "
                f"{self.factory!r}"
            )
        for name in ("head", "global_layers"):
            value = getattr(self, name)
            if value is None:
                continue
            if not (
                isinstance(value, tuple) and value and all(isinstance(p, str) and p for p in value)
            ):
                raise ValueError(
                    f"Model.{name} must be a tuple of name patterns (e.g. ('fc',)), got {value!r}"
                )
        check_choice("Model.norm", self.norm, ("shared", "local"))
        check_choice("Model.trainer", self.trainer, ("auto", "cohort", "loop"))


def as_model(model: object, owner: str) -> Model:
    """``model`` as a :class:`Model` (a bare factory wrapped), or ``ValueError``."""
    if isinstance(model, Model):
        return model
    if isinstance(model, nn.Module):
        raise ValueError(
            f"{owner} must be a factory of torch.nn.Module (its class, or a function "
            f"returning one), not a module instance: every run builds and initialises its "
            f"own copy from the run's seed; got an instance of {type(model).__name__}"
        )
    if callable(model):
        return Model(model)
    raise ValueError(
        f"{owner} must be a torch.nn.Module factory (a class or a zero-argument function), "
        f"a simfl.neural.Model, or MLP(...)/CNN(...), got {model!r}"
    )


def module_seed(generator: torch.Generator | np.random.Generator) -> int:
    """A seed for torch's generator drawn from a keyed ``generator``."""
    if isinstance(generator, np.random.Generator):
        return int(generator.integers(2**63))
    return int(torch.randint(2**62, (1,), generator=generator).item())


def build_module(factory: Callable[[], nn.Module], seed: int) -> nn.Module:
    """``factory()`` with torch's generator seeded by ``seed`` (the process's stream restored)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = factory()
    if not isinstance(module, nn.Module):
        raise ModelCheckError(
            f"the model factory {getattr(factory, '__name__', factory)!r} returned "
            f"{type(module).__name__}, not a torch.nn.Module"
        )
    return module


# ---------------------------------------------------------------------- objectives


# ---------------------------------------------------------------------- the bound model
def _matches(patterns: Sequence[str], layer: str, params: Iterable[str]) -> bool:
    return any(
        fnmatch.fnmatchcase(layer, p) or any(fnmatch.fnmatchcase(n, p) for n in params)
        for p in patterns
    )


def memory_budget(device: torch.device) -> int:
    """Bytes one cohort call may use: half of what is free on ``device``."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free * _SAFETY)
    try:
        pages = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        pages = 8 << 30
    return int(pages * _SAFETY)


@dataclass
class _Probe:
    """What one probe of the module found (see :meth:`ModuleNet.probe`)."""

    flops: dict[frozenset[str], float] = field(default_factory=dict)
    saved_bytes: float = 0.0


class ModuleNet:
    """A :class:`Model` bound to its data: names, head, work, and batched forward passes.

    Parameters
    ----------
    model
        The model.
    objective
        The task's loss and metrics.
    sample
        ``(x, y)``: two samples of the training data (inputs and targets), on ``device``.
    device
        Where training runs.
    seed
        Seed of the template module (its values are never used: every call passes all the
        parameters and buffers it computes with).
    augment
        ``augment(x, generator) -> x``: a transformation of one client's training minibatch
        drawing from ``generator`` (a ``torch.Generator`` seeded from the client's keyed
        stream each step), or ``None``.
    """

    splittable = False

    def __init__(
        self,
        model: Model,
        objective: Objective,
        sample: tuple[Tensor, Tensor],
        device: torch.device,
        seed: int = 0,
        augment: Callable[[Tensor, torch.Generator], Tensor] | None = None,
    ) -> None:
        self.model = model
        self.objective = objective
        self.device = device
        self.augment = augment
        module = build_module(model.factory, seed).to(device)
        self.module = module
        self.name = type(module).__name__
        named_p = dict(module.named_parameters())
        named_b = dict(module.named_buffers())
        self._tied = len(dict(module.named_parameters(remove_duplicate=False))) > len(named_p)
        if not named_p:
            raise ModelCheckError(f"the model {self.name} has no parameters to train")
        self.param_names = tuple(named_p)
        self.buffer_names = tuple(named_b)
        self.shapes: dict[str, tuple[int, ...]] = {
            n: tuple(t.shape) for n, t in {**named_p, **named_b}.items()
        }
        self.dtypes = {n: t.dtype for n, t in {**named_p, **named_b}.items()}
        layers: list[str] = []
        for n in (*self.param_names, *self.buffer_names):
            layer = param_layer(n) if "." in n else ""
            if layer not in layers:
                layers.append(layer)
        owners = dict(module.named_modules())
        self.layer_names = tuple(layers)
        self._layer_of = {
            n: (param_layer(n) if "." in n else "") for n in (*self.param_names, *self.buffer_names)
        }
        with_params = [lay for lay in layers if any(self._layer_of[p] == lay for p in named_p)]
        if model.head is None:
            self.head: tuple[str, ...] = (with_params[-1],)
        else:
            self.head = self._select("Model.head", model.head)
        self.body = tuple(lay for lay in self.layer_names if lay not in self.head)
        self.norm_layers = tuple(
            lay for lay in self.layer_names if isinstance(owners.get(lay), NORM_TYPES)
        )
        self.local_layers: tuple[str, ...] = self.norm_layers if model.norm == "local" else ()
        lg: dict[str, tuple[str, ...]] = {"code": tuple(with_params[-2:])}
        if model.global_layers is not None:
            lg["paper"] = self._select("Model.global_layers", model.global_layers)
        self.lg_global = lg
        dropout = any(isinstance(m, nn.modules.dropout._DropoutNd) for m in module.modules())
        self._sample = sample
        #: Whether a training step draws random numbers (dropout, augmentation).
        self.random = dropout or augment is not None or self._draws_random()
        self._probe = _Probe()
        self.trainer = self._choose_path()

    def _draws_random(self) -> bool:
        """Whether a training-mode forward pass draws from torch's generator.

        Catches the randomness that no ``nn.Dropout`` module announces: functional dropout in
        ``forward``, the dropout between a recurrent module's layers (``nn.GRU(dropout=...)``),
        any ``torch.rand`` the module calls. The process's generator is restored.
        """
        x, _ = self._sample
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(0)
            before = torch.random.get_rng_state()
            gpu = torch.cuda.get_rng_state(self.device) if devices else None
            self.module.train()
            with torch.no_grad():
                self.module(x)
            drew = not torch.equal(before, torch.random.get_rng_state())
            if gpu is not None:
                drew = drew or not torch.equal(gpu, torch.cuda.get_rng_state(self.device))
        return drew

    # ------------------------------------------------------------------ names
    def _select(self, owner: str, patterns: Sequence[str]) -> tuple[str, ...]:
        """Layers matched by ``patterns`` (each must match one), in module order."""
        for p in patterns:
            if not any(
                _matches((p,), lay, [n for n, o in self._layer_of.items() if o == lay])
                for lay in self.layer_names
            ):
                raise ModelCheckError(
                    f"{owner} pattern {p!r} matches no layer of {self.name}; its layers are "
                    f"{[lay for lay in self.layer_names]}"
                )
        return tuple(
            lay
            for lay in self.layer_names
            if _matches(patterns, lay, [n for n, o in self._layer_of.items() if o == lay])
        )

    def resolve_layers(self, owner: str, patterns: Sequence[str]) -> tuple[str, ...]:
        """The layers ``patterns`` name (``ModelCheckError`` naming ``owner`` if one is unused)."""
        return self._select(owner, patterns)

    def params_of(self, layers: Iterable[str]) -> tuple[str, ...]:
        """Names of the trainable parameters of ``layers``, in module order."""
        wanted = set(layers)
        return tuple(p for p in self.param_names if self._layer_of[p] in wanted)

    def names_of(self, layers: Iterable[str]) -> tuple[str, ...]:
        """Names of the parameters and buffers of ``layers``, in module order."""
        wanted = set(layers)
        return tuple(
            n for n in (*self.param_names, *self.buffer_names) if self._layer_of[n] in wanted
        )

    def n_params(self, layers: Iterable[str] | None = None) -> int:
        """Number of trainable parameters (of ``layers``, default all)."""
        names = self.param_names if layers is None else self.params_of(layers)
        return sum(math.prod(self.shapes[n]) for n in names)

    # ------------------------------------------------------------------ values
    def init(self, generator: torch.Generator | np.random.Generator) -> Params:
        """Fresh parameters and buffers: the factory's own initialisation from ``generator``."""
        module = build_module(self.model.factory, module_seed(generator))
        got = {n: t.detach().clone() for n, t in module.state_dict(keep_vars=True).items()}
        missing = set(self.shapes) - set(got)
        if missing or any(tuple(got[n].shape) != self.shapes[n] for n in self.shapes):
            raise ModelCheckError(
                f"the model factory built modules of different shapes: {sorted(missing) or ''}"
            )
        return {n: got[n].to("cpu") for n in (*self.param_names, *self.buffer_names)}

    def stacked(self, name: str, p: Tensor) -> bool:
        """Whether the tensor ``p`` of ``name`` carries a leading client axis."""
        return p.dim() == len(self.shapes[name]) + 1

    # ------------------------------------------------------------------ computing
    def _call(self, params: Params, x: Tensor) -> Tensor:
        # every call passes every parameter and buffer (checked at build); untying and the
        # strict key check would walk the module's tree at each call, so only a module with
        # tied weights (one tensor under two names) pays for the untying
        out = functional_call(self.module, params, (x,), tie_weights=self._tied, strict=False)
        if not isinstance(out, Tensor):
            raise ModelCheckError(
                f"the forward pass of {self.name} returned {type(out).__name__}, not a tensor"
            )
        return out

    def forward(self, params: Params, x: Tensor, start: int = 0, stop: int | None = None) -> Tensor:
        """Outputs of ``x`` ``(C, B, ...)``: client ``c`` through its own slice of stacked tensors.

        Evaluation mode (no dropout, running statistics used); ``start``/``stop`` must be the
        whole module (a module cannot be cut into layers).
        """
        if start != 0 or stop is not None:
            raise ValueError("a torch.nn.Module runs whole: start=0, stop=None")
        self.module.eval()
        stacked = {n: p for n, p in params.items() if self.stacked(n, p)}
        if not stacked:
            c, b = x.shape[:2]
            out = self._call(params, x.reshape(c * b, *x.shape[2:]))
            return out.reshape(c, b, *out.shape[1:])
        return torch.stack(
            [
                self._call({**params, **{n: p[i] for n, p in stacked.items()}}, x[i])
                for i in range(x.shape[0])
            ]
        )

    def losses(
        self,
        params: Params,
        x: Tensor,
        y: Tensor,
        counts: Tensor | np.ndarray[Any, Any],
        seeds: Sequence[int] | None = None,
    ) -> Tensor:
        """Each client's mean training loss on its first ``counts[c]`` samples of ``x[c]``.

        ``params``: every tensor stacked ``(C, ...)`` or shared; buffers stacked (they are
        updated in place, as the module's forward pass updates them). Clients are grouped by
        their count; a client with none gets loss 0 and runs nothing. ``seeds``: one per client
        for a module with random layers (its dropout masks). Training mode.
        """
        self.module.train()
        counts = np.asarray(counts)
        c = int(counts.size)
        out = torch.zeros(c, dtype=torch.float32, device=x.device)
        pieces: list[tuple[Tensor, Tensor]] = []
        loop = self.trainer["path"] == "loop"
        # each client's slices from one unbind (whose gradient is one stack; indexing p[i]
        # would add a zero-filled gradient of the whole stacked tensor per client)
        slices = {n: p.unbind(0) for n, p in params.items() if loop and self.stacked(n, p)}
        for n_valid in sorted(set(counts.tolist()) - {0}, reverse=True):
            members = np.flatnonzero(counts == n_valid)
            if loop:
                for i in members.tolist():
                    sub = {n: (slices[n][i] if n in slices else p) for n, p in params.items()}
                    xi = self._augmented(x[i, :n_valid], None if seeds is None else seeds[i])
                    with self._seeded(None if seeds is None else (seeds[i],)):
                        loss = self._loss(sub, xi, y[i, :n_valid])
                    pieces.append((torch.tensor([i], device=x.device), loss.reshape(1)))
            else:
                pieces.append(self._group(params, x, y, members, int(n_valid), seeds))
        if pieces:
            index = torch.cat([p[0] for p in pieces])
            values = torch.cat([p[1] for p in pieces])
            out = out.index_put((index,), values.to(out.dtype))
        return out

    def _loss(self, params: Params, x: Tensor, y: Tensor) -> Tensor:
        loss = self.objective.loss_fn(self._call(params, x), y)
        return loss

    def _group(
        self,
        params: Params,
        x: Tensor,
        y: Tensor,
        members: np.ndarray[Any, Any],
        n_valid: int,
        seeds: Sequence[int] | None,
    ) -> tuple[Tensor, Tensor]:
        """Losses of clients ``members`` (all with ``n_valid`` samples) in one ``vmap`` call."""
        whole = members.size == x.shape[0] and bool((members == np.arange(x.shape[0])).all())
        idx = torch.from_numpy(members).to(x.device)
        stacked = {n: p for n, p in params.items() if self.stacked(n, p)}
        shared = {n: p for n, p in params.items() if n not in stacked}
        sub = stacked if whole else {n: p.index_select(0, idx) for n, p in stacked.items()}
        xs = x[:, :n_valid] if whole else x.index_select(0, idx)[:, :n_valid]
        ys = y[:, :n_valid] if whole else y.index_select(0, idx)[:, :n_valid]
        if self.augment is not None and seeds is not None:
            xs = torch.stack(
                [self._augmented(xs[j], seeds[i]) for j, i in enumerate(members.tolist())]
            )

        def one(p: Params, xi: Tensor, yi: Tensor) -> Tensor:
            return self._loss({**shared, **p}, xi, yi)

        with self._seeded(None if seeds is None else [seeds[i] for i in members.tolist()]):
            losses = vmap(one, randomness="different" if self.random else "error")(sub, xs, ys)
        if not whole:  # the module's in-place buffer updates, back into the cohort's tensors
            with torch.no_grad():
                for n in self.buffer_names:
                    if n in stacked:
                        stacked[n].index_copy_(0, idx, sub[n])
        return idx, losses

    def _augmented(self, x: Tensor, seed: int | None) -> Tensor:
        """One client's minibatch through :attr:`augment` (a generator seeded by ``seed``)."""
        if self.augment is None or seed is None:
            return x
        gen = torch.Generator(device=x.device).manual_seed(seed ^ 0x5EED)
        out = self.augment(x, gen)
        if not isinstance(out, Tensor) or out.shape[0] != x.shape[0]:
            raise ModelCheckError(
                f"Supervised.augment must return a tensor of the batch's {x.shape[0]} "
                f"samples, got {type(out).__name__}"
            )
        return out

    def _seeded(self, seeds: Sequence[int] | None) -> Any:
        """A context seeding torch's generator for the module's random layers (or nothing)."""
        return _Seeded(seeds if self.random else None, self.device)

    def evaluate(
        self, params: Params, x: Tensor, y: Tensor, index: np.ndarray[Any, Any], chunk: int
    ) -> dict[str, np.ndarray[Any, Any]]:
        """Per client, each metric summed over its samples (``index`` ``(C, T)``, -1 padded).

        Evaluation mode, client by client in pieces of ``chunk`` samples; each metric is the
        batch mean times the batch size, summed in float64.
        """
        self.module.eval()
        fns = self.objective.metric_fns
        sums = {m: np.zeros(index.shape[0]) for m in fns}
        stacked = {n: p for n, p in params.items() if self.stacked(n, p)}
        with torch.no_grad():
            for i in range(index.shape[0]):
                own = index[i][index[i] >= 0]
                p = {**params, **{n: t[i] for n, t in stacked.items()}}
                for s in range(0, own.size, chunk):
                    ids = torch.from_numpy(own[s : s + chunk]).to(x.device)
                    out = self._call(p, x.index_select(0, ids))
                    yi = y.index_select(0, ids)
                    for m, fn in fns.items():
                        sums[m][i] += float(fn(out, yi)) * ids.numel()
        return sums

    # ------------------------------------------------------------------ work and paths
    def train_macs(self, trained: Iterable[str]) -> float:
        """Multiply-accumulates of one training step of one sample when ``trained`` learn.

        Counted by :class:`~torch.utils.flop_counter.FlopCounterMode` on a step of two samples
        (half its FLOPs per sample and per multiply-accumulate); only the parameters of
        ``trained`` require a gradient, so autograd's backward pass stops below the lowest one.
        """
        key = frozenset(trained)
        got = self._probe.flops.get(key)
        if got is None:
            names = set(self.params_of(key))
            params = self.init(torch.Generator().manual_seed(0))
            params = {n: p.to(self.device).requires_grad_(n in names) for n, p in params.items()}
            x, y = self._sample
            self.module.train()
            with (
                _Seeded([0] if self.random else None, self.device),
                FlopCounterMode(display=False) as counter,
            ):
                loss = self._loss(params, x, y)
                if names:
                    torch.autograd.grad(loss, [params[n] for n in self.param_names if n in names])
            got = self._probe.flops[key] = counter.get_total_flops() / 2.0 / x.shape[0]
        return got

    def _choose_path(self) -> dict[str, str]:
        """The trainer path and why (see the module docstring)."""
        wanted = self.model.trainer
        if wanted == "loop":
            return {"path": "loop", "reason": "Model(trainer='loop')"}
        if wanted == "auto" and self.device.type != "cuda":
            return {"path": "loop", "reason": "auto: the loop on a CPU"}
        why = "Model(trainer='cohort')" if wanted == "cohort" else "auto: the cohort on a GPU"
        self.trainer = {"path": "cohort", "reason": why}
        try:
            params = self.init(torch.Generator().manual_seed(0))
            x, y = self._sample
            stacked = {n: p.to(self.device).expand(2, *p.shape).clone() for n, p in params.items()}
            for n in self.param_names:
                stacked[n].requires_grad_(True)
            xs, ys = torch.stack([x, x]), torch.stack([y, y])
            loss = self._group(stacked, xs, ys, np.arange(2), x.shape[0], [0, 1])
            torch.autograd.grad(loss[1].sum(), [stacked[n] for n in self.param_names])
        except Exception as exc:
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            return {
                "path": "loop",
                "reason": f"vmap cannot take {self.name} ({type(exc).__name__}: {text[:200]})",
            }
        return {"path": "cohort", "reason": why}

    def cohort_chunk(self, batch_size: int, extra_copies: int = 3) -> int:
        """Clients one cohort call may train at once within :func:`memory_budget`.

        A client costs its parameters and buffers ``1 + extra_copies`` times (values,
        gradients, optimiser state) plus the activations autograd keeps for ``batch_size``
        samples (measured on the probe's step). ``ModelCheckError`` if one client does not fit.
        """
        state = sum(
            math.prod(s) * torch.empty((), dtype=self.dtypes[n]).element_size()
            for n, s in self.shapes.items()
        )
        per_sample = self._activation_bytes()
        per_client = state * (1 + extra_copies) + per_sample * batch_size
        budget = memory_budget(self.device)
        if per_client > budget:
            raise ModelCheckError(
                f"one client's training of {self.name} needs about {per_client / 2**20:.0f} MiB "
                f"(parameters, gradients, optimiser state and the activations of a batch of "
                f"{batch_size}), more than the {budget / 2**20:.0f} MiB available on "
                f"{self.device}; use a smaller model or batch"
            )
        return max(1, int(budget // per_client))

    def _activation_bytes(self) -> float:
        if not self._probe.saved_bytes:
            saved = [0]

            def pack(t: Tensor) -> Tensor:
                saved[0] += t.numel() * t.element_size()
                return t

            params = self.init(torch.Generator().manual_seed(0))
            params = {n: p.to(self.device) for n, p in params.items()}
            for n in self.param_names:
                params[n].requires_grad_(True)
            x, y = self._sample
            self.module.train()
            with (
                _Seeded([0] if self.random else None, self.device),
                torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t),
            ):
                self._loss(params, x, y)
            self._probe.saved_bytes = max(1.0, saved[0] / x.shape[0])
        return self._probe.saved_bytes

    def __repr__(self) -> str:
        return f"ModuleNet({self.name!r}, params={self.n_params()}, trainer={self.trainer['path']})"


class _Seeded:
    """Seed torch's generator for a step's random layers, and restore the process's after."""

    def __init__(self, seeds: Sequence[int] | None, device: torch.device) -> None:
        self.seeds = seeds
        self.device = device
        self._fork: Any = None

    def __enter__(self) -> None:
        if self.seeds is None:
            return
        devices = [self.device] if self.device.type == "cuda" else []
        self._fork = torch.random.fork_rng(devices=devices)
        self._fork.__enter__()
        seed = int(np.random.SeedSequence(list(self.seeds)).generate_state(1, np.uint64)[0])
        torch.manual_seed(seed % (2**63))

    def __exit__(self, *exc: object) -> None:
        if self._fork is not None:
            self._fork.__exit__(*exc)
            self._fork = None


#: A built model: a paper network (:class:`~simfl.neural.models.Net`) or a module.
AnyNet = Net | ModuleNet
