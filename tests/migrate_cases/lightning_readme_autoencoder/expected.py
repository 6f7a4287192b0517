"""The autoencoder from Lightning's README, written against the unified `lightning` package."""

import lightning as L
import torch
import torch.nn.functional as F
from lightning_step_types import TrainStepResult, ValStepResult
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def fake_mnist(n: int, seed: int) -> TensorDataset:
    """Random 28x28 "digits" and labels, shaped like torchvision's MNIST."""
    generator = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.rand(n, 1, 28, 28, generator=generator), torch.randint(0, 10, (n,), generator=generator))


class LitAutoEncoder(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(28 * 28, 64), nn.ReLU(), nn.Linear(64, 3))
        self.decoder = nn.Sequential(nn.Linear(3, 64), nn.ReLU(), nn.Linear(64, 28 * 28))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # in lightning, forward defines the prediction/inference actions
        embedding: torch.Tensor = self.encoder(x)
        return embedding

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> TrainStepResult:
        # training_step defines the train loop. It is independent of forward
        x, _ = batch
        x = x.view(x.size(0), -1)
        z = self.encoder(x)
        x_hat = self.decoder(z)
        loss = F.mse_loss(x_hat, x)
        self.log("train_loss", loss)
        return TrainStepResult(loss=loss)

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> ValStepResult:
        x, _ = batch
        x = x.view(x.size(0), -1)
        val_loss = F.mse_loss(self.decoder(self.encoder(x)), x)
        self.log("val_loss", val_loss)
        return ValStepResult(loss=val_loss)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        optimizer = torch.optim.Adam(self.parameters(), lr=1e-3)
        return optimizer

    def train_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(fake_mnist(64, seed=0), batch_size=32)

    def val_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(fake_mnist(64, seed=1), batch_size=32)
