"""A Python float passed as `loss` (e.g. after `.item()`): the loss must stay a tensor in the graph."""

from torch import Tensor

from lightning_step_types import TrainStepResult


def step_result(loss: Tensor) -> TrainStepResult:
    result: TrainStepResult = TrainStepResult(loss=loss.item())  # E: mypy[call-overload] pyright[reportArgumentType]
    return result
