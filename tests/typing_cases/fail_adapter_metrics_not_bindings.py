"""StepResultAdapter(metrics=...) given a metric instead of a StepMetric."""

from torchmetrics.classification import MulticlassAccuracy

from lightning_step_types import StepResultAdapter

adapter = StepResultAdapter(metrics={"acc": MulticlassAccuracy(3)})  # E: mypy[dict-item] pyright[reportArgumentType]
