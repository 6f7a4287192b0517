"""An int passed as `loss`, with metadata (so the metadata overload is the one that is checked)."""

from torch import Tensor

from lightning_step_types import ValStepResult


def step_result(correct: int, preds: Tensor) -> ValStepResult:
    result: ValStepResult = ValStepResult(loss=correct, metadata={"preds": preds})  # E: mypy[call-overload] pyright[reportArgumentType]
    return result
