"""Steps the codemod cannot prove safe to rewrite: each is left as it is, with a report line saying why."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from lightning_step_types import TrainStepResult
from pytorch_lightning.utilities.types import STEP_OUTPUT
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

P = ParamSpec("P")
R = TypeVar("R")


def timed(step: Callable[P, R]) -> Callable[P, R]:
    """Print how long a step took."""

    @functools.wraps(step)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        start = time.perf_counter()
        result = step(*args, **kwargs)
        print(f"{step.__name__}: {time.perf_counter() - start:.4f}s")
        return result

    return wrapper


def points(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 2, generator=generator)
    return TensorDataset(x, (x[:, 0] * x[:, 1] > 0).long())


class PointsModule(pl.LightningModule):
    """Model, optimizer and data shared by the modules below."""

    def __init__(self, prefix: str = "fit") -> None:
        super().__init__()
        self.prefix = prefix
        self.linear = nn.Linear(2, 2)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(points(32, seed=0), batch_size=8)

    def val_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(points(16, seed=1), batch_size=8)

    def test_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(points(16, seed=2), batch_size=8)


class VariableShapes(PointsModule):
    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> TrainStepResult:
        x, y = batch
        logits = self.linear(x)
        out = {"loss": F.cross_entropy(logits, y)}
        out["logits"] = logits.detach()
        return TrainStepResult(loss=out["loss"], metadata={"logits": out["logits"]})

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> Any:
        x, y = batch
        logits = self.linear(x)
        return F.cross_entropy(logits, y), logits

    def test_step(self, batch: list[torch.Tensor], batch_idx: int) -> STEP_OUTPUT:
        x, y = batch
        return {f"{self.prefix}_test_loss": F.cross_entropy(self.linear(x), y)}


class OpenEndedShapes(PointsModule):
    def diagnostics(self, logits: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"max_logit": logits.max().detach()}

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> STEP_OUTPUT:
        x, y = batch
        logits = self.linear(x)
        loss = F.cross_entropy(logits, y)
        return {"loss": loss, **self.diagnostics(logits)}

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> Any:
        x, y = batch
        logits = self.linear(x)
        if batch_idx == 0:
            return F.cross_entropy(logits, y)
        return logits.argmax(dim=-1), y

    @timed
    def test_step(self, batch: list[torch.Tensor], batch_idx: int) -> STEP_OUTPUT:
        x, y = batch
        return F.cross_entropy(self.linear(x), y)
