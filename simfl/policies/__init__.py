"""Participation and straggler-mitigation policies: decisions, never processes.

Each policy is a frozen dataclass; the engine asks it what to do next from a read-only
:class:`View` and tells it each round's :class:`~simfl.outcome.Outcome` (see
:mod:`simfl.policies.base` and ``docs/writing-a-policy.md``).

Synchronous: :class:`WaitAll`, :class:`Deadline`, :class:`FastestK` (over-selection),
:class:`AdaptiveDeadline`, :class:`SRPFL` (progressive participation of the fastest clients;
:func:`flanp` is it configured as SRPFL's code runs FLANP),
:class:`Oort` (guided selection by statistical and system utility), :class:`TiFL` (one tier of
similarly fast devices per round), :class:`FedCS` (greedy selection under a deadline).
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
from simfl.policies.fedcs import FedCS
from simfl.policies.hierarchical import EdgeAggregation
from simfl.policies.observed import Observations
from simfl.policies.oort import Exploration, Oort, OortState, Pacer
from simfl.policies.srpfl import SRPFL, Plateau, SRPFLState, flanp
from simfl.policies.sync import Deadline, FastestK, WaitAll
from simfl.policies.tiered import FedAT, FedATState
from simfl.policies.tifl import TiFL, TiFLState

__all__ = [
    "SRPFL",
    "AdaptiveDeadline",
    "AdaptiveState",
    "EdgePolicy",
    "AsyncPolicy",
    "Deadline",
    "EdgeAggregation",
    "Exploration",
    "FastestK",
    "FedAsync",
    "FedAT",
    "FedATState",
    "FedBuff",
    "FedCS",
    "Observations",
    "Oort",
    "OortState",
    "Pacer",
    "Plateau",
    "Policy",
    "RoundPlan",
    "SRPFLState",
    "SyncPolicy",
    "TiFL",
    "TiFLState",
    "TieredPolicy",
    "View",
    "WaitAll",
    "cohort_size",
    "sample_uniform",
    "sample_weighted",
    "flanp",
]
