"""A typed training_step returning the bare loss tensor (Lightning accepts it; the typed contract does not)."""

import torch.nn.functional as F
from torch import Tensor, nn

from lightning_step_types import TrainStepResult, TypedLightningModule


class Model(TypedLightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 1)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> TrainStepResult:
        x, y = batch
        loss = F.mse_loss(self.layer(x), y)
        return loss  # E: mypy[return-value] pyright[reportReturnType]
