"""Item assignment on TypedDict metadata whose items are ReadOnly (the documented way to declare metadata)."""

from typing import TypedDict

from torch import Tensor
from typing_extensions import ReadOnly

from lightning_step_types import TrainStepResult


class TrainMeta(TypedDict):
    logits: ReadOnly[Tensor]


def rescale(outputs: TrainStepResult[TrainMeta]) -> None:
    outputs.metadata["logits"] = outputs.metadata["logits"] * 2  # E: mypy[typeddict-readonly-mutated] pyright[reportTypedDictNotRequiredAccess]
