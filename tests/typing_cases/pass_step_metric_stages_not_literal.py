"""Stages as a list, a module constant, or read from a config: accepted, and typed as far as they are known.

A list of literals reads like the tuple (``["val"]``: a ``ValStepResult``). Stages that are not
literals (``tuple[str, ...]`` from a config, a ``Sequence[str]``, a constant mypy widens to
``tuple[str, str]``) give the general ``StepResult``; unknown names are refused at setup.
"""

from collections.abc import Mapping, Sequence
from typing import Any

from torch import Tensor
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy
from typing_extensions import assert_type

from lightning_step_types import StepMetric, StepResult, TypedLightningModule, ValStepResult, declared_metric

VAL_STAGES = ("val", "test")


def val_scores(result: ValStepResult, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
    return result.metadata["logits"], batch[1]


def any_scores(result: StepResult, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
    return result.metadata["logits"], batch[1]


from_a_list = StepMetric(MulticlassAccuracy(3), update=val_scores, stages=["val"])
assert_type(from_a_list, StepMetric[ValStepResult[Any]])
from_a_constant = StepMetric(MulticlassAccuracy(3), update=lambda r, b: (r.metadata["logits"], b[1]), stages=VAL_STAGES)


def from_config(stages: tuple[str, ...], more: Sequence[str]) -> Mapping[str, StepMetric[Any]]:
    accuracy = StepMetric(MulticlassAccuracy(3), update=any_scores, stages=stages)
    assert_type(accuracy, StepMetric[StepResult[Any]])
    loss = StepMetric(MeanMetric(), update=lambda r, b: (r.loss, b[1].shape[0]), stages=more)
    return {"acc": accuracy, "loss": loss}


step_only = StepMetric(MulticlassAccuracy(3), update=lambda r, b: (r.metadata["logits"], b[1]), on_step=True, on_epoch=False)


class Classifier(TypedLightningModule):
    def configure_step_metrics(self) -> Mapping[str, StepMetric[Any]]:
        return {"acc": from_a_list, "step_acc": step_only}

    def on_validation_epoch_end(self) -> None:
        assert_type(declared_metric(self, "acc", "val"), Any)  # a Metric or a MetricCollection, as declared
