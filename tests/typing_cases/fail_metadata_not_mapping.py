"""Metadata passed as a list of pairs instead of a mapping."""

from torch import Tensor

from lightning_step_types import TrainStepResult


def step_result(loss: Tensor, logits: Tensor) -> TrainStepResult:
    result: TrainStepResult = TrainStepResult(loss=loss, metadata=[("logits", logits)])  # E: mypy[call-overload] pyright[reportArgumentType]
    return result
