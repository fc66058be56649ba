"""Participation and straggler-mitigation policies."""

from simfl.policies.base import Policy, SyncPolicy
from simfl.policies.sync import Deadline, FastestK, WaitAll

__all__ = ["Deadline", "FastestK", "Policy", "SyncPolicy", "WaitAll"]
