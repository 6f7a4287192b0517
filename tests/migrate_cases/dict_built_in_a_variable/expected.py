"""Steps that build their output dict in a variable, key by key, and return it."""

from typing import Any

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from lightning_step_types import TrainStepResult, ValStepResult
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def spirals(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    angle = torch.rand(n, generator=generator) * 12
    label = torch.randint(0, 2, (n,), generator=generator)
    radius = angle / 12 + 0.05 * torch.randn(n, generator=generator)
    x = torch.stack([radius * torch.cos(angle + label * torch.pi), radius * torch.sin(angle + label * torch.pi)], 1)
    return TensorDataset(x, label)


class SpiralData(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, 32), nn.Tanh(), nn.Linear(32, 2))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-2)

    def train_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(spirals(64, seed=0), batch_size=16, shuffle=True)

    def val_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(spirals(32, seed=1), batch_size=16)


class SpiralClassifier(SpiralData):
    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> TrainStepResult:
        x, y = batch
        logits = self.net(x)
        output = {"loss": F.cross_entropy(logits, y)}
        output["acc"] = (logits.argmax(dim=1) == y).float().mean().detach()
        self.log("train_acc", output["acc"])
        return TrainStepResult(loss=output["loss"], metadata={"acc": output["acc"]})

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> ValStepResult:
        x, y = batch
        logits = self.net(x)
        result: dict[str, Any] = {}
        result["val_loss"] = F.cross_entropy(logits, y)
        result["log"] = {"val_acc": (logits.argmax(dim=1) == y).float().mean()}
        self.log_dict(result["log"])
        return ValStepResult(loss=result["val_loss"])


class SpiralClassifierKeepingOutputs(SpiralData):
    """The dict is stored on the module (`self.last = output`): an alias, so the step is left alone."""

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> dict[str, Any]:
        x, y = batch
        output = {"loss": F.cross_entropy(self.net(x), y)}
        self.last = output
        return output
