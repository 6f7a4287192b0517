"""Metadata built from a dict literal or variable reads back typed, as a read-only Mapping."""

from collections.abc import Mapping
from typing import Any

from torch import Tensor
from typing_extensions import assert_type

from lightning_step_types import FrozenMetadata, TrainStepResult, ValStepResult


def reads(loss: Tensor, logits: Tensor, labels: list[str]) -> None:
    from_literal = TrainStepResult(loss=loss, metadata={"logits": logits})
    assert_type(from_literal.metadata, Mapping[str, Tensor])
    assert_type(from_literal.metadata["logits"], Tensor)

    names = {"labels": labels}
    from_variable = ValStepResult(loss, names)
    assert_type(from_variable.metadata, Mapping[str, list[str]])

    without = TrainStepResult(loss=loss)
    assert_type(without, TrainStepResult)
    assert_type(without.metadata, Mapping[str, Any])

    frozen = FrozenMetadata({"logits": logits})
    from_frozen = TrainStepResult(loss=loss, metadata=frozen)
    assert_type(from_frozen.metadata, FrozenMetadata)
    mutable_copy: dict[str, object] = from_frozen.metadata.copy()
    mutable_copy["extra"] = 1
