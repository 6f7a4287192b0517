"""Documented gap: a result hook's metadata type is not tied to the step's.

The stub declares ``on_train_batch_result(self, result: TrainStepResult[Any] | None, ...)``: the
hook may narrow the metadata to any type, and neither checker relates it to what
``training_step`` returns. Below, the step returns ``TrainMeta`` and the hook reads ``OtherMeta``;
at runtime ``result.metadata["embeddings"]`` raises ``KeyError``. docs/typing.md therefore tells
users to keep the two annotations in agreement.
"""

from typing import Any, TypedDict

import torch.nn.functional as F
from torch import Tensor, nn
from typing_extensions import ReadOnly

from lightning_step_types import TrainStepResult, TypedLightningModule


class TrainMeta(TypedDict):
    logits: ReadOnly[Tensor]


class OtherMeta(TypedDict):
    embeddings: ReadOnly[Tensor]


class Classifier(TypedLightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 3)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> TrainStepResult[TrainMeta]:
        x, y = batch
        logits = self.layer(x)
        return TrainStepResult(loss=F.cross_entropy(logits, y), metadata={"logits": logits.detach()})

    def on_train_batch_result(self, result: TrainStepResult[OtherMeta] | None, batch: Any, batch_idx: int) -> None:
        if result is not None:  # neither checker relates OtherMeta to the step's TrainMeta (see docstring)
            self.log("max_embedding", result.metadata["embeddings"].max())
