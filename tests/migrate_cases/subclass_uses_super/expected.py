"""A base segmentation module whose training_step result its subclasses reuse through super()."""

from __future__ import annotations

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from lightning_step_types import ValStepResult
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def blobs_and_masks(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    images = torch.rand(n, 1, 8, 8, generator=generator)
    return TensorDataset(images, (images > 0.5).float())


class SegmentationBase(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 1, kernel_size=3, padding=1)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        mask_logits: torch.Tensor = self.conv(images)
        return mask_logits

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        images, masks = batch
        loss = F.binary_cross_entropy_with_logits(self(images), masks)
        return loss

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> ValStepResult:
        images, masks = batch
        val_loss = F.binary_cross_entropy_with_logits(self(images), masks)
        self.log("val_loss", val_loss)
        return ValStepResult(loss=val_loss)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-2)

    def train_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(blobs_and_masks(32, seed=0), batch_size=8)

    def val_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(blobs_and_masks(16, seed=1), batch_size=8)


class WeightedSegmentation(SegmentationBase):
    weight = 0.5

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.log("unweighted_loss", loss)
        return loss * self.weight


class LoggedSegmentation(SegmentationBase):
    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        self.log("batch_size", float(len(batch[0])))
        return super().training_step(batch, batch_idx)
