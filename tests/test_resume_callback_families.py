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
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pytorch_lightning.callbacks import Callback, ModelCheckpoint, StochasticWeightAveraging
from pytorch_lightning.loggers import Logger
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


class Rows(Logger):
    """Every row Lightning writes: (step, {name: value})."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[int | None, dict[str, float]]] = []

    @property
    def name(self) -> str:
        return "rows"

    @property
    def version(self) -> int:
        return 0

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass

    def log_metrics(self, metrics: Any, step: int | None = None) -> None:
        self.rows.append((step, {name: float(value) for name, value in metrics.items()}))


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
