"""Exact resume on two CPU processes (gloo): each rank's running epoch state is saved into the one
checkpoint and restored to the same rank; a different world size says what starts fresh."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from models import assert_same_metrics, spawn_with_teardown_retry, trainer_kwargs
from pytorch_lightning.callbacks import ModelCheckpoint
from test_resume import EXACT, Logs, stateful_loader

from lightning_step_types import StepResultWarning, TrainStepResult, TypedLightningModule

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not EXACT, reason="Lightning before 2.5 replays the checkpoint's batch on resume"),
]


class DistributedResume(Logs, TypedLightningModule):
    """Logs each rank's own values, and values synced over both ranks."""

    def __init__(self) -> None:
        super().__init__()
        self.build(0, 0.1)
        self.setup_logs()

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        loss = self.log_training(batch)  # unsynced: each rank's own aggregate
        self.log("synced_loss", loss, on_step=False, on_epoch=True, sync_dist=True)
        self.log("synced_max", loss, on_step=False, on_epoch=True, sync_dist=True, reduce_fx="max")
        return TrainStepResult(loss=loss)


class RecordMetrics(pl.Callback):
    """Every rank writes what it ended with: the file is how a spawned child's result reaches the test."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        record = {
            "callback": {k: v.clone() for k, v in trainer.callback_metrics.items()},
            "logged": {k: v.clone() for k, v in trainer.logged_metrics.items()},
            "params": {k: p.detach().clone() for k, p in pl_module.named_parameters()},
        }
        torch.save(record, self.root / f"rank{trainer.global_rank}.pt")


def fit_on_two(root: Path, ckpt_path: Path | None) -> tuple[list[dict[str, Any]], Path]:
    """Each rank's record, and the run's root (its checkpoints are under ``ckpt/``)."""

    def fit(run_root: Path) -> None:
        callbacks: list[pl.Callback] = [RecordMetrics(run_root)]
        if ckpt_path is None:
            checkpoints = ModelCheckpoint(
                dirpath=run_root / "ckpt", every_n_train_steps=3, save_top_k=-1, filename="{step}"
            )
            callbacks.append(checkpoints)
        kwargs = trainer_kwargs(
            run_root, devices=2, strategy="ddp_spawn", callbacks=callbacks, enable_checkpointing=True
        )
        pl.Trainer(**kwargs).fit(DistributedResume(), stateful_loader(), ckpt_path=ckpt_path)

    run_root = spawn_with_teardown_retry(fit, root, lambda r: all((r / f"rank{rank}.pt").exists() for rank in (0, 1)))
    return [torch.load(run_root / f"rank{rank}.pt") for rank in (0, 1)], run_root


def test_two_processes_resume_exactly_and_one_process_says_what_starts_fresh(tmp_path: Path) -> None:
    full, full_root = fit_on_two(tmp_path / "full", None)
    checkpoint = full_root / "ckpt" / "step=3.ckpt"  # batch 3 of 6 on each rank (11 samples each)
    saved = torch.load(checkpoint, weights_only=False)["lightning_step_types"]["epoch_state"]
    assert saved["encoded"]["batches_done"] == 3 and len(saved["ranks"]) == 2
    assert not torch.equal(  # each rank's own running sum, not rank 0's twice
        saved["ranks"][0]["logged"]["training_step.train_loss"]["tensors"]["value"],
        saved["ranks"][1]["logged"]["training_step.train_loss"]["tensors"]["value"],
    )
    resumed, _ = fit_on_two(tmp_path / "resumed", checkpoint)
    for rank in (0, 1):
        for part in ("callback", "logged", "params"):
            assert_same_metrics(resumed[rank][part], full[rank][part])
    assert not torch.equal(full[0]["callback"]["train_loss_epoch"], full[1]["callback"]["train_loss_epoch"])
    assert torch.equal(full[0]["callback"]["synced_loss"], full[1]["callback"]["synced_loss"])

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        one = pl.Trainer(**trainer_kwargs(tmp_path / "one"))
        one.fit(DistributedResume(), stateful_loader(), ckpt_path=checkpoint)
    messages = [str(w.message) for w in caught if issubclass(w.category, StepResultWarning)]
    assert messages == [
        "DistributedResume: resuming epoch 0 at the end of batch 2\n"
        "  got:      epoch state saved by 2 processes, resumed on 1: each process's running state belongs to its own"
        " data, so these start fresh: 'train_loss' (training_step), 'train_sum' (training_step), 'train_max'"
        " (training_step), 'train_min' (training_step), 'train_mae' (training_step), 'synced_loss' (training_step), 'synced_max'"
        " (training_step), metric 'mae'\n"
        "  expected: the world size the checkpoint was saved with (2)\n"
        "  fix:      resume on 2 processes to continue the epoch exactly"
    ]
