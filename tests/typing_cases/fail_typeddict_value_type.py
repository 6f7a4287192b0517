"""A TypedDict metadata value of the wrong type (a float where a Tensor is declared)."""

from typing import TypedDict

from torch import Tensor

from lightning_step_types import ValStepResult


class ValMeta(TypedDict):
    accuracy: Tensor


def step_result(loss: Tensor, correct: Tensor) -> ValStepResult[ValMeta]:
    return ValStepResult(loss=loss, metadata={"accuracy": correct.float().mean().item()})  # E: mypy[typeddict-item] pyright[reportReturnType]
