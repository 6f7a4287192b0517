"""What a plain ``DataLoader``'s resume inside an epoch costs: skipping ``n`` batches at the index level,
against a replay that loads them.

Exact resume starts a plain ``DataLoader``'s resumed iterator at the point's batch: before its first
batch, it draws the index batches the uninterrupted run had consumed from the loader's sampler and
drops them (no ``__getitem__``, no collate), then the next batch goes to the worker that would have
loaded it. A replay (what torchdata does for an ``IterableDataset`` without a state, and the only way
for one here too) loads the ``n`` batches and drops them. This measures both, for ``n`` up to 100,000,
without workers and with two, on ``DataLoader(dataset, batch_size=16, shuffle=True)`` over a dataset
whose ``__getitem__`` makes a 32-float row (about the cheapest load there is: a replay of a real
dataset costs what loading its batches costs, often far more).

Each figure is the time from ``iter(loader)`` to its first batch, minus that of a fresh iterator's
(which starts its workers and loads one batch too): the median of 5 (3 above 10,000 batches; one for
the replay of 100,000). The skip goes through the library's own iterator making
(``lightning_step_types._lightning.plain_loader``), as a resumed fit makes it.

Run from the repository root::

    python benchmarks/skip_cost.py            # about 3 minutes on 2 idle cores
    python benchmarks/skip_cost.py --quick    # up to 10,000 batches
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from lightning_step_types._lightning.plain_loader import (
    WorkerDraws,
    follow_loader_iterators,
    rotate_workers,
    skip_index_batches,
    stop_following_loader_iterators,
)

BATCH_SIZE, FEATURES = 16, 32


class Rows(Dataset[torch.Tensor]):
    """``rows`` rows of 32 floats, made as they are read."""

    def __init__(self, rows: int) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return self.rows

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.full((FEATURES,), float(index))


class Skipping:
    """The library's iterator events with nothing but the skip: the first index draw drops ``count``
    index batches and gives the next one to the worker that loads it uninterrupted."""

    def __init__(self, count: int) -> None:
        self.count = count

    def making(self, loader: Any, iterator: Any, fresh: bool) -> torch.Generator | None:
        return None

    def first_draw(self, loader: Any, iterator: Any, draw: Callable[[], Any]) -> Any:
        skip_index_batches(iterator, self.count)
        rotate_workers(iterator, self.count)
        return draw()

    def made(self, loader: Any, iterator: Any, draws: WorkerDraws | None) -> None:
        pass


def _loader(batches: int, workers: int) -> DataLoader[torch.Tensor]:
    return DataLoader(
        Rows((batches + 1) * BATCH_SIZE),
        batch_size=BATCH_SIZE,
        shuffle=True,
        generator=torch.Generator().manual_seed(0),
        num_workers=workers,
    )


def first_batch_seconds(batches: int, workers: int, how: str) -> float:
    """Seconds from ``iter(loader)`` to its first batch, starting ``batches`` batches in (``how``: "skip",
    "replay"), or from the start ("fresh")."""
    loader = _loader(batches, workers)
    if how == "skip":
        follow_loader_iterators(loader, Skipping(batches))
    started = time.perf_counter()
    iterator = iter(loader)
    if how == "replay":
        for _ in range(batches):
            next(iterator)
    next(iterator)
    elapsed = time.perf_counter() - started
    del iterator
    stop_following_loader_iterators(loader)
    return elapsed


def cost(batches: int, workers: int, how: str, repeat: int) -> float:
    """The median over ``repeat`` runs of the time to the first batch, minus a fresh iterator's."""
    fresh = statistics.median(first_batch_seconds(batches, workers, "fresh") for _ in range(repeat))
    return statistics.median(first_batch_seconds(batches, workers, how) for _ in range(repeat)) - fresh


def _shown(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="up to 10,000 batches")
    parser.add_argument("--counts", help="the numbers of batches skipped, comma-separated (default: 10 to 100,000)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    counts = (10, 100, 1_000, 10_000) if args.quick else (10, 100, 1_000, 10_000, 100_000)
    if args.counts:
        counts = tuple(int(count) for count in args.counts.split(","))
    print(f"torch {torch.__version__}; DataLoader(batch_size={BATCH_SIZE}, shuffle=True), 32-float rows made per read")
    print("time to the resumed iterator's first batch, minus a fresh iterator's\n")
    header = (
        "| batches skipped | index skip, no workers | index skip, 2 workers"
        " | replay (loading them), no workers | replay, 2 workers |"
    )
    print(header)
    print("| --- | --- | --- | --- | --- |")
    for batches in counts:
        repeat = 5 if batches <= 10_000 else 3
        replay_repeat = 1 if batches >= 100_000 else repeat
        figures = [
            cost(batches, 0, "skip", repeat),
            cost(batches, 2, "skip", repeat),
            cost(batches, 0, "replay", replay_repeat),
            cost(batches, 2, "replay", replay_repeat),
        ]
        print(f"| {batches:,} | " + " | ".join(_shown(max(figure, 0.0)) for figure in figures) + " |")


if __name__ == "__main__":
    main()
