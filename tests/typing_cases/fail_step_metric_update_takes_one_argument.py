"""A binding that takes only the result: update is called with (result, batch)."""

from typing import Any

from torch import Tensor
from torchmetrics import MeanMetric

from lightning_step_types import StepMetric, StepResult


def update(result: StepResult[Any]) -> tuple[Tensor]:
    return (result.loss,)


mean_loss = StepMetric(MeanMetric(), update=update)  # E: mypy[arg-type] pyright[reportArgumentType]
