"""Neural FedAvg, FedAvg+FT, FedProx, Local-only, FedPer, FedRep and LG-FedAvg.

Each is a small frozen dataclass that says which layers stay on the clients and what a client
does in a round; the batched training, aggregation, evaluation, work and payload are shared
(:mod:`simfl.neural.base`). SRPFL is a policy (:class:`simfl.policies.SRPFL`) and wraps any of
them unchanged.

* FedAvg -- McMahan et al., AISTATS 2017: every client trains the whole network for ``epochs``
  epochs from the server model; the server averages (weighted by training-set size). Evaluation
  uses the shared model for every client. The FedRep code instead scores FedAvg with each
  client's last *locally trained* copy (``w_glob_keys = []`` makes every key "local" in
  ``test_img_local_all``); the paper reports the global model, which is what is done here.
* FedAvg+FT -- FedAvg, then at evaluation each client trains only the head of the global model on
  its own data for ``finetune_epochs`` (10) epochs (Collins et al., ICML 2021, Section 5).
* FedProx -- Li et al., MLSys 2020: FedAvg with ``mu/2 ||w - w^t||^2`` added to the local loss
  (default ``mu = 0.1``, the FedRep code's default). The FedRep code's FedProx optimiser also
  has a server momentum ``gmf`` (default 0, not implemented).
* Local-only -- every layer stays on the client; nothing is sent (payload 0 bytes). A client
  trains ``epochs`` epochs each time it is selected (the paper's "same number of local epochs"
  rule); the FedRep code's ``main_local.py`` trains every client for T epochs in one go, which
  ``epochs = 1 / r`` matches in expectation under a fraction ``r`` of the clients per round.
* FedPer -- Arivazhagan et al. 2019: the head stays on the client, body and head train together
  for ``epochs`` epochs, the body is averaged.
* FedRep -- Collins et al., ICML 2021, Algorithm 1: ``head_epochs`` (tau_h) epochs on the head
  with the body frozen, then ``body_epochs`` (tau_phi) epochs on the body with the head frozen;
  heads persist on the clients; the body is averaged. Paper settings: 10 head epochs, then 5 body
  epochs (1 for CIFAR-10 with 100 clients); every other method uses as many epochs as FedRep's
  body ("All other methods use the same number of local epochs as FedRep does for updating the
  representation"), so set ``epochs`` accordingly (the FedRep scripts run FedAvg on CIFAR with 1).
  ``interleave=True`` is the SRPFL code's schedule instead: ``body_epochs`` cycles of
  ``head_epochs`` head epochs then one body epoch.
* LG-FedAvg -- Liang et al. 2020: the *global* layers are averaged and shared, the others stay
  on the clients; every layer trains for ``epochs`` epochs (the paper's E = 1).
  ``global_layers="paper"`` is the paper's split (MLP: all but the first two layers; CNN: the
  two convolutions), ``"code"`` the FedRep and SRPFL codes' (the last two layers), or a tuple of
  layer names. ``pretrain_rounds`` first runs that many rounds of FedAvg on the whole network
  and starts every client's local layers from the result (the paper trains FedAvg "until we
  reach a goal accuracy" before the LG rounds; a round count replaces the accuracy test). The
  LG code also keeps each device's best model by its test accuracy and reports the best round;
  that selection on the test set is not done.

Shared departures from the published code, for all of them:

* Frozen parameters stay frozen. In the FedRep code ``net.zero_grad()`` leaves zero gradients on
  layers frozen with ``requires_grad = False`` (PyTorch < 2.0), so the shared SGD optimiser
  still moves them with momentum and weight decay; here a phase changes only its own layers.
  Momentum buffers do carry over from one phase to the next within a round, as the one
  optimiser of the code does.
* The loss is cross-entropy on logits (the code's MLP applies ``CrossEntropyLoss`` to softmax
  outputs) and images are standardised per channel without the code's CIFAR augmentation
  (random crops and flips would need per-step random transforms outside the keyed streams).
* The server averages weighted by training-set size (the paper's weighted average; the FedRep
  code weights by 1 on CIFAR/MNIST, where its shards make the sizes equal anyway). The code's
  cap of 500 training samples per client (``m_tr``) and its extra final round, in which every
  client fine-tunes its head before the last test, are not simulated.
* Defaults: the FedRep code's SGD (lr 0.01, momentum 0.5, weight decay 1e-4 on weights, batch
  10) for every algorithm; the LG code uses lr 0.05 and no weight decay on MNIST
  (``SGD(lr=0.05, weight_decay=0.0)``). Epochs default to the paper's 5 (FedRep: 10 + 5; LG: 1).
* Optimisers: every algorithm here takes any client optimiser (:mod:`simfl.neural.optim`:
  ``SGD``, ``Adam``, ``AdamW``, each with ``state="reset"`` or ``"keep"``) and a server optimiser
  (``server_optimizer``, :mod:`simfl.neural.server`: ``FedAvgM``, ``FedAdam``, ``FedYogi``,
  ``FedAdagrad``) on the average of the shared parameters; LG-FedAvg's pre-training rounds
  step the whole network with it. Local-only has no server model and refuses one.
* Heads and local layers that never trained (clients never selected) are the initial ones, as
  in the code. Fine-tuning before evaluation (``finetune_epochs``) trains the client's local
  layers (FedAvg+FT: the head) from its own values by default (the FedRep paper's "+FT");
  ``finetune_from="average"`` starts from the last cohort's average, as the SRPFL code's
  ``test_fine_tune`` does.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, replace
from typing import ClassVar

from simfl._checks import check_bool, check_choice, check_int, check_real
from simfl.algorithms.base import Updates
from simfl.neural.base import NeuralAlgorithm, NeuralState
from simfl.neural.models import ModelSpec, Params
from simfl.neural.module import AnyNet
from simfl.neural.optim import DEFAULT_SGD, ClientOptimizer
from simfl.neural.task import Supervised
from simfl.neural.train import Phase
from simfl.outcome import Outcome

__all__ = [
    "FedAvgFT",
    "FedPer",
    "FedProx",
    "LGFedAvg",
    "NeuralFedAvg",
    "NeuralFedRep",
    "NeuralLocalOnly",
]


def _check_common(alg: NeuralAlgorithm) -> None:
    """The checks of the fields every algorithm here has (optimisers, fine-tuning)."""
    owner = type(alg).__name__
    alg.check_optimizers()
    check_int(f"{owner}.finetune_epochs", alg.finetune_epochs, low=0)
    check_choice(f"{owner}.finetune_from", alg.finetune_from, ("own", "average"))


def _check_body(owner: str, network: AnyNet) -> None:
    """A shared body to average: the head must leave a layer with parameters."""
    if not network.params_of(network.body):
        raise ValueError(
            f"{owner}: the model's head {list(network.head)} covers every layer with "
            f"parameters, so the shared body would be empty (set Model(head=...))"
        )


@dataclass(frozen=True, repr=False)
class NeuralFedAvg(NeuralAlgorithm):
    """FedAvg: the whole network is shared and trained for ``epochs`` local epochs.

    Parameters
    ----------
    epochs
        Local epochs per round (>= 1).
    optimizer
        The client optimiser (``SGD``, ``Adam``, ``AdamW``; :mod:`simfl.neural.optim`).
    finetune_epochs
        Head epochs each client trains before it is evaluated (0: none).
    """

    epochs: int = 5
    optimizer: ClientOptimizer = DEFAULT_SGD
    finetune_epochs: int = 0

    name: ClassVar[str] = "FedAvg"

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_int(f"{owner}.epochs", self.epochs, low=1)
        _check_common(self)

    def local_layers(self, network: AnyNet) -> tuple[str, ...]:  # noqa: D102
        return ()

    def phases(self, network: AnyNet) -> tuple[Phase, ...]:  # noqa: D102
        return (Phase(network.layer_names, self.epochs),)


@dataclass(frozen=True, repr=False)
class FedAvgFT(NeuralFedAvg):
    """FedAvg whose evaluation fine-tunes each client's head first (default 10 epochs)."""

    finetune_epochs: int = 10

    name: ClassVar[str] = "FedAvg+FT"


@dataclass(frozen=True, repr=False)
class FedProx(NeuralFedAvg):
    """FedProx: FedAvg with the proximal term ``mu/2 ||w - w^t||^2`` (``mu >= 0``)."""

    mu: float = 0.1

    name: ClassVar[str] = "FedProx"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_real("FedProx.mu", self.mu, low=0.0)

    def prox(self, state: NeuralState) -> tuple[float, Params] | None:  # noqa: D102
        return (self.mu, state.shared)


@dataclass(frozen=True, repr=False)
class NeuralLocalOnly(NeuralAlgorithm):
    """Local-only: each client trains its own network; nothing is sent or averaged."""

    epochs: int = 5
    optimizer: ClientOptimizer = DEFAULT_SGD

    name: ClassVar[str] = "Local"
    server_rule: ClassVar[str | None] = "Local-only has no server model (nothing is averaged)"

    def __post_init__(self) -> None:
        check_int("NeuralLocalOnly.epochs", self.epochs, low=1)
        _check_common(self)

    def local_layers(self, network: AnyNet) -> tuple[str, ...]:  # noqa: D102
        return network.layer_names

    def phases(self, network: AnyNet) -> tuple[Phase, ...]:  # noqa: D102
        return (Phase(network.layer_names, self.epochs),)


@dataclass(frozen=True, repr=False)
class FedPer(NeuralAlgorithm):
    """FedPer: personal heads, body and head trained together for ``epochs`` epochs.

    Parameters
    ----------
    epochs
        Local epochs per round (>= 1).
    optimizer, finetune_epochs, finetune_from
        As for :class:`NeuralFedRep`.
    """

    epochs: int = 5
    optimizer: ClientOptimizer = DEFAULT_SGD
    finetune_epochs: int = 0
    finetune_from: str = "own"

    name: ClassVar[str] = "FedPer"

    def __post_init__(self) -> None:
        check_int("FedPer.epochs", self.epochs, low=1)
        _check_common(self)

    def check_network(self, network: AnyNet) -> None:  # noqa: D102
        _check_body("FedPer", network)

    def local_layers(self, network: AnyNet) -> tuple[str, ...]:  # noqa: D102
        return network.head

    def phases(self, network: AnyNet) -> tuple[Phase, ...]:  # noqa: D102
        return (Phase(network.layer_names, self.epochs),)


@dataclass(frozen=True, repr=False)
class NeuralFedRep(NeuralAlgorithm):
    """FedRep: ``head_epochs`` on the personal head, then ``body_epochs`` on the shared body.

    Parameters
    ----------
    head_epochs
        tau_h, epochs on the head with the body frozen (>= 0; paper 10).
    body_epochs
        tau_phi, epochs on the body with the head frozen (>= 1; paper 5, 1 for CIFAR-10/100).
    interleave
        The SRPFL code's schedule: ``body_epochs`` cycles of (``head_epochs`` head epochs, one
        body epoch).
    optimizer
        As for :class:`NeuralFedAvg`.
    finetune_epochs
        Head epochs every evaluated client trains, with the body frozen at the server's, before
        it is evaluated (0: none, the default). The FedRep paper averages the final 10 rounds
        over all clients after T = 100-200 rounds, when every client has trained its head many
        times; its code then adds a last round in which *every* client trains only its head
        for ``max(10, tau_h)`` epochs (the same budget as the "+FT" baselines' 10 head epochs)
        before the final test. ``finetune_epochs=max(10, head_epochs)`` is that last round.
        With 0, a client never selected is scored with its initial (random) head, which is
        close to chance when few rounds leave some clients out.
    finetune_from
        Fine-tuning starts from the client's ``"own"`` local layers or from the last cohort's
        ``"average"`` (the SRPFL code's evaluation).
    """

    head_epochs: int = 10
    body_epochs: int = 5
    interleave: bool = False
    optimizer: ClientOptimizer = DEFAULT_SGD
    finetune_epochs: int = 0
    finetune_from: str = "own"

    name: ClassVar[str] = "FedRep"

    def __post_init__(self) -> None:
        check_int("NeuralFedRep.head_epochs", self.head_epochs, low=0)
        check_int("NeuralFedRep.body_epochs", self.body_epochs, low=1)
        object.__setattr__(
            self, "interleave", check_bool("NeuralFedRep.interleave", self.interleave)
        )
        _check_common(self)

    def check_network(self, network: AnyNet) -> None:  # noqa: D102
        _check_body("NeuralFedRep", network)

    def local_layers(self, network: AnyNet) -> tuple[str, ...]:  # noqa: D102
        return network.head

    def phases(self, network: AnyNet) -> tuple[Phase, ...]:  # noqa: D102
        head = (Phase(network.head, self.head_epochs),) if self.head_epochs else ()
        if self.interleave:
            return (*head, Phase(network.body, 1)) * self.body_epochs
        return (*head, Phase(network.body, self.body_epochs))


@dataclass(frozen=True, repr=False)
class LGFedAvg(NeuralAlgorithm):
    """LG-FedAvg: global layers averaged, local layers kept; all train for ``epochs`` epochs.

    Parameters
    ----------
    global_layers
        ``"paper"``, ``"code"`` (see the module docstring) or a tuple of layer names.
    epochs
        Local epochs per round (>= 1; paper 1).
    pretrain_rounds
        Rounds of FedAvg on the whole network before the LG rounds (>= 0).
    optimizer, finetune_epochs
        As for :class:`NeuralFedAvg` (fine-tuning trains the local layers).
    finetune_from
        Fine-tuning starts from the client's ``"own"`` local layers or from the last cohort's
        ``"average"`` (the SRPFL code's evaluation).
    """

    global_layers: str | tuple[str, ...] = "paper"
    epochs: int = 1
    pretrain_rounds: int = 0
    optimizer: ClientOptimizer = DEFAULT_SGD
    finetune_epochs: int = 0
    finetune_from: str = "own"

    name: ClassVar[str] = "LG-FedAvg"

    def __post_init__(self) -> None:
        if isinstance(self.global_layers, str):
            if self.global_layers not in ("paper", "code"):
                raise ValueError(
                    f"LGFedAvg.global_layers must be 'paper', 'code' or a tuple of layer names, "
                    f"got {self.global_layers!r}"
                )
        elif not (
            isinstance(self.global_layers, tuple)
            and self.global_layers
            and all(isinstance(n, str) for n in self.global_layers)
        ):
            raise ValueError(
                f"LGFedAvg.global_layers must be 'paper', 'code' or a non-empty tuple of layer "
                f"names, got {self.global_layers!r}"
            )
        check_int("LGFedAvg.epochs", self.epochs, low=1)
        check_int("LGFedAvg.pretrain_rounds", self.pretrain_rounds, low=0)
        _check_common(self)

    def global_names(self, network: AnyNet) -> tuple[str, ...]:
        """The global layers of ``network`` (a tuple of patterns is matched to its layers)."""
        if isinstance(self.global_layers, str):
            split = network.lg_global.get(self.global_layers)
            if split is None:
                raise ValueError(
                    f"LGFedAvg.global_layers={self.global_layers!r}: the module "
                    f"{network.name} declares no such split; give Model(..., "
                    f"global_layers=(patterns...)) or LGFedAvg(global_layers=(patterns...))"
                )
            return split
        return network.resolve_layers("LGFedAvg.global_layers", self.global_layers)

    def check_network(self, network: AnyNet) -> None:  # noqa: D102
        glob = set(self.global_names(network))
        if glob >= set(network.layer_names) - set(network.local_layers):
            raise ValueError("LGFedAvg.global_layers must leave at least one local layer")

    def check_model(self, task: Supervised) -> None:  # noqa: D102
        if not isinstance(task.model, ModelSpec):
            return  # a module's layers are known once it is built (check_network)
        names = task.model.layer_names
        if isinstance(self.global_layers, tuple):
            unknown = [p for p in self.global_layers if not fnmatch.filter(names, p)]
            if unknown:
                raise ValueError(
                    f"LGFedAvg.global_layers {unknown} match no layer of the model; its layers "
                    f"are {list(names)}"
                )
            if {n for p in self.global_layers for n in fnmatch.filter(names, p)} == set(names):
                raise ValueError("LGFedAvg.global_layers must leave at least one local layer")

    def local_layers(self, network: AnyNet) -> tuple[str, ...]:  # noqa: D102
        glob = set(self.global_names(network))
        return tuple(n for n in network.layer_names if n not in glob)

    def phases(self, network: AnyNet) -> tuple[Phase, ...]:  # noqa: D102
        return (Phase(network.layer_names, self.epochs),)

    def exchanged(self, state: NeuralState) -> tuple[str, ...]:
        """The global layers; the whole network while pre-training with FedAvg."""
        if state.round < self.pretrain_rounds:
            return (*state.shared, *state.local_default)
        return tuple(state.shared)

    def aggregate(self, state: NeuralState, updates: Updates, outcome: Outcome) -> NeuralState:
        """LG aggregation; while pre-training, the local layers are averaged into the default."""
        if state.round >= self.pretrain_rounds:
            return super().aggregate(state, updates, outcome)
        # FedAvg on the whole network: a server optimiser steps every layer
        whole, server = self.server_update(state, updates, {**state.shared, **state.local_default})
        shared = {n: whole[n] for n in state.shared}
        default = {n: whole[n] for n in state.local_default}
        return replace(
            self.keep_opt_state(state, updates),
            shared=shared,
            local_default=default,
            local_average=default,
            server_state=server,
            round=state.round + 1,
        )
