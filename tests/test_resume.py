"""Exact epoch aggregates across a mid-epoch resume (lightning_step_types/resume/epoch_state.py).

Every test runs a real Trainer twice: uninterrupted, saving checkpoints with
``ModelCheckpoint(every_n_train_steps=k)``, then resumed from one of them in a fresh Trainer
with a fresh module. ``StatefulDataLoader`` gives the resumed run the uninterrupted data order,
so the weights match bit for bit; these tests check that every epoch aggregate does too:
``callback_metrics``, ``logged_metrics`` and the ``CSVLogger`` file, value by value.
"""

from __future__ import annotations

import csv
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
import torchmetrics
from models import RegressorParts, assert_same_metrics, assert_same_params, make_dataset, trainer_kwargs
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset
from torchdata.stateful_dataloader import StatefulDataLoader

import lightning_step_types.resume.messages as resume_messages
from lightning_step_types import (
    LossLogging,
    StepMetric,
    StepResultAdapter,
    StepResultWarning,
    TrainStepResult,
    TypedLightningModule,
)
from lightning_step_types.resume.epoch_state import CHECKPOINT_KEY, resuming

BATCHES = 11  # 21 samples in batches of 2: the last batch holds one

# Lightning 2.5 continues a mid-epoch resume at the batch after the checkpoint; before, it trains
# the checkpoint's batch again, so no resumed run equals the uninterrupted one, and exact resume
# only warns (test_before_lightning_2_5_exact_resume_warns_once_and_restores_nothing).
LIGHTNING_VERSION = tuple(int(part) for part in pl.__version__.split(".")[:2])
EXACT = LIGHTNING_VERSION >= (2, 5)
exact = pytest.mark.skipif(not EXACT, reason="Lightning before 2.5 replays the checkpoint's batch on resume")


def dataset(seed: int = 0) -> TensorDataset:
    x, y = make_dataset(seed, BATCHES, 2).tensors
    return TensorDataset(x[:-1], y[:-1])


def stateful_loader(seed: int = 0) -> StatefulDataLoader[Any]:
    return StatefulDataLoader(dataset(seed), batch_size=2)


class Logs(RegressorParts):
    """What every resume model logs from training: each reduction, and a torchmetrics object."""

    mae: torchmetrics.MeanAbsoluteError

    def setup_logs(self) -> None:
        self.mae = torchmetrics.MeanAbsoluteError()

    def log_training(self, batch: Any) -> torch.Tensor:
        loss, preds = self.loss_and_preds(batch)
        log: Any = getattr(self, "log")
        log("train_loss", loss, on_step=True, on_epoch=True)
        log("train_sum", loss, on_step=False, on_epoch=True, reduce_fx="sum")
        log("train_max", loss, on_step=False, on_epoch=True, reduce_fx="max")
        log("train_min", loss, on_step=False, on_epoch=True, reduce_fx=torch.min)
        self.mae(preds, batch[1])
        log("train_mae", self.mae, on_step=False, on_epoch=True)
        return loss


class TypedResume(Logs, TypedLightningModule):
    def __init__(self, seed: int = 0, lr: float = 0.1) -> None:
        super().__init__()
        self.build(seed, lr)
        self.setup_logs()

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        return TrainStepResult(loss=self.log_training(batch))

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Any:
        loss, _ = self.loss_and_preds(batch)
        self.log("val_loss", loss)
        return None


class PlainResume(Logs, pl.LightningModule):
    """An existing module: run under ``StepResultAdapter()`` it resumes exactly; alone, as Lightning does."""

    def __init__(self, seed: int = 0, lr: float = 0.1) -> None:
        super().__init__()
        self.build(seed, lr)
        self.setup_logs()

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        return self.log_training(batch)


class LogLossResume(RegressorParts, TypedLightningModule):
    log_loss = LossLogging(prog_bar=False)

    def __init__(self) -> None:
        super().__init__()
        self.build(0, 0.1)

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        loss, _ = self.loss_and_preds(batch)
        return TrainStepResult(loss=loss)


class Run:
    """One fit: its Trainer, module and CSV rows."""

    def __init__(self, trainer: pl.Trainer, module: pl.LightningModule, rows: list[dict[str, str]]) -> None:
        self.trainer, self.module, self.rows = trainer, module, rows


def fit(
    root: Path,
    make_module: Callable[[], pl.LightningModule],
    *,
    every: int | None = None,
    ckpt_path: Path | None = None,
    loader: Callable[[], Any] = stateful_loader,
    adapter: bool = False,
    exact_resume: bool = True,
    adapter_metrics: dict[str, StepMetric[Any]] | None = None,
    **overrides: Any,
) -> Run:
    val = overrides.pop("val_dataloaders", None)
    callbacks: list[pl.Callback] = []
    if every is not None:
        callbacks.append(
            ModelCheckpoint(dirpath=root / "ckpt", every_n_train_steps=every, save_top_k=-1, filename="{step}")
        )
    if adapter:
        callbacks.append(StepResultAdapter(exact_resume=exact_resume, metrics=adapter_metrics))
    logger = CSVLogger(root, name="csv", version=0)
    kwargs = trainer_kwargs(root, max_epochs=1, callbacks=callbacks, logger=logger, log_every_n_steps=1)
    kwargs["enable_checkpointing"] = every is not None or "val_check_interval" in overrides
    kwargs.update(overrides)
    trainer = pl.Trainer(**kwargs)
    module = make_module()
    trainer.fit(module, loader(), val, ckpt_path=ckpt_path)
    rows: list[dict[str, str]] = []
    metrics_file = Path(logger.log_dir) / "metrics.csv"
    if metrics_file.exists():  # CSVLogger writes no file for a run that logs nothing
        with open(metrics_file, newline="") as file:
            rows = [{k: v for k, v in row.items() if v != ""} for row in csv.DictReader(file)]
    return Run(trainer, module, rows)


def assert_same_run(resumed: Run, full: Run) -> None:
    """Weights, callback_metrics, logged_metrics and every CSV row the resumed run wrote."""
    assert_same_params(resumed.module, full.module)
    assert_same_metrics(resumed.trainer.callback_metrics, full.trainer.callback_metrics)
    assert_same_metrics(resumed.trainer.logged_metrics, full.trainer.logged_metrics)
    assert resumed.rows, "the resumed run logged nothing"
    assert resumed.rows == full.rows[-len(resumed.rows) :]


def no_step_result_warnings(run: Callable[[], Run]) -> Run:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = run()
    assert [str(w.message) for w in caught if issubclass(w.category, StepResultWarning)] == []
    return result


def one_step_result_warning(run: Callable[[], Run]) -> tuple[Run, str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = run()
    messages = [str(w.message) for w in caught if issubclass(w.category, StepResultWarning)]
    assert len(messages) == 1, messages
    return result, messages[0]


# --- the plain-Lightning behaviour this fixes ----------------------------------------------------


@exact
def test_plain_lightning_epoch_aggregates_cover_only_the_batches_after_a_resume(tmp_path: Path) -> None:
    """The figures docs/resume.md quotes: resume after batch 5 of 11, the last batch uneven."""
    full = fit(tmp_path / "full", PlainResume, every=5)
    resumed = fit(tmp_path / "resumed", PlainResume, ckpt_path=tmp_path / "full" / "ckpt" / "step=5.ckpt")
    assert_same_params(resumed.module, full.module)  # the data order and weights do resume exactly
    full_metrics, resumed_metrics = full.trainer.callback_metrics, resumed.trainer.callback_metrics
    assert round(float(full_metrics["train_loss_epoch"]), 3) == 4.375
    assert round(float(resumed_metrics["train_loss_epoch"]), 3) == 1.004
    assert round(float(full_metrics["train_mae"]), 3) == 1.428
    assert round(float(resumed_metrics["train_mae"]), 3) == 0.712


# --- exact resume ------------------------------------------------------------------------------------


@exact
@pytest.mark.parametrize(
    ("every", "epochs"),
    [(1, 1), (5, 1), (10, 1), (16, 2)],
    ids=["after-first-batch", "mid-epoch", "before-last-batch", "mid-second-epoch"],
)
@pytest.mark.parametrize("how", ["typed", "adapter"])
def test_resumed_epoch_aggregates_equal_the_uninterrupted_run(
    how: str, every: int, epochs: int, tmp_path: Path
) -> None:
    make: Callable[[], pl.LightningModule] = TypedResume if how == "typed" else PlainResume
    adapter = how == "adapter"
    full = fit(tmp_path / "full", make, every=every, adapter=adapter, max_epochs=epochs)
    resumed = no_step_result_warnings(
        lambda: fit(
            tmp_path / "resumed",
            make,
            adapter=adapter,
            max_epochs=epochs,
            ckpt_path=tmp_path / "full" / "ckpt" / f"step={every}.ckpt",
        )
    )
    assert_same_run(resumed, full)
    assert not resuming()


@exact
def test_log_loss_resumes_exactly(tmp_path: Path) -> None:
    full = fit(tmp_path / "full", LogLossResume, every=5)
    resumed = fit(tmp_path / "resumed", LogLossResume, ckpt_path=tmp_path / "full" / "ckpt" / "step=5.ckpt")
    assert_same_run(resumed, full)
    assert "train_loss_epoch" in resumed.trainer.logged_metrics


@exact
def test_gradient_accumulation_resumes_exactly(tmp_path: Path) -> None:
    # every_n_train_steps counts optimizer steps: step 2 is after batch 4 of 11, between two windows of 2
    full = fit(tmp_path / "full", TypedResume, every=2, accumulate_grad_batches=2)
    resumed = fit(
        tmp_path / "resumed",
        TypedResume,
        accumulate_grad_batches=2,
        ckpt_path=tmp_path / "full" / "ckpt" / "step=2.ckpt",
    )
    assert_same_run(resumed, full)


@exact
def test_mid_epoch_validation_with_two_loaders_resumes_exactly(tmp_path: Path) -> None:
    def val_loaders() -> list[DataLoader[Any]]:
        return [DataLoader(dataset(1), batch_size=4), DataLoader(dataset(2), batch_size=4)]

    overrides: dict[str, Any] = dict(val_check_interval=0.5, limit_val_batches=2)
    full = fit(tmp_path / "full", TypedResume, every=7, val_dataloaders=val_loaders(), **overrides)
    resumed = fit(
        tmp_path / "resumed",
        TypedResume,
        val_dataloaders=val_loaders(),
        ckpt_path=tmp_path / "full" / "ckpt" / "step=7.ckpt",
        **overrides,
    )
    assert "val_loss/dataloader_idx_1" in resumed.trainer.callback_metrics
    assert_same_run(resumed, full)


@exact
def test_a_checkpoint_saved_by_mid_epoch_validation_resumes_exactly(tmp_path: Path) -> None:
    """ModelCheckpoint without every_n_train_steps saves after each validation: every 5 batches, so after batches 5 and 10 of 11."""

    def val_loaders() -> list[DataLoader[Any]]:
        return [DataLoader(dataset(1), batch_size=4), DataLoader(dataset(2), batch_size=4)]

    overrides: dict[str, Any] = dict(val_check_interval=0.5, limit_val_batches=2)
    saver = ModelCheckpoint(dirpath=tmp_path / "full" / "ckpt", save_top_k=-1, filename="{step}")
    full = fit(tmp_path / "full", TypedResume, val_dataloaders=val_loaders(), callbacks=[saver], **overrides)
    assert sorted(path.name for path in (tmp_path / "full" / "ckpt").glob("*.ckpt")) == ["step=10.ckpt", "step=5.ckpt"]
    mid_epoch = tmp_path / "full" / "ckpt" / "step=5.ckpt"
    resumed = no_step_result_warnings(
        lambda: fit(tmp_path / "resumed", TypedResume, val_dataloaders=val_loaders(), ckpt_path=mid_epoch, **overrides)
    )
    assert_same_run(resumed, full)


@exact
def test_lightning_pytorch_flavour_resumes_exactly(tmp_path: Path) -> None:
    import lightning.pytorch as lp

    from lightning_step_types.lightning_pytorch import TypedLightningModule as LTyped

    class LightningResume(Logs, LTyped):
        def __init__(self) -> None:
            super().__init__()
            self.build(0, 0.1)
            self.setup_logs()

        def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
            return TrainStepResult(loss=self.log_training(batch))

    def run(root: Path, ckpt: Path | None) -> tuple[lp.Trainer, LightningResume]:
        callbacks = [
            lp.callbacks.ModelCheckpoint(dirpath=root, every_n_train_steps=5, save_top_k=-1, filename="{step}")
        ]
        kwargs = trainer_kwargs(root, callbacks=callbacks, enable_checkpointing=True)
        trainer, module = lp.Trainer(**kwargs), LightningResume()
        trainer.fit(module, stateful_loader(), ckpt_path=ckpt)
        return trainer, module

    full_trainer, full_module = run(tmp_path / "full", None)
    resumed_trainer, resumed_module = run(tmp_path / "resumed", tmp_path / "full" / "step=5.ckpt")
    assert_same_params(resumed_module, full_module)
    assert_same_metrics(resumed_trainer.callback_metrics, full_trainer.callback_metrics)


def declared_mse() -> dict[str, StepMetric[Any]]:
    # a result is the read-only mapping {"loss": ..., **metadata}, as the adapter's view of a dict return is
    return {
        "mse": StepMetric(
            torchmetrics.MeanSquaredError(), update=lambda result, batch: (result["preds"], batch[1]), stages=("train",)
        )
    }


class DeclaredMetric(TypedResume):
    """Declared step metrics (``configure_step_metrics``): their training copies resume with the epoch."""

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        loss, preds = self.loss_and_preds(batch)
        return TrainStepResult(loss=loss, metadata={"preds": preds.detach()})

    def configure_step_metrics(self) -> dict[str, StepMetric[Any]]:
        return declared_mse()


class DeclaredMetricNoResume(DeclaredMetric):
    exact_resume = False


class PlainWithPreds(PlainResume):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        loss, preds = self.loss_and_preds(batch)
        return {"loss": loss, "preds": preds.detach()}


@exact
def test_declared_metrics_resume_exactly(tmp_path: Path) -> None:
    full = fit(tmp_path / "full", DeclaredMetric, every=5)
    resumed = fit(tmp_path / "resumed", DeclaredMetric, ckpt_path=tmp_path / "full" / "ckpt" / "step=5.ckpt")
    plain = fit(tmp_path / "plain", DeclaredMetricNoResume, ckpt_path=tmp_path / "full" / "ckpt" / "step=5.ckpt")
    assert_same_run(resumed, full)
    epoch_mse = full.trainer.callback_metrics["train_mse"]
    assert torch.equal(resumed.trainer.callback_metrics["train_mse"], epoch_mse)
    # The switch shows what is restored: without it the epoch's metric covers batch 5 onwards only.
    assert not torch.equal(plain.trainer.callback_metrics["train_mse"], epoch_mse)


@exact
def test_metrics_declared_on_the_adapter_resume_exactly(tmp_path: Path) -> None:
    def run(root: Path, **kwargs: Any) -> Run:
        return fit(root, PlainWithPreds, adapter=True, adapter_metrics=declared_mse(), **kwargs)

    full = run(tmp_path / "full", every=5)
    resumed = run(tmp_path / "resumed", ckpt_path=tmp_path / "full" / "ckpt" / "step=5.ckpt")
    assert_same_run(resumed, full)
    assert torch.equal(resumed.trainer.callback_metrics["train_mse"], full.trainer.callback_metrics["train_mse"])


# --- what a checkpoint carries -----------------------------------------------------------------------


@exact
def test_an_override_without_super_keeps_the_epoch_state(tmp_path: Path) -> None:
    class OwnCheckpointHooks(TypedResume):
        def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            checkpoint["mine"] = 1

        def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            self.loaded_mine = checkpoint["mine"]

        def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
            pass

    full = fit(tmp_path / "full", OwnCheckpointHooks, every=5)
    checkpoint = torch.load(tmp_path / "full" / "ckpt" / "step=5.ckpt", weights_only=False)
    assert checkpoint["mine"] == 1 and "epoch_state" in checkpoint[CHECKPOINT_KEY]
    resumed = fit(tmp_path / "resumed", OwnCheckpointHooks, ckpt_path=tmp_path / "full" / "ckpt" / "step=5.ckpt")
    assert resumed.module.loaded_mine == 1
    assert_same_run(resumed, full)


def test_checkpoint_bytes_added(tmp_path: Path) -> None:
    """The test model's checkpoint at step 5, with and without the epoch state (figure in docs/resume.md)."""
    fit(tmp_path / "with", PlainResume, every=5, adapter=True)
    fit(tmp_path / "without", PlainResume, every=5, adapter=True, exact_resume=False)
    with_state = (tmp_path / "with" / "ckpt" / "step=5.ckpt").stat().st_size
    without = (tmp_path / "without" / "ckpt" / "step=5.ckpt").stat().st_size
    print(f"epoch state adds {with_state - without} bytes to a {without}-byte checkpoint")
    assert 0 < with_state - without < 40960  # about 26 KB of it the random streams, twice (docs/resume.md)


def test_load_from_checkpoint_is_weights_only(tmp_path: Path) -> None:
    fit(tmp_path / "full", TypedResume, every=5)
    loaded = TypedResume.load_from_checkpoint(tmp_path / "full" / "ckpt" / "step=5.ckpt")
    assert not resuming()
    fresh = no_step_result_warnings(lambda: fit(tmp_path / "fresh", lambda: loaded))
    assert fresh.trainer.global_step == BATCHES  # a new run from the loaded weights, all 11 batches
    assert float(fresh.trainer.callback_metrics["train_sum"]) == pytest.approx(
        sum(float(r["train_loss_step"]) for r in fresh.rows if "train_loss_step" in r)
    )


# --- tolerant loading ------------------------------------------------------------------------------


@exact
def test_a_plain_lightning_checkpoint_resumes_with_one_warning(tmp_path: Path) -> None:
    fit(tmp_path / "full", PlainResume, every=5)  # no adapter: a plain Lightning checkpoint
    _, message = one_step_result_warning(
        lambda: fit(tmp_path / "resumed", TypedResume, ckpt_path=tmp_path / "full" / "ckpt" / "step=5.ckpt")
    )
    assert message == (
        "TypedResume: resuming epoch 0 at batch 5\n"
        "  got:      a checkpoint without the running epoch state of lightning_step_types (saved by plain"
        " Lightning, or with exact_resume=False): every value logged with on_epoch=True in training, and every"
        " logged metric, starts fresh, so epoch 0's aggregates cover batch 5 onwards only\n"
        "  expected: checkpoint['lightning_step_types'], which TypedLightningModule and StepResultAdapter() save"
        " mid-epoch\n"
        "  fix:      nothing to do for this run: checkpoints saved from now on resume exactly"
    )


def test_exact_resume_false_saves_and_restores_nothing(tmp_path: Path) -> None:
    fit(tmp_path / "full", PlainResume, every=5, adapter=True, exact_resume=False)
    checkpoint = torch.load(tmp_path / "full" / "ckpt" / "step=5.ckpt", weights_only=False)
    assert CHECKPOINT_KEY not in checkpoint
    plain = fit(tmp_path / "plain", PlainResume, ckpt_path=tmp_path / "full" / "ckpt" / "step=5.ckpt")
    switched_off = no_step_result_warnings(
        lambda: fit(
            tmp_path / "off",
            PlainResume,
            adapter=True,
            exact_resume=False,
            ckpt_path=tmp_path / "full" / "ckpt" / "step=5.ckpt",
        )
    )
    assert_same_metrics(switched_off.trainer.callback_metrics, plain.trainer.callback_metrics)


@exact
def test_an_end_of_epoch_checkpoint_has_nothing_in_flight(tmp_path: Path) -> None:
    """Saved in on_train_epoch_end: the next epoch starts fresh in both runs, so there is nothing to warn about."""
    full = fit(
        tmp_path / "full",
        TypedResume,
        max_epochs=2,
        enable_checkpointing=True,
        callbacks=[ModelCheckpoint(dirpath=tmp_path / "full" / "ckpt", save_top_k=-1, filename="{epoch}")],
    )
    checkpoint = torch.load(tmp_path / "full" / "ckpt" / "epoch=0.ckpt", weights_only=False)
    state = checkpoint[CHECKPOINT_KEY]["epoch_state"]
    assert (state["point"]["kind"], state["point"]["epoch"]) == ("epoch", 1)  # the next epoch, from its start
    assert "logged" not in state["ranks"][0]  # nothing of epoch 0 is in flight
    resumed = no_step_result_warnings(
        lambda: fit(
            tmp_path / "resumed", TypedResume, max_epochs=2, ckpt_path=tmp_path / "full" / "ckpt" / "epoch=0.ckpt"
        )
    )
    assert_same_run(resumed, full)


@exact
@pytest.mark.parametrize("loader", ["stateful", "plain"])
def test_a_checkpoint_at_an_epoch_s_last_batch_ends_that_epoch_in_the_resumed_run(loader: str, tmp_path: Path) -> None:
    """ModelCheckpoint at an epoch's last batch: Lightning alone resumes at the next epoch without ending this
    one (and, from a StatefulDataLoader's state at its end, skips the next epoch's batches too)."""
    make_loader = stateful_loader if loader == "stateful" else lambda: DataLoader(dataset(), batch_size=2)
    full = fit(tmp_path / "full", TypedResume, every=BATCHES, max_epochs=2, loader=make_loader)
    checkpoint = tmp_path / "full" / "ckpt" / f"step={BATCHES}.ckpt"
    point = torch.load(checkpoint, weights_only=False)[CHECKPOINT_KEY]["epoch_state"]["point"]
    assert (point["kind"], point["batch"]) == ("batch_end", BATCHES - 1)
    resumed = no_step_result_warnings(
        lambda: fit(tmp_path / "resumed", TypedResume, max_epochs=2, loader=make_loader, ckpt_path=checkpoint)
    )
    assert resumed.trainer.global_step == 2 * BATCHES
    assert_same_run(resumed, full)
    fit(tmp_path / "plain_full", PlainResume, every=BATCHES, max_epochs=2, loader=make_loader)
    plain = fit(
        tmp_path / "plain",
        PlainResume,
        max_epochs=2,
        loader=make_loader,
        ckpt_path=tmp_path / "plain_full" / "ckpt" / f"step={BATCHES}.ckpt",
    )
    assert plain.trainer.global_step == (BATCHES if loader == "stateful" else 2 * BATCHES)
    assert not any(row.get("epoch") == "0" and "train_loss_epoch" in row for row in plain.rows)  # epoch 0 never ended


class ChangedLogging(TypedResume):
    """TypedResume after an edit: train_max is now a mean, train_min is gone, the metric renamed."""

    def __init__(self) -> None:
        super().__init__()
        self.abs_error = self.mae
        del self.mae

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        loss, preds = self.loss_and_preds(batch)
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        self.log("train_sum", loss, on_step=False, on_epoch=True, reduce_fx="sum")
        self.log("train_max", loss, on_step=False, on_epoch=True)
        self.abs_error(preds, batch[1])
        self.log("train_mae", self.abs_error, on_step=False, on_epoch=True)
        return TrainStepResult(loss=loss)


@exact
def test_a_checkpoint_from_before_the_module_changed_restores_the_rest(tmp_path: Path) -> None:
    full = fit(tmp_path / "full", TypedResume, every=5)
    resumed, message = one_step_result_warning(
        lambda: fit(tmp_path / "resumed", ChangedLogging, ckpt_path=tmp_path / "full" / "ckpt" / "step=5.ckpt")
    )
    for unchanged in ("train_loss_epoch", "train_sum"):  # restored: equal to the uninterrupted run
        assert torch.equal(resumed.trainer.callback_metrics[unchanged], full.trainer.callback_metrics[unchanged])
    # train_min, no longer logged, goes on as saved: Lightning logs its value of batches 0 to 4 at the epoch's end
    assert float(resumed.trainer.callback_metrics["train_min"]) == min(
        float(r["train_loss_step"]) for r in full.rows[:5]
    )
    assert message == (
        "ChangedLogging: resuming epoch 0 at the end of batch 4\n"
        "  got:      a checkpoint from before the module changed what it logs or declares; these start fresh:"
        " metric 'mae' (torchmetrics.regression.mae.MeanAbsoluteError), 'train_max' (training_step), now logged"
        " differently\n"
        "  expected: the values and metrics the module logged when the checkpoint was saved, logged the same way\n"
        "  fix:      nothing to do for this run; to resume exactly, resume from a checkpoint saved by"
        " TypedLightningModule or under StepResultAdapter() with the same module"
    )


@pytest.mark.skipif(EXACT, reason="Lightning 2.5 and later resume exactly")
def test_before_lightning_2_5_exact_resume_warns_once_and_restores_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(resume_messages, "_unavailable_warned", False)
    fit(tmp_path / "full", TypedResume, every=5)
    checkpoint = tmp_path / "full" / "ckpt" / "step=5.ckpt"
    plain = fit(tmp_path / "plain", PlainResume, ckpt_path=checkpoint)  # as plain Lightning resumes
    resumed, message = one_step_result_warning(lambda: fit(tmp_path / "resumed", TypedResume, ckpt_path=checkpoint))
    assert_same_params(resumed.module, plain.module)
    assert_same_metrics(resumed.trainer.callback_metrics, plain.trainer.callback_metrics)
    assert message == (
        "exact resume\n"
        f"  got:      Lightning {pl.__version__} resumes a checkpoint saved inside an epoch by training the batch it was"
        " saved at again: the running epoch aggregates cannot be restored exactly, so they start fresh\n"
        "  expected: pytorch-lightning or lightning 2.5 to 2.6, which continue a mid-epoch resume at the next batch"
        " and keep their logging state where lightning_step_types reads it\n"
        "  fix:      upgrade Lightning for exact epoch aggregates; until then runs resume as in plain Lightning"
    )
    no_step_result_warnings(lambda: fit(tmp_path / "again", TypedResume, ckpt_path=checkpoint))  # once per process
