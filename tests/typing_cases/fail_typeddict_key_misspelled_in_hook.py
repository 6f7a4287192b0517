"""A misspelled TypedDict metadata key, read in the module's typed hook."""

from typing import Any, TypedDict

import torch.nn.functional as F
from torch import Tensor, nn

from lightning_step_types import TrainStepResult, TypedLightningModule


class TrainMeta(TypedDict):
    logits: Tensor


class Classifier(TypedLightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 3)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> TrainStepResult[TrainMeta]:
        x, y = batch
        logits = self.layer(x)
        return TrainStepResult(loss=F.cross_entropy(logits, y), metadata={"logits": logits.detach()})

    def on_train_batch_end(self, outputs: TrainStepResult[TrainMeta] | None, batch: Any, batch_idx: int) -> None:  # X: mypy[override]
        if outputs is not None:
            if outputs.metadata["logts"] is None:  # E: mypy[typeddict-item] pyright[reportGeneralTypeIssues]
                return
            self.log("max_logit", outputs.metadata["logits"].max())
