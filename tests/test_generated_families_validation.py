"""Validation loaders that shuffle with a generator of their own (``val_order="generator"``, a dimension of the
generated setups drawn last at each seed), in a resumed fit, shrunk.

The uninterrupted run's sanity check and validations draw each validation's order from the generator; the
checkpoint holds its state. A resumed fit makes its validation loaders at its start where its first epoch
validates, else at its first validation, and from an epoch's end Lightning runs a sanity check of its own; with
``reload_dataloaders_every_n_epochs`` the uninterrupted run's validation makes them anew at some epochs.
"""

from __future__ import annotations

from pathlib import Path

from setups.space import CheckpointSpec, DataSpec, InterruptionSpec, Setup, TrainerSpec
from test_generated_regressions import resumes_exactly_or_named

SHUFFLED = DataSpec(val_order="generator")


def test_a_first_validation_after_the_point_shuffles_from_the_saved_generator(tmp_path: Path) -> None:
    """Validation every second epoch, resumed inside epoch 0: the resumed fit has no validation loader at its
    first batch, where the generators went back (none was set), so its first validation shuffled as a fresh
    generator does, not from the state the uninterrupted run's sanity check left (val_loss_0 differed, silently).
    Now set where that validation makes its loaders."""
    setup = Setup(
        data=SHUFFLED,
        trainer=TrainerSpec(max_epochs=2, check_val_every_n_epoch=2, num_sanity_val_steps=2, limit_val_batches=2),
        checkpoint=CheckpointSpec(on_exception=True),
        interruption=InterruptionSpec(at=30),
    )
    verdict = resumes_exactly_or_named(setup, tmp_path)
    assert verdict.outcome == "exact"
    assert verdict.plan is not None and verdict.plan["epoch"] == 0


def test_a_reload_makes_the_validation_loaders_anew_where_the_uninterrupted_run_did(tmp_path: Path) -> None:
    """Seeds ci 13 and 204, shrunk: reload_dataloaders_every_n_epochs=1, resumed from epoch 0's end. The resumed
    fit's own sanity check made the loaders at epoch 1 and drew an order, and its validation then went on from that
    generator without a reload (Lightning counts from its own making), where the uninterrupted run's validation
    made them anew: two of the rows differed (val_loss_0 1.27 against 0.74), silently. Now the resumed fit's first
    validation makes them anew where the uninterrupted one did, counted from the saved loaders' epoch."""
    setup = Setup(
        data=DataSpec(via="datamodule", reload=True, val_order="generator"),
        trainer=TrainerSpec(limit_val_batches=2, num_sanity_val_steps=2),
        interruption=InterruptionSpec(how="kill"),
    )
    verdict = resumes_exactly_or_named(setup, tmp_path)
    assert verdict.outcome == "exact"
