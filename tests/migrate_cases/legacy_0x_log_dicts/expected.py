"""Written for Lightning 0.x: metrics travel in the returned dict under 'log' and 'progress_bar'."""

from typing import Any

import pytorch_lightning as pl
import torch
from lightning_step_types import TrainStepResult, ValStepResult
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


def random_digits(n: int, seed: int) -> TensorDataset:
    """8x8 grey images with a label each: the shapes of sklearn's digits."""
    generator = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.rand(n, 1, 8, 8, generator=generator), torch.randint(0, 10, (n,), generator=generator))


class LitDigits(pl.LightningModule):

    def __init__(self) -> None:
        super(LitDigits, self).__init__()
        self.l1 = torch.nn.Linear(8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.l1(x.view(x.size(0), -1)))

    def training_step(self, batch: Any, batch_nb: int) -> TrainStepResult:
        # REQUIRED
        x, y = batch
        y_hat = self(x)
        loss = F.cross_entropy(y_hat, y)
        tensorboard_logs = {'train_loss': loss}
        self.log_dict(tensorboard_logs)
        return TrainStepResult(loss=loss)

    def validation_step(self, batch: Any, batch_nb: int) -> ValStepResult:
        # OPTIONAL
        x, y = batch
        y_hat = self(x)
        loss = F.cross_entropy(y_hat, y)
        acc = (y_hat.argmax(dim=1) == y).float().mean()
        self.log_dict({'val_loss_step': loss})
        self.log_dict({'val_acc': acc}, prog_bar=True)
        return ValStepResult(loss=loss)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        # REQUIRED
        return torch.optim.Adam(self.parameters(), lr=0.02)

    def train_dataloader(self) -> DataLoader[Any]:
        # REQUIRED
        return DataLoader(random_digits(64, seed=0), batch_size=32)

    def val_dataloader(self) -> DataLoader[Any]:
        # OPTIONAL
        return DataLoader(random_digits(64, seed=1), batch_size=32)
