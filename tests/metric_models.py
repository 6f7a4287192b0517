"""Models for the declared-metrics tests: one classifier, written three ways, in both Lightning flavours.

- ``Hand*``: the hand-written pattern the declared metrics must equal exactly: one torchmetrics
  object per stage and per validation loader, ``metric.update`` in the step, ``self.log(name, metric)``
  on every step (``metric(...)`` and ``on_step=True`` for training step values).
- ``Typed*``: a ``TypedLightningModule`` whose ``configure_step_metrics`` declares the same metric.
- ``Plain*``: an existing module returning dicts, for ``StepResultAdapter(metrics=...)``.

``kind`` picks the metric: ``"acc"`` (MulticlassAccuracy), ``"mse"`` (MeanSquaredError) or
``"scores"`` (a MetricCollection of accuracy and F1, which share a compute group).
The classes are module attributes so that spawned DDP processes can unpickle them.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import lightning.pytorch
import pytorch_lightning
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torchmetrics import MeanSquaredError, Metric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score

from lightning_step_types import StepMetric, TrainStepResult, ValStepResult
from lightning_step_types import lightning_pytorch as lst_lightning_pytorch
from lightning_step_types import pytorch_lightning as lst_pytorch_lightning

IN_FEATURES, CLASSES = 4, 3
KINDS = ("acc", "mse", "scores")


def make_metric(kind: str, prefix: str = "") -> Metric | MetricCollection:
    if kind == "acc":
        return MulticlassAccuracy(CLASSES)
    if kind == "mse":
        return MeanSquaredError()
    return MetricCollection([MulticlassAccuracy(CLASSES), MulticlassF1Score(CLASSES)], prefix=prefix or None)


def metric_arguments(kind: str, logits: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """What the step feeds the metric: class scores and labels, or a regression of the label."""
    if kind == "mse":
        return logits[:, 0], target.float()
    return logits, target


def dataset(seed: int, size: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(size, IN_FEATURES, generator=generator)
    return TensorDataset(x, torch.randint(0, CLASSES, (size,), generator=generator))


def loader(seed: int, size: int, batch_size: int) -> DataLoader[Any]:
    return DataLoader(dataset(seed, size), batch_size=batch_size)


def train_loader() -> DataLoader[Any]:
    return loader(0, 21, 4)  # 6 batches, the last of 1 sample


def val_loaders() -> list[DataLoader[Any]]:
    return [loader(1, 10, 4), loader(2, 7, 3)]  # uneven last batches, of different sizes


def final_loader() -> DataLoader[Any]:
    return loader(5, 9, 4)


class Parts:
    """Network, loss and optimizer shared by the three ways of writing the classifier."""

    kind: str
    on_step: bool
    net: torch.nn.Linear

    def build(self, kind: str, on_step: bool) -> None:
        self.kind, self.on_step = kind, on_step
        self.net = torch.nn.Linear(IN_FEATURES, CLASSES)
        generator = torch.Generator().manual_seed(0)
        with torch.no_grad():
            self.net.weight.copy_(torch.randn(self.net.weight.shape, generator=generator))
            self.net.bias.copy_(torch.randn(self.net.bias.shape, generator=generator))

    def forward_batch(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x, y = batch
        logits = self.net(x)
        return F.cross_entropy(logits, y), logits, y

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.net.parameters(), lr=0.5)


# --- the hand-written pattern ----------------------------------------------------------------------


def hand_init(self: Any, kind: str = "acc", on_step: bool = False) -> None:
    super(self._own_class, self).__init__()
    self.build(kind, on_step)
    prefixed = kind == "scores"
    self.train_metric = make_metric(kind, "train_" if prefixed else "")
    self.val_metrics = torch.nn.ModuleList([make_metric(kind, "val_" if prefixed else "") for _ in range(2)])
    self.test_metric = make_metric(kind, "test_" if prefixed else "")


def hand_log(self: Any, stage: str, metric: Any, on_step: bool) -> None:
    if isinstance(metric, MetricCollection):
        self.log_dict(metric, on_step=on_step, on_epoch=True, prog_bar=True)
    else:
        self.log(f"{stage}_{self.kind}", metric, on_step=on_step, on_epoch=True, prog_bar=True)


def hand_training_step(self: Any, batch: Any, batch_idx: int) -> Any:
    loss, logits, y = self.forward_batch(batch)
    arguments = metric_arguments(self.kind, logits.detach(), y)
    if self.on_step:
        self.train_metric(*arguments)
    else:
        self.train_metric.update(*arguments)
    hand_log(self, "train", self.train_metric, self.on_step)
    return loss


def hand_validation_step(self: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Any:
    loss, logits, y = self.forward_batch(batch)
    metric = self.val_metrics[dataloader_idx]
    metric.update(*metric_arguments(self.kind, logits, y))
    hand_log(self, "val", metric, False)
    return {"loss": loss}


def hand_test_step(self: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Any:
    loss, logits, y = self.forward_batch(batch)
    self.test_metric.update(*metric_arguments(self.kind, logits, y))
    hand_log(self, "test", self.test_metric, False)
    return {"loss": loss}


# --- declared metrics ------------------------------------------------------------------------------


def declared(kind: str, on_step: bool) -> dict[str, StepMetric[Any]]:
    """The same metric as the hand-written module, declared once."""
    if kind == "mse":
        update: Callable[[Any, Any], tuple[Any, ...]] = lambda result, batch: (result["logits"][:, 0], batch[1].float())
    else:
        update = lambda result, batch: (result["logits"], batch[1])
    return {kind: StepMetric(make_metric(kind), update=update, prog_bar=True, on_step=on_step)}


def typed_init(self: Any, kind: str = "acc", on_step: bool = False) -> None:
    super(self._own_class, self).__init__()
    self.build(kind, on_step)


def typed_configure_step_metrics(self: Any) -> dict[str, StepMetric[Any]]:
    return declared(self.kind, self.on_step)


def typed_training_step(self: Any, batch: Any, batch_idx: int) -> TrainStepResult:
    loss, logits, _ = self.forward_batch(batch)
    return TrainStepResult(loss=loss, metadata={"logits": logits.detach()})


def typed_eval_step(self: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> ValStepResult:
    loss, logits, _ = self.forward_batch(batch)
    return ValStepResult(loss=loss, metadata={"logits": logits})


# --- an existing module with dict returns, for StepResultAdapter(metrics=...) ----------------------


def plain_training_step(self: Any, batch: Any, batch_idx: int) -> Any:
    loss, logits, _ = self.forward_batch(batch)
    return {"loss": loss, "logits": logits.detach()}


def plain_eval_step(self: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Any:
    loss, logits, _ = self.forward_batch(batch)
    return {"loss": loss, "logits": logits}


def _build(name: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> type:
    cls = types.new_class(
        name, bases, exec_body=lambda ns: ns.update(namespace, __module__=__name__, __qualname__=name)
    )
    cls._own_class = cls  # for the zero-argument-free super() in the shared __init__s
    return cls


def _classes(prefix: str, pl: Any, lst: Any) -> dict[str, type]:
    common = {"_own_class": None}
    return {
        f"{prefix}Hand": _build(
            f"{prefix}Hand",
            (Parts, pl.LightningModule),
            {**common, "__init__": hand_init, "training_step": hand_training_step,
             "validation_step": hand_validation_step, "test_step": hand_test_step},
        ),
        f"{prefix}Typed": _build(
            f"{prefix}Typed",
            (Parts, lst.TypedLightningModule),
            {**common, "__init__": typed_init, "configure_step_metrics": typed_configure_step_metrics,
             "training_step": typed_training_step, "validation_step": typed_eval_step, "test_step": typed_eval_step},
        ),
        f"{prefix}Plain": _build(
            f"{prefix}Plain",
            (Parts, pl.LightningModule),
            {**common, "__init__": typed_init, "training_step": plain_training_step,
             "validation_step": plain_eval_step, "test_step": plain_eval_step},
        ),
    }  # fmt: skip


CLASSES_BY_FLAVOUR = {
    "pytorch_lightning": _classes("", pytorch_lightning, lst_pytorch_lightning),
    "lightning.pytorch": _classes("Lightning", lightning.pytorch, lst_lightning_pytorch),
}
for _classes_of_flavour in CLASSES_BY_FLAVOUR.values():
    globals().update(_classes_of_flavour)
