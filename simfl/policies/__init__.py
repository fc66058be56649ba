"""Participation and straggler-mitigation policies: decisions, never processes.

Each policy is a frozen dataclass; the engine asks it what to do next from a read-only
:class:`View` and tells it each round's :class:`~simfl.outcome.Outcome` (see
:mod:`simfl.policies.base` and ``docs/writing-a-policy.md``).

Synchronous: :class:`WaitAll`, :class:`Deadline`, :class:`FastestK` (over-selection),
:class:`AdaptiveDeadline`, :class:`SRPFL` (progressive participation of the fastest clients).
Asynchronous: :class:`FedAsync`, :class:`FedBuff`. Semi-asynchronous (synchronous within speed
tiers, asynchronous across them): :class:`FedAT`. Hierarchical: :class:`EdgeAggregation` (edge
servers aggregate their devices before the cloud; needs a network with edges).
"""

from simfl.policies.adaptive import AdaptiveDeadline, AdaptiveState
from simfl.policies.asynchronous import FedAsync, FedBuff
from simfl.policies.base import (
    AsyncPolicy,
    EdgePolicy,
    Policy,
    RoundPlan,
    SyncPolicy,
    TieredPolicy,
    View,
    cohort_size,
    sample_uniform,
    sample_weighted,
)
from simfl.policies.hierarchical import EdgeAggregation
from simfl.policies.srpfl import SRPFL, Plateau, SRPFLState
from simfl.policies.sync import Deadline, FastestK, WaitAll
from simfl.policies.tiered import FedAT, FedATState

__all__ = [
    "SRPFL",
    "AdaptiveDeadline",
    "AdaptiveState",
    "EdgePolicy",
    "AsyncPolicy",
    "Deadline",
    "EdgeAggregation",
    "FastestK",
    "FedAsync",
    "FedAT",
    "FedATState",
    "FedBuff",
    "Plateau",
    "Policy",
    "RoundPlan",
    "SRPFLState",
    "SyncPolicy",
    "TieredPolicy",
    "View",
    "WaitAll",
    "cohort_size",
    "sample_uniform",
    "sample_weighted",
]
