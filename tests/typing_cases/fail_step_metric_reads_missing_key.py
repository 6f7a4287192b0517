"""A typed binding reads a metadata key its TypedDict lacks."""

from typing import TypedDict

from torch import Tensor
from torchmetrics.classification import MulticlassAccuracy
from typing_extensions import ReadOnly

from lightning_step_types import StepMetric, ValStepResult


class ValMeta(TypedDict):
    logits: ReadOnly[Tensor]


def update(result: ValStepResult[ValMeta], batch: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
    return result.metadata["logit"], batch[1]  # E: mypy[typeddict-item] pyright[reportGeneralTypeIssues,reportUnknownVariableType]


accuracy = StepMetric(MulticlassAccuracy(3), update=update, stages=("val", "test"))
