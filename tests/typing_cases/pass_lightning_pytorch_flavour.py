"""The `lightning.pytorch` flavour (`import lightning as L`): same typed steps, result hooks, hooks and callbacks."""

from typing import Any

import lightning.pytorch as L
import torch.nn.functional as F
from torch import Tensor, nn

from lightning_step_types import TrainStepResult, ValStepResult
from lightning_step_types.lightning_pytorch import StepResultAdapter, TypedCallback, TypedLightningModule


class Model(TypedLightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 1)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> TrainStepResult:
        x, y = batch
        return TrainStepResult(loss=F.mse_loss(self.layer(x), y))

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> ValStepResult:
        x, y = batch
        return ValStepResult(loss=F.mse_loss(self.layer(x), y))

    def on_validation_batch_result(
        self, result: ValStepResult | None, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if result is not None:
            self.log("val_loss_seen", result.loss)


class Results(TypedCallback):
    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_result(
        self, trainer: L.Trainer, pl_module: L.LightningModule, result: TrainStepResult | None, batch: Any, batch_idx: int
    ) -> None:
        if result is not None:
            self.losses.append(result.loss.item())


class Losses(TypedCallback):
    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: TrainStepResult | None,  # X: mypy[override]
        batch: Any,
        batch_idx: int,
    ) -> None:
        if outputs is not None:
            print(outputs.loss.item())


class PlainModel(L.LightningModule):
    def training_step(self, batch: Tensor, batch_idx: int) -> TrainStepResult:
        return TrainStepResult(loss=batch.sum())


trainer = L.Trainer(callbacks=[Losses(), Results(), StepResultAdapter(strict=True)], logger=False)
