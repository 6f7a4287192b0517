"""A plain LightningModule annotated `-> TrainStepResult` that still returns the bare loss."""

import pytorch_lightning as pl
import torch.nn.functional as F
from torch import Tensor, nn

from lightning_step_types import TrainStepResult


class PlainModel(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 1)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> TrainStepResult:
        x, y = batch
        return F.mse_loss(self.layer(x), y)  # E: mypy[return-value] pyright[reportReturnType]
