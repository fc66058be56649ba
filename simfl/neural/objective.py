"""What a supervised task's model minimises and what its evaluation reports: :class:`Objective`.

The losses and metrics of each kind of task: cross-entropy and accuracy for classification and
next-token prediction (over every predicted token), mean squared and absolute error for
regression.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as nnf
from torch import Tensor

from simfl._checks import check_choice

__all__ = ["KINDS", "Objective", "accuracy", "cross_entropy", "mae", "mse"]

#: The kinds of supervised task, with their default loss and metrics (:class:`Objective`).
KINDS = ("classification", "next_token", "regression")


def _flat(out: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    """Logits ``(..., V)`` and integer targets ``(...)`` as ``(M, V)`` and ``(M,)``."""
    return out.reshape(-1, out.shape[-1]), y.reshape(-1)


def cross_entropy(out: Tensor, y: Tensor) -> Tensor:
    """Mean cross-entropy of logits ``(B, ..., V)`` against integer targets ``(B, ...)``."""
    logits, target = _flat(out, y)
    return nnf.cross_entropy(logits, target)


def accuracy(out: Tensor, y: Tensor) -> Tensor:
    """Share of the targets ``(B, ...)`` that are the argmax of the logits ``(B, ..., V)``."""
    logits, target = _flat(out, y)
    return (logits.argmax(dim=-1) == target).to(torch.float32).mean()


def mse(out: Tensor, y: Tensor) -> Tensor:
    """Mean squared error over the batch (predictions reshaped to the targets)."""
    return nnf.mse_loss(out.reshape(y.shape).to(torch.float32), y.to(torch.float32))


def mae(out: Tensor, y: Tensor) -> Tensor:
    """Mean absolute error over the batch (predictions reshaped to the targets)."""
    return (out.reshape(y.shape).to(torch.float32) - y.to(torch.float32)).abs().mean()


@dataclass(frozen=True)
class Objective:
    """What a task's model minimises and what its evaluation reports.

    Parameters
    ----------
    kind
        ``"classification"`` (cross-entropy; ``accuracy`` and ``loss``), ``"next_token"``
        (the same over every predicted token: outputs ``(B, V)`` for one next token per sample
        or ``(B, T, V)`` for a whole shifted sequence) or ``"regression"`` (mean squared error;
        ``mse`` and ``mae``).
    loss
        ``loss(outputs, targets) -> scalar``: the mean loss of a batch, as torch's losses
        reduce by default (default: the kind's). It must be differentiable and, for the cohort
        path, free of data-dependent Python control flow.
    metrics
        Metric name -> ``fn(outputs, targets) -> scalar`` (the batch's mean); evaluation
        reports each one averaged over the evaluated clients' samples (default: the kind's;
        ``"loss"`` always means :attr:`loss`).
    goals
        Metric name -> ``"max"`` or ``"min"`` (default: ``"max"`` for ``accuracy``, ``"min"``
        for the rest).
    """

    kind: str = "classification"
    loss: Callable[[Tensor, Tensor], Tensor] | None = None
    metrics: Mapping[str, Callable[[Tensor, Tensor], Tensor]] | None = None
    goals: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        check_choice("Objective.kind", self.kind, KINDS)
        if self.loss is not None and not callable(self.loss):
            raise ValueError(f"Objective.loss must be callable, got {self.loss!r}")
        if self.metrics is not None and (
            not isinstance(self.metrics, Mapping)
            or not all(isinstance(k, str) and callable(v) for k, v in self.metrics.items())
        ):
            raise ValueError(
                f"Objective.metrics must map metric names to callables, got {self.metrics!r}"
            )
        if self.goals is not None:
            if not isinstance(self.goals, Mapping):
                raise ValueError(
                    f"Objective.goals must map metric names to 'max' or 'min', got {self.goals!r}"
                )
            for k, v in dict(self.goals).items():
                check_choice(f"Objective.goals[{k!r}]", v, ("max", "min"))

    @property
    def loss_fn(self) -> Callable[[Tensor, Tensor], Tensor]:
        """The loss (the kind's default if none was given)."""
        if self.loss is not None:
            return self.loss
        return mse if self.kind == "regression" else cross_entropy

    @property
    def metric_fns(self) -> dict[str, Callable[[Tensor, Tensor], Tensor]]:
        """Metric name -> function, ``loss`` included."""
        if self.metrics is not None:
            fns = dict(self.metrics)
        elif self.kind == "regression":
            fns = {"mse": mse, "mae": mae}
        else:
            fns = {"accuracy": accuracy}
        fns.setdefault("loss", self.loss_fn)
        return fns

    @property
    def metric_names(self) -> tuple[str, ...]:
        """The metrics evaluation reports, in column order."""
        return tuple(self.metric_fns)

    @property
    def goal_map(self) -> dict[str, str]:
        """Metric name -> ``"max"`` or ``"min"``."""
        goals = {m: ("max" if m == "accuracy" else "min") for m in self.metric_names}
        goals.update(dict(self.goals or {}))
        return goals
