"""A TypedLightningModule's result hooks: typed outputs, exact in mypy and pyright, with no ignore.

Lightning does not declare ``on_*_batch_result``, so both checkers compare these overrides with the
stub's ``TrainStepResult[Any] | None`` / ``ValStepResult[Any] | None`` only, and a TypedDict
metadata type narrows it (compare pass_typeddict_metadata.py, whose ``on_*_batch_end`` mypy flags).
"""

from typing import Any, TypedDict

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from typing_extensions import ReadOnly, assert_type

from lightning_step_types import TrainStepResult, TypedLightningModule, ValStepResult


class TrainMeta(TypedDict):
    logits: ReadOnly[Tensor]


class EvalMeta(TypedDict):
    preds: ReadOnly[Tensor]
    correct: ReadOnly[int]


class Classifier(TypedLightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 3)
        self.correct = 0

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> TrainStepResult[TrainMeta] | None:
        x, y = batch
        logits = self.layer(x)
        return TrainStepResult(loss=F.cross_entropy(logits, y), metadata={"logits": logits.detach()})

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> ValStepResult[EvalMeta]:
        x, y = batch
        logits = self.layer(x)
        preds = logits.argmax(-1)
        metadata: EvalMeta = {"preds": preds, "correct": int((preds == y).sum())}
        return ValStepResult(F.cross_entropy(logits, y), metadata, batch_size=len(y))

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> ValStepResult[EvalMeta]:
        return self.validation_step(batch, batch_idx)

    def on_train_batch_result(self, result: TrainStepResult[TrainMeta] | None, batch: Any, batch_idx: int) -> None:
        if result is None:
            return
        assert_type(result.loss, Tensor)
        assert_type(result.metadata, TrainMeta)
        assert_type(result.metadata["logits"], Tensor)
        self.log("max_logit", result.metadata["logits"].max())

    def on_validation_batch_result(
        self, result: ValStepResult[EvalMeta] | None, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if result is not None:
            assert_type(result.metadata["correct"], int)
            assert_type(result.batch_size, int | None)
            self.correct += result.metadata["correct"]

    def on_test_batch_result(
        self, result: ValStepResult[EvalMeta] | None, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if result is not None:
            assert_type(result.metadata["preds"], Tensor)
            self.log("test_pred_mean", result.metadata["preds"].float().mean())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Untyped(TypedLightningModule):
    """Bare result classes: metadata is a Mapping[str, Any]."""

    def on_train_batch_result(self, result: TrainStepResult | None, batch: Any, batch_idx: int) -> None:
        if result is not None:
            assert_type(result.metadata["anything"], Any)
