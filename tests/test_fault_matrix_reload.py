"""The fault-injection matrix, on training loaders Lightning makes anew each epoch.

``Trainer(reload_dataloaders_every_n_epochs=1)`` calls the data module's ``train_dataloader()`` again
at each epoch's start, and here it returns other rows each epoch (drawn from a seed that depends on
``trainer.current_epoch``, as a curriculum or a resampled data set would). A resumed run must then
fetch the resumed epoch's own rows from where the checkpoint left them, and the epochs after it their
own. The harness and the outcome rule are ``fault_matrix``'s (``run_cell``: the uninterrupted fit
against the interrupted, resumed chain, every value and every logged row); ``ReloadLoop`` adds:

- **the order** of each epoch's loader: sequential, or shuffled with a generator of its own
  (``StatefulDataLoader(shuffle=True, generator=g)``);
- **the loop**: validation at each epoch's end, at half an epoch (``val_check_interval=0.5``), or
  ``limit_train_batches=7``.

Each cell, both ways in, crosses them with faults inside the reloaded epoch (an exception, a kill
after ``ModelCheckpoint``, SLURM's signal), at its start, at the end of the epoch before it, and inside
a mid-epoch validation: all exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from fault_matrix import BATCH, ROWS, Cell, Fault, Faults, Loop, MapRows, run_cell, val_loader
from torchdata.stateful_dataloader import StatefulDataLoader

ORDERS = ("sequential", "shuffled")


class EpochRows(pl.LightningDataModule):
    """Training rows of their own each epoch, read at each reload: seed ``10 + trainer.current_epoch``."""

    def __init__(self, order: str, faults: Faults) -> None:
        super().__init__()
        self.order, self.faults = order, faults

    def train_dataloader(self) -> StatefulDataLoader[Any]:
        rows = MapRows(ROWS, 10 + self.trainer.current_epoch, self.faults)  # type: ignore[union-attr]
        if self.order == "shuffled":
            return StatefulDataLoader(rows, batch_size=BATCH, shuffle=True, generator=torch.Generator().manual_seed(7))
        return StatefulDataLoader(rows, batch_size=BATCH)


class EpochRowsValidated(EpochRows):
    def val_dataloader(self) -> StatefulDataLoader[Any]:
        return val_loader()


@dataclass(frozen=True)
class ReloadLoop(Loop):
    """``Loop`` whose training loader the data module makes anew at each epoch's start."""

    order: str = "sequential"  # sequential | shuffled

    @property
    def trainer_kwargs(self) -> dict[str, Any]:
        return {"reload_dataloaders_every_n_epochs": 1}

    def make_train_loaders(self, faults: Faults) -> pl.LightningDataModule:
        return (EpochRowsValidated if self.validation != "none" else EpochRows)(self.order, faults)

    def shown(self) -> str:
        base = Loop(**{name: getattr(self, name) for name in Loop.__dataclass_fields__}).shown()
        return f"reloaded {self.order}" + ("" if base == "default" else f", {base}")


LOOPS = (
    ReloadLoop(validation="epoch"),
    ReloadLoop(validation="half"),
    ReloadLoop(limit="limit_train_batches"),
)
# each a place the reloaded epoch's loader state matters: inside epoch 1 (whose loader the resumed
# run makes itself), at its start, and the end of epoch 0 (the resumed run makes epoch 1's)
FAULTS = (
    Fault("training_step", "exception", 1, 5),
    Fault("between_batches", "checkpoint_kill", 1, 2),
    Fault("module_batch_start", "sigusr1", 1, 3),
    Fault("on_train_epoch_start", "exception", 1, 0),
    Fault("on_train_epoch_start", "save", 1, 0),
    Fault("on_train_epoch_end", "exception", 0, 6),
)
MID_VALIDATION = Fault("validation_step", "exception", 1, 4)  # the validation after epoch 1's batch 4

CELLS = [
    Cell(way, ReloadLoop(order=order, validation=loop.validation, limit=loop.limit), fault)
    for way in ("typed", "adapter")
    for order in ORDERS
    for loop in LOOPS
    for fault in FAULTS + ((MID_VALIDATION,) if loop.validation == "half" else ())
    if loop.reaches(fault.epoch, fault.batch)
]


def _id(cell: Cell) -> str:
    return cell.id.replace(" ", "_").replace(",", "").replace("[", "").replace("]", "")


@pytest.mark.parametrize("cell", CELLS, ids=[_id(cell) for cell in CELLS])
def test_cell(cell: Cell, tmp_path: Path) -> None:
    outcome = run_cell(cell, tmp_path)
    assert outcome.kind == "exact", f"{cell.id}: {outcome.shown()}\n" + "\n".join(outcome.warnings)


def test_the_epochs_train_rows_of_their_own(tmp_path: Path) -> None:
    """The matrix's premise: each epoch's reloaded loader yields other rows, so a resumed epoch that
    fetched the wrong epoch's rows (or started its loader over) would change the weights."""
    loop = ReloadLoop()
    faults = Faults(None, tmp_path)
    data = loop.make_train_loaders(faults)
    trainer = pl.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    data.trainer = trainer
    first = next(iter(data.train_dataloader()))[0]
    trainer.fit_loop.epoch_progress.current.completed = 1
    second = next(iter(data.train_dataloader()))[0]
    assert first.shape == second.shape == (BATCH, 8)
    assert not torch.equal(first, second)
