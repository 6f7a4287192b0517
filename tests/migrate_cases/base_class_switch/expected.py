"""Two pytorch_lightning modules migrated with --base-class: one converts fully, one keeps its base."""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from lightning_step_types import TrainStepResult, TypedLightningModule, ValStepResult
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def clusters(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 2, (n,), generator=generator)
    x = torch.randn(n, 3, generator=generator) + 2 * y.unsqueeze(1)
    return TensorDataset(x, y)


class LogisticRegression(TypedLightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 2)

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> TrainStepResult:
        x, y = batch
        return TrainStepResult(loss=F.cross_entropy(self.linear(x), y))

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> ValStepResult:
        x, y = batch
        return ValStepResult(loss=F.cross_entropy(self.linear(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(clusters(32, seed=0), batch_size=8)

    def val_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(clusters(16, seed=1), batch_size=8)


class LogisticRegressionWithPreds(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 2)

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> TrainStepResult:
        x, y = batch
        return TrainStepResult(loss=F.cross_entropy(self.linear(x), y))

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> Any:
        x, y = batch
        logits = self.linear(x)
        # (loss, predictions): a shape no typed result has
        return F.cross_entropy(logits, y), logits.argmax(dim=-1)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(clusters(32, seed=0), batch_size=8)

    def val_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(clusters(16, seed=1), batch_size=8)
