"""Results are frozen dataclasses: `dataclasses.replace`, `fields` and `match` work on them."""

import dataclasses

from torch import Tensor
from typing_extensions import assert_type

from lightning_step_types import TrainStepResult, ValStepResult


def halve(result: TrainStepResult) -> TrainStepResult:
    return dataclasses.replace(result, loss=result.loss / 2)


def field_names(result: ValStepResult) -> list[str]:
    return [field.name for field in dataclasses.fields(result)]


def loss_of(result: TrainStepResult | ValStepResult) -> Tensor:
    match result:
        case TrainStepResult(loss=loss, batch_size=None):
            return loss
        case ValStepResult(loss, metadata, batch_size):
            assert_type(batch_size, int | None)
            return loss * len(metadata)
        case _:
            return result.loss
