"""Item assignment on the metadata of a result built from a dict variable (and of a bare TrainStepResult)."""

from torch import Tensor

from lightning_step_types import TrainStepResult


def step_result(loss: Tensor, logits: Tensor) -> TrainStepResult:
    extras: dict[str, Tensor] = {"logits": logits}
    result = TrainStepResult(loss, extras)
    result.metadata["probs"] = logits.softmax(-1)  # E: mypy[index] pyright[reportIndexIssue]
    return result


def in_a_hook(outputs: TrainStepResult, logits: Tensor) -> None:
    outputs.metadata["logits"] = logits  # E: mypy[index] pyright[reportIndexIssue]
