"""configure_step_metrics returning bare metrics instead of StepMetric bindings."""

from collections.abc import Mapping

from torchmetrics import Metric
from torchmetrics.classification import MulticlassAccuracy

from lightning_step_types import TypedLightningModule


class Classifier(TypedLightningModule):
    def configure_step_metrics(self) -> Mapping[str, Metric]:  # E: mypy[override] pyright[reportIncompatibleMethodOverride]
        return {"acc": MulticlassAccuracy(3)}
