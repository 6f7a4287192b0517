"""A TypedLightningModule whose three steps return typed results and whose hooks read them."""

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from typing_extensions import assert_type

from lightning_step_types import TrainStepResult, TypedLightningModule, ValStepResult


class Regressor(TypedLightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 1)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.layer(x)
        return out

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> TrainStepResult:
        x, y = batch
        preds = self(x)
        return TrainStepResult(loss=F.mse_loss(preds, y), metadata={"preds": preds.detach()})

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> ValStepResult:
        x, y = batch
        return ValStepResult(loss=F.mse_loss(self(x), y), batch_size=len(x))

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> ValStepResult:
        x, y = batch
        return ValStepResult(F.mse_loss(self(x), y), {"n": len(x)})

    def on_train_batch_end(self, outputs: TrainStepResult | None, batch: Any, batch_idx: int) -> None:  # X: mypy[override]
        if outputs is not None:
            assert_type(outputs.loss, Tensor)
            assert_type(outputs.batch_size, int | None)
            self.log("preds_mean", outputs.metadata["preds"].mean())

    def on_validation_batch_end(
        self, outputs: ValStepResult | None, batch: Any, batch_idx: int, dataloader_idx: int = 0  # X: mypy[override]
    ) -> None:
        if outputs is not None:
            self.log("val_loss_seen", outputs.loss)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class KeepsResultHooks(Regressor):
    """An override of a typed batch-end hook calling super(), which runs the result hooks."""

    def on_train_batch_end(self, outputs: TrainStepResult | None, batch: Any, batch_idx: int) -> None:  # X: mypy[override]
        super().on_train_batch_end(outputs, batch, batch_idx)
