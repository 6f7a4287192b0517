"""A declared metric's value goes to ``self.log`` as it is; a collection's, narrowed, to ``self.log_dict``."""

from collections.abc import Mapping
from typing import Any

import torch
from torchmetrics import MaxMetric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy

from lightning_step_types import StepMetric, TypedLightningModule, declared_metric


class Classifier(TypedLightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(4, 3)
        self.val_acc_best = MaxMetric()

    def configure_step_metrics(self) -> Mapping[str, StepMetric[Any]]:
        return {
            "acc": StepMetric(MulticlassAccuracy(num_classes=3), update=lambda result, batch: (result.metadata["logits"], batch[1]), stages=("val",)),
            "scores": StepMetric(MetricCollection([MulticlassAccuracy(num_classes=3)]), update=lambda result, batch: (result.metadata["logits"], batch[1]), stages=("val",)),
        }

    def on_validation_epoch_end(self) -> None:
        # taught: docs/metrics.md
        self.val_acc_best(declared_metric(self, "acc", "val").compute())
        self.log("val/acc_best", self.val_acc_best.compute(), sync_dist=True, prog_bar=True)

        self.log("val_acc_now", declared_metric(self, "acc", "val").compute())
        self.log("val_acc_loader_1", declared_metric(self, "acc", "val", dataloader_idx=1).compute(), prog_bar=True)
        scores = declared_metric(self, "scores")
        if isinstance(scores, MetricCollection):
            self.log_dict(scores.compute())
