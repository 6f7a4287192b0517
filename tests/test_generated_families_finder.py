"""BatchSizeFinder in a fit resumed inside its first epoch (generated setup ci 161 and its variants), and a tuner
(LearningRateFinder, BatchSizeFinder) in a fit resumed at a later epoch's start (ci 83, 121, 143), shrunk.

Each setup shows only what differs from the simplest one (``tests/test_generated_regressions.py``), judged by
the oracle (``tests/setups/oracle.py``: uninterrupted against interrupted-and-resumed, each fit in a fresh
process). The finder runs its trials in ``on_fit_start``, in the uninterrupted fit and again in the resumed one
(from the point's weights), then loads the checkpoint it saved before them.
"""

from __future__ import annotations

from pathlib import Path

from setups.oracle import _fresh, _job  # the oracle's fit in a fresh process, with or without the library
from setups.space import CallbackSpec, CheckpointSpec, DataSpec, InterruptionSpec, ModuleSpec, Setup, TrainerSpec
from test_generated_regressions import resumes_exactly_or_named

from lightning_step_types.check_resume.compare import differences

FINDER = (CallbackSpec("batch_size_finder"),)
LR_FINDER = (CallbackSpec("lr_finder"),)
EVERY_EPOCH = CheckpointSpec(every="epochs", top_k=-1)


def test_the_finders_trials_logged_values_do_not_stay_in_the_resumed_fits_views(tmp_path: Path) -> None:
    """The resumed fit's trials logged train_loss_epoch and val_loss_0 (from the point's weights); the
    uninterrupted fit's sanity check emptied the views after its own trials, and a resumed fit runs none: the
    views kept them beside the checkpoint's (epoch=0-step=2.ckpt's ``callback_metrics`` held
    ['train_loss_epoch', 'val_loss_0'] after the resume, none uninterrupted). Now emptied where the finder loads
    its checkpoint after its trials."""
    setup = Setup(
        data=DataSpec(via="datamodule"),
        trainer=TrainerSpec(max_epochs=1, num_sanity_val_steps=2),
        callbacks=FINDER,
        checkpoint=CheckpointSpec(every="steps", every_n=2, top_k=-1),
        interruption=InterruptionSpec(how="save", where="on_train_batch_end", at=70),
    )
    verdict = resumes_exactly_or_named(setup, tmp_path)
    assert verdict.plan is not None and (verdict.plan["epoch"], verdict.plan["batch"]) == (0, 1)


def test_the_finders_trials_logged_values_after_an_exception_in_the_first_epoch(tmp_path: Path) -> None:
    """The same, resumed from OnExceptionCheckpoint's file after an exception in the first epoch's batch 1, with a
    torchmetrics metric logged per epoch (['mean_out', 'train_loss_epoch'] after the resume, none uninterrupted)."""
    setup = Setup(
        module=ModuleSpec(metric=True),
        data=DataSpec(via="datamodule"),
        trainer=TrainerSpec(max_epochs=1, num_sanity_val_steps=2),
        callbacks=FINDER,
        checkpoint=CheckpointSpec(every="steps", every_n=2, top_k=-1, on_exception=True),
        interruption=InterruptionSpec(at=70),
    )
    verdict = resumes_exactly_or_named(setup, tmp_path)
    assert verdict.plan is not None and (verdict.plan["epoch"], verdict.plan["batch"]) == (0, 1)


def test_a_reload_with_a_draw_at_the_first_epochs_last_request(tmp_path: Path) -> None:
    """reload_dataloaders_every_n_epochs=1 and a train_dataloader() that draws from torch's stream: the finder
    asks for the training loaders again after its trials, and the resumed fit's finder does after its own (from
    other draws): the first epoch's rows after the point started elsewhere. The streams before the first epoch's
    last request now go into the checkpoint, and back before the resumed fit's request after its finder's."""
    setup = Setup(
        module=ModuleSpec(dropout=True),
        data=DataSpec(via="datamodule", reload=True),
        trainer=TrainerSpec(max_epochs=1),
        callbacks=FINDER,
        checkpoint=CheckpointSpec(every="steps", every_n=2, top_k=-1),
        interruption=InterruptionSpec(how="save", where="on_train_batch_end", at=70),
    )
    verdict = resumes_exactly_or_named(setup, tmp_path)
    assert verdict.plan is not None and (verdict.plan["epoch"], verdict.plan["batch"]) == (0, 1)


def test_a_reload_in_the_second_epoch_after_the_finder(tmp_path: Path) -> None:
    """The uninterrupted fit's finder loads the checkpoint it saved at the fit's start after its trials: the
    streams saved there stayed to be put back before the next training iterator made, the second epoch's
    (reloaded), so the uninterrupted fit (not plain Lightning's) drew its second epoch from the fit's start
    streams, and the resumed fit did not. Now nothing of that checkpoint's streams goes back after the trials."""
    setup = Setup(
        module=ModuleSpec(dropout=True),
        data=DataSpec(via="datamodule", reload=True),
        callbacks=FINDER,
        checkpoint=CheckpointSpec(every="steps", every_n=2, top_k=-1),
        interruption=InterruptionSpec(how="save", where="on_train_batch_end", at=40),
    )
    verdict = resumes_exactly_or_named(setup, tmp_path)
    assert verdict.plan is not None and (verdict.plan["epoch"], verdict.plan["batch"]) == (0, 1)


def test_an_uninterrupted_fit_with_the_finder_and_a_reload_trains_as_plain_lightnings(tmp_path: Path) -> None:
    """The same setup uninterrupted, with the library and without (``exact_resume=False``): the same weights,
    metrics and rows; only the library's own entries differ (its checkpoint key, the module's flag). The
    second epoch's reloaded iterator drew from the fit's start streams with the library."""
    setup = Setup(
        module=ModuleSpec(dropout=True),
        data=DataSpec(via="datamodule", reload=True),
        callbacks=FINDER,
        checkpoint=CheckpointSpec(every="steps", every_n=2, top_k=-1),
    )
    ((ours,),) = _fresh(setup, [_job(setup, tmp_path / "ours", None, True)])
    ((plain,),) = _fresh(setup, [_job(setup, tmp_path / "plain", None, False)])
    found = [str(difference) for difference in differences(plain, [ours])]
    assert found == [
        "at the resume (epoch 0, batch 0) module attribute exact_resume: absent after the resume, False uninterrupted",
        "module attribute exact_resume: absent after the resume, False uninterrupted",
        "<root>/checkpoints/epoch=0-step=2.ckpt keys: ['lightning_step_types'] after the resume, [] uninterrupted",
        "<root>/checkpoints/epoch=1-step=4.ckpt keys: ['lightning_step_types'] after the resume, [] uninterrupted",
        "<root>/checkpoints/epoch=1-step=6.ckpt keys: ['lightning_step_types'] after the resume, [] uninterrupted",
    ]


def test_learning_rate_finder_resumed_at_a_later_epochs_start_trains_the_epoch_from_its_iterators_streams(
    tmp_path: Path,
) -> None:
    """Resumed from epoch=0's checkpoint (an exception in epoch 1's first step), with dropout. The uninterrupted
    epoch 1 made its iterator after its on_train_epoch_start hooks and trained from the streams that making left;
    the resumed fit makes its first iterator before the hooks, where the streams after it are read and put back
    after them. LearningRateFinder makes it in its own ``setup_data`` after loading its checkpoint again, between
    the fit loop's runs, inside ``isolate_rng``, which then put the streams back as they were before the finder:
    the epoch trained from those (weights and the checkpoints' best score differed). Now an iterator made before
    the fit loop's run is made again at the epoch loop's start, after the hooks, as the uninterrupted epoch's was."""
    setup = Setup(
        module=ModuleSpec(dropout=True),
        data=DataSpec(val_loaders=0),
        callbacks=LR_FINDER,
        checkpoint=EVERY_EPOCH,
        interruption=InterruptionSpec(at=65),
    )
    verdict = resumes_exactly_or_named(setup, tmp_path)
    assert verdict.plan is not None and (verdict.plan["epoch"], verdict.plan["batch"]) == (1, 0)


def test_learning_rate_finder_resumed_at_a_later_epochs_start_records_the_next_epochs_streams(tmp_path: Path) -> None:
    """The same without dropout: only epoch=1-step=10.ckpt's record of the streams its epoch-2 iterator is made from
    differed (``random_streams['iterator']``: the resumed epoch 1 ran from other streams, and left others)."""
    setup = Setup(
        data=DataSpec(val_loaders=0),
        callbacks=LR_FINDER,
        checkpoint=CheckpointSpec(every="epochs", top_k=2, monitor="train_loss_step"),
        interruption=InterruptionSpec(at=65),
    )
    verdict = resumes_exactly_or_named(setup, tmp_path)
    assert verdict.plan is not None and (verdict.plan["epoch"], verdict.plan["batch"]) == (1, 0)


def test_a_tuners_trial_epoch_end_is_not_the_next_epochs_hooks_start(tmp_path: Path) -> None:
    """BatchSizeFinder's trials run the fit loop through epoch 0's end, where the streams the next epoch's hooks start
    from are read: the fit's own epoch-0-end save (ModelCheckpoint's, before the fit's own epoch end read them again)
    recorded the trials' streams for epoch 1's start, and the resumed epoch 1 made its iterator and ran its hooks from
    them (weights differed). Now a run of the fit loop starts without the streams a run before it read."""
    setup = Setup(
        module=ModuleSpec(dropout=True),
        data=DataSpec(via="datamodule", val_loaders=0),
        callbacks=FINDER,
        checkpoint=EVERY_EPOCH,
        interruption=InterruptionSpec(at=65),
    )
    verdict = resumes_exactly_or_named(setup, tmp_path)
    assert verdict.plan is not None and (verdict.plan["epoch"], verdict.plan["batch"]) == (1, 0)


def test_learning_rate_finder_with_max_steps_resumed_inside_an_epoch_goes_on_from_the_points_batch(
    tmp_path: Path,
) -> None:
    """Seed ci, setup 130, shrunk: LearningRateFinder, max_steps=7, a kill in batch 3 resumed from the save after
    batch 1. `_lr_find` sets the epoch loop not restarting after it loads its own checkpoint; the fit loop stays
    restarting with max_steps set (iteration-based training), so the library's restart left the epoch loop's flag
    as the finder set it, and the resumed epoch counted its batches from 0 with the optimizer's 2 steps done: it
    trained batches 0 to 4 where the uninterrupted fit trained 2 to 6 (logged steps, rows and validation loss
    differed, silently)."""
    setup = Setup(
        data=DataSpec(rows=27, batch_size=4, loader="stateful"),
        trainer=TrainerSpec(max_epochs=1, max_steps=7),
        callbacks=LR_FINDER,
        checkpoint=CheckpointSpec(every="steps", every_n=2, save_last=True),
        interruption=InterruptionSpec(how="kill", at=71),
    )
    verdict = resumes_exactly_or_named(setup, tmp_path)
    assert verdict.outcome == "exact"
    assert verdict.plan == {"how": "kill", "hook": "training_step", "epoch": 0, "batch": 3, "visit": 2}


def test_learning_rate_finder_resumed_inside_an_epoch_records_the_checkpoints_streams_before_its_iterator(
    tmp_path: Path,
) -> None:
    """Seed ci, setups 66 and 130 (without max_steps), shrunk: the resumed fit makes its point's iterator three
    times (the finder's trial, the finder's ``setup_data`` after its own load, the fit loop's run). The streams went
    back before the first two; the record that later checkpoints hold of the streams before the epoch's iterator
    was read again before the third, from what the trial had drawn (epoch=0-step=6.ckpt's
    ``random_streams['iterator']`` differed from the uninterrupted run's). The fit itself was exact."""
    setup = Setup(
        data=DataSpec(rows=27, batch_size=4, loader="stateful"),
        trainer=TrainerSpec(max_epochs=1),
        callbacks=LR_FINDER,
        checkpoint=CheckpointSpec(every="steps", every_n=2, save_last=True),
        interruption=InterruptionSpec(how="kill", at=71),
    )
    verdict = resumes_exactly_or_named(setup, tmp_path)
    assert verdict.outcome == "exact"
