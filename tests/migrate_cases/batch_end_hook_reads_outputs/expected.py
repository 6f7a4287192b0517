"""Batch-end hooks that read the step outputs by key: the codemod keeps every key they read."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from lightning_step_types import TrainStepResult
from pytorch_lightning.utilities.types import STEP_OUTPUT
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def houses(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 4, generator=generator)
    return TensorDataset(x, x @ torch.tensor([[3.0], [1.0], [0.5], [2.0]]))


class PriceRegressor(pl.LightningModule):
    """Tracks the worst residual of each training batch and the mean validation loss of each epoch."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 1)
        self.val_losses: list[torch.Tensor] = []

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> TrainStepResult:
        x, y = batch
        preds = self.linear(x)
        loss = F.mse_loss(preds, y)
        return TrainStepResult(loss=loss, metadata={"residuals": (preds - y).detach()})

    def on_train_batch_end(self, outputs: STEP_OUTPUT, batch: Any, batch_idx: int) -> None:
        assert isinstance(outputs, Mapping)
        self.log("max_residual", outputs["residuals"].abs().max())

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> STEP_OUTPUT:
        x, y = batch
        return {"val_loss": F.mse_loss(self.linear(x), y)}

    def on_validation_batch_end(self, outputs: STEP_OUTPUT, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        assert isinstance(outputs, Mapping)
        self.val_losses.append(outputs["val_loss"])

    def on_validation_epoch_end(self) -> None:
        self.log("val_loss_epoch", torch.stack(self.val_losses).mean())
        self.val_losses.clear()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)

    def train_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(houses(32, seed=0), batch_size=8)

    def val_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(houses(16, seed=1), batch_size=8)
