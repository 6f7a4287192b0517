"""With the default stages (training included), a binding that takes only a ValStepResult."""

from typing import Any

from torch import Tensor
from torchmetrics.classification import MulticlassAccuracy

from lightning_step_types import StepMetric, ValStepResult


def update(result: ValStepResult, batch: Any) -> tuple[Tensor, Tensor]:
    return result.metadata["logits"], batch[1]


accuracy = StepMetric(MulticlassAccuracy(3), update=update)  # E: mypy[arg-type] pyright[reportArgumentType]
