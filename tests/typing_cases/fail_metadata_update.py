"""Mutating methods on a result's metadata (`update`, `pop`, `del`)."""

from torch import Tensor

from lightning_step_types import ValStepResult


def step_result(loss: Tensor, preds: Tensor) -> ValStepResult:
    result = ValStepResult(loss=loss, metadata={"preds": preds})
    result.metadata.update(target=preds)  # E: mypy[attr-defined] pyright[reportAttributeAccessIssue,reportUnknownMemberType]
    del result.metadata["preds"]  # E: mypy[attr-defined] pyright[reportIndexIssue]
    return result
