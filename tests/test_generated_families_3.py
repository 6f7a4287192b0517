"""Generated setups of the families fixed in this round, shrunk: one test each.

Each runs its setup through the oracle (``tests/setups/oracle.py``: uninterrupted against
interrupted-and-resumed, each fit in a fresh process) with ``resumes_exactly_or_named`` (see
``tests/test_generated_regressions.py`` for what a ``Setup(...)`` leaves at its simplest).
"""

from __future__ import annotations

from pathlib import Path

from setups.space import CallbackSpec, CheckpointSpec, DataSpec, InterruptionSpec, ModuleSpec, Setup, TrainerSpec
from test_generated_regressions import resumes_exactly_or_named

USER = (("state_dict", False), ("per_rank", False), ("epoch_start", "none"), ("logs", False), ("deque", False))


def test_a_relaunch_from_a_save_after_an_early_stop_inside_the_epoch_ends_the_epoch(tmp_path: Path) -> None:
    """EarlyStopping stops at the validation after the epoch's last batch (val_check_interval=2), and the
    ModelCheckpoint of that validation is the relaunch's file: the resumed fit runs the rest of the batch's end
    and the epoch's end (on_train_epoch_end, the epoch's logged values, the plateau scheduler's update,
    current_epoch 1) before it stops, as the job did (the stop set at the fit's start ended it before the epoch)."""
    setup = Setup(
        module=ModuleSpec(scheduler="plateau"),
        data=DataSpec(batch_size=4),
        trainer=TrainerSpec(val_check_interval=2),
        callbacks=(
            CallbackSpec("early_stopping", (("monitor", "val_loss_0"), ("patience", 0), ("mode", "max"))),
            CallbackSpec("lr_monitor", (("logging_interval", "step"),)),
            CallbackSpec("user", USER),
        ),
        interruption=InterruptionSpec(how="relaunch"),
    )
    verdict = resumes_exactly_or_named(setup, tmp_path)
    assert verdict.outcome == "exact", verdict.detail


def test_a_resume_at_the_last_epochs_end_counts_the_persistent_workers_passes(tmp_path: Path) -> None:
    """An exception in on_train_epoch_end of the last epoch (persistent_workers=True, an IterableDataset): the
    resumed fit runs that epoch's end, and the file ModelCheckpoint writes there records the persistent iterator's
    passes as the uninterrupted run's does (2, the epochs it ran; the resumed fit's fresh iterator counted 1)."""
    setup = Setup(
        module=ModuleSpec(accumulate=2),
        data=DataSpec(workers=1, persistent=True, dataset="iterable", via="datamodule"),
        checkpoint=CheckpointSpec(on_exception=True),
        interruption=InterruptionSpec(where="on_train_epoch_end", at=50),
    )
    verdict = resumes_exactly_or_named(setup, tmp_path)
    assert verdict.outcome == "exact", verdict.detail


def test_a_save_in_the_modules_on_train_epoch_end_runs_the_epoch_end_hooks_after_it(tmp_path: Path) -> None:
    """The module saves in its on_train_epoch_end of the last epoch, and an exception follows: EarlyStopping's
    on_train_epoch_end (a monitoring callback, called after the module's hook) had not run. The resumed fit runs the
    epoch's end again from there (EarlyStopping's check, its best score; the epoch's logged row), where it went on at
    the next epoch as if every hook had returned, and so trained nothing and ran none of them."""
    setup = Setup(
        module=ModuleSpec(scheduler="step"),
        callbacks=(
            CallbackSpec("early_stopping", (("monitor", "val_loss_0"), ("patience", 0), ("mode", "min"))),
            CallbackSpec("user", USER),
        ),
        checkpoint=CheckpointSpec(every="steps", top_k=-1),
        interruption=InterruptionSpec(how="save", where="on_train_epoch_end", at=50),
    )
    verdict = resumes_exactly_or_named(setup, tmp_path)
    assert verdict.outcome == "exact", verdict.detail


def test_persistent_workers_drawing_from_a_generator_the_dataset_holds_are_named(tmp_path: Path) -> None:
    """The dataset adds noise drawn from a torch.Generator it holds, loaded by one persistent worker: the
    worker draws from its own copy of the generator, which moves through epoch 0 and which no checkpoint holds.
    The resume at epoch 1 (fresh workers, their copies from the main process's generator) draws other noise:
    named (the watch in each worker looked at its global streams only, which did not move)."""
    setup = Setup(data=DataSpec(workers=1, persistent=True, augment="held"))
    verdict = resumes_exactly_or_named(setup, tmp_path)
    assert verdict.outcome == "warned", verdict.detail
    assert verdict.family == "warned: worker draws"
    assert any("state_dict" in difference for difference in verdict.differences), verdict.differences


def test_workers_drawing_from_a_generator_the_dataset_holds_resumed_at_an_epochs_start_are_exact(
    tmp_path: Path,
) -> None:
    """The same without persistent workers: each epoch's workers start from the main process's generator, in the
    uninterrupted run as after the resume at epoch 1's start; nothing differs, nothing is named."""
    setup = Setup(data=DataSpec(workers=1, augment="held"))
    verdict = resumes_exactly_or_named(setup, tmp_path)
    assert verdict.outcome == "exact", verdict.detail


def test_a_stateful_loaders_dataset_generator_goes_on_after_a_resume_at_an_epochs_start(tmp_path: Path) -> None:
    """A StatefulDataLoader in the main process over a dataset that draws its noise from a torch.Generator it holds
    (its state_dict() returns the generator's state), resumed from ModelCheckpoint's file of epoch 0's end: the point
    carries no loader position, and Lightning's loader states were dropped with it, so the dataset's generator
    started epoch 1 from its first state; now it goes on from the saved one, as Lightning's own load gives it."""
    setup = Setup(data=DataSpec(loader="stateful", augment="held"))
    verdict = resumes_exactly_or_named(setup, tmp_path)
    assert verdict.outcome == "exact", verdict.detail


def test_an_iterable_datasets_position_an_epoch_cut_short_leaves_goes_on_after_a_resume(tmp_path: Path) -> None:
    """An IterableDataset with state_dict() (its position) in a plain DataLoader, epochs cut to 3 batches by
    limit_train_batches: the next epoch's iterator goes on from the position the cut left. Resumed from the save at
    epoch 0's end (a ModelCheckpoint's, in on_train_epoch_end), the dataset's state goes back with the point, where
    it started epoch 1 from the first row."""
    setup = Setup(
        data=DataSpec(rows=32, dataset="iterable"),
        trainer=TrainerSpec(limit_train_batches=3),
        interruption=InterruptionSpec(where="on_train_batch_end", at=60),
    )
    verdict = resumes_exactly_or_named(setup, tmp_path)
    assert verdict.outcome == "exact", verdict.detail
