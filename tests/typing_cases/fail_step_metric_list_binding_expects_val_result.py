"""A list of stages is checked like a tuple: training among them, a binding that takes only a ValStepResult."""

from torch import Tensor
from torchmetrics.classification import MulticlassAccuracy

from lightning_step_types import StepMetric, ValStepResult


def update(result: ValStepResult, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
    return result.metadata["logits"], batch[1]


accuracy = StepMetric(MulticlassAccuracy(3), update=update, stages=["train", "val"])  # E: mypy[arg-type,list-item] pyright[reportCallIssue,reportArgumentType]
