"""Evaluation steps returning a bare loss tensor: after the rewrite their batch-end hooks get a mapping.

Lightning hands what `validation_step` / `test_step` return to every callback's
`on_validation_batch_end` / `on_test_batch_end`: a Tensor here, a mapping holding `loss` once they
return a ValStepResult. Nothing in this file defines those hooks, so the steps are rewritten, each
with a note saying so; `test_step` returns what `validation_step` returns, and gets the note too.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from lightning_step_types import TrainStepResult, ValStepResult
from pytorch_lightning import LightningModule
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def waves(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 1, generator=generator) * 6
    return TensorDataset(x, x.sin())


class WaveRegressor(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(1, 16), nn.Tanh(), nn.Linear(16, 1))

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> TrainStepResult:
        x, y = batch
        return TrainStepResult(loss=F.mse_loss(self.net(x), y))

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> ValStepResult:
        x, y = batch
        val_loss = F.mse_loss(self.net(x), y)
        self.log("val_loss", val_loss)
        return ValStepResult(loss=val_loss)

    def test_step(self, batch: list[torch.Tensor], batch_idx: int) -> ValStepResult:
        return self.validation_step(batch, batch_idx)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-2)

    def train_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(waves(32, seed=0), batch_size=8)

    def val_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(waves(16, seed=1), batch_size=8)

    def test_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(waves(16, seed=2), batch_size=8)
