"""Helpers whose names say "loss" but which return a tuple: only the unpacked loss is a loss."""

from typing import Any

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from lightning_step_types import TrainStepResult
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def digits(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.rand(n, 64, generator=generator), torch.randint(0, 10, (n,), generator=generator))


def loss_and_logits(model: nn.Module, batch: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = batch
    logits = model(x)
    return F.cross_entropy(logits, y), logits


class DigitClassifier(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(64, 10)

    def compute_loss(self, batch: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        loss, logits = loss_and_logits(self.net, batch)
        acc = (logits.argmax(dim=1) == batch[1]).float().mean()
        return loss, {"acc": acc}

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> TrainStepResult:
        loss, logs = self.compute_loss(batch)
        self.log_dict({f"train_{k}": v for k, v in logs.items()})
        return TrainStepResult(loss=loss)

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> Any:
        # the name says "loss", the code says (loss, logs): a ValStepResult(loss=<tuple>) would fail
        return self.compute_loss(batch)

    def test_step(self, batch: list[torch.Tensor], batch_idx: int) -> Any:
        return loss_and_logits(self.net, batch)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(digits(32, seed=0), batch_size=8)

    def val_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(digits(16, seed=1), batch_size=8)

    def test_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(digits(16, seed=2), batch_size=8)
