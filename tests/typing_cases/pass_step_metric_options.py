"""StepMetric's options: a MetricCollection, the progress bar, step values, a log name, stages as a list."""

from typing import Any

from torchmetrics import MeanMetric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score

from lightning_step_types import StepMetric

scores = StepMetric(
    MetricCollection([MulticlassAccuracy(3), MulticlassF1Score(3)], prefix="cls_"),
    update=lambda result, batch: (result["logits"], batch[1]),
    stages=["train", "val"],
    prog_bar=True,
    on_step=True,
    log_name="{stage}/{name}",
)
mean_loss = StepMetric(MeanMetric(), update=lambda result, batch: (result.loss,), stages=("val", "test"))
declared: dict[str, StepMetric[Any]] = {"scores": scores, "loss": mean_loss}
