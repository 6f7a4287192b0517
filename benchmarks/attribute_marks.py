"""Per-batch cost of following a module's own attributes for exact resume (``resume/undeclared_state.py``).

At each training batch's start the fit follower takes a mark of every attribute the module holds
that no checkpoint does (``ModuleAttributes.batch_start``); this times that call alone, on a
``LightningModule`` holding what real modules hold, in these setups:

- ``no attributes``: a module holding its layers only;
- ``nothing changes``: eleven attributes set in ``__init__`` (hyperparameters: numbers, a string, a
  tuple; an empty list; a dict of settings; a counter, two tensors and a dict of sums, which the
  setups below change), none changed by the step;
- ``a list grows``: the same, and ``self.training_step_outputs.append(loss)`` each step;
- ``a counter and a cached tensor``: ``self.rows_seen += 4`` and ``self.last = pred.detach()`` each step;
- ``a tensor in place``: ``self.loss_sum += loss`` each step (its value is cloned at each mark);
- ``a dict of sums``: ``self.stats["loss"] += float(loss)`` each step;
- ``a numpy Generator`` / ``a torch.Generator`` / ``a random.Random`` / ``a numpy RandomState``: the
  eleven, and a random generator ``self.rng`` drawn from each step (its state is read at each mark,
  ``resume/held_generators.py``).

Each setup runs the step's changes and the mark ``--steps`` times, repeated ``--repeats`` times; the
table gives the median over repetitions of the mark's CPU µs per batch (the step's own changes are
timed apart and left out). Run: ``python benchmarks/attribute_marks.py`` (a few seconds).
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch

from lightning_step_types.resume.source import Moment
from lightning_step_types.resume.undeclared_state import ModuleAttributes


class Module(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(32, 2)
        self.lr, self.hidden, self.dropout, self.name = 1e-3, 64, 0.1, "model"
        self.sizes = (32, 64, 2)
        self.training_step_outputs: list[torch.Tensor] = []
        self.settings = {"warmup": 10, "clip": 1.0}
        self.rows_seen = 0
        self.last = torch.zeros(())
        self.loss_sum = torch.zeros(())
        self.stats: dict[str, float] = {"loss": 0.0}


GENERATORS: dict[str, Callable[[], Any]] = {
    "a numpy Generator": lambda: np.random.default_rng(0),
    "a torch.Generator": lambda: torch.Generator().manual_seed(0),
    "a random.Random": lambda: random.Random(0),
    "a numpy RandomState": lambda: np.random.RandomState(0),
}


class Bare(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(32, 2)


def _changes(setup: str, module: Module, loss: torch.Tensor) -> Callable[[], None]:
    def step() -> None:
        if setup == "a list grows":
            module.training_step_outputs.append(loss)
        elif setup == "a counter and a cached tensor":
            module.rows_seen += 4
            module.last = loss.detach().clone()
        elif setup == "a tensor in place":
            module.loss_sum += loss
        elif setup == "a dict of sums":
            module.stats["loss"] += float(loss)
        elif setup in GENERATORS:
            rng: Any = getattr(module, "rng")
            if isinstance(rng, torch.Generator):
                torch.rand((), generator=rng)
            else:
                rng.random()

    return step


SETUPS = (
    "no attributes",
    "nothing changes",
    "a list grows",
    "a counter and a cached tensor",
    "a tensor in place",
    "a dict of sums",
    *GENERATORS,
)


def _module(setup: str) -> Any:
    if setup == "no attributes":
        return Bare()
    module = Module()
    if setup in GENERATORS:
        module.rng = GENERATORS[setup]()
    return module


def _per_batch(setup: str, steps: int) -> tuple[float, int]:
    """CPU µs per mark, and how many attributes are followed."""
    trainer = pl.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False)
    module: Any = _module(setup)
    attributes = ModuleAttributes(trainer, module)
    attributes.mark(Moment.FIT_START)
    step = _changes(setup, module, torch.tensor(0.5))
    start = time.thread_time_ns()
    for _ in range(steps):
        step()
    changes = time.thread_time_ns() - start
    attributes.stop()
    module = _module(setup)
    attributes = ModuleAttributes(trainer, module)
    attributes.mark(Moment.FIT_START)
    step = _changes(setup, module, torch.tensor(0.5))
    start = time.thread_time_ns()
    for _ in range(steps):
        step()
        attributes.batch_start()
    both = time.thread_time_ns() - start
    attributes.stop()
    return (both - changes) / steps / 1000, len(attributes.batch_marks.names)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    rows: list[tuple[str, float, int]] = []
    for setup in SETUPS:
        results: list[Any] = [_per_batch(setup, args.steps) for _ in range(args.repeats)]
        rows.append((setup, statistics.median(r[0] for r in results), results[0][1]))
    print(f"{'setup':<34} {'attributes':>10} {'µs per batch':>13}")
    for setup, micros, followed in rows:
        print(f"{setup:<34} {followed:>10} {micros:>13.2f}")


if __name__ == "__main__":
    main()
