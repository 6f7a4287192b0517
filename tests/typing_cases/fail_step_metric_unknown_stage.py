"""A stage name Lightning users write but the binding does not know ("validation" for "val")."""

from torchmetrics.classification import MulticlassAccuracy

from lightning_step_types import StepMetric

accuracy = StepMetric(MulticlassAccuracy(3), update=lambda r, b: (r["logits"], b[1]), stages=("train", "validation"))  # E: mypy[arg-type] pyright[reportCallIssue,reportArgumentType]
