"""Several models sharing a base class, next to classes that are not LightningModules at all."""

from __future__ import annotations

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from lightning_step_types import TrainStepResult, ValStepResult
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

FEATURES = 5


def sine_data(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.rand(n, FEATURES, generator=generator) * 6 - 3
    return TensorDataset(x, x.sin().sum(dim=1, keepdim=True))


class FeatureScaler:
    """Not a LightningModule: its `training_step` is a preprocessing step and stays as it is."""

    def training_step(self, x: torch.Tensor) -> torch.Tensor:
        scaled = (x - x.mean(dim=0)) / (x.std(dim=0) + 1e-6)
        return scaled


class MLPBase(pl.LightningModule):
    """Shared network, optimizer and data; subclasses write the steps."""

    def __init__(self, hidden: int = 16) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(FEATURES, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(x)
        return out

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-2)

    def train_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(sine_data(64, seed=0), batch_size=16, shuffle=True)

    def val_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(sine_data(32, seed=1), batch_size=16)


class SineRegressor(MLPBase):
    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> TrainStepResult:
        x, y = batch
        loss = F.mse_loss(self(x), y)
        return TrainStepResult(loss=loss)


class SineRegressorWithPreds(MLPBase):
    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> TrainStepResult:
        x, y = batch
        preds = self(x)
        loss = F.smooth_l1_loss(preds, y)
        return TrainStepResult(loss=loss, metadata={"preds": preds.detach()})

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> ValStepResult:
        x, y = batch
        val_loss = F.smooth_l1_loss(self(x), y)
        self.log("val_loss", val_loss)
        return ValStepResult(loss=val_loss)


class Residual(nn.Module):
    """A plain torch module, untouched."""

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = x + self.block(x)
        return out
