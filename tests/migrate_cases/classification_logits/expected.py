"""A small MLP classifier on synthetic blobs; the training step hands the logits on to callbacks."""

from __future__ import annotations

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from lightning_step_types import TrainStepResult, ValStepResult
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

NUM_FEATURES = 8
NUM_CLASSES = 3


def blobs(n: int, seed: int) -> TensorDataset:
    """Gaussian blobs, one per class."""
    generator = torch.Generator().manual_seed(seed)
    y = torch.randint(0, NUM_CLASSES, (n,), generator=generator)
    centers = torch.randn(NUM_CLASSES, NUM_FEATURES, generator=generator) * 3
    x = centers[y] + torch.randn(n, NUM_FEATURES, generator=generator)
    return TensorDataset(x, y)


class BlobClassifier(pl.LightningModule):
    def __init__(self, hidden: int = 16, lr: float = 1e-2) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(NUM_FEATURES, hidden), nn.ReLU(), nn.Linear(hidden, NUM_CLASSES))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.net(x)
        return logits

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> TrainStepResult:
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        self.log("train_loss", loss)
        return TrainStepResult(
            loss=loss,
            metadata={
                # detached: callbacks only look at them
                "logits": logits.detach(),
                "target": y,
            },
        )

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> ValStepResult:
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        acc = (logits.argmax(dim=-1) == y).float().mean()
        self.log_dict({"val_loss": loss, "val_acc": acc})
        return ValStepResult(loss=loss, metadata={"val_acc": acc})

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams["lr"])

    def train_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(blobs(64, seed=0), batch_size=16, shuffle=True)

    def val_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(blobs(32, seed=1), batch_size=16)
