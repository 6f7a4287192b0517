"""A binding returns one tensor instead of the tuple of metric.update's arguments."""

from typing import Any

from torch import Tensor
from torchmetrics import MeanMetric

from lightning_step_types import StepMetric, StepResult


def update(result: StepResult[Any], batch: Any) -> Tensor:
    return result.loss


mean_loss = StepMetric(MeanMetric(), update=update)  # E: mypy[arg-type] pyright[reportArgumentType]
