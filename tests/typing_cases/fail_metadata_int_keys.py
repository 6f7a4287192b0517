"""Metadata keyed by ints: results address their metadata by name (str keys only)."""

from torch import Tensor

from lightning_step_types import TrainStepResult


def step_result(loss: Tensor, per_class: list[Tensor]) -> TrainStepResult:
    return TrainStepResult(loss=loss, metadata={0: per_class[0], 1: per_class[1]})  # E: mypy[dict-item] pyright[reportArgumentType]
