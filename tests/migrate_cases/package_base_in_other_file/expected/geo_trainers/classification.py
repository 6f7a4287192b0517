"""Patch classification."""

import torch
from lightning_step_types import TrainStepResult
from torch import Tensor, nn

from .base import BaseTask


class ClassificationTask(BaseTask):
    def configure_models(self) -> None:
        self.model = nn.Sequential(nn.Flatten(), nn.Linear(4 * 8 * 8, self.classes))

    def forward(self, x: Tensor) -> Tensor:
        return self.model(x)

    def training_step(self, batch: list[Tensor], batch_idx: int) -> TrainStepResult:
        x, y = batch
        loss: Tensor = self.criterion(self(x), y)
        self.log("train_loss", loss)
        return TrainStepResult(loss=loss)

    def validation_step(self, batch: list[Tensor], batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", self.criterion(self(x), y))

    def predict_step(self, batch: list[Tensor], batch_idx: int) -> Tensor:
        return self(batch[0]).softmax(dim=-1)


class MultiLabelClassificationTask(ClassificationTask):
    def training_step(self, batch: list[Tensor], batch_idx: int) -> TrainStepResult:
        x, y = batch
        target = nn.functional.one_hot(y, self.classes).float()
        loss = nn.functional.binary_cross_entropy_with_logits(self(x), target)
        return TrainStepResult(loss=loss)

    def validation_epoch_end(self, outputs: list[Tensor]) -> None:
        self.log("val_mean", torch.stack(outputs).mean())
