"""A CNN on tiny images whose test_step reuses validation_step, as the Lightning docs suggest."""

from __future__ import annotations

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from lightning_step_types import TrainStepResult, ValStepResult
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def tiny_images(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 3, 12, 12, generator=generator), torch.randint(0, 4, (n,), generator=generator))


class TinyCNN(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.classifier = nn.Linear(8, 4)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.classifier(self.features(images))
        return logits

    def _shared_eval_step(self, batch: list[torch.Tensor], batch_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        images, labels = batch
        logits = self(images)
        loss = F.cross_entropy(logits, labels)
        acc = (logits.argmax(dim=1) == labels).float().mean()
        return loss, acc

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> TrainStepResult:
        loss, _ = self._shared_eval_step(batch, batch_idx)
        return TrainStepResult(loss=loss)

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> ValStepResult:
        loss, acc = self._shared_eval_step(batch, batch_idx)
        self.log_dict({"val_loss": loss, "val_acc": acc})
        return ValStepResult(loss=loss, metadata={"val_acc": acc})

    def test_step(self, batch: list[torch.Tensor], batch_idx: int) -> ValStepResult:
        return self.validation_step(batch, batch_idx)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)

    def train_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(tiny_images(32, seed=0), batch_size=8, shuffle=True)

    def val_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(tiny_images(16, seed=1), batch_size=8)

    def test_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(tiny_images(16, seed=2), batch_size=8)
