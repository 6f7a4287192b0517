"""Families of failures the generator of setups found, fixed since: each kept as a shrunk setup, judged by the
oracle as ``tests/test_generated_regressions.py`` judges its own (uninterrupted against interrupted-and-resumed,
each fit in a fresh process). ``Setup(...)`` shows only what differs from the simplest setup (see that file)."""

from __future__ import annotations

from pathlib import Path

from setups.space import CallbackSpec, CheckpointSpec, DataSpec, InterruptionSpec, ModuleSpec, Setup, TrainerSpec
from test_generated_regressions import resumes_exactly_or_named

# --- ModelCheckpoint's last file after a resume from one of its own top-k files ---------------------------------


def test_modelcheckpoints_last_link_after_a_resume_from_it(tmp_path: Path) -> None:
    """ModelCheckpoint(save_last="link") writes epoch=0-step=5.ckpt before it sets last_model_path to last.ckpt (the
    link it makes to that file), so the file held the path before it (''): resumed from last.ckpt, the resumed
    ModelCheckpoint found last.ckpt "taken" and linked last-v1.ckpt from then on (epoch=1-step=10.ckpt's entry, its
    state, its files differed). Now the file's point holds the last path that save went on to set."""
    setup = Setup(checkpoint=CheckpointSpec(save_last="link"), interruption=InterruptionSpec(resume="last"))
    resumes_exactly_or_named(setup, tmp_path)


def test_modelcheckpoints_deferred_save_resumed_from(tmp_path: Path) -> None:
    """ModelCheckpoint(monitor=..., every_n_train_steps=5): the save due at epoch 0's last batch, which a validation
    follows, is deferred to on_validation_end, which sets _defer_save_until_validation back to False after writing
    epoch=0-step=5.ckpt; the file held True, and the fit resumed from it saved again at its first validation's end
    (epoch=1-step=9.ckpt, which the uninterrupted run never wrote: its best_k_models, scores and files differed)."""
    setup = Setup(
        trainer=TrainerSpec(num_sanity_val_steps=2, val_check_interval=0.5),
        checkpoint=CheckpointSpec(every="steps", every_n=5, monitor="train_loss_step", top_k=-1),
        interruption=InterruptionSpec(how="kill", where="on_train_batch_end", at=70),
    )
    resumes_exactly_or_named(setup, tmp_path)


# --- a later checkpoint's record of the validation loaders, after a resume before the first validation -----------


def test_a_later_checkpoints_record_of_the_validation_loaders_before_a_resumed_fits_first_validation(
    tmp_path: Path,
) -> None:
    """The sanity check made the validation loader before epoch 0; a fit resumed inside epoch 0 (from the user's
    save at its first batch's end) runs none, and validates first at epoch 1's end: its later checkpoints
    (epoch=0-step=2.ckpt on) recorded no validation loader's generators ([]) where the uninterrupted run's
    recorded its one loader's ([{}]). Now, until it makes its validation loaders, a resumed fit records the ones its
    checkpoint held."""
    setup = Setup(
        trainer=TrainerSpec(check_val_every_n_epoch=2, num_sanity_val_steps=2),
        checkpoint=CheckpointSpec(every="steps", every_n=2, top_k=-1),
        interruption=InterruptionSpec(how="save", where="on_train_batch_end"),
    )
    resumes_exactly_or_named(setup, tmp_path)


def test_a_later_checkpoints_record_of_the_validation_loaders_made_at_a_resumed_fits_start(tmp_path: Path) -> None:
    """check_val_every_n_epoch=2, resumed inside epoch 1: Lightning makes the validation loaders at the resumed
    fit's start (the epoch validates), where the uninterrupted run makes them at epoch 1's validation, so the
    resumed fit's later checkpoints in epoch 1 recorded one loader's generators ([{}]) where the uninterrupted run's
    recorded none ([])."""
    setup = Setup(
        module=ModuleSpec(scheduler="step", accumulate=2),
        data=DataSpec(via="datamodule", train_loaders=2),
        trainer=TrainerSpec(precision="bf16-true", check_val_every_n_epoch=2),
        checkpoint=CheckpointSpec(every="time", top_k=-1),
        interruption=InterruptionSpec(at=59),
    )
    resumes_exactly_or_named(setup, tmp_path)


# --- a later checkpoint's record of the resume machinery's own, after a resume -----------------------------------


def test_a_later_checkpoints_record_of_a_persistent_loaders_passes(tmp_path: Path) -> None:
    """A plain DataLoader with 2 persistent workers, killed in epoch 1 and resumed from epoch=0-step=5.ckpt: the
    resumed fit's new iterator makes the pass the uninterrupted run's persistent iterator ran as its second, and
    epoch=1-step=10.ckpt recorded it as the iterator's first (runs_before 1 where the uninterrupted run's has 2)."""
    setup = Setup(
        data=DataSpec(workers=2, persistent=True),
        checkpoint=CheckpointSpec(every="epochs", top_k=-1),
        interruption=InterruptionSpec(how="kill", where="on_train_batch_end", at=57),
    )
    resumes_exactly_or_named(setup, tmp_path)


def test_a_later_checkpoints_record_of_an_epoch_start_hooks_rows(tmp_path: Path) -> None:
    """LearningRateMonitor(logging_interval="epoch") writes a row in on_train_epoch_start; the second logger fails
    there, and the fit resumed at the epoch's start leaves out the row the first logger got already. Its
    epoch=0-step=4.ckpt recorded that the hook wrote no row (the uninterrupted run's: one): a row left out is given in
    the fit's history all the same."""
    setup = Setup(
        trainer=TrainerSpec(max_epochs=1),
        callbacks=(CallbackSpec("lr_monitor", (("logging_interval", "epoch"),)),),
        checkpoint=CheckpointSpec(every="steps", every_n=2, on_exception=True),
        loggers=("csv", "failing"),
        interruption=InterruptionSpec(where="logger"),
    )
    resumes_exactly_or_named(setup, tmp_path)


# --- LearningRateMonitor's row at an epoch's start ---------------------------------------------------------------


def test_learning_rate_monitors_row_at_an_epochs_start_resumed_inside_that_epoch(tmp_path: Path) -> None:
    """LearningRateMonitor(logging_interval="epoch") writes a row at each epoch's start; resumed inside epoch 1
    (an exception in training_step after a save every step), Lightning skips that hook. The run that saved wrote
    the row before the save, so nothing differs: it was named (a false alarm); now exact, without a warning."""
    setup = Setup(
        trainer=TrainerSpec(max_epochs=2),
        callbacks=(CallbackSpec("lr_monitor", (("logging_interval", "epoch"),)),),
        checkpoint=CheckpointSpec(every="steps", top_k=-1),
        interruption=InterruptionSpec(at=75),
    )
    verdict = resumes_exactly_or_named(setup, tmp_path)
    assert (verdict.outcome, verdict.warnings) == ("exact", [])
    assert verdict.plan is not None and (verdict.plan["epoch"], verdict.plan["batch"]) == (1, 2)


def test_learning_rate_monitors_epoch_start_row_resumed_at_the_next_epochs_start(tmp_path: Path) -> None:
    """Seed ci, setup 176, shrunk: LearningRateMonitor() writes a row at each epoch's start and one at each batch's
    start; resumed at epoch 1's start (from epoch=0-step=5.ckpt), each is written once, as uninterrupted. The check
    placed the epoch-start row after the last epoch's batches (the batch count there is still the last epoch's), so
    a later row of that place was taken for it: silent rows that did not differ; now exact."""
    setup = Setup(
        data=DataSpec(val_loaders=0),
        callbacks=(CallbackSpec("lr_monitor", (("logging_interval", None),)),),
    )
    verdict = resumes_exactly_or_named(setup, tmp_path)
    assert (verdict.outcome, verdict.warnings) == ("exact", [])
    assert verdict.plan is not None and (verdict.plan["epoch"], verdict.plan["batch"]) == (1, 0)


# --- a resume with nothing left to train; generators a dataset holds; an IterableDataset's position ---------------

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
