"""A validation/test binding declares the training result."""

from typing import Any

from torch import Tensor
from torchmetrics.classification import MulticlassAccuracy

from lightning_step_types import StepMetric, TrainStepResult


def update(result: TrainStepResult, batch: Any) -> tuple[Tensor, Tensor]:
    return result.metadata["logits"], batch[1]


accuracy = StepMetric(MulticlassAccuracy(3), update=update, stages=("val", "test"))  # E: mypy[arg-type] pyright[reportCallIssue,reportArgumentType]
