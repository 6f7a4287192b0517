"""A typed binding's StepMetric keeps its result type; the live copies are torchmetrics metrics by name."""

from typing import TypedDict

from torch import Tensor
from torchmetrics import Metric
from torchmetrics.classification import MulticlassAccuracy
from typing_extensions import ReadOnly, assert_type

from lightning_step_types import StepMetric, TrainStepResult, TypedLightningModule
from lightning_step_types.metrics import step_metric_objects


class TrainMeta(TypedDict):
    logits: ReadOnly[Tensor]


def train_scores(result: TrainStepResult[TrainMeta], batch: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
    return result.metadata["logits"], batch[1]


train_accuracy: StepMetric[TrainStepResult[TrainMeta]] = StepMetric(MulticlassAccuracy(3), update=train_scores, stages=("train",))


def restore(model: TypedLightningModule, saved: dict[str, dict[str, Tensor]]) -> None:
    copies = step_metric_objects(model)
    assert_type(copies, dict[str, Metric])
    for name, metric in copies.items():
        if name.startswith("train/") and name in saved:
            for state, value in saved[name].items():
                setattr(metric, state, value)
