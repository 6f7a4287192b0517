"""Declared metrics on a typed module: lambdas for every stage, typed bindings per stage, a collection."""

from collections.abc import Mapping
from typing import Any, TypedDict

from torch import Tensor
from torchmetrics import MeanSquaredError, MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score
from typing_extensions import ReadOnly

from lightning_step_types import StepMetric, StepResult, TrainStepResult, TypedLightningModule, ValStepResult

Batch = tuple[Tensor, Tensor]


class TrainMeta(TypedDict):
    logits: ReadOnly[Tensor]


class ValMeta(TypedDict):
    logits: ReadOnly[Tensor]
    preds: ReadOnly[Tensor]


def train_scores(result: TrainStepResult[TrainMeta], batch: Batch) -> tuple[Tensor, Tensor]:
    return result.metadata["logits"], batch[1]


def val_scores(result: ValStepResult[ValMeta], batch: Batch) -> tuple[Tensor, Tensor]:
    return result.metadata["preds"], batch[1]


def any_stage(result: StepResult[TrainMeta], batch: Batch) -> tuple[Tensor, Tensor]:
    return result.metadata["logits"][:, 0], batch[1].float()


class Classifier(TypedLightningModule):
    def configure_step_metrics(self) -> Mapping[str, StepMetric[Any]]:
        return {
            "acc": StepMetric(MulticlassAccuracy(3), update=lambda result, batch: (result.metadata["logits"], batch[1])),
            "train_f1": StepMetric(MulticlassF1Score(3), update=train_scores, stages=("train",), on_step=True),
            "val_acc": StepMetric(MulticlassAccuracy(3), update=val_scores, stages=("val", "test"), prog_bar=True),
            "mse": StepMetric(MeanSquaredError(), update=any_stage, log_name="{stage}/mse"),
            "scores": StepMetric(
                MetricCollection([MulticlassAccuracy(3), MulticlassF1Score(3)]),
                update=lambda result, batch: (result["logits"], batch[1]),
                stages=["val"],
            ),
        }
