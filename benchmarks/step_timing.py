"""Shared by the benchmarks that time whole training steps inside a real fit (loss_logging.py,
metrics_cost.py, compiled_step.py): the median interval between consecutive
``on_train_batch_start`` calls, over fits that take turns."""

from __future__ import annotations

import logging
import statistics
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset


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
    trainer = quiet_trainer(steps, [clock])
    torch.manual_seed(0)
    trainer.fit(model_class(), loader)
    return clock.median_step(warmup=min(20, steps // 4))


def quiet_trainer(steps: int, callbacks: list[pl.Callback]) -> pl.Trainer:
    """A CPU Trainer for ``steps`` training steps: no validation, logger, checkpoints, bar or summary."""
    return pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        callbacks=callbacks,
    )


def interleaved_step_times(
    variants: Mapping[str, type[pl.LightningModule]],
    warmup: type[pl.LightningModule],
    steps: int,
    repeats: int,
    batch_size: int,
) -> dict[str, list[float]]:
    """Each variant's per-fit median step time, for ``repeats`` fits, on one CPU thread.

    The fits take turns in a rotating order, so a drift in the machine's load spreads over all
    variants; a short fit of ``warmup`` first warms up imports, the allocator and caches.
    """
    loader = quiet_single_thread_loader(steps, batch_size)
    median_step_time(warmup, loader, 50)
    return in_turns(list(variants), lambda name: median_step_time(variants[name], loader, steps), repeats)


def quiet_single_thread_loader(steps: int, batch_size: int) -> DataLoader[Any]:
    """One CPU thread, Lightning's advice silenced, and ``steps`` batches of ``Linear(32, 2)`` data."""
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")  # Lightning's advice about workers and log intervals
    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    generator = torch.Generator().manual_seed(0)
    n = steps * batch_size
    data = TensorDataset(torch.randn(n, 32, generator=generator), torch.randint(0, 2, (n,), generator=generator))
    return DataLoader(data, batch_size=batch_size, shuffle=False)


def in_turns(names: list[str], fit: Callable[[str], float], repeats: int) -> dict[str, list[float]]:
    """``fit(name)`` for every name, ``repeats`` times, in a rotating order: a drift in the
    machine's load spreads over all of them."""
    times: dict[str, list[float]] = {name: [] for name in names}
    for repeat in range(repeats):
        for name in names[repeat % len(names) :] + names[: repeat % len(names)]:
            times[name].append(fit(name))
    return times
