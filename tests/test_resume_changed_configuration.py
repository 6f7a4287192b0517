"""A relaunch from an epoch-end checkpoint with a changed configuration: what the module's attributes hold.

Exact resume continues the interrupted run: an attribute the fit changed (a counter of the batches
seen) comes back with the value it had at the checkpoint, whatever the relaunched Trainer or module is
given, and counts on from there; a setting given in ``__init__`` and not changed during the fit is not
saved, so the relaunched module keeps the value it was given. Lightning's own
``test_fit_ckpt_path_epoch_restored`` relaunches so (more batches per epoch) and expects plain
Lightning's count, the relaunched fit's batches alone (``conformance/allowlist.txt``); ``docs/resume.md``
("A relaunch with a changed configuration") says what a user gets, and each case here is one of its
sentences. ``exact_resume=False`` is the plain count, so the counter's cases can fail.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
from models import PlainRegressor, make_loader, make_trainer
from pytorch_lightning.callbacks import ModelCheckpoint

from lightning_step_types import StepResultWarning
from lightning_step_types.pytorch_lightning import StepResultAdapter

FIRST_BATCHES = 3  # batches per epoch in the interrupted run (of the loader's 4)


class BatchCounter(PlainRegressor):
    """Counts the batches it trains on (``on_train_batch_start``), as Lightning's test module does."""

    def __init__(self, lr: float = 0.1, start: int = 0) -> None:
        super().__init__(lr=lr)
        self.num_batches_seen = start
        self.resumed_at: int | None = None

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        self.num_batches_seen += 1

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.resumed_at = checkpoint["global_step"]  # set here: the module's own, left as set


def first_epoch_checkpoint(root: Path) -> Path:
    """Two epochs of ``FIRST_BATCHES`` batches, a checkpoint at each epoch's end; the first epoch's."""
    module = BatchCounter()
    checkpoints = ModelCheckpoint(dirpath=root / "checkpoints", save_top_k=-1)
    trainer = make_trainer(root, max_epochs=2, limit_train_batches=FIRST_BATCHES, enable_checkpointing=True,
                           callbacks=[checkpoints, StepResultAdapter()])  # fmt: skip
    trainer.fit(module, train_dataloaders=make_loader())
    assert module.num_batches_seen == 2 * FIRST_BATCHES
    return root / "checkpoints" / f"epoch=0-step={FIRST_BATCHES}.ckpt"


def relaunch(root: Path, checkpoint: Path, module: BatchCounter, exact_resume: bool = True, **trainer: Any) -> int:
    """Resume ``module`` from ``checkpoint`` for epoch 1; the Trainer's global step at the end.

    Nothing is named: every attribute either comes back or is the relaunched module's own.
    """
    fit = make_trainer(root / "relaunch", max_epochs=2, callbacks=[StepResultAdapter(exact_resume=exact_resume)],
                       **trainer)  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit.fit(module, train_dataloaders=make_loader(), ckpt_path=checkpoint)
    assert [str(w.message) for w in caught if issubclass(w.category, StepResultWarning)] == []
    return fit.global_step


@pytest.mark.parametrize(
    ("limit", "exact_resume", "expected"),
    [
        (FIRST_BATCHES, True, 2 * FIRST_BATCHES),  # the same configuration: the uninterrupted run's count
        (4, True, FIRST_BATCHES + 4),  # more batches per epoch: counts on from the checkpoint's value
        (4, False, 4),  # plain Lightning's resume: the relaunched fit's batches alone
    ],
)
def test_a_counter_the_fit_changed_counts_on_from_the_checkpoint(
    tmp_path: Path, limit: int, exact_resume: bool, expected: int
) -> None:
    checkpoint = first_epoch_checkpoint(tmp_path)
    module = BatchCounter()
    global_step = relaunch(tmp_path, checkpoint, module, exact_resume, limit_train_batches=limit)
    assert global_step == FIRST_BATCHES + limit
    assert module.num_batches_seen == expected


def test_a_counter_started_elsewhere_in_init_is_the_checkpoints(tmp_path: Path) -> None:
    checkpoint = first_epoch_checkpoint(tmp_path)
    module = BatchCounter(start=100)
    relaunch(tmp_path, checkpoint, module, limit_train_batches=4)
    assert module.num_batches_seen == FIRST_BATCHES + 4


def test_a_setting_given_anew_in_init_stays(tmp_path: Path) -> None:
    checkpoint = first_epoch_checkpoint(tmp_path)
    module = BatchCounter(lr=0.05)
    relaunch(tmp_path, checkpoint, module, limit_train_batches=4)
    assert module.lr == 0.05
    assert module.num_batches_seen == FIRST_BATCHES + 4


def test_the_relaunched_fits_own_count_from_what_on_load_checkpoint_sets(tmp_path: Path) -> None:
    checkpoint = first_epoch_checkpoint(tmp_path)
    module = BatchCounter()
    global_step = relaunch(tmp_path, checkpoint, module, limit_train_batches=4)
    assert module.resumed_at == FIRST_BATCHES
    assert global_step - module.resumed_at == 4
