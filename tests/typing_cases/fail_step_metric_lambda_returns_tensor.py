"""A lambda binding returns one tensor instead of a tuple."""

from torchmetrics import MeanMetric

from lightning_step_types import StepMetric

mean_loss = StepMetric(MeanMetric(), update=lambda result, batch: result.loss)  # E: mypy[arg-type,return-value] pyright[reportArgumentType]
