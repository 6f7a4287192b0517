"""A misspelled TypedDict metadata key, read in the module's on_validation_batch_result."""

from typing import Any, TypedDict

import torch.nn.functional as F
from torch import Tensor, nn
from typing_extensions import ReadOnly

from lightning_step_types import TypedLightningModule, ValStepResult


class EvalMeta(TypedDict):
    logits: ReadOnly[Tensor]


class Classifier(TypedLightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 3)

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> ValStepResult[EvalMeta]:
        x, y = batch
        logits = self.layer(x)
        return ValStepResult(loss=F.cross_entropy(logits, y), metadata={"logits": logits})

    def on_validation_batch_result(
        self, result: ValStepResult[EvalMeta] | None, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if result is None or result.metadata["logts"] is None:  # E: mypy[typeddict-item] pyright[reportGeneralTypeIssues]
            return
        self.log("max_logit", result.metadata["logits"].max())
