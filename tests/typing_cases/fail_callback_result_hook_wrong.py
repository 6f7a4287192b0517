"""A TypedCallback whose on_validation_batch_result declares the training result."""

from typing import Any

import pytorch_lightning as pl

from lightning_step_types import TrainStepResult, TypedCallback


class Printer(TypedCallback):
    def on_validation_batch_result(  # E: pyright[reportIncompatibleMethodOverride]
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        result: TrainStepResult | None,  # E: mypy[override]
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        pass
