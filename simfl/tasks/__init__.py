"""Learning problems: data generation or loading, partitioning, models and metrics."""

from simfl.tasks.base import Task
from simfl.tasks.linear import (
    LinearModel,
    LinearRepresentation,
    LinearRepresentationData,
    LinearTask,
    principal_angle_distance,
    ridge_solve,
)

__all__ = [
    "LinearModel",
    "LinearRepresentation",
    "LinearRepresentationData",
    "LinearTask",
    "Task",
    "principal_angle_distance",
    "ridge_solve",
]
