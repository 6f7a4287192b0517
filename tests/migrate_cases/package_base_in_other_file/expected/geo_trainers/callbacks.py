"""A callback reading what the regression task's validation step returns."""

from typing import Any

import lightning.pytorch as L


class ValLossHistory(L.Callback):
    def __init__(self) -> None:
        self.history: list[float] = []

    def on_validation_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.history.append(float(outputs["val_loss"]))
