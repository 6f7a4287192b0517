"""A result built without its `loss`."""

from torch import Tensor

from lightning_step_types import TrainStepResult


def step_result(logits: Tensor) -> TrainStepResult:
    result: TrainStepResult = TrainStepResult(metadata={"logits": logits})  # E: mypy[call-overload] pyright[reportCallIssue]
    return result
