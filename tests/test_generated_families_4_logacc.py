"""Families of failures the generator of setups found, fixed since: each kept as a shrunk setup, judged by the
oracle as ``tests/test_generated_regressions.py`` judges its own (uninterrupted against interrupted-and-resumed,
each fit in a fresh process). ``Setup(...)`` shows only what differs from the simplest setup (see that file)."""

from __future__ import annotations

from pathlib import Path

from setups.space import CheckpointSpec, InterruptionSpec, ModuleSpec, Setup, TrainerSpec
from test_generated_regressions import resumes_exactly_or_named

# --- a logger's write that raised in the epoch's logging -----------------------------------------------------------


def test_a_loggers_write_that_raised_in_the_epochs_logging(tmp_path: Path) -> None:
    """A logger's log_metrics raised in epoch 0's logging (its second write at batch 4: the epoch's row), where
    FitLoop.on_advance_end holds the logger step one lower (it lowers it before the epoch's row, raises it after):
    OnExceptionCheckpoint's file held the lowered step, and the resumed fit, which runs the epoch's end again, wrote
    every row after with a step one behind (the epoch's row at 3, not 4; the last logger step 9, not 10). Now a save
    there encodes the step as the epoch's end began."""
    setup = Setup(
        checkpoint=CheckpointSpec(on_exception=True),
        loggers=("failing",),
        interruption=InterruptionSpec(where="logger", at=45, resume="last"),
    )
    verdict = resumes_exactly_or_named(setup, tmp_path)
    assert (verdict.outcome, verdict.plan) == (
        "exact",
        {"how": "exception", "hook": "logger", "epoch": 0, "batch": 4, "visit": 2},
    )


# --- a metric logged in validation, saved in on_validation_end -----------------------------------------------------


def test_a_metric_logged_in_validation_saved_in_on_validation_end(tmp_path: Path) -> None:
    """val_check_interval=2: ModelCheckpoint saves epoch=0-step=2.ckpt in on_validation_end, before Lightning resets
    the metric objects logged in that validation (`_on_evaluation_end`, after the hooks); the file held the declared
    val/mse metric's sums, which the resumed fit (resumed after the validation, which it does not run again) added
    its next validation to: val_mse at epoch 0 after 4 batches differed. Now a save there leaves those metrics out,
    as Lightning's reset leaves them."""
    setup = Setup(module=ModuleSpec(step_metric=True), trainer=TrainerSpec(val_check_interval=2))
    verdict = resumes_exactly_or_named(setup, tmp_path)
    assert (verdict.outcome, verdict.plan) == (
        "exact",
        {"how": "exception", "hook": "training_step", "epoch": 0, "batch": 2, "visit": 1},
    )


# --- a declared metric, resumed at an epoch's end ------------------------------------------------------------------


def test_a_declared_metric_resumed_at_an_epochs_end(tmp_path: Path) -> None:
    """An exception in on_train_epoch_end, OnExceptionCheckpoint: the resumed fit runs epoch 0's end again, and the
    declared train/mse metric's entry (no batch logs it again first) was looked up among the saved metrics by its
    path (_step_metric_copies.train__mse), where the declared copy goes by "declared train/mse": the resume warned
    that the module had changed what it logs, epoch 0's row lacked train_mse, and the metric was never reset (epoch
    1's train_mse differed). Now the copy is found by its path in the module."""
    setup = Setup(
        module=ModuleSpec(step_metric=True),
        checkpoint=CheckpointSpec(on_exception=True),
        interruption=InterruptionSpec(where="on_train_epoch_end"),
    )
    verdict = resumes_exactly_or_named(setup, tmp_path)
    assert (verdict.outcome, verdict.warnings, verdict.plan) == (
        "exact",
        [],
        {"how": "exception", "hook": "on_train_epoch_end", "epoch": 0, "batch": -1, "visit": 1},
    )
