"""The module's on_train_batch_end declaring the validation result as its `outputs`."""

from typing import Any

from lightning_step_types import TypedLightningModule, ValStepResult


class Model(TypedLightningModule):
    def on_train_batch_end(self, outputs: ValStepResult | None, batch: Any, batch_idx: int) -> None:  # E: mypy[override] pyright[reportIncompatibleMethodOverride]
        pass
