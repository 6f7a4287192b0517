"""Families of failures the generator of setups found, fixed since: each kept as a shrunk setup, judged by the
oracle as ``tests/test_generated_regressions.py`` judges its own (uninterrupted against interrupted-and-resumed,
each fit in a fresh process). ``Setup(...)`` shows only what differs from the simplest setup (see that file)."""

from __future__ import annotations

from pathlib import Path

from setups.space import CheckpointSpec, DataSpec, InterruptionSpec, ModuleSpec, Setup, TrainerSpec
from test_generated_regressions import resumes_exactly_or_named

# --- a persistent loader's pass at the first epoch's start, made before the save ----------------------------------


def test_a_persistent_loaders_pass_resumed_from_the_first_epochs_start(tmp_path: Path) -> None:
    """Two shuffled plain loaders, one persistent worker each, saved in on_train_epoch_start of epoch 0: Lightning made
    the epoch's iterators before the hooks (`FitLoop.setup_data`), each drawing its first index batch (its order)
    as it was made, but the file held the streams at the save, after the second loader drew its workers' base seed:
    the resumed fit drew the first loader's order from them (its weights differed)."""
    setup = Setup(
        module=ModuleSpec(scheduler="step"),
        data=DataSpec(sampler="shuffle", workers=1, persistent=True, train_loaders=2, val_loaders=0),
        trainer=TrainerSpec(max_steps=2),
        checkpoint=CheckpointSpec(every="epochs", top_k=2, monitor="train_loss_step"),
        interruption=InterruptionSpec(how="save", where="on_train_epoch_start"),
    )
    resumes_exactly_or_named(setup, tmp_path)


def test_a_later_checkpoints_count_of_a_persistent_loaders_passes_after_a_resume_at_the_first_epochs_start(
    tmp_path: Path,
) -> None:
    """The same with sequential loaders (setup 193 of seed ci, shrunk): the file recorded the count of passes made
    (1) as the passes before the epoch's, which was the iterator's first, and the streams at the save as those of
    its first draw; the resumed fit's later files (epoch=0-step=2.ckpt) recorded both otherwise than the
    uninterrupted run's (the shorter loader's passes one more, from setup 193's epoch=0-step=7.ckpt on)."""
    setup = Setup(
        module=ModuleSpec(scheduler="step"),
        data=DataSpec(workers=1, persistent=True, train_loaders=2, val_loaders=0),
        trainer=TrainerSpec(max_steps=2),
        checkpoint=CheckpointSpec(every="epochs", top_k=2, monitor="train_loss_step"),
        interruption=InterruptionSpec(how="save", where="on_train_epoch_start"),
    )
    resumes_exactly_or_named(setup, tmp_path)


# --- a save in the sanity check, before the fit loop asked for its training loaders --------------------------------


def test_a_later_checkpoints_record_of_the_streams_after_a_resume_from_the_sanity_check(tmp_path: Path) -> None:
    """Saved in the sanity check's validation_step (setup 76 of seed ci, shrunk): the file held the streams at the
    save, after the sanity check drew, as those before the first training iterator; Lightning puts back the
    streams the sanity check started from (`isolate_rng`) and asks for the training loaders after it. The resumed
    fit made its iterator from the saved streams, and its later files (epoch=0-step=5.ckpt on) recorded them as the
    streams before that iterator, where the uninterrupted run's recorded the ones the sanity check started from."""
    setup = Setup(
        trainer=TrainerSpec(num_sanity_val_steps=2),
        checkpoint=CheckpointSpec(every="epochs", top_k=-1),
        interruption=InterruptionSpec(how="save", where="validation_step"),
    )
    resumes_exactly_or_named(setup, tmp_path)


def test_a_reloads_draw_after_a_resume_from_the_sanity_check(tmp_path: Path) -> None:
    """The same with reload_dataloaders_every_n_epochs=1 and a draw in train_dataloader(): the resumed fit's request
    drew from its own streams and its iterator was made from the saved ones (the uninterrupted run's from what its
    request left, one draw on), so its later files' record of the streams before the request and before the iterator
    differed. Now such a file holds the streams the request starts from, and the iterator draws after it."""
    setup = Setup(
        data=DataSpec(reload=True),
        trainer=TrainerSpec(num_sanity_val_steps=2),
        checkpoint=CheckpointSpec(every="epochs", top_k=-1),
        interruption=InterruptionSpec(how="save", where="validation_step"),
    )
    resumes_exactly_or_named(setup, tmp_path)


# --- the validation loaders a resumed fit made at its start ---------------------------------------------------------


def test_a_later_checkpoints_point_after_a_resume_in_an_epoch_that_validates_before_its_validation(
    tmp_path: Path,
) -> None:
    """check_val_every_n_epoch=2, resumed inside epoch 1 (setups 18 and 188 of seed ci, shrunk): Lightning made the
    resumed fit's validation loaders at its start (the epoch validates), where the uninterrupted run made them at
    epoch 1's validation; ModelCheckpoint (monitor="train_loss_step", a save every batch) defers its save at the
    epoch's last batch past the validation only where they exist, so the resumed fit's epoch=1-step=10.ckpt was
    written after the validation (its point: the validation done) and the uninterrupted run's before it. Now a fit
    resumed from a point its run reached without validation loaders makes them at the validation too."""
    setup = Setup(
        trainer=TrainerSpec(check_val_every_n_epoch=2),
        checkpoint=CheckpointSpec(every="time", top_k=-1, monitor="train_loss_step"),
        interruption=InterruptionSpec(at=75),
    )
    resumes_exactly_or_named(setup, tmp_path)
