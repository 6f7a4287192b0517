"""A training_step returning the validation result class."""

import torch.nn.functional as F
from torch import Tensor, nn

from lightning_step_types import TrainStepResult, TypedLightningModule, ValStepResult


class Model(TypedLightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 1)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> TrainStepResult:
        x, y = batch
        loss = F.mse_loss(self.layer(x), y)
        return ValStepResult(loss=loss)  # E: mypy[return-value] pyright[reportReturnType]
