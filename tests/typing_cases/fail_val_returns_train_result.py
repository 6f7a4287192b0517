"""A validation_step returning the training result class."""

import torch.nn.functional as F
from torch import Tensor, nn

from lightning_step_types import TrainStepResult, TypedLightningModule, ValStepResult


class Model(TypedLightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 1)

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> ValStepResult:
        x, y = batch
        loss = F.mse_loss(self.layer(x), y)
        return TrainStepResult(loss=loss)  # E: mypy[return-value] pyright[reportReturnType]
