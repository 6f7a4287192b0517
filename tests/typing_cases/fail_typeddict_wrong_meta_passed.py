"""A result with one metadata type passed where another is expected (results are covariant, not interchangeable)."""

from typing import TypedDict

from torch import Tensor

from lightning_step_types import TrainStepResult


class TrainMeta(TypedDict):
    logits: Tensor


class OtherMeta(TypedDict):
    embeddings: Tensor


def read_logits(result: TrainStepResult[TrainMeta]) -> Tensor:
    return result.metadata["logits"]


def caller(result: TrainStepResult[OtherMeta]) -> Tensor:
    return read_logits(result)  # E: mypy[arg-type] pyright[reportArgumentType]
