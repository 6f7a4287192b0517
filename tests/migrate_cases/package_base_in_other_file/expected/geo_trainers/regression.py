"""Patch regression: the validation step returns its loss under "val_loss", which a callback reads."""

from lightning.pytorch.utilities.types import STEP_OUTPUT
from lightning_step_types import TrainStepResult
from torch import Tensor, nn

from .base import BaseTask


class RegressionTask(BaseTask):
    def __init__(self) -> None:
        super().__init__(classes=1, loss="mse")

    def configure_models(self) -> None:
        self.model = nn.Sequential(nn.Flatten(), nn.Linear(4 * 8 * 8, 1))

    def training_step(self, batch: list[Tensor], batch_idx: int) -> TrainStepResult:
        x, y = batch
        loss = self.criterion(self.model(x).squeeze(1), y.float())
        return TrainStepResult(loss=loss)

    def validation_step(self, batch: list[Tensor], batch_idx: int) -> STEP_OUTPUT:
        x, y = batch
        return {"val_loss": self.criterion(self.model(x).squeeze(1), y.float())}
