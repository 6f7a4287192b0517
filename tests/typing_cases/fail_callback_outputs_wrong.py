"""A TypedCallback whose validation hook declares the training result."""

from typing import Any

import pytorch_lightning as pl

from lightning_step_types import TrainStepResult, TypedCallback


class Printer(TypedCallback):
    def on_validation_batch_end(  # E: pyright[reportIncompatibleMethodOverride]
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: TrainStepResult | None,  # E: mypy[override]
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        pass
