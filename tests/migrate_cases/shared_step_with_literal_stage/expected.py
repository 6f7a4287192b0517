"""One shared step branching on a literal stage, as lightning-bolts' LogisticRegression writes it.

`_shared_step(batch, "train")` takes the `if stage == "train"` branch, whose dict `{"loss": loss}`
is only logged (`self.log_dict`) before it is returned: `training_step` is rewritten to the loss it
holds. `_regularization` returns the loss it is given. The evaluation stages return
`_log_metrics`' dict, whose keys are f-strings: those steps are left for you, with the fix.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from lightning_step_types import TrainStepResult
from pytorch_lightning import LightningModule
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset


def blobs(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 3, (n,), generator=generator)
    x = torch.randn(n, 4, generator=generator) + y.unsqueeze(1)
    return TensorDataset(x, y)


class LogisticRegression(LightningModule):
    def __init__(self, l2_strength: float = 0.01) -> None:
        super().__init__()
        self.l2_strength = l2_strength
        self.criterion = nn.CrossEntropyLoss()
        self.linear = nn.Linear(4, 3)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> TrainStepResult:
        return TrainStepResult(loss=self._shared_step(batch, "train")["loss"])

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> dict[str, Tensor]:
        return self._shared_step(batch, "val")

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> dict[str, Tensor]:
        return self._shared_step(batch, "test")

    def _shared_step(self, batch: tuple[Tensor, Tensor], stage: str) -> dict[str, Tensor]:
        x, y = batch
        logits = self.linear(x)
        loss = self.criterion(logits, y)

        if stage == "train":
            loss = self._regularization(loss)
            loss /= x.size(0)
            metrics = {"loss": loss}
            self.log_dict(metrics, on_step=True)
            return metrics

        acc = (logits.argmax(dim=-1) == y).float().mean()
        return self._log_metrics(acc, loss, stage, on_step=True)

    def _log_metrics(self, acc: Tensor, loss: Tensor, stage: str, on_step: bool) -> dict[str, Tensor]:
        metrics = {f"{stage}_loss": loss, f"{stage}_acc": acc}
        self.log_dict(metrics, on_step=on_step)
        return metrics

    def _regularization(self, loss: Tensor) -> Tensor:
        if self.l2_strength > 0:
            loss += self.l2_strength * self.linear.weight.pow(2).sum()
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-2)

    def train_dataloader(self) -> DataLoader[tuple[Tensor, ...]]:
        return DataLoader(blobs(32, seed=0), batch_size=8)

    def val_dataloader(self) -> DataLoader[tuple[Tensor, ...]]:
        return DataLoader(blobs(16, seed=1), batch_size=8)

    def test_dataloader(self) -> DataLoader[tuple[Tensor, ...]]:
        return DataLoader(blobs(16, seed=2), batch_size=8)
