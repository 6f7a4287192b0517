"""Real loggers: a typed run writes the same CSV rows and TensorBoard scalars as the equivalent plain run.

The typed module gets its loss metrics from ``log_loss`` and logs one extra metric with ``self.log``; the
plain module writes all of it with ``self.log``. Both runs use the same seed and data, log through a
``CSVLogger`` and a ``TensorBoardLogger`` at once, and everything is read back from disk.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from models import RegressorParts, assert_same_params, make_dataset, trainer_kwargs
from pytorch_lightning.loggers import CSVLogger, TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch.utils.data import DataLoader

from lightning_step_types import StepResultAdapter, TrainStepResult, TypedLightningModule, ValStepResult


def uneven_loader(seed: int) -> DataLoader[Any]:
    """10 samples in batches of 4, 4, 2."""
    return DataLoader(make_dataset(seed, n_batches=5, batch_size=2), batch_size=4, shuffle=False)


def mae(preds: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.l1_loss(preds, y)


class PlainLogged(RegressorParts, pl.LightningModule):
    """The reference: every metric through ``self.log``, the loss calls as ``LossLogging`` documents them."""

    def __init__(self) -> None:
        super().__init__()
        self.build(seed=0, lr=0.1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss, preds = self.loss_and_preds(batch)
        self.log("train_mae", mae(preds, batch[1]))
        self.log("train_loss", loss, on_step=True, on_epoch=True, prog_bar=True, batch_size=len(preds))
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        loss, preds = self.loss_and_preds(batch)
        self.log("val_mae", mae(preds, batch[1]))
        self.log("val_loss", loss, on_step=False, on_epoch=True, prog_bar=True, batch_size=len(preds))

    def test_step(self, batch: Any, batch_idx: int) -> None:
        loss, preds = self.loss_and_preds(batch)
        self.log("test_loss", loss, on_step=False, on_epoch=True, prog_bar=True, batch_size=len(preds))


def typed_training_step(self: Any, batch: Any, batch_idx: int) -> TrainStepResult:
    loss, preds = self.loss_and_preds(batch)
    self.log("train_mae", mae(preds, batch[1]))
    return TrainStepResult(loss=loss, batch_size=len(preds))


def typed_validation_step(self: Any, batch: Any, batch_idx: int) -> ValStepResult:
    loss, preds = self.loss_and_preds(batch)
    self.log("val_mae", mae(preds, batch[1]))
    return ValStepResult(loss=loss, batch_size=len(preds))


def typed_test_step(self: Any, batch: Any, batch_idx: int) -> ValStepResult:
    loss, preds = self.loss_and_preds(batch)
    return ValStepResult(loss=loss, batch_size=len(preds))


class TypedLogged(RegressorParts, TypedLightningModule):
    """The loss metrics come from ``log_loss``; the module logs only its extra metrics."""

    log_loss = True
    training_step = typed_training_step
    validation_step = typed_validation_step
    test_step = typed_test_step

    def __init__(self) -> None:
        super().__init__()
        self.build(seed=0, lr=0.1)


class PlainReturningTyped(RegressorParts, pl.LightningModule):
    """The same steps in a plain module, for ``StepResultAdapter(log_loss=True)``."""

    training_step = typed_training_step
    validation_step = typed_validation_step
    test_step = typed_test_step

    def __init__(self) -> None:
        super().__init__()
        self.build(seed=0, lr=0.1)


class LoggedRun:
    """fit (2 epochs) and test, logging to CSV and TensorBoard under ``root``."""

    def __init__(self, model: pl.LightningModule, root: Path, callbacks: list[pl.Callback] = []) -> None:  # noqa: B006
        csv_logger = CSVLogger(str(root), name="csv", version=0)
        tb_logger = TensorBoardLogger(str(root), name="tb", version=0, default_hp_metric=False)
        trainer = pl.Trainer(
            **trainer_kwargs(root, max_epochs=2, log_every_n_steps=1, logger=[csv_logger, tb_logger]),
            callbacks=list(callbacks),
        )
        trainer.fit(model, uneven_loader(0), uneven_loader(1))
        trainer.test(model, uneven_loader(2), verbose=False)
        self.model = model
        self.csv_path = Path(csv_logger.log_dir) / "metrics.csv"
        self.tb_dir = Path(tb_logger.log_dir)

    def csv_rows(self) -> list[dict[str, str]]:
        with self.csv_path.open(newline="") as file:
            return list(csv.DictReader(file))

    def scalars(self) -> dict[str, list[tuple[int, float]]]:
        """Every TensorBoard scalar as ``tag -> [(step, value), ...]``, read from the event files."""
        accumulator = EventAccumulator(str(self.tb_dir), size_guidance={"scalars": 0})  # 0: keep every event
        accumulator.Reload()
        return {
            tag: [(event.step, event.value) for event in accumulator.Scalars(tag)]
            for tag in accumulator.Tags()["scalars"]
        }


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory: pytest.TempPathFactory) -> LoggedRun:
    return LoggedRun(PlainLogged(), tmp_path_factory.mktemp("plain"))


TAGS = ["epoch", "test_loss", "train_loss_epoch", "train_loss_step", "train_mae", "val_loss", "val_mae"]


@pytest.mark.parametrize(
    "make_run",
    [
        pytest.param(lambda root: LoggedRun(TypedLogged(), root), id="TypedLightningModule"),
        pytest.param(
            lambda root: LoggedRun(PlainReturningTyped(), root, [StepResultAdapter(log_loss=True)]),
            id="StepResultAdapter",
        ),
    ],
)
def test_csv_and_tensorboard_files_match_plain_lightning(make_run: Any, plain_run: LoggedRun, tmp_path: Path) -> None:
    typed_run = make_run(tmp_path)
    assert_same_params(typed_run.model, plain_run.model)

    # CSV: the same file, byte for byte, with a row per step (6) plus epoch-level rows
    assert typed_run.csv_path.read_text() == plain_run.csv_path.read_text()
    rows = typed_run.csv_rows()
    assert sorted(rows[0]) == sorted(["step", *TAGS])
    assert [row["step"] for row in rows if row["train_loss_step"]] == ["0", "1", "2", "3", "4", "5"]
    assert [row["step"] for row in rows if row["val_loss"]] == ["2", "5"]
    assert [row["step"] for row in rows if row["train_loss_epoch"]] == ["2", "5"]
    assert [row["step"] for row in rows if row["test_loss"]] == ["6"]

    # TensorBoard: the same tags, steps and values
    typed_scalars, plain_scalars = typed_run.scalars(), plain_run.scalars()
    assert sorted(typed_scalars) == sorted(plain_scalars) == TAGS
    for tag in TAGS:
        assert typed_scalars[tag] == plain_scalars[tag], tag
    assert [step for step, _ in typed_scalars["train_loss_step"]] == [0, 1, 2, 3, 4, 5]
    assert [step for step, _ in typed_scalars["val_loss"]] == [2, 5]

    # Both files hold the same numbers: the float32 values Lightning logged
    for tag in TAGS:
        assert [(int(row["step"]), float(row[tag])) for row in rows if row[tag]] == typed_scalars[tag], tag


def _mock_run(root: Path, adapted: bool) -> tuple[list[Any], list[str], set[str]]:
    """A fit with a ``unittest.mock.Mock`` logger and ``Mock(spec=Callback)``, as Lightning's own tests
    write them: the rows the logger got, the hooks the callback got, and what the fit left on them."""
    from unittest.mock import Mock

    logger = Mock()
    logger.save_dir = str(root)
    callback = Mock(spec=pl.Callback, model=pl.Callback())
    callbacks: list[Any] = [callback, StepResultAdapter()] if adapted else [callback]
    trainer = pl.Trainer(**trainer_kwargs(root, logger=logger, callbacks=callbacks, max_epochs=2, log_every_n_steps=1))
    from models import PlainRegressor, make_loader

    trainer.fit(PlainRegressor(), make_loader(), make_loader(seed=1))
    # each row with how it was passed (Lightning passes metrics= and step= by keyword)
    rows = [
        (sorted(call.kwargs), len(call.args), sorted(call.kwargs["metrics"])) for call in logger.log_metrics.mock_calls
    ]
    # the adapter reads a stateful callback's state_dict() at each resume point's start: its only other call
    hooks = [name for name, _, _ in callback.method_calls if not (adapted and name == "state_dict")]
    return rows, hooks, set(vars(logger)) | set(vars(callback))


def test_mock_logger_and_callback_are_left_as_plain_lightning_leaves_them(tmp_path: Path) -> None:
    """Lightning's tests read ``logger.log_metrics.mock_calls`` and a Mock callback's ``method_calls``
    after a fit; a Mock records a deleted attribute and raises on it afterwards, so exact resume's
    row recorder and hook wrappers must come off without deleting anything the Mock knows of."""
    plain_rows, plain_hooks, plain_attributes = _mock_run(tmp_path / "plain", adapted=False)
    rows, hooks, attributes = _mock_run(tmp_path / "adapted", adapted=True)
    assert len(rows) == len(plain_rows) > 0
    assert rows == plain_rows and rows[0][:2] == (["metrics", "step"], 0)
    assert hooks == plain_hooks and "on_validation_end" in hooks and "on_train_epoch_end" in hooks
    assert attributes == plain_attributes
