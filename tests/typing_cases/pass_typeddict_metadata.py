"""Typed metadata: a TypedDict (with ReadOnly items) flows from the steps to the module's typed hooks."""

from typing import Any, TypedDict

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from typing_extensions import ReadOnly, assert_type

from lightning_step_types import TrainStepResult, TypedLightningModule, ValStepResult


class TrainMeta(TypedDict):
    logits: ReadOnly[Tensor]


class ValMeta(TypedDict):
    preds: ReadOnly[Tensor]
    correct: ReadOnly[int]


class Classifier(TypedLightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 3)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> TrainStepResult[TrainMeta]:
        x, y = batch
        logits = self.layer(x)
        return TrainStepResult(loss=F.cross_entropy(logits, y), metadata={"logits": logits.detach()})

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> ValStepResult[ValMeta]:
        x, y = batch
        logits = self.layer(x)
        preds = logits.argmax(-1)
        metadata: ValMeta = {"preds": preds, "correct": int((preds == y).sum())}
        return ValStepResult(F.cross_entropy(logits, y), metadata, batch_size=len(y))

    def on_train_batch_end(self, outputs: TrainStepResult[TrainMeta] | None, batch: Any, batch_idx: int) -> None:  # X: mypy[override]
        if outputs is None:
            return
        assert_type(outputs.metadata, TrainMeta)
        assert_type(outputs.metadata["logits"], Tensor)
        self.log("max_logit", outputs.metadata["logits"].max())

    def on_validation_batch_end(
        self, outputs: ValStepResult[ValMeta] | None, batch: Any, batch_idx: int, dataloader_idx: int = 0  # X: mypy[override]
    ) -> None:
        if outputs is not None:
            assert_type(outputs.metadata["correct"], int)
            self.log("correct", float(outputs.metadata["correct"]))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def logits_of(result: TrainStepResult[TrainMeta]) -> Tensor:
    return result.metadata["logits"]


def any_train_result(result: TrainStepResult) -> Tensor:
    return result.loss


def covariance(result: TrainStepResult[TrainMeta]) -> Tensor:
    # A result with typed metadata is a TrainStepResult (bare: Mapping[str, Any] metadata).
    return any_train_result(result) + logits_of(result).sum()
