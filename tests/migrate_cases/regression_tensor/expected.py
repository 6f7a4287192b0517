"""Linear regression on a noisy plane: every step returns its loss tensor."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from lightning_step_types import TrainStepResult, ValStepResult
from pytorch_lightning import LightningModule
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

INPUT_DIM = 4


def noisy_plane(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, INPUT_DIM, generator=generator)
    weights = torch.arange(1.0, INPUT_DIM + 1)
    y = x @ weights + 0.1 * torch.randn(n, generator=generator)
    return TensorDataset(x, y.unsqueeze(1))


class PlaneRegressor(LightningModule):
    def __init__(self, lr: float = 0.05) -> None:
        super().__init__()
        self.lr = lr
        self.linear = nn.Linear(INPUT_DIM, 1)

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> TrainStepResult:
        x, y = batch
        loss = F.mse_loss(self.linear(x), y)
        self.log("train_mse", loss, prog_bar=True)
        return TrainStepResult(loss=loss)

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> ValStepResult:
        x, y = batch
        return ValStepResult(loss=F.mse_loss(self.linear(x), y))

    def test_step(self, batch: list[torch.Tensor], batch_idx: int) -> ValStepResult:
        x, y = batch
        test_loss = F.l1_loss(self.linear(x), y)
        self.log("test_mae", test_loss)
        return ValStepResult(loss=test_loss)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr)

    def train_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(noisy_plane(64, seed=0), batch_size=8, shuffle=True)

    def val_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(noisy_plane(32, seed=1), batch_size=8)

    def test_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(noisy_plane(32, seed=2), batch_size=8)
