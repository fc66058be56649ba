"""Federated algorithms: the math the engine drives (one module per algorithm family)."""

from simfl.algorithms.base import Algorithm, Updates
from simfl.algorithms.feddar import FedDAR, FedDARState
from simfl.algorithms.fedmavg import FedMAvg, FedMAvgState
from simfl.algorithms.lg_interpolation import LGInterpolation, LGInterpolationState
from simfl.algorithms.linear_baselines import GDGD, GDGDState, LocalOnly, LocalOnlyState
from simfl.algorithms.linear_fedavg import FedAvg, FedAvgState
from simfl.algorithms.linear_fedrep import FedRep, FedRepState
from simfl.algorithms.mixing import BufferedMix, SequentialMix
from simfl.algorithms.softmax_fedavg import SoftmaxFedAvg, SoftmaxFedAvgState
from simfl.algorithms.timing import TimingOnly

__all__ = [
    "Algorithm",
    "BufferedMix",
    "FedDAR",
    "FedDARState",
    "FedMAvg",
    "FedMAvgState",
    "FedAvg",
    "FedAvgState",
    "FedRep",
    "FedRepState",
    "GDGD",
    "GDGDState",
    "LGInterpolation",
    "LGInterpolationState",
    "LocalOnly",
    "LocalOnlyState",
    "SequentialMix",
    "SoftmaxFedAvg",
    "SoftmaxFedAvgState",
    "TimingOnly",
    "Updates",
]
