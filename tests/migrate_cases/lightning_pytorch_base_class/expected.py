"""A `lightning.pytorch` module migrated with --base-class: it becomes a TypedLightningModule of that flavour."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from lightning_step_types import TrainStepResult, ValStepResult
from lightning_step_types.lightning_pytorch import TypedLightningModule
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def two_moons(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    t = torch.rand(n, generator=generator) * torch.pi
    label = torch.randint(0, 2, (n,), generator=generator)
    x = torch.stack([t.cos() + label, t.sin() * (1 - 2 * label) + 0.5 * label], dim=1)
    return TensorDataset(x + 0.1 * torch.randn(n, 2, generator=generator), label)


class MoonsClassifier(TypedLightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 2))

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> TrainStepResult:
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        return TrainStepResult(loss=loss)

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> ValStepResult:
        x, y = batch
        logits = self.net(x)
        return ValStepResult(loss=F.cross_entropy(logits, y), metadata={"probs": logits.softmax(dim=-1)})

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-2)

    def train_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(two_moons(64, seed=0), batch_size=16, shuffle=True)

    def val_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(two_moons(32, seed=1), batch_size=16)
