"""A result hook reading the result without checking for None (the step may have skipped the batch)."""

from typing import Any

from lightning_step_types import TypedLightningModule, ValStepResult


class Model(TypedLightningModule):
    def on_validation_batch_result(
        self, result: ValStepResult | None, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self.log("val_loss_seen", result.loss)  # E: mypy[union-attr] pyright[reportOptionalMemberAccess]
