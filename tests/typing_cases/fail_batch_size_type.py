"""`batch_size` given as a float (e.g. from a mean): it must be an int or None."""

from torch import Tensor

from lightning_step_types import ValStepResult


def step_result(loss: Tensor, weights: Tensor) -> ValStepResult:
    return ValStepResult(loss=loss, batch_size=weights.sum().item())  # E: mypy[arg-type] pyright[reportArgumentType]
