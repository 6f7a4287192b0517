"""A method named like a hook Lightning 2 removed, that the class calls itself: a helper, not a leftover.

pytorch-forecasting's `BaseModel` collects its step outputs and passes them to its own
`on_epoch_end(self, outputs)` from `on_train_epoch_end`. Lightning 2 never calls `on_epoch_end`
itself (and, unlike `training_epoch_end`, does not refuse a module defining it), so nothing is left
to migrate here.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from lightning_step_types import TrainStepResult
from pytorch_lightning import LightningModule
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def steps(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    return TensorDataset(x, (x[:, 0] > 0).long())


class StepClassifier(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(4, 2)
        self.training_step_outputs: list[torch.Tensor] = []
        self.epoch_means: list[float] = []

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> TrainStepResult:
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.training_step_outputs.append(loss.detach())
        return TrainStepResult(loss=loss)

    def on_train_epoch_end(self) -> None:
        self.on_epoch_end(self.training_step_outputs)
        self.training_step_outputs.clear()

    def on_epoch_end(self, outputs: list[torch.Tensor]) -> None:
        self.epoch_means.append(torch.stack(outputs).mean().item())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(steps(32, seed=0), batch_size=8)
