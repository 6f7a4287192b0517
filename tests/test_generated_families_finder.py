"""BatchSizeFinder in a fit resumed inside its first epoch (generated setup ci 161 and its variants), shrunk.

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
