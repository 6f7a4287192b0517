"""Metric state the module holds, across a resume (lightning_step_types/resume/metric_state.py).

torchmetrics keeps a metric's states out of ``state_dict()``, so Lightning's checkpoint does not
carry them. These tests run the two patterns that depend on them, uninterrupted and faulted then
resumed, and compare every logged value:

- the best-value recipe of docs/metrics.md (a ``MaxMetric`` reset in ``on_train_start``, fed by the
  declared validation accuracy), with the fault in the epoch after the best value;
- a metric updated in ``training_step`` and computed by hand in ``on_train_epoch_end``, held as an
  attribute, in a nested dict, or in a plain helper object, both ways in.

``exact_resume=False`` is plain Lightning's behaviour, the reference that shows what was lost.
"""

from __future__ import annotations

import csv
import types
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from models import assert_same_params, trainer_kwargs
from pytorch_lightning.callbacks import ModelCheckpoint, OnExceptionCheckpoint
from pytorch_lightning.loggers import CSVLogger
from torchdata.stateful_dataloader import StatefulDataLoader
from torchmetrics import MaxMetric, MeanSquaredError, Metric
from torchmetrics.classification import MulticlassAccuracy

from lightning_step_types import (
    StepMetric,
    StepResultAdapter,
    StepResultWarning,
    TrainStepResult,
    TypedLightningModule,
    ValStepResult,
    declared_metric,
    not_resumed,
)


class SimulatedFault(RuntimeError):
    """Stands for an out-of-memory error in a training step."""


def _rows(root: Path) -> list[dict[str, str]]:
    with open(root / "csv" / "version_0" / "metrics.csv", newline="") as file:
        return [{key: value for key, value in row.items() if value != ""} for row in csv.DictReader(file)]


def _column(rows: list[dict[str, str]], key: str) -> list[float]:
    return [float(row[key]) for row in rows if key in row]


def _step_result_warnings(call: Callable[[], Any]) -> tuple[Any, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = call()
    return result, [str(w.message) for w in caught if issubclass(w.category, StepResultWarning)]


# --- the best-value recipe (docs/metrics.md, "Tracking the best value so far") --------------------

CLASSES, FEATURES = 3, 4
EPOCHS, FAULT_EPOCH, FAULT_BATCH = 4, 2, 3


def _classification(seed: int, rows: int) -> torch.utils.data.TensorDataset:
    """Three classes from a noisy linear score: the validation accuracy goes up and down with lr=6."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, FEATURES, generator=generator)
    weights = torch.tensor([[1.0, -1.0, 0.5], [0.5, 1.0, -1.0], [-1.0, 0.5, 1.0], [0.2, 0.2, 0.2]])
    y = (x @ weights + 0.8 * torch.randn(rows, CLASSES, generator=generator)).argmax(dim=1)
    return torch.utils.data.TensorDataset(x, y)


class Classifier(TypedLightningModule):
    """The recipe as docs/metrics.md shows it, with steps, data and a fault around it."""

    def __init__(self, fault: bool = False, exact_resume: bool = True) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Linear(FEATURES, CLASSES)
        self.val_acc_best = MaxMetric()
        self.fault, self.exact_resume = fault, exact_resume

    def configure_step_metrics(self) -> Mapping[str, StepMetric[Any]]:
        return {
            "acc": StepMetric(
                MulticlassAccuracy(num_classes=3),
                update=lambda result, batch: (result.metadata["logits"], batch[1]),
                stages=("val",),
                log_name="{stage}/{name}",
            )
        }

    def on_train_start(self) -> None:
        self.val_acc_best.reset()  # the sanity check's value does not count

    def on_validation_epoch_end(self) -> None:
        self.val_acc_best(declared_metric(self, "acc", "val").compute())
        self.log("val/acc_best", self.val_acc_best.compute(), sync_dist=True, prog_bar=True)

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        if self.fault and (self.trainer.current_epoch, batch_idx) == (FAULT_EPOCH, FAULT_BATCH):
            self.fault = False
            raise SimulatedFault("out of memory")
        x, y = batch
        return TrainStepResult(loss=F.cross_entropy(self.net(x), y))

    def validation_step(self, batch: Any, batch_idx: int) -> ValStepResult:
        x, y = batch
        logits = self.net(x)
        return ValStepResult(loss=F.cross_entropy(logits, y), metadata={"logits": logits})

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=6.0)  # large steps: the accuracy goes up and down


STEPS_BEFORE_FAULT = FAULT_EPOCH * 6 + FAULT_BATCH  # 6 batches an epoch: the checkpoint before the fault's batch


def _fit_classifier(root: Path, module: Classifier, ckpt_path: Path | None = None) -> pl.Trainer:
    """A fit that saves every 3 steps (``ModelCheckpoint``), and on the fault (``OnExceptionCheckpoint``)."""
    callbacks: list[pl.Callback] = [
        ModelCheckpoint(root / "every", every_n_train_steps=3, save_top_k=-1, filename="{step}")
    ]
    if module.fault:
        callbacks.append(OnExceptionCheckpoint(root))
    kwargs = trainer_kwargs(
        root,
        max_epochs=EPOCHS,
        callbacks=callbacks,
        logger=CSVLogger(root, name="csv", version=0),
        log_every_n_steps=1,
        enable_checkpointing=True,
        num_sanity_val_steps=2,
    )
    trainer = pl.Trainer(**kwargs)
    train = StatefulDataLoader(_classification(0, 24), batch_size=4)
    val = StatefulDataLoader(_classification(1, 12), batch_size=4)
    trainer.fit(module, train, val, ckpt_path=ckpt_path)
    return trainer


def _resumed_classifier(tmp_path: Path, how: str, exact_resume: bool) -> tuple[pl.Trainer, list[str]]:
    """Resumed from the fault's checkpoint: an exception's, or the last ``every_n_train_steps`` one before it."""
    with pytest.raises(SimulatedFault):
        _fit_classifier(tmp_path / "faulty", Classifier(fault=True, exact_resume=exact_resume))
    ckpt = "on_exception.ckpt" if how == "exception" else f"every/step={STEPS_BEFORE_FAULT}.ckpt"
    return _step_result_warnings(
        lambda: _fit_classifier(tmp_path / "resumed", Classifier(exact_resume=exact_resume), tmp_path / "faulty" / ckpt)
    )


@pytest.mark.parametrize("how", ["exception", "every_n_train_steps"])
def test_the_best_value_recipe_resumes_exactly_after_a_fault_in_the_epoch_after_the_best(
    how: str, tmp_path: Path
) -> None:
    full = _fit_classifier(tmp_path / "full", Classifier())
    accuracy, best = _column(_rows(tmp_path / "full"), "val/acc"), _column(_rows(tmp_path / "full"), "val/acc_best")
    # the case the recipe exists for: the best epoch is the one before the fault's, and the fault's is worse
    assert len(accuracy) == EPOCHS and accuracy.index(max(accuracy)) == FAULT_EPOCH - 1
    assert accuracy[FAULT_EPOCH] < max(accuracy) and best == [max(accuracy[: n + 1]) for n in range(EPOCHS)]

    resumed, warned = _resumed_classifier(tmp_path, how, exact_resume=True)
    assert warned == []
    assert_same_params(resumed.lightning_module, full.lightning_module)
    assert (
        resumed.callback_metrics["val/acc_best"].item() == full.callback_metrics["val/acc_best"].item() == max(accuracy)
    )
    resumed_rows = _rows(tmp_path / "resumed")
    assert resumed_rows == _rows(tmp_path / "full")[-len(resumed_rows) :]
    assert _column(resumed_rows, "val/acc_best") == best[FAULT_EPOCH:]


def test_without_exact_resume_the_recipe_forgets_the_best_value_as_plain_lightning_does(tmp_path: Path) -> None:
    full = _fit_classifier(tmp_path / "full", Classifier())
    accuracy = _column(_rows(tmp_path / "full"), "val/acc")
    resumed, _ = _resumed_classifier(tmp_path, "every_n_train_steps", exact_resume=False)
    # the weights and the epochs' accuracies are exact (Lightning restores them from a batch's end);
    # the best value covers the resumed epochs only
    assert_same_params(resumed.lightning_module, full.lightning_module)
    assert _column(_rows(tmp_path / "resumed"), "val/acc") == accuracy[FAULT_EPOCH:]
    assert resumed.callback_metrics["val/acc_best"].item() == max(accuracy[FAULT_EPOCH:]) < max(accuracy)


# --- a metric updated in the steps and computed by hand at the epoch's end -------------------------

HOLDERS = ["attribute", "nested dict", "plain object"]


class HandComputed:
    """Updates a ``MeanSquaredError`` in each step; computes, logs and resets it at the epoch's end."""

    def __init__(self, holder: str, fault: bool, exact_resume: bool, opted_out: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(3, 1)
        mse = not_resumed(MeanSquaredError()) if opted_out else MeanSquaredError()
        if holder == "attribute":
            self.train_mse = mse
        elif holder == "nested dict":
            self.scores = {"train": {"mse": mse}}
        else:
            self.scores = types.SimpleNamespace(mse=mse)
        self.holder, self.fault, self.exact_resume = holder, fault, exact_resume

    def mse(self) -> Metric:
        if self.holder == "attribute":
            return self.train_mse
        return self.scores["train"]["mse"] if self.holder == "nested dict" else self.scores.mse

    def step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.fault and (getattr(self, "trainer").current_epoch, batch_idx) == (1, 4):
            self.fault = False
            raise SimulatedFault("out of memory")
        x, y = batch
        preds = self.layer(x)
        metric = self.mse()
        metric.to(preds.device)
        metric.update(preds.detach(), y)
        return F.mse_loss(preds, y)

    def on_train_epoch_end(self) -> None:
        getattr(self, "log")("train_mse_by_hand", self.mse().compute())
        self.mse().reset()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


class TypedHandComputed(HandComputed, TypedLightningModule):
    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        return TrainStepResult(loss=self.step(batch, batch_idx))


class PlainHandComputed(HandComputed, pl.LightningModule):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.step(batch, batch_idx)


def _regression(rows: int = 32) -> torch.utils.data.TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(rows, 3, generator=generator)
    return torch.utils.data.TensorDataset(
        x, x.sum(dim=1, keepdim=True) + 0.1 * torch.randn(rows, 1, generator=generator)
    )


def _fit_hand_computed(root: Path, module: HandComputed, way: str, ckpt_path: Path | None = None) -> pl.Trainer:
    callbacks: list[pl.Callback] = [
        ModelCheckpoint(root / "every", every_n_train_steps=2, save_top_k=-1, filename="{step}")
    ]
    if module.fault:
        callbacks.append(OnExceptionCheckpoint(root))
    if way == "adapter":
        callbacks.append(StepResultAdapter(exact_resume=module.exact_resume))
    kwargs = trainer_kwargs(
        root,
        max_epochs=2,
        callbacks=callbacks,
        logger=CSVLogger(root, name="csv", version=0),
        log_every_n_steps=1,
        enable_checkpointing=True,
    )
    trainer = pl.Trainer(**kwargs)
    trainer.fit(module, StatefulDataLoader(_regression(), batch_size=4), ckpt_path=ckpt_path)
    return trainer


def _hand_computed(
    way: str, holder: str, *, fault: bool = False, exact_resume: bool = True, opted_out: bool = False
) -> HandComputed:
    cls = TypedHandComputed if way == "typed" else PlainHandComputed
    module = cls(holder, fault, exact_resume, opted_out)
    if way == "typed":
        module.exact_resume = exact_resume
    return module


def _hand_computed_after_a_fault(
    tmp_path: Path, way: str, holder: str, ckpt: str = "on_exception.ckpt", **options: Any
) -> tuple[float, list[str]]:
    with pytest.raises(SimulatedFault):
        _fit_hand_computed(tmp_path / "faulty", _hand_computed(way, holder, fault=True, **options), way)
    resumed, warned = _step_result_warnings(
        lambda: _fit_hand_computed(
            tmp_path / "resumed", _hand_computed(way, holder, **options), way, tmp_path / "faulty" / ckpt
        )
    )
    return resumed.callback_metrics["train_mse_by_hand"].item(), warned


@pytest.mark.parametrize("holder", HOLDERS)
@pytest.mark.parametrize("way", ["typed", "adapter"])
def test_a_metric_computed_by_hand_at_the_epoch_s_end_resumes_exactly(way: str, holder: str, tmp_path: Path) -> None:
    full = _fit_hand_computed(tmp_path / "full", _hand_computed(way, holder), way)
    expected = full.callback_metrics["train_mse_by_hand"].item()
    value, warned = _hand_computed_after_a_fault(tmp_path, way, holder)
    assert warned == []
    assert value == expected
    resumed_rows = _rows(tmp_path / "resumed")
    assert resumed_rows == _rows(tmp_path / "full")[-len(resumed_rows) :]


@pytest.mark.parametrize("way", ["typed", "adapter"])
def test_without_exact_resume_or_opted_out_the_hand_computed_value_covers_the_resumed_batches_only(
    way: str, tmp_path: Path
) -> None:
    full = _fit_hand_computed(tmp_path / "full", _hand_computed(way, "attribute"), way)
    expected = full.callback_metrics["train_mse_by_hand"].item()
    before_fault = "every/step=12.ckpt"  # epoch 1's batches 0 to 3 done (8 batches an epoch); the fault is in batch 4
    plain, _ = _hand_computed_after_a_fault(tmp_path / "plain", way, "attribute", before_fault, exact_resume=False)
    opted_out, warned = _hand_computed_after_a_fault(
        tmp_path / "opted_out", way, "attribute", before_fault, opted_out=True
    )
    exact, _ = _hand_computed_after_a_fault(tmp_path / "exact", way, "attribute", before_fault)
    # epoch 1's batches 4 to 7 only, in both: plain Lightning's behaviour, and what not_resumed() asks for
    assert plain == opted_out != expected == exact
    assert warned == []


class MicroAccuracyClassifier(Classifier):
    """The same module, its declared accuracy now micro-averaged: the same metric class, other state shapes."""

    def configure_step_metrics(self) -> Mapping[str, StepMetric[Any]]:
        return {
            "acc": StepMetric(
                MulticlassAccuracy(num_classes=3, average="micro"),
                update=lambda result, batch: (result.metadata["logits"], batch[1]),
                stages=("val",),
                log_name="{stage}/{name}",
            )
        }


def test_a_metric_whose_states_no_longer_fit_starts_fresh_named_in_one_warning(tmp_path: Path) -> None:
    with pytest.raises(SimulatedFault):
        _fit_classifier(tmp_path / "faulty", Classifier(fault=True))
    resumed, warned = _step_result_warnings(
        lambda: _fit_classifier(
            tmp_path / "resumed", MicroAccuracyClassifier(), tmp_path / "faulty" / "on_exception.ckpt"
        )
    )
    assert len(warned) == 1, warned
    assert warned[0].startswith(f"MicroAccuracyClassifier: resuming epoch {FAULT_EPOCH} at batch {FAULT_BATCH}\n")
    assert (
        "these start fresh: metric 'declared val/acc' (torchmetrics.classification.accuracy.MulticlassAccuracy)"
        in warned[0]
    )
    # the rest is restored: the best value goes on from the checkpoint's
    assert resumed.callback_metrics["val/acc_best"].item() >= torch.tensor(7 / 9).item()  # epoch 1's 7 of 9
