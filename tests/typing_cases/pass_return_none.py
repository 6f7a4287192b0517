"""Steps that skip a batch by returning None, declared `-> TrainStepResult | None`."""

import torch.nn.functional as F
from torch import Tensor, nn

from lightning_step_types import TrainStepResult, TypedLightningModule, ValStepResult


class SkipsEmpty(TypedLightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 1)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> TrainStepResult | None:
        x, y = batch
        if len(x) == 0:
            return None
        return TrainStepResult(loss=F.mse_loss(self.layer(x), y))

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> ValStepResult | None:
        x, y = batch
        if len(x) == 0:
            return None
        return ValStepResult(loss=F.mse_loss(self.layer(x), y))
