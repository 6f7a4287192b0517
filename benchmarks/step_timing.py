"""Shared by the benchmarks that time whole training steps inside a real fit (loss_logging.py,
metrics_cost.py): the median interval between consecutive ``on_train_batch_start`` calls."""

from __future__ import annotations

import statistics
import time
from typing import Any

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader


class StepClock(pl.Callback):
    def __init__(self) -> None:
        self.starts: list[float] = []

    def on_train_batch_start(self, *args: Any) -> None:
        self.starts.append(time.perf_counter())

    def median_step(self, warmup: int) -> float:
        intervals = [b - a for a, b in zip(self.starts, self.starts[1:])][warmup:]
        return statistics.median(intervals)


def median_step_time(model_class: type[pl.LightningModule], loader: DataLoader[Any], steps: int) -> float:
    """Fit ``model_class()`` for ``steps`` steps; the median step time after a short warm-up."""
    clock = StepClock()
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        callbacks=[clock],
    )
    torch.manual_seed(0)
    trainer.fit(model_class(), loader)
    return clock.median_step(warmup=min(20, steps // 4))
