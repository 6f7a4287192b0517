"""Steps that return None for some batches: the typed annotations keep None (as `| None` or Optional)."""

from __future__ import annotations

from typing import Optional

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from lightning_step_types import TrainStepResult, ValStepResult
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def sensor_readings(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=generator)
    return TensorDataset(x, x.sum(dim=1, keepdim=True).tanh())


class RobustRegressor(pl.LightningModule):
    def __init__(self, max_val_batches: int = 1) -> None:
        super().__init__()
        self.max_val_batches = max_val_batches
        self.linear = nn.Linear(3, 1)

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> TrainStepResult | None:
        x, y = batch
        if not torch.isfinite(x).all():
            return None  # skip batches with corrupt readings
        loss = F.huber_loss(self.linear(x), y)
        return TrainStepResult(loss=loss)

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> Optional[ValStepResult]:
        if batch_idx >= self.max_val_batches:
            return None
        x, y = batch
        return ValStepResult(loss=F.huber_loss(self.linear(x), y))

    def test_step(self, batch: list[torch.Tensor], batch_idx: int) -> ValStepResult | None:
        x, y = batch
        if len(x) < 2:
            return None  # too few readings to compare
        loss = F.huber_loss(self.linear(x), y)
        self.log("test_loss", loss)
        return ValStepResult(loss=loss)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)

    def train_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(sensor_readings(32, seed=0), batch_size=8)

    def val_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(sensor_readings(16, seed=1), batch_size=8)

    def test_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(sensor_readings(16, seed=2), batch_size=8)
