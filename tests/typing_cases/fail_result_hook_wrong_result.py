"""The module's on_train_batch_result declaring the validation result."""

from typing import Any

from lightning_step_types import TypedLightningModule, ValStepResult


class Model(TypedLightningModule):
    def on_train_batch_result(self, result: ValStepResult | None, batch: Any, batch_idx: int) -> None:  # E: mypy[override] pyright[reportIncompatibleMethodOverride]
        pass
