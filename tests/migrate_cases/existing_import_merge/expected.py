"""A training script that already checks its steps with StepResultAdapter: the codemod extends that import."""

from __future__ import annotations

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_step_types import StepResultAdapter, TrainStepResult, ValStepResult

N_FEATURES = 11  # like the wine-quality table


def wine_like(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, N_FEATURES, generator=generator)
    quality = 6 + x[:, :3].sum(dim=1, keepdim=True)
    return TensorDataset(x, quality)


class WineQuality(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(N_FEATURES, 8), nn.ReLU(), nn.Linear(8, 1))

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> TrainStepResult:
        x, y = batch
        loss = F.mse_loss(self.net(x), y)
        return TrainStepResult(loss=loss)

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> ValStepResult:
        x, y = batch
        preds = self.net(x)
        return ValStepResult(loss=F.mse_loss(preds, y), metadata={"mae": (preds - y).abs().mean()})

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-2)

    def train_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(wine_like(64, seed=0), batch_size=16, shuffle=True)

    def val_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(wine_like(32, seed=1), batch_size=16)


def main() -> None:
    trainer = pl.Trainer(max_epochs=5, callbacks=[StepResultAdapter()])
    trainer.fit(WineQuality())


if __name__ == "__main__":
    main()
