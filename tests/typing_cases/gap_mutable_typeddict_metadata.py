"""Documented gap: TypedDict metadata WITHOUT ReadOnly items is mutable to both checkers.

A TypedDict's items are assignable unless declared ``ReadOnly[...]`` (PEP 705), and a result
reads its metadata back as the declared TypedDict, so neither checker flags the assignment
below. At runtime the metadata is a ``FrozenMetadata`` and the assignment raises ``TypeError``.
docs/typing.md therefore tells users to declare metadata TypedDicts with ``ReadOnly`` items
(fail_typeddict_readonly_item_assignment.py shows both checkers then catch it).
"""

from typing import TypedDict

from torch import Tensor

from lightning_step_types import TrainStepResult


class MutableMeta(TypedDict):
    logits: Tensor


def rescale(outputs: TrainStepResult[MutableMeta]) -> None:
    outputs.metadata["logits"] = outputs.metadata["logits"] * 2  # neither checker reports this (see docstring)
