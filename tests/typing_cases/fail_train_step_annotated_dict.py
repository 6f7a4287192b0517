"""A TypedLightningModule whose training_step is annotated to return a dict: the override itself is wrong."""

import torch.nn.functional as F
from torch import Tensor, nn

from lightning_step_types import TypedLightningModule


class Model(TypedLightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 1)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> dict[str, Tensor]:  # E: mypy[override] pyright[reportIncompatibleMethodOverride]
        x, y = batch
        return {"loss": F.mse_loss(self.layer(x), y)}
