"""A misspelled field name, read and passed as a keyword."""

from torch import Tensor

from lightning_step_types import TrainStepResult


def log_value(result: TrainStepResult) -> Tensor:
    if result.los is None:  # E: mypy[attr-defined] pyright[reportAttributeAccessIssue,reportUnknownMemberType]
        raise ValueError("no loss")
    return result.loss


def build(loss: Tensor, logits: Tensor) -> TrainStepResult:
    result: TrainStepResult = TrainStepResult(loss=loss, meta={"logits": logits})  # E: mypy[call-overload] pyright[reportCallIssue]
    return result
