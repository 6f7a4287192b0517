"""A plain pytorch_lightning.LightningModule (no base class from this package) annotated with the result types.

Lightning's own `training_step` returns `STEP_OUTPUT` (Tensor | Mapping[str, Any] | None); the results are
read-only Mappings, so the narrower annotation is a valid override in both checkers.
"""

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightning_step_types import StepResultAdapter, TrainStepResult, ValStepResult


class PlainModel(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 1)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> TrainStepResult:
        x, y = batch
        return TrainStepResult(loss=F.mse_loss(self.layer(x), y))

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> ValStepResult:
        x, y = batch
        return ValStepResult(loss=F.mse_loss(self.layer(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters())


trainer = pl.Trainer(max_epochs=1, callbacks=[StepResultAdapter(strict=True)], logger=False)
