"""Item assignment on the metadata of a result built from a dict literal.

Solved from a dict literal, the metadata type is `dict[str, Tensor]`; the stubs read it back as
`Mapping[str, Tensor]`, so the mutation that raises TypeError at runtime is a static error too.
"""

from torch import Tensor

from lightning_step_types import TrainStepResult


def step_result(loss: Tensor, logits: Tensor) -> TrainStepResult:
    result = TrainStepResult(loss=loss, metadata={"logits": logits})
    result.metadata["probs"] = logits.softmax(-1)  # E: mypy[index] pyright[reportIndexIssue]
    return result
