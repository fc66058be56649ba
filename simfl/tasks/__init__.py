"""Learning problems: data generation or loading, partitioning, models and metrics."""

from simfl.tasks.base import Task
from simfl.tasks.linear import (
    LinearModel,
    LinearRepresentation,
    LinearRepresentationData,
    principal_angle_distance,
)

__all__ = [
    "LinearModel",
    "LinearRepresentation",
    "LinearRepresentationData",
    "Task",
    "principal_angle_distance",
]
