"""Families the generator of setups found in Lightning's callbacks and the module's running statistics, each in
a focused form beside its shrunk setup (tests/test_generated_regressions.py):

1. ``StochasticWeightAveraging``: its ``load_state_dict`` keeps the checkpoint's ``n_averaged`` and scheduler
   state in ``_init_n_averaged`` and ``_scheduler_state`` for its set-up, and nothing clears them; a resumed
   fit ended with the checkpoint's (2 and SWALR's state) where the uninterrupted one holds what its own start
   left (0 and None). They go back once the resumed fit's set-up read them, inside an epoch and at its start.
2. A batch's logged row after a save inside the batch's step or end: the resumed run goes on at that batch's
   end and writes its row (where ``log_every_n_steps`` has Lightning write one), as what runs after the point.
   It wrote it only where the run that saved had stopped there (an exception's save), so a ``ModelCheckpoint``
   save in ``on_train_batch_end`` followed by an exception in the module's ``on_train_batch_end`` lost the
   row; and an exception's save wrote it whatever ``log_every_n_steps`` said.
3. BatchNorm's running statistics at a save inside a batch: named only where they changed since the batch's
   start (its forward ran before the save), which the resumed run, forwarding the batch again, counts twice. A
   user's save at training_step's start, before the forward, resumes exactly and silently (it was named).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from pytorch_lightning.callbacks import Callback, ModelCheckpoint, StochasticWeightAveraging
from test_lightning_parity import Rows
from test_resume_regressions import (
    WAYS,
    Fit,
    PlainPlanned,
    PlannedFault,
    TypedPlanned,
    assert_same_fit,
    chain,
    fit,
    planned,
)
from torch import nn

# --- 1. StochasticWeightAveraging's values its loading keeps ------------------------------------------------


def _averaging(fitted: Fit) -> StochasticWeightAveraging:
    return next(c for c in fitted.trainer.callbacks if isinstance(c, StochasticWeightAveraging))


def _averaged(fitted: Fit) -> tuple[Any, ...]:
    swa = _averaging(fitted)
    return (swa._init_n_averaged, swa._scheduler_state, int(swa.n_averaged or 0), swa._latest_update_epoch)


@pytest.mark.parametrize("way", WAYS)
def test_stochastic_weight_averaging_keeps_what_its_own_start_loaded_after_a_resume_inside_an_epoch(
    way: str, tmp_path: Path
) -> None:
    """swa_epoch_start=1 (averaging from epoch 0), an exception in epoch 1's batch 3, resumed from
    OnExceptionCheckpoint's file: the averaging counts 2 models and ends as uninterrupted, with _init_n_averaged
    0 and _scheduler_state None (2 and SWALR's state before)."""

    def callbacks() -> list[Callback]:
        return [StochasticWeightAveraging(swa_lrs=0.01, swa_epoch_start=1)]

    full, interrupted, resumed = chain(way, tmp_path, callbacks, (1, 3))
    assert_same_fit(resumed, full)
    assert (interrupted.warned, resumed.warned) == ([], [])
    assert _averaged(full) == (0, None, 2, 1)
    assert _averaged(resumed) == _averaged(full)


@pytest.mark.parametrize("way", WAYS)
def test_stochastic_weight_averaging_keeps_what_its_own_start_loaded_after_a_resume_at_an_epochs_start(
    way: str, tmp_path: Path
) -> None:
    """Resumed from ModelCheckpoint's file of epoch 0's end: Lightning runs the set-up in epoch 1's
    on_train_epoch_start, from the checkpoint's values (1 model, SWALR's state); after it they are the
    uninterrupted fit's (0, None)."""

    def callbacks() -> list[Callback]:
        return [
            StochasticWeightAveraging(swa_lrs=0.01, swa_epoch_start=1),
            ModelCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=-1),
        ]

    full = fit(way, tmp_path / "full", planned(way), callbacks())
    resumed = fit(
        way, tmp_path / "resumed", planned(way), callbacks(), ckpt_path=tmp_path / "ckpt" / "epoch=0-step=12.ckpt"
    )
    assert_same_fit(resumed, full)
    assert resumed.warned == []
    assert _averaged(resumed) == _averaged(full) == (0, None, 2, 1)
    assert "on_train_epoch_start" not in vars(_averaging(resumed))  # its own method again after the set-up


# --- 2. a batch's logged row after a save inside the batch ------------------------------------------------


class _FailsAtBatchEnd:
    """Logs each step's loss; the plan's ``batch_end_fault`` (epoch, batch) raises in the module's own
    on_train_batch_end, which Lightning calls after the callbacks' (ModelCheckpoint has saved there)."""

    def loss(self, batch: Any, batch_idx: int) -> Any:
        loss = super().loss(batch, batch_idx)  # type: ignore[misc]
        getattr(self, "log")("step_loss", loss, on_step=True, on_epoch=False)
        return loss

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        trainer: Any = getattr(self, "trainer")
        plan: dict[str, Any] = getattr(self, "plan")
        if tuple(plan.get("batch_end_fault", ())) == (trainer.current_epoch, batch_idx):
            raise PlannedFault("in on_train_batch_end")


class TypedFailsAtBatchEnd(_FailsAtBatchEnd, TypedPlanned):
    pass


class PlainFailsAtBatchEnd(_FailsAtBatchEnd, PlainPlanned):
    pass


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize(("source", "every"), [("ModelCheckpoint", 1), ("OnExceptionCheckpoint", 2)])
def test_a_batchs_row_after_a_save_in_its_end_is_written_once_as_lightning_would(
    way: str, source: str, every: int, tmp_path: Path
) -> None:
    """ModelCheckpoint saves in on_train_batch_end at each step; the module's on_train_batch_end raises in
    epoch 0's last batch (batch 2 of 3, step 2). Resumed from ModelCheckpoint's file of that step (1 row a step):
    the interrupted fit's rows and the resumed fit's are the uninterrupted fit's (the row of step 2 was missing).
    Resumed from OnExceptionCheckpoint's, with log_every_n_steps=2: no row at step 2 (one was written)."""

    def module(plan: dict[str, Any] | None = None) -> Any:
        return TypedFailsAtBatchEnd(plan) if way == "typed" else PlainFailsAtBatchEnd(plan)

    def run(root: Path, plan: dict[str, Any] | None, ckpt_path: Path | None = None) -> tuple[Fit, Rows]:
        rows = Rows()
        callbacks: list[Callback] = [ModelCheckpoint(dirpath=root / "ckpt", every_n_train_steps=1, save_top_k=-1)]
        options: dict[str, Any] = {"limit_train_batches": 3, "log_every_n_steps": every}
        return fit(way, root, module(plan), callbacks, ckpt_path=ckpt_path, logger=rows, **options), rows

    full, full_rows = run(tmp_path / "full", None)
    interrupted, interrupted_rows = run(tmp_path / "run", {"batch_end_fault": (0, 2)})
    assert isinstance(interrupted.error, PlannedFault)
    saved = tmp_path / "run" / ("ckpt/epoch=0-step=3.ckpt" if source == "ModelCheckpoint" else "on_exception.ckpt")
    resumed, resumed_rows = run(tmp_path / "resumed", None, saved)
    assert_same_fit(resumed, full)
    assert resumed.warned == []
    steps = [step for step, _ in full_rows.rows]
    assert steps == ([0, 1, 2, 2, 3, 4, 5, 5] if every == 1 else [1, 2, 3, 5, 5])  # each epoch's end: step 2, 5
    assert [step for step, _ in interrupted_rows.rows] == ([0, 1] if every == 1 else [1])
    assert interrupted_rows.rows + resumed_rows.rows == full_rows.rows


# --- 3. running statistics at a save inside a batch --------------------------------------------------------

SAVED_IN_STEP = (0, 3)  # epoch, batch: training_step saves there, before or after the forward


class _Normed:
    """A BatchNorm1d before the regressor; at ``SAVED_IN_STEP`` training_step saves a checkpoint of the user's
    (``trainer.save_checkpoint``), before the forward where the plan's ``save`` is ``before``, else after it."""

    def build(self, plan: dict[str, Any] | None) -> None:
        super().build(plan)  # type: ignore[misc]
        self.bn = nn.BatchNorm1d(3)

    def loss(self, batch: Any, batch_idx: int) -> Any:
        trainer: Any = getattr(self, "trainer")
        plan: dict[str, Any] = getattr(self, "plan")
        here = (trainer.current_epoch, batch_idx) == SAVED_IN_STEP and "save" in plan
        if here and plan["save"] == "before":
            trainer.save_checkpoint(plan["path"])
        x, y, ids = batch
        loss = super().loss((self.bn(x), y, ids), batch_idx)  # type: ignore[misc]
        if here and plan["save"] == "after":
            trainer.save_checkpoint(plan["path"])
        return loss


class TypedNormed(_Normed, TypedPlanned):
    pass


class PlainNormed(_Normed, PlainPlanned):
    pass


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("save", ["before", "after"])
def test_running_statistics_are_named_only_where_the_batchs_forward_ran_before_the_save(
    way: str, save: str, tmp_path: Path
) -> None:
    """A save in training_step of epoch 0's batch 3, resumed in a fresh fit: before the forward, the statistics
    are batch 3's start's and the resume is exact and silent (named before); after it, they count batch 3 and
    the resumed run forwards it again: named, num_batches_tracked one higher, the weights exact."""

    def module(plan: dict[str, Any] | None = None) -> Any:
        return TypedNormed(plan) if way == "typed" else PlainNormed(plan)

    saved = tmp_path / "saved.ckpt"
    full = fit(way, tmp_path / "full", module(), [])
    saving = fit(way, tmp_path / "saving", module({"save": save, "path": str(saved)}), [])
    assert saving.error is None and saved.exists()
    resumed = fit(way, tmp_path / "resumed", module(), [], ckpt_path=saved)
    assert_same_fit(resumed, full)
    full_bn, resumed_bn = full.module.bn, resumed.module.bn
    owner = type(resumed.module).__name__
    if save == "before":
        assert resumed.warned == []
        assert int(resumed_bn.num_batches_tracked) == int(full_bn.num_batches_tracked) == 24
        assert torch.equal(resumed_bn.running_mean, full_bn.running_mean)
        assert torch.equal(resumed_bn.running_var, full_bn.running_var)
        return
    assert resumed.warned == [
        f"{owner}: resuming epoch 0 at batch 3\n"
        "  got:      a checkpoint saved inside batch 3, with modules in training mode that keep running statistics:"
        " self.bn (BatchNorm1d); their running_mean, running_var and num_batches_tracked already count batch 3's"
        " forward if it ran before the save, and the resumed run forwards batch 3 again, so they count it twice\n"
        "  expected: a checkpoint saved between batches, or a module without running statistics in training mode\n"
        "  fix:      nothing to do for the weights and the epoch values, which are exact; the running statistics count"
        " one batch twice (num_batches_tracked is one higher); to avoid it save between batches"
        " (ModelCheckpoint(every_n_train_steps=...)), or recompute the statistics after training with"
        " torch.optim.swa_utils.update_bn(loader, model)"
    ]
    assert int(resumed_bn.num_batches_tracked) == int(full_bn.num_batches_tracked) + 1 == 25
