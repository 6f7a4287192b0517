"""A plain function where a torchmetrics metric belongs."""

from torch import Tensor

from lightning_step_types import StepMetric


def accuracy(preds: Tensor, target: Tensor) -> Tensor:
    return (preds == target).float().mean()


bound = StepMetric(accuracy, update=lambda result, batch: (result["preds"], batch[1]))  # E: mypy[call-overload] pyright[reportArgumentType]
