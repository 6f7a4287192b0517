"""A result hook whose `result` leaves out None: a step that returned None (a skipped batch) gives None here."""

from typing import Any

from lightning_step_types import TrainStepResult, TypedLightningModule


class Model(TypedLightningModule):
    def on_train_batch_result(self, result: TrainStepResult, batch: Any, batch_idx: int) -> None:  # E: mypy[override] pyright[reportIncompatibleMethodOverride]
        self.log("loss_seen", result.loss)
