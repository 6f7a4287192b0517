"""A misspelled option: progbar for prog_bar."""

from torchmetrics.classification import MulticlassAccuracy

from lightning_step_types import StepMetric

accuracy = StepMetric(MulticlassAccuracy(3), update=lambda result, batch: (result["logits"], batch[1]), progbar=True)  # E: mypy[call-overload] pyright[reportCallIssue,reportUnknownLambdaType]
