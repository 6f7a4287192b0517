"""``log_loss``: the adapter's loss logging gives exactly what the equivalent explicit ``self.log`` calls give.

Every comparison runs a typed module and a plain ``LightningModule`` that writes the ``self.log`` call
``LossLogging`` documents, on the same data, and compares ``callback_metrics``, ``logged_metrics``,
``progress_bar_metrics`` (at every batch and epoch end) and the ``CSVLogger`` file bit for bit.
The data has an uneven last batch (10 samples in batches of 4) and two validation dataloaders, so
batch-size weighting and the ``/dataloader_idx_N`` keys are exercised.
"""

from __future__ import annotations

import csv
import warnings
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import pytorch_lightning.utilities.data as lightning_data
import torch
import torch.nn.functional as F
from models import RegressorParts, assert_same_metrics, make_dataset, trainer_kwargs
from pytorch_lightning.callbacks import EarlyStopping, ModelCheckpoint
from pytorch_lightning.loggers import CSVLogger
from torch.utils.data import DataLoader

from lightning_step_types import (
    LossLogging,
    StepResultAdapter,
    StepResultError,
    TrainStepResult,
    TypedLightningModule,
    ValStepResult,
)

DEFAULT_NAMES = LossLogging()
CUSTOM_NAMES = LossLogging(train="loss", val=None, test="holdout_loss", prog_bar=False)
AMBIGUOUS = "Trying to infer the `batch_size` from an ambiguous collection"


# --- data: 10 samples in batches of 4 (4, 4, 2) -------------------------------------------------


def uneven_loader(seed: int = 0, n_samples: int = 10, collate_fn: Any = None) -> DataLoader[Any]:
    dataset = make_dataset(seed, n_batches=n_samples // 2, batch_size=2)
    return DataLoader(dataset, batch_size=4, shuffle=False, collate_fn=collate_fn)


def val_loaders(collate_fn: Any = None) -> list[DataLoader[Any]]:
    """Two validation dataloaders of different lengths: keys get ``/dataloader_idx_N``."""
    return [uneven_loader(seed=1, collate_fn=collate_fn), uneven_loader(seed=2, n_samples=6, collate_fn=collate_fn)]


def dict_collate(samples: list[tuple[torch.Tensor, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """A dict batch whose first tensor is not per-sample: Lightning infers 5 and warns of ambiguity."""
    return {
        "mask": torch.ones(5, dtype=torch.bool),
        "x": torch.stack([x for x, _ in samples]),
        "y": torch.stack([y for _, y in samples]),
    }


def xy(batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    if isinstance(batch, dict):
        return batch["x"], batch["y"]
    return batch[0], batch[1]


# --- models -------------------------------------------------------------------------------------


class LossParts(RegressorParts):
    """Loss computation shared by every model here; ``state_batch_size`` says whether the step names it."""

    state_batch_size: bool

    def setup_parts(self, state_batch_size: bool) -> None:
        self.build(seed=0, lr=0.1)
        self.state_batch_size = state_batch_size

    def loss_and_size(self, batch: Any) -> tuple[torch.Tensor, int | None]:
        x, y = xy(batch)
        return F.mse_loss(self(x), y), (len(x) if self.state_batch_size else None)  # type: ignore[operator]


class ExplicitLogging(LossParts, pl.LightningModule):
    """The reference: a plain module writing the ``self.log`` calls that ``LossLogging`` documents."""

    def __init__(self, names: LossLogging = DEFAULT_NAMES, state_batch_size: bool = True) -> None:
        super().__init__()
        self.setup_parts(state_batch_size)
        self.names = names

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss, batch_size = self.loss_and_size(batch)
        if self.names.train is not None:
            self.log(
                self.names.train, loss, on_step=True, on_epoch=True, prog_bar=self.names.prog_bar, batch_size=batch_size
            )
        return loss

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> dict[str, torch.Tensor]:
        loss, batch_size = self.loss_and_size(batch)
        if self.names.val is not None:
            self.log(
                self.names.val, loss, on_step=False, on_epoch=True, prog_bar=self.names.prog_bar, batch_size=batch_size
            )
        return {"loss": loss}

    def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> dict[str, torch.Tensor]:
        loss, batch_size = self.loss_and_size(batch)
        if self.names.test is not None:
            self.log(
                self.names.test, loss, on_step=False, on_epoch=True, prog_bar=self.names.prog_bar, batch_size=batch_size
            )
        return {"loss": loss}


class TypedSteps(LossParts):
    """Steps returning typed results and never calling ``self.log``."""

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        loss, batch_size = self.loss_and_size(batch)
        return TrainStepResult(loss=loss, batch_size=batch_size)

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> ValStepResult:
        loss, batch_size = self.loss_and_size(batch)
        return ValStepResult(loss=loss, batch_size=batch_size)

    def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> ValStepResult:
        loss, batch_size = self.loss_and_size(batch)
        return ValStepResult(loss=loss, batch_size=batch_size)


class TypedLossModel(TypedSteps, TypedLightningModule):
    """The typed module, logging nothing unless told to."""

    def __init__(self, state_batch_size: bool = True) -> None:
        super().__init__()
        self.setup_parts(state_batch_size)


class TypedLogsInInit(TypedLossModel):
    """``self.log_loss = ...`` in ``__init__``."""

    def __init__(self, names: LossLogging | bool = True, state_batch_size: bool = True) -> None:
        super().__init__(state_batch_size)
        self.log_loss = names


class TypedLogsOnClass(TypedLossModel):
    """``log_loss = True`` as a class attribute."""

    log_loss = True


class TypedCustomNamesOnClass(TypedLogsOnClass):
    log_loss = CUSTOM_NAMES


class PlainTypedSteps(TypedSteps, pl.LightningModule):
    """A plain ``LightningModule`` returning typed results, for ``StepResultAdapter(log_loss=...)``."""

    def __init__(self, state_batch_size: bool = True) -> None:
        super().__init__()
        self.setup_parts(state_batch_size)


class PlainLegacySteps(LossParts, pl.LightningModule):
    """A plain module returning Lightning's own values, as ``returns`` says: a loss Tensor, or a dict
    ``{"loss": loss, "preds": preds}`` (in every stage)."""

    def __init__(self, returns: str = "tensor") -> None:
        super().__init__()
        self.setup_parts(state_batch_size=False)
        self.returns = returns

    def _returned(self, batch: Any) -> Any:
        x, _ = xy(batch)
        loss = self.loss_and_size(batch)[0]
        return loss if self.returns == "tensor" else {"loss": loss, "preds": self(x).detach()}

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        return self._returned(batch)

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Any:
        return self._returned(batch)

    def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Any:
        return self._returned(batch)


class PlainPredictions(PlainLegacySteps):
    """Evaluation steps returning predictions (a tensor of one value per sample), no loss: nothing to log there."""

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Any:
        return self(xy(batch)[0])

    def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Any:
        return self(xy(batch)[0])


# --- running and recording ------------------------------------------------------------------------


def snapshot(trainer: pl.Trainer) -> tuple[dict[str, torch.Tensor], ...]:
    return tuple(
        {name: torch.as_tensor(value).clone() for name, value in metrics.items()}
        for metrics in (trainer.callback_metrics, trainer.logged_metrics, trainer.progress_bar_metrics)
    )


class MetricsTimeline(pl.Callback):
    """The trainer's three metric dicts at every batch and epoch end, in order."""

    def __init__(self) -> None:
        self.timeline: list[tuple[str, tuple[dict[str, torch.Tensor], ...]]] = []

    def _record(self, trainer: pl.Trainer, hook: str) -> None:
        self.timeline.append((hook, snapshot(trainer)))

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        self._record(trainer, "train_batch_end")

    def on_train_epoch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        self._record(trainer, "train_epoch_end")

    def on_validation_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        self._record(trainer, "validation_batch_end")

    def on_validation_epoch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        self._record(trainer, "validation_epoch_end")

    def on_test_epoch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        self._record(trainer, "test_epoch_end")


class Run:
    """fit (2 epochs, sanity check on), validate and test of one model, with everything it logged."""

    def __init__(
        self,
        model: pl.LightningModule,
        root: Path,
        callbacks: list[pl.Callback] = [],  # noqa: B006
        collate_fn: Any = None,
    ) -> None:
        timeline = MetricsTimeline()
        logger = CSVLogger(str(root), name="csv", version=0)
        trainer = pl.Trainer(
            **trainer_kwargs(root, max_epochs=2, num_sanity_val_steps=2, log_every_n_steps=1, logger=logger),
            callbacks=[*callbacks, timeline],
        )
        lightning_data.warning_cache.clear()  # Lightning warns once per process: let each run say it anew
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trainer.fit(model, uneven_loader(collate_fn=collate_fn), val_loaders(collate_fn))
            self.after_fit = snapshot(trainer)
            self.validated = trainer.validate(model, val_loaders(collate_fn), verbose=False)
            self.after_validate = snapshot(trainer)
            self.tested = trainer.test(model, uneven_loader(seed=3, collate_fn=collate_fn), verbose=False)
            self.after_test = snapshot(trainer)
        self.warnings = [str(w.message) for w in caught]
        self.timeline = timeline.timeline
        self.trainer = trainer
        self.csv_path = Path(logger.log_dir) / "metrics.csv"

    def csv_rows(self) -> list[dict[str, str]]:
        with self.csv_path.open(newline="") as file:
            return list(csv.DictReader(file))

    def ambiguity_warnings(self) -> list[str]:
        return [text for text in self.warnings if text.startswith(AMBIGUOUS)]


def assert_same_logging(typed: Run, plain: Run) -> None:
    """Bit-for-bit the same metrics everywhere Lightning keeps or writes them."""
    assert [hook for hook, _ in typed.timeline] == [hook for hook, _ in plain.timeline]
    for (_, typed_dicts), (_, plain_dicts) in zip(typed.timeline, plain.timeline, strict=True):
        for typed_metrics, plain_metrics in zip(typed_dicts, plain_dicts, strict=True):
            assert_same_metrics(typed_metrics, plain_metrics)
    for typed_dicts, plain_dicts in [
        (typed.after_fit, plain.after_fit),
        (typed.after_validate, plain.after_validate),
        (typed.after_test, plain.after_test),
    ]:
        for typed_metrics, plain_metrics in zip(typed_dicts, plain_dicts, strict=True):
            assert_same_metrics(typed_metrics, plain_metrics)
    assert typed.validated == plain.validated
    assert typed.tested == plain.tested
    assert typed.csv_path.read_text() == plain.csv_path.read_text()


def weighted_mean(losses: list[torch.Tensor], sizes: list[int]) -> torch.Tensor:
    """Lightning's mean reduction: ``sum(loss * n) / sum(n)``, accumulated in the same order."""
    total = torch.tensor(0.0)
    for loss, size in zip(losses, sizes, strict=True):
        total = total + loss * size
    return total / sum(sizes)


# --- the default names, each way of turning logging on -------------------------------------------

TRAIN_KEYS = ["train_loss_epoch", "train_loss_step"]
VAL_KEYS = ["val_loss/dataloader_idx_0", "val_loss/dataloader_idx_1"]


@pytest.fixture(scope="module")
def explicit_default(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return Run(ExplicitLogging(DEFAULT_NAMES), tmp_path_factory.mktemp("explicit_default"))


@pytest.mark.parametrize(
    "make_run",
    [
        pytest.param(lambda root: Run(TypedLogsOnClass(), root), id="class attribute"),
        pytest.param(lambda root: Run(TypedLogsInInit(True), root), id="self.log_loss in __init__"),
        pytest.param(lambda root: Run(TypedLogsInInit(DEFAULT_NAMES), root), id="LossLogging()"),
        pytest.param(lambda root: Run(PlainTypedSteps(), root, [StepResultAdapter(log_loss=True)]), id="adapter"),
        pytest.param(
            lambda root: Run(PlainTypedSteps(), root, [StepResultAdapter(strict=True, log_loss=True)]),
            id="strict adapter",
        ),
    ],
)
def test_log_loss_equals_explicit_self_log(make_run: Any, explicit_default: Run, tmp_path: Path) -> None:
    typed = make_run(tmp_path)

    assert_same_logging(typed, explicit_default)
    callback_metrics, logged_metrics, progress_bar_metrics = typed.after_fit
    assert sorted(callback_metrics) == sorted(["train_loss", "train_loss_epoch", "train_loss_step", *VAL_KEYS])
    assert sorted(logged_metrics) == sorted([*TRAIN_KEYS, *VAL_KEYS])
    assert sorted(progress_bar_metrics) == sorted(["train_loss_epoch", "train_loss_step", *VAL_KEYS])
    assert list(typed.after_test[1]) == ["test_loss"]
    with typed.csv_path.open(newline="") as file:
        header = next(csv.reader(file))
    assert sorted(header) == sorted(["epoch", "step", "test_loss", *TRAIN_KEYS, *VAL_KEYS])
    # 2 epochs x 3 batches: one row per step, one per epoch's train mean, one per validation epoch (fit x2,
    # validate), one for test.
    assert [row["train_loss_step"] != "" for row in typed.csv_rows()].count(True) == 6


def test_epoch_means_weight_the_uneven_last_batch(explicit_default: Run) -> None:
    """The epoch value is the batch-size-weighted mean of the step values (4, 4, 2), not their plain mean."""
    rows = explicit_default.csv_rows()
    steps = [torch.tensor(float(row["train_loss_step"])) for row in rows if row["train_loss_step"]]
    epochs = [float(row["train_loss_epoch"]) for row in rows if row["train_loss_epoch"]]
    assert len(steps) == 6 and len(epochs) == 2
    for epoch, epoch_steps in zip(epochs, (steps[:3], steps[3:]), strict=True):
        assert epoch == pytest.approx(weighted_mean(epoch_steps, [4, 4, 2]).item(), rel=1e-6)
        assert epoch != pytest.approx(torch.stack(epoch_steps).mean().item(), rel=1e-6)


def test_custom_names_equal_explicit_self_log(tmp_path: Path) -> None:
    plain = Run(ExplicitLogging(CUSTOM_NAMES), tmp_path / "plain")
    on_class = Run(TypedCustomNamesOnClass(), tmp_path / "class")
    in_init = Run(TypedLogsInInit(CUSTOM_NAMES), tmp_path / "init")
    adapter = Run(PlainTypedSteps(), tmp_path / "adapter", [StepResultAdapter(log_loss=CUSTOM_NAMES)])

    for typed in (on_class, in_init, adapter):
        assert_same_logging(typed, plain)
    callback_metrics, logged_metrics, progress_bar_metrics = on_class.after_fit
    assert sorted(callback_metrics) == ["loss", "loss_epoch", "loss_step"]  # val=None: no validation metric
    assert sorted(logged_metrics) == ["loss_epoch", "loss_step"]
    assert progress_bar_metrics == {}  # prog_bar=False
    assert on_class.validated == [{}, {}]
    assert list(on_class.tested[0]) == ["holdout_loss"]


@pytest.mark.parametrize("returns", ["tensor", "dict"])
def test_adapter_logs_the_loss_a_plain_step_returns_in_every_stage(returns: str, tmp_path: Path) -> None:
    """A plain module, unchanged: each stage's loss, returned as a Tensor or as ``{"loss": ...}``, is logged as
    the hand-written ``self.log`` calls log it (``train_loss``, ``val_loss``, ``test_loss``), with the batch
    size Lightning infers; bit for bit, at every batch and epoch end and in the CSV file."""
    plain = Run(ExplicitLogging(DEFAULT_NAMES, state_batch_size=False), tmp_path / "plain")
    legacy = Run(PlainLegacySteps(returns), tmp_path / "legacy", [StepResultAdapter(log_loss=True)])

    assert_same_logging(legacy, plain)
    assert sorted(legacy.after_fit[1]) == sorted([*TRAIN_KEYS, *VAL_KEYS])
    assert sorted(legacy.after_validate[1]) == VAL_KEYS
    assert list(legacy.after_test[1]) == ["test_loss"]


def test_adapter_logs_no_evaluation_loss_where_the_step_returns_no_loss(tmp_path: Path) -> None:
    """Evaluation steps returning predictions (a tensor of several values, no loss): only the training loss is
    logged, as by hand."""
    names = LossLogging(val=None, test=None)
    plain = Run(ExplicitLogging(names, state_batch_size=False), tmp_path / "plain")
    predictions = Run(PlainPredictions(), tmp_path / "predictions", [StepResultAdapter(log_loss=True)])

    assert_same_logging(predictions, plain)
    assert sorted(predictions.after_fit[1]) == TRAIN_KEYS


# --- batch size: stated on the result, or inferred as Lightning does ------------------------------


def test_stated_batch_size_is_used_and_nothing_is_inferred(tmp_path: Path) -> None:
    plain = Run(ExplicitLogging(state_batch_size=True), tmp_path / "plain", collate_fn=dict_collate)
    typed = Run(TypedLogsInInit(state_batch_size=True), tmp_path / "typed", collate_fn=dict_collate)
    inferred = Run(TypedLogsInInit(state_batch_size=False), tmp_path / "inferred", collate_fn=dict_collate)

    assert_same_logging(typed, plain)
    assert typed.ambiguity_warnings() == plain.ambiguity_warnings() == []
    # The stated sizes (4, 4, 2) weight the means; the inferred 5 for every batch would not.
    stated_value = typed.after_fit[0]["val_loss/dataloader_idx_0"]
    assert not torch.equal(stated_value, inferred.after_fit[0]["val_loss/dataloader_idx_0"])


def test_inferred_batch_size_matches_lightning_and_warns_alike(tmp_path: Path) -> None:
    plain = Run(ExplicitLogging(state_batch_size=False), tmp_path / "plain", collate_fn=dict_collate)
    typed = Run(TypedLogsInInit(state_batch_size=False), tmp_path / "typed", collate_fn=dict_collate)

    assert_same_logging(typed, plain)
    expected = (
        f"{AMBIGUOUS}. The batch size we found is 5. To avoid any miscalculations,"
        " use `self.log(..., batch_size=batch_size)`."
    )
    assert typed.ambiguity_warnings() == plain.ambiguity_warnings() == [expected]


def test_stated_batch_size_weights_the_validation_mean(tmp_path: Path) -> None:
    """The logged validation value is Lightning's weighted mean of the step losses with the stated sizes."""

    class Recording(TypedLogsInInit):
        def on_validation_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            if not self.trainer.sanity_checking:
                self.seen.append((dataloader_idx, outputs.loss, outputs.batch_size))

    model = Recording(state_batch_size=True)
    model.seen = []
    trainer = pl.Trainer(**trainer_kwargs(tmp_path))
    trainer.validate(model, val_loaders(dict_collate), verbose=False)

    assert [(idx, size) for idx, _, size in model.seen] == [(0, 4), (0, 4), (0, 2), (1, 4), (1, 2)]
    for idx, sizes in [(0, [4, 4, 2]), (1, [4, 2])]:
        losses = [loss for i, loss, _ in model.seen if i == idx]
        assert torch.equal(trainer.callback_metrics[f"val_loss/dataloader_idx_{idx}"], weighted_mean(losses, sizes))


# --- checkpointing and early stopping on the logged loss ------------------------------------------


class EpochValLoss(pl.Callback):
    def __init__(self) -> None:
        self.values: list[torch.Tensor] = []

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self.values.append(trainer.callback_metrics["val_loss"].clone())


class DivergingTyped(TypedLogsOnClass):
    """No ``self.log`` anywhere; a learning rate that first helps, then overshoots."""

    def __init__(self, lr: float) -> None:
        super().__init__()
        self.lr = lr


class DivergingExplicit(ExplicitLogging):
    def __init__(self, lr: float) -> None:
        super().__init__()
        self.lr = lr


def fit_monitored(
    model: pl.LightningModule, root: Path, lr_epochs: int = 8
) -> tuple[ModelCheckpoint, EarlyStopping, EpochValLoss]:
    checkpoint = ModelCheckpoint(dirpath=str(root / "ckpt"), monitor="val_loss", mode="min", save_top_k=1)
    stopping = EarlyStopping(monitor="val_loss", mode="min", patience=1)
    values = EpochValLoss()
    trainer = pl.Trainer(
        **trainer_kwargs(root, max_epochs=lr_epochs, enable_checkpointing=True),
        callbacks=[checkpoint, stopping, values],
    )
    trainer.fit(model, uneven_loader(), uneven_loader(seed=1))
    return checkpoint, stopping, values


def test_checkpoint_and_early_stopping_monitor_the_logged_loss(tmp_path: Path) -> None:
    checkpoint, stopping, values = fit_monitored(DivergingTyped(lr=0.3), tmp_path / "typed")
    plain_checkpoint, plain_stopping, plain_values = fit_monitored(DivergingExplicit(lr=0.3), tmp_path / "plain")

    best_epoch = min(range(len(values.values)), key=lambda i: values.values[i].item())
    assert best_epoch == 3  # val_loss falls for four epochs, then rises
    assert stopping.stopped_epoch == len(values.values) - 1 == 4  # patience=1: stopped after one worse epoch
    assert torch.equal(checkpoint.best_model_score, values.values[best_epoch])
    assert torch.equal(stopping.best_score, values.values[best_epoch])
    assert Path(checkpoint.best_model_path).name == f"epoch={best_epoch}-step={3 * (best_epoch + 1)}.ckpt"
    assert [v.item() for v in values.values] == [v.item() for v in plain_values.values]
    assert torch.equal(checkpoint.best_model_score, plain_checkpoint.best_model_score)
    assert stopping.stopped_epoch == plain_stopping.stopped_epoch


# --- off by default -------------------------------------------------------------------------------


def test_nothing_is_logged_by_default(tmp_path: Path) -> None:
    typed = Run(TypedLossModel(), tmp_path / "typed")
    adapted = Run(PlainTypedSteps(), tmp_path / "adapted", [StepResultAdapter()])

    for run in (typed, adapted):
        assert run.after_fit == run.after_validate == run.after_test == ({}, {}, {})
        assert run.validated == [{}, {}] and run.tested == [{}]
        assert not run.csv_path.exists()  # nothing logged: the CSV logger never writes a file


def test_monitoring_an_unlogged_loss_fails_as_in_lightning(tmp_path: Path) -> None:
    stopping = EarlyStopping(monitor="val_loss")
    trainer = pl.Trainer(**trainer_kwargs(tmp_path), callbacks=[stopping])
    with pytest.raises(RuntimeError, match=r"Early stopping conditioned on metric `val_loss` which is not available"):
        trainer.fit(TypedLossModel(), uneven_loader(), uneven_loader(seed=1))


# --- batch_size on the result is checked ----------------------------------------------------------

BATCH_SIZE_EXPECTED = "None, or a positive int: the number of samples the loss averages over"
BATCH_SIZE_FIX = "pass the count, e.g. `batch_size=len(x)`, or leave it out to let Lightning infer it"
BAD_BATCH_SIZES = [(0, "int 0"), (-1, "int -1"), (2.0, "float 2.0"), (True, "bool True")]


@pytest.mark.parametrize(("batch_size", "got"), BAD_BATCH_SIZES, ids=[got for _, got in BAD_BATCH_SIZES])
@pytest.mark.parametrize("result_class", [TrainStepResult, ValStepResult])
def test_bad_batch_size_is_rejected(result_class: Any, batch_size: Any, got: str) -> None:
    with pytest.raises(StepResultError) as info:
        result_class(loss=torch.tensor(1.0), batch_size=batch_size)
    where = f"{result_class.__name__}.batch_size"
    assert (
        str(info.value)
        == f"{where}\n  got:      {got}\n  expected: {BATCH_SIZE_EXPECTED}\n  fix:      {BATCH_SIZE_FIX}"
    )
    assert (info.value.where, info.value.got, info.value.hook) == (where, got, None)


class BadBatchSize(TypedLogsOnClass):
    def __init__(self, batch_size: Any) -> None:
        super().__init__()
        self.bad = batch_size

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        return TrainStepResult(loss=self.loss_and_size(batch)[0], batch_size=self.bad)

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> ValStepResult:
        return ValStepResult(loss=self.loss_and_size(batch)[0], batch_size=self.bad)


@pytest.mark.parametrize(("batch_size", "got"), BAD_BATCH_SIZES, ids=[got for _, got in BAD_BATCH_SIZES])
@pytest.mark.parametrize(("stage", "result_class"), [("fit", "TrainStepResult"), ("validate", "ValStepResult")])
def test_bad_batch_size_in_a_step_names_the_step(
    stage: str, result_class: str, batch_size: Any, got: str, tmp_path: Path
) -> None:
    model = BadBatchSize(batch_size)
    before = [p.detach().clone() for p in model.parameters()]
    trainer = pl.Trainer(**trainer_kwargs(tmp_path))
    with pytest.raises(StepResultError) as info:
        getattr(trainer, stage)(model, uneven_loader(), **({"verbose": False} if stage == "validate" else {}))
    hook = "BadBatchSize.training_step" if stage == "fit" else "BadBatchSize.validation_step"
    assert str(info.value) == (
        f"{hook}: {result_class}.batch_size\n  got:      {got}\n  expected: {BATCH_SIZE_EXPECTED}\n  fix:      {BATCH_SIZE_FIX}"
    )
    assert trainer.callback_metrics == {}  # raised before anything was logged
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


# --- log_loss beside the step's own self.log of the same name --------------------------------------


class OwnValLog:
    """A validation step that logs ``val_loss`` itself, with Lightning's defaults (not log_loss's arguments)."""

    def validation_step(self: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> ValStepResult:
        loss, batch_size = self.loss_and_size(batch)
        self.log("val_loss", loss, batch_size=batch_size)
        return ValStepResult(loss=loss, batch_size=batch_size)


class TypedOwnValLog(OwnValLog, TypedLogsOnClass):
    pass


class PlainOwnValLog(OwnValLog, PlainTypedSteps):
    pass


class ExplicitOwnValLog(ExplicitLogging):
    """The reference: log_loss's calls for training and test, the step's own one for validation."""

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> dict[str, torch.Tensor]:
        loss, batch_size = self.loss_and_size(batch)
        self.log("val_loss", loss, batch_size=batch_size)
        return {"loss": loss}


def clash_warning(cls: str, hook: str, name: str, stage: str, other_settings: str = "") -> str:
    return (
        f"{cls}.{hook}: log_loss\n"
        f"  got:      `self.log({name!r}, ...)` in {cls}.{hook}, and log_loss logging {name!r} as well\n"
        "  expected: one `self.log` per name and hook: Lightning raises on a second call with other arguments"
        " and counts a second identical one twice\n"
        f"  fix:      the step's own `self.log({name!r}, ...)` is kept and log_loss skips {name!r}; to silence this,"
        f" remove that call from the step, or turn this stage of log_loss off: `log_loss=LossLogging({stage}=None{other_settings})`"
    )


def log_loss_warnings(run: Run) -> list[str]:
    return [text for text in run.warnings if text.split("\n")[0].endswith(": log_loss")]


@pytest.mark.parametrize(
    "make_run",
    [
        pytest.param(lambda root: Run(TypedOwnValLog(), root), id="typed module"),
        pytest.param(lambda root: Run(PlainOwnValLog(), root, [StepResultAdapter(log_loss=True)]), id="adapter"),
    ],
)
def test_the_steps_own_self_log_wins_over_log_loss(make_run: Any, tmp_path: Path) -> None:
    """Without the check, Lightning raises MisconfigurationException ('twice ... with different arguments')."""
    run = make_run(tmp_path / "clash")
    reference = Run(ExplicitOwnValLog(), tmp_path / "reference")

    assert_same_logging(run, reference)
    cls = type(run.trainer.lightning_module).__qualname__
    assert log_loss_warnings(run) == [clash_warning(cls, "validation_step", "val_loss", "val")]


def test_a_step_logging_log_losss_own_call_is_not_counted_twice(explicit_default: Run, tmp_path: Path) -> None:
    """The same arguments: Lightning would silently add every value twice into the epoch mean."""
    run = Run(ExplicitLogging(DEFAULT_NAMES), tmp_path, [StepResultAdapter(log_loss=True)])

    assert_same_logging(run, explicit_default)
    # Its evaluation steps return {"loss": loss}, which log_loss logs too: each stage's clash is told once
    # (validation's first: the sanity check runs it before training).
    assert log_loss_warnings(run) == [
        clash_warning("ExplicitLogging", "validation_step", "val_loss", "val"),
        clash_warning("ExplicitLogging", "training_step", "train_loss", "train"),
        clash_warning("ExplicitLogging", "test_step", "test_loss", "test"),
    ]


def test_the_fix_keeps_the_other_settings(tmp_path: Path) -> None:
    run = Run(PlainOwnValLog(), tmp_path, [StepResultAdapter(log_loss=LossLogging(val="val_loss", prog_bar=False))])
    assert log_loss_warnings(run) == [
        clash_warning("PlainOwnValLog", "validation_step", "val_loss", "val", ", prog_bar=False")
    ]


def test_turning_the_stage_off_silences_the_warning(tmp_path: Path) -> None:
    run = Run(PlainOwnValLog(), tmp_path / "off", [StepResultAdapter(log_loss=LossLogging(val=None))])
    reference = Run(ExplicitOwnValLog(), tmp_path / "reference")

    assert_same_logging(run, reference)
    assert log_loss_warnings(run) == []


def test_logged_in_current_hook_sees_only_the_running_hooks_calls(tmp_path: Path) -> None:
    from lightning_step_types._lightning.result_collection import logged_in_current_hook

    seen: list[tuple[str, int, bool, bool, bool]] = []

    class Probe(PlainTypedSteps):
        def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
            before = logged_in_current_hook(self, "probe")
            self.log("probe", float(batch_idx))
            seen.append(
                (
                    "training_step",
                    batch_idx,
                    before,
                    logged_in_current_hook(self, "probe"),
                    logged_in_current_hook(self, "other"),
                )
            )
            return super().training_step(batch, batch_idx)

        def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> ValStepResult:
            # "probe" was logged from training_step, not from this hook
            seen.append(("validation_step", dataloader_idx, logged_in_current_hook(self, "probe"), False, False))
            self.log("probe", 1.0)
            seen.append(("validation_step", dataloader_idx, logged_in_current_hook(self, "probe"), False, False))
            return super().validation_step(batch, batch_idx, dataloader_idx)

    model = Probe()
    assert logged_in_current_hook(model, "probe") is False  # no Trainer
    trainer = pl.Trainer(**trainer_kwargs(tmp_path, limit_train_batches=2, limit_val_batches=1))
    trainer.fit(model, uneven_loader(), val_loaders())
    assert seen == [
        ("training_step", 0, False, True, False),
        ("training_step", 1, True, True, False),
        ("validation_step", 0, False, False, False),
        ("validation_step", 0, True, False, False),
        ("validation_step", 1, False, False, False),  # the second dataloader's key is its own
        ("validation_step", 1, True, False, False),
    ]
