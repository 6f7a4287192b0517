"""Declared metrics for an existing module: StepResultAdapter(metrics=...), and the metric objects by name."""

from typing import Any

from torch import Tensor
from torchmetrics import Metric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy
from typing_extensions import assert_type

from lightning_step_types import StepMetric, StepResultAdapter, ValStepResult


def from_legacy_dict(result: Any, batch: Any) -> tuple[Tensor, Tensor]:
    return result["preds"], batch[1]


adapter = StepResultAdapter(metrics={"acc": StepMetric(MulticlassAccuracy(3), update=from_legacy_dict)})
val_only: StepMetric[ValStepResult] = StepMetric(
    MulticlassAccuracy(3), update=lambda result, batch: (result.metadata["preds"], batch[1]), stages=("val",)
)
also_val = StepResultAdapter(strict=True, metrics={"acc": val_only})
assert_type(val_only.metric, Metric | MetricCollection)
