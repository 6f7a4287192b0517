"""What exact resume reads of the callbacks at each batch's start: only those whose batch hooks can change them.

A ``ModelCheckpoint`` that saves at no batch's end (neither every ``every_n_train_steps`` steps nor by
``train_time_interval``: the default Trainer's) returns at once from its ``on_train_batch_end``, so its
attributes are not read per batch; one that does save there, or a subclass with a batch hook of its own,
is. A fault inside a batch still resumes exactly with such a one (the fault matrices' holders part
covers the rest).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint

from lightning_step_types.resume.fit_follower import follower_of
from tests.models import TypedRegressor, assert_same_params, make_loader, make_trainer


class CountingCheckpoint(ModelCheckpoint):
    """A subclass with a batch hook of its own, which changes its attributes."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.batches_seen = 0

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.batches_seen += 1
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)


class InBatchProbe(pl.Callback):
    """Records, at the first batch's start, which callbacks the follower reads at each batch's start."""

    def __init__(self) -> None:
        self.read_each_batch: list[Any] | None = None

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: Any, batch: Any, batch_idx: int) -> None:
        follower = follower_of(pl_module)
        assert follower is not None and follower.holders is not None
        if self.read_each_batch is None:
            self.read_each_batch = [callback for _, callback, _ in follower.holders.in_batch]


def test_only_callbacks_whose_batch_hooks_can_change_them_are_read_at_each_batch(tmp_path: Path) -> None:
    quiet = ModelCheckpoint(dirpath=tmp_path / "quiet")
    every_two = ModelCheckpoint(dirpath=tmp_path / "steps", every_n_train_steps=2)
    timed = ModelCheckpoint(dirpath=tmp_path / "time", train_time_interval=timedelta(hours=1))
    counting = CountingCheckpoint(dirpath=tmp_path / "counting")
    probe = InBatchProbe()
    callbacks = [quiet, every_two, timed, counting, probe]
    trainer = make_trainer(tmp_path, max_epochs=1, enable_checkpointing=True, callbacks=callbacks)
    trainer.fit(TypedRegressor(), make_loader())
    assert probe.read_each_batch is not None
    # in the Trainer's order (Lightning moves the checkpoint callbacks last)
    assert [id(callback) for callback in probe.read_each_batch] == [id(probe), id(every_two), id(timed), id(counting)]
    assert counting.batches_seen == trainer.num_training_batches


class FailAt(pl.Callback):
    """Raises inside the step's batch (its on_before_optimizer_step) at one global step, once."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: Any, optimizer: Any) -> None:
        if trainer.global_step == self.step:
            raise RuntimeError("fault inside the batch")


def test_a_fault_inside_a_batch_with_a_checkpoint_that_saves_at_no_batch_end_resumes_exactly(tmp_path: Path) -> None:
    torch.manual_seed(0)
    reference = TypedRegressor()
    make_trainer(tmp_path / "reference", max_epochs=2).fit(reference, make_loader())

    torch.manual_seed(0)
    interrupted = TypedRegressor()
    saving = ModelCheckpoint(dirpath=tmp_path / "on_exception", save_on_exception=True, save_top_k=0)
    failing = make_trainer(tmp_path / "run", max_epochs=2, enable_checkpointing=True, callbacks=[saving, FailAt(5)])
    try:
        failing.fit(interrupted, make_loader())
    except RuntimeError as error:
        assert str(error) == "fault inside the batch"
    else:
        raise AssertionError("the fault did not happen")
    (saved,) = list((tmp_path / "on_exception").glob("*.ckpt"))

    torch.manual_seed(1)  # another initialization: the checkpoint's weights replace it
    resumed = TypedRegressor()
    saving_again = ModelCheckpoint(dirpath=tmp_path / "on_exception", save_on_exception=True, save_top_k=0)
    make_trainer(tmp_path / "run", max_epochs=2, enable_checkpointing=True, callbacks=[saving_again]).fit(
        resumed, make_loader(), ckpt_path=saved
    )
    assert_same_params(reference, resumed)
