"""A training-only binding declares the validation result."""

from typing import Any

from torch import Tensor
from torchmetrics.classification import MulticlassAccuracy

from lightning_step_types import StepMetric, ValStepResult


def update(result: ValStepResult, batch: Any) -> tuple[Tensor, Tensor]:
    return result.metadata["logits"], batch[1]


accuracy = StepMetric(MulticlassAccuracy(3), update=update, stages=("train",))  # E: mypy[arg-type] pyright[reportCallIssue,reportArgumentType]
