"""Lightning 0.x: one metrics dict shown both in the logger and in the progress bar."""

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from lightning_step_types import TrainStepResult, ValStepResult
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def sequences(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 10, 3, generator=generator)
    return TensorDataset(x, x.cumsum(dim=1)[:, -1])


class RunningSum(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.GRU(3, 16, batch_first=True)
        self.head = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(x)
        last: torch.Tensor = self.head(out[:, -1])
        return last

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> TrainStepResult:
        x, y = batch
        loss = F.mse_loss(self(x), y)
        logs = {"train_mse": loss, "train_rmse": loss.sqrt()}
        self.log_dict(logs, prog_bar=True)
        return TrainStepResult(loss=loss)

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> ValStepResult:
        x, y = batch
        loss = F.mse_loss(self(x), y)
        metrics = {"val_mse": loss}
        self.log_dict(metrics, prog_bar=True)
        return ValStepResult(loss=loss)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-2)

    def train_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(sequences(32, seed=0), batch_size=8)

    def val_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(sequences(16, seed=1), batch_size=8)
