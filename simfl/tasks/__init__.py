"""Learning problems: data generation or loading, partitioning, models and metrics."""

from simfl.tasks.base import Task
from simfl.tasks.classification import (
    ClassificationData,
    ClassificationTask,
    ClientArrays,
    SyntheticSoftmax,
    softmax_metrics,
)
from simfl.tasks.domain_mixture import DomainMixture, DomainMixtureData, DomainModel
from simfl.tasks.lg_synthetic import LGSynthetic, LGSyntheticData, expected_test_mse, paper_error
from simfl.tasks.linear import (
    LinearModel,
    LinearRepresentation,
    LinearRepresentationData,
    LinearTask,
    principal_angle_distance,
    ridge_solve,
)
from simfl.tasks.matrix import MatrixData, MatrixTask, SyntheticClustering
from simfl.tasks.movielens import MovieLens

__all__ = [
    "ClassificationData",
    "ClassificationTask",
    "ClientArrays",
    "DomainMixture",
    "DomainMixtureData",
    "DomainModel",
    "LGSynthetic",
    "LGSyntheticData",
    "LinearModel",
    "LinearRepresentation",
    "LinearRepresentationData",
    "LinearTask",
    "MatrixData",
    "MatrixTask",
    "MovieLens",
    "SyntheticClustering",
    "SyntheticSoftmax",
    "Task",
    "expected_test_mse",
    "paper_error",
    "principal_angle_distance",
    "ridge_solve",
    "softmax_metrics",
]
