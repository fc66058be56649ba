"""Participation and straggler-mitigation policies.

Synchronous: :class:`WaitAll`, :class:`Deadline`, :class:`FastestK` (over-selection),
:class:`AdaptiveDeadline`, :class:`SRPFL` (progressive participation of the fastest clients).
Asynchronous: :class:`FedAsync`, :class:`FedBuff`. Hierarchical: :class:`EdgeAggregation` (edge
servers aggregate their devices before the cloud; needs a network with edges).
"""

from simfl.policies.adaptive import AdaptiveDeadline
from simfl.policies.asynchronous import AsyncPolicy, FedAsync, FedBuff
from simfl.policies.base import Policy, SyncPolicy
from simfl.policies.hierarchical import EdgeAggregation
from simfl.policies.srpfl import SRPFL, Plateau
from simfl.policies.sync import Deadline, FastestK, WaitAll

__all__ = [
    "SRPFL",
    "AdaptiveDeadline",
    "AsyncPolicy",
    "Deadline",
    "EdgeAggregation",
    "FastestK",
    "FedAsync",
    "FedBuff",
    "Plateau",
    "Policy",
    "SyncPolicy",
    "WaitAll",
]
