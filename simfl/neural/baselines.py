"""The seed papers' neural baselines: SCAFFOLD, Ditto, APFL, Per-FedAvg, pFedMe, L2GD, FedNova.

FedRep's Table 1 (Collins et al., ICML 2021) compares against SCAFFOLD, Ditto, APFL, Per-FedAvg
and L2GD; SRPFL (Tziotis et al., TMLR 2023) against HF-MAML and FLANP (FedAvg under SRPFL's
schedule: :func:`simfl.policies.flanp`); pFedMe and FedNova complete the set. Each is a small
frozen dataclass on :class:`~simfl.neural.base.NeuralAlgorithm`: every layer is shared, the
server state is a :class:`BaselineState` (the base state plus each client's ``personal``
tensors and the server's ``extra`` ones), and the local update of a cohort is one batched
computation (stacked parameters, one forward and backward pass per step for every client).

Common rules (as for the other neural algorithms):

* Minibatches: in every local epoch a client cuts a fresh permutation of its samples, drawn
  from the keyed stream ``("neural/batches", client, round)``, into batches of
  ``optimizer.batch_size``; algorithms that need several independent batches per step
  (Per-FedAvg) draw one permutation per batch role, in role order, each epoch. Ditto's personal
  update draws from ``("neural/personal", client, round)``.
* The main SGD step is ``torch.optim.SGD``'s (``optimizer``: momentum, weight decay on weights
  only, buffers new each round); the other steps of a method (inner steps, mixing weights,
  averaging steps) are plain gradient steps as in the papers.
* The server averages weighted by training-set size, as every simfl neural algorithm does (the
  papers average uniformly over the sampled clients; the two agree when sizes are equal, as
  with FedRep's shards).
* Personalised methods (Ditto, APFL, pFedMe, L2GD) are evaluated with each client's own
  personalised model on its own test split, like FedRep; a client that never took part uses
  the initial model as its personal one (every ``v_k^0 = w^0`` in the papers). Per-FedAvg and
  HF-MAML are evaluated after one adaptation step, SCAFFOLD and FedNova with the global model
  (SCAFFOLD+FT fine-tunes the head first, like FedAvg+FT). Every baseline takes
  ``finetune_epochs``: each client then trains the head of the model it is evaluated with for
  that many epochs before the test (:class:`~simfl.neural.personal.Baseline`), so a comparison
  can give every method the final fine-tuning budget of FedRep's "+FT" rows.
* Partial work: a step is one minibatch step of the client's schedule (for Ditto the personal
  steps come first, then the global ones), so a client stopped by a deadline did a prefix of
  its full update.
* Models: every baseline trains a paper network (``MLP(...)``/``CNN(...)``, on its fast path)
  or any ``torch.nn.Module`` (:class:`~simfl.neural.Model`), with BatchNorm buffers and
  dropout, on the loop or the cohort trainer path, and with the task's
  :class:`~simfl.neural.Objective`'s loss. A module's buffers are updated by its training
  forward passes and averaged by the server, never stepped (:mod:`simfl.neural.personal`;
  each family's module says what its personal models and mixing do with them); its
  normalisation layers cannot stay local (``Model(norm="local")`` is refused, except by
  FedNova, which keeps them as FedAvg does).
* Payload: the model (its buffers included) each way; SCAFFOLD also sends a control variate
  each way (twice FedAvg's parameters).
* Policies: every synchronous family (sync, edge) runs every baseline. Asynchronous and tiered
  policies mix only the server's model, so methods whose clients keep state that the
  aggregation updates (SCAFFOLD's controls, the personal models of Ditto, APFL, pFedMe and
  L2GD) refuse them at construction (:attr:`~simfl.algorithms.Algorithm.synchronous_only`);
  Per-FedAvg, HF-MAML and FedNova run under them (a FedNova update applied alone is its own
  normalised move, so the policy's mixing decides).

The methods live in one module per family, and are all importable from here:

* :mod:`~simfl.neural.control` -- control variates and normalised averaging: :class:`SCAFFOLD`,
  :class:`SCAFFOLDFT`, :class:`NeuralFedNova`.
* :mod:`~simfl.neural.personal_models` -- personal models: :class:`Ditto`, :class:`APFL`,
  :class:`PFedMe`, :class:`L2GD`.
* :mod:`~simfl.neural.meta` -- meta-learning: :class:`PerFedAvg`, :class:`HFMAML`.

Each family's module docstring gives its methods' papers and departures.
"""

from simfl.neural.control import SCAFFOLD, SCAFFOLDFT, NeuralFedNova
from simfl.neural.control import momentum_norm as momentum_norm
from simfl.neural.meta import HFMAML, PerFedAvg
from simfl.neural.meta import META_SGD as META_SGD
from simfl.neural.personal_models import APFL, L2GD, Ditto, PFedMe
from simfl.neural.personal_models import PFEDME_SGD as PFEDME_SGD

__all__ = [
    "APFL",
    "HFMAML",
    "L2GD",
    "SCAFFOLD",
    "Ditto",
    "NeuralFedNova",
    "PFedMe",
    "PerFedAvg",
    "SCAFFOLDFT",
]
