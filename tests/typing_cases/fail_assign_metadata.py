"""Replacing a result's `metadata`: results are frozen."""

from torch import Tensor

from lightning_step_types import TrainStepResult


def relabel(result: TrainStepResult, logits: Tensor) -> None:
    result.metadata = {"logits": logits}  # E: mypy[assignment] pyright[reportAttributeAccessIssue]
