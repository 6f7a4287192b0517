"""A misspelled TypedDict metadata key where the result is built: the return type says which keys it has."""

from typing import TypedDict

from torch import Tensor

from lightning_step_types import TrainStepResult


class TrainMeta(TypedDict):
    logits: Tensor


def step_result(loss: Tensor, logits: Tensor) -> TrainStepResult[TrainMeta]:
    return TrainStepResult(loss=loss, metadata={"logit": logits})  # E: mypy[typeddict-item,typeddict-unknown-key] pyright[reportReturnType]
