"""A result is a read-only Mapping `{"loss": loss, **metadata}`: everything a Mapping offers type-checks."""

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor
from typing_extensions import assert_type

from lightning_step_types import StepResult, TrainStepResult, ValStepResult


def log_all(values: Mapping[str, Any]) -> list[str]:
    return sorted(values)


def use(loss: Tensor, logits: Tensor) -> None:
    result = TrainStepResult(loss=loss, metadata={"logits": logits})
    assert_type(result["loss"], Tensor)
    names = log_all(result)
    plain: dict[str, Any] = dict(result)
    copied: dict[str, Any] = result.copy()
    found = "logits" in result and len(result) == 2
    keys = [key for key in result]
    both: list[StepResult] = [result, ValStepResult(loss=torch.zeros(()))]
    print(names, plain, copied, found, keys, both, hash(result), result == plain)
