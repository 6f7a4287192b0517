"""Setups the generator found failing (families of its third round), shrunk: one test each.

Each runs its setup through the oracle (``tests/setups/oracle.py``: uninterrupted against interrupted-and-resumed,
each fit in a fresh process) with ``resumes_exactly_or_named`` from ``tests/test_generated_regressions.py``: the
resume is exact, or warned with what differs named.
"""

from __future__ import annotations

from pathlib import Path

from setups.space import CallbackSpec, CheckpointSpec, DataSpec, InterruptionSpec, Setup, TrainerSpec
from test_generated_regressions import resumes_exactly_or_named


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
