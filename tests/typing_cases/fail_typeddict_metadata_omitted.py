"""A result declared to carry TypedDict metadata, built without any: the keys the hooks read are missing."""

from typing import TypedDict

from torch import Tensor

from lightning_step_types import TrainStepResult


class TrainMeta(TypedDict):
    logits: Tensor


def step_result(loss: Tensor) -> TrainStepResult[TrainMeta]:
    return TrainStepResult(loss=loss)  # E: mypy[return-value] pyright[reportReturnType]
