"""--base-class where the Lightning imports are still used after the switch: they stay.

`pl` also names a callback's base and a trainer; `LightningModule` is also read in a string
annotation (a forward reference).
"""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from lightning_step_types import TrainStepResult, TypedLightningModule
from pytorch_lightning import LightningModule
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def lines(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=generator)
    return TensorDataset(x, x.sum(dim=1, keepdim=True))


class LineRegressor(TypedLightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 1)

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> TrainStepResult:
        x, y = batch
        return TrainStepResult(loss=F.mse_loss(self.linear(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)

    def train_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(lines(32, seed=0), batch_size=8)


class ScaledLineRegressor(TypedLightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 1)

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> TrainStepResult:
        x, y = batch
        return TrainStepResult(loss=F.mse_loss(self.linear(x), 2 * y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)

    def train_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(lines(32, seed=1), batch_size=8)


class BatchCounter(pl.Callback):
    def __init__(self) -> None:
        self.batches = 0

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.batches += 1


def fit(model: "LightningModule") -> pl.Trainer:
    trainer = pl.Trainer(max_epochs=1, callbacks=[BatchCounter()], logger=False, enable_checkpointing=False)
    trainer.fit(model)
    return trainer
