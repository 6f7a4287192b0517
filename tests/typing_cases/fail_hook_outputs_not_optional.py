"""A typed hook whose `outputs` leaves out None: a step that returned None (a skipped batch) gives None here."""

from typing import Any

from lightning_step_types import TrainStepResult, TypedLightningModule


class Model(TypedLightningModule):
    def on_train_batch_end(self, outputs: TrainStepResult, batch: Any, batch_idx: int) -> None:  # E: mypy[override] pyright[reportIncompatibleMethodOverride]
        self.log("loss_seen", outputs.loss)
