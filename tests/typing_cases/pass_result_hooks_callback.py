"""A TypedCallback's result hooks with TypedDict metadata: exact in mypy and pyright, with no ignore."""

from typing import Any, TypedDict

import pytorch_lightning as pl
from torch import Tensor
from typing_extensions import ReadOnly, assert_type

from lightning_step_types import StepResultAdapter, TrainStepResult, TypedCallback, ValStepResult


class TrainMeta(TypedDict):
    logits: ReadOnly[Tensor]


class EvalMeta(TypedDict):
    logits: ReadOnly[Tensor]
    labels: ReadOnly[Tensor]


class LogitsCollector(TypedCallback):
    def __init__(self) -> None:
        self.train_logits: list[Tensor] = []
        self.val_logits: dict[int, list[Tensor]] = {}
        self.test_accuracy: list[float] = []

    def on_train_batch_result(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        result: TrainStepResult[TrainMeta] | None,
        batch: Any,
        batch_idx: int,
    ) -> None:
        if result is not None:
            assert_type(result.metadata["logits"], Tensor)
            self.train_logits.append(result.metadata["logits"])

    def on_validation_batch_result(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        result: ValStepResult[EvalMeta] | None,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if result is not None:
            self.val_logits.setdefault(dataloader_idx, []).append(result.metadata["logits"])

    def on_test_batch_result(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        result: ValStepResult[EvalMeta] | None,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if result is None:
            return
        correct = result.metadata["logits"].argmax(-1) == result.metadata["labels"]
        assert_type(result.loss, Tensor)
        self.test_accuracy.append(correct.float().mean().item())


class LossHistory(TypedCallback):
    """Bare result classes: the loss is typed, metadata values are Any."""

    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_result(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        result: TrainStepResult | None,
        batch: Any,
        batch_idx: int,
    ) -> None:
        if result is not None:
            self.losses.append(result.loss.item())


trainer = pl.Trainer(callbacks=[StepResultAdapter(strict=True), LogitsCollector(), LossHistory()], logger=False)
