"""Assigning a misspelled attribute on a result (at runtime every result class refuses new attributes)."""

from torch import Tensor

from lightning_step_types import ValStepResult


def attach(result: ValStepResult, preds: Tensor) -> None:
    result.metdata = {"preds": preds}  # E: mypy[attr-defined] pyright[reportAttributeAccessIssue]
