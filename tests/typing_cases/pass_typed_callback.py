"""A TypedCallback reading the typed results of the steps in its batch-end hooks."""

from typing import Any, TypedDict

import pytorch_lightning as pl
from torch import Tensor
from typing_extensions import ReadOnly, assert_type

from lightning_step_types import TrainStepResult, TypedCallback, ValStepResult


class ValMeta(TypedDict):
    preds: ReadOnly[Tensor]


class CollectPredictions(TypedCallback):
    def __init__(self) -> None:
        self.preds: list[Tensor] = []
        self.train_losses: list[float] = []

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: TrainStepResult | None,  # X: mypy[override]
        batch: Any,
        batch_idx: int,
    ) -> None:
        if outputs is not None:
            self.train_losses.append(outputs.loss.item())

    def on_validation_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: ValStepResult[ValMeta] | None,  # X: mypy[override]
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if outputs is not None:
            assert_type(outputs.metadata["preds"], Tensor)
            self.preds.append(outputs.metadata["preds"])


trainer = pl.Trainer(callbacks=[CollectPredictions()], logger=False)
