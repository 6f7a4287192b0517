"""--base-class on a module whose Lightning imports only named the base classes: they go with the switch.

`pl` is read only as `pl.LightningModule`, and `LightningModule` only as a base (and in docstrings,
which are prose, not code); `seed_everything` is still used, so its import stays.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from lightning_step_types import TrainStepResult, TypedLightningModule
from pytorch_lightning import seed_everything
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def circles(n: int, seed: int) -> TensorDataset:
    seed_everything(seed, verbose=False)
    radius = torch.rand(n)
    angle = torch.rand(n) * 2 * torch.pi
    x = torch.stack([radius * angle.cos(), radius * angle.sin()], dim=1)
    return TensorDataset(x, (radius > 0.5).long())


class CircleClassifier(TypedLightningModule):
    """A LightningModule for two concentric circles."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 2))

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> TrainStepResult:
        x, y = batch
        return TrainStepResult(loss=F.cross_entropy(self.net(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-2)

    def train_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(circles(32, seed=0), batch_size=8)


class RadiusRegressor(TypedLightningModule):
    """Example of a `LightningModule` that regresses the radius."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 1))

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> TrainStepResult:
        x, _ = batch
        return TrainStepResult(loss=F.mse_loss(self.net(x).squeeze(1), x.norm(dim=1)))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-2)

    def train_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(circles(32, seed=1), batch_size=8)
