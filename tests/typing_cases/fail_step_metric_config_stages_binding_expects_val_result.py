"""Stages read from a config may include training: a binding for them takes the general StepResult."""

from torch import Tensor
from torchmetrics.classification import MulticlassAccuracy

from lightning_step_types import StepMetric, ValStepResult


def update(result: ValStepResult, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
    return result.metadata["logits"], batch[1]


def declare(stages: tuple[str, ...]) -> None:
    StepMetric(MulticlassAccuracy(3), update=update, stages=stages)  # E: mypy[arg-type] pyright[reportCallIssue,reportArgumentType]
