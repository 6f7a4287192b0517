"""The fault-injection harness: one uninterrupted fit against an interrupted, resumed chain.

A cell names a way in (``TypedLightningModule`` or ``StepResultAdapter()``), a loop configuration
(``Loop``), where in Lightning's fit loop a fault lands and how it stops the run (``Fault``), and
optionally a second fault in the resumed run. ``run_cell`` runs the chain and compares it with the
uninterrupted fit of the same module and loop, value by value:

- every parameter and buffer;
- ``callback_metrics`` and ``logged_metrics``;
- ``global_step`` and the logger's step (``_batches_that_stepped``);
- every optimizer's and LR scheduler's state;
- every row the loggers were given, tagged with where in the fit it was logged: the chain's rows
  are each segment's rows up to where the next segment resumed, and must be the uninterrupted
  run's rows, position by position.

The outcome reads ``exact``, ``warned: <what differs>`` (one ``StepResultWarning`` at resume, which
names the batch and each of those values), ``silent: <what differs>`` or ``crash: <exception>``.

The model is a ``Linear(8, 1)`` regressor (two of them for two manual optimizers) trained with SGD
and momentum on 42 fixed rows in batches of 4 (11 batches, the last of 2), from torchdata's
``StatefulDataLoader``, 2 epochs, deterministic: nothing draws from a random generator while it
trains, so the uninterrupted run is one fixed reference.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import random
import signal
import stat
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
import torchmetrics
from pytorch_lightning.callbacks import Callback, Checkpoint, ModelCheckpoint, OnExceptionCheckpoint
from pytorch_lightning.loggers.logger import Logger
from pytorch_lightning.plugins.environments import SLURMEnvironment
from torch import nn
from torch.utils.data import Dataset, IterableDataset
from torchdata.stateful_dataloader import StatefulDataLoader

from lightning_step_types import StepResultAdapter, StepResultWarning, TrainStepResult, TypedLightningModule

ROWS, BATCH = 42, 4
BATCHES = math.ceil(ROWS / BATCH)  # 11, the last holding 2 rows
SECOND_LOADER_ROWS = 28  # 7 batches: the second training loader cycles (max_size_cycle)
VAL_ROWS = 12
FEATURES = 8


# --- what a cell is -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Loop:
    """How the fit loop runs: each field one dimension of the matrix."""

    optimization: str = "automatic"  # automatic | manual | manual_two | manual_accumulate | manual_scheduler
    accumulate: int = 1  # Trainer(accumulate_grad_batches=...)
    validation: str = "none"  # none | epoch (at each epoch's end) | half (val_check_interval=0.5; 5 without a length)
    scheduler: str = "none"  # none | step | epoch | plateau_epoch | plateau_step
    data: str = "map"  # map | iterable (an IterableDataset in the StatefulDataLoader)
    signature: str = "batch"  # batch | dataloader_iter (training_step(self, dataloader_iter))
    loaders: int = 1  # 1 | 2 (a dict of two training loaders)
    limit: str = "none"  # none | max_steps (15) | limit_train_batches (7)
    logging: str = "step"  # step | epoch_hooks | batch_end | some_batches

    @property
    def manual(self) -> bool:
        return self.optimization != "automatic"

    @property
    def batches(self) -> int:
        return 7 if self.limit == "limit_train_batches" else BATCHES

    @property
    def val_check_interval(self) -> float | int:
        """Half an epoch: Lightning refuses a fraction for a loader without a length."""
        return 0.5 if self.data == "map" else 5

    @property
    def validated_after(self) -> tuple[int, ...]:
        """The batches a validation runs after, in each epoch."""
        if self.validation == "epoch":
            return (self.batches - 1,)
        if self.validation == "half":
            every = int(self.batches * 0.5) if self.data == "map" else 5
            return tuple(batch for batch in range(self.batches) if (batch + 1) % every == 0)
        return ()

    def optimizer_steps(self, batches: int) -> int:
        """The optimizer steps (global_step) after ``batches`` batches of epoch 0 (and on)."""
        per_epoch = self.batches
        done, in_epoch = divmod(batches, per_epoch)
        if self.optimization == "manual_two":
            return 2 * batches
        if self.optimization == "manual_accumulate":
            windows = (per_epoch + 1) // 2
            return done * windows + in_epoch // 2
        if self.accumulate > 1:
            windows = math.ceil(per_epoch / self.accumulate)
            return done * windows + in_epoch // self.accumulate
        return batches

    def reaches(self, epoch: int, batch: int) -> bool:
        """Whether the fit trains batch ``batch`` of epoch ``epoch`` (max_steps=15 can end it sooner)."""
        if self.limit != "max_steps":
            return True
        return self.optimizer_steps(epoch * self.batches + batch) < 15

    def shown(self) -> str:
        parts = [f"{name}={value}" for name, value in vars(self).items() if value != getattr(DEFAULT_LOOP, name)]
        return ", ".join(parts) or "default"


DEFAULT_LOOP = Loop()

# where a fault lands, in the order Lightning's fit loop reaches them
TRAIN_WHERES = (
    "on_train_epoch_start",
    "fetch",
    "on_before_batch_transfer",
    "transfer_batch_to_device",
    "on_after_batch_transfer",
    "callback_batch_start_before",  # a callback's on_train_batch_start listed before the adapter
    "callback_batch_start_after",  # one listed after it (a typed module: its own on_train_batch_start)
    "module_batch_start",  # the module's on_train_batch_start
    "training_step",
    "on_before_zero_grad",
    "on_before_backward",
    "backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "optimizer_step_before",  # an optimizer_step override, before super() (automatic)
    "after_update",  # after the weights changed: optimizer_step after super(); after opt.step() (manual)
    "lr_scheduler_step",
    "callback_batch_end",
    "module_batch_end",  # the module's on_train_batch_end (a typed module: on_train_batch_result)
    "between_batches",  # nothing inside a batch: where ModelCheckpoint(every_n_train_steps) saves
    "on_train_epoch_end",
)
VAL_WHERES = ("on_validation_start", "validation_step", "on_validation_epoch_end", "on_validation_end")
WHERES = TRAIN_WHERES + VAL_WHERES
HOWS = (
    "exception",  # an exception, OnExceptionCheckpoint saves, the run stops
    "save",  # trainer.save_checkpoint from that hook, the run goes on
    "sigusr1",  # SLURM's requeue signal under SLURMEnvironment(auto_requeue=True): Lightning's handler saves
    "sigterm",  # SIGTERM: Lightning stops at the batch's end, OnExceptionCheckpoint saves
    "checkpoint_kill",  # ModelCheckpoint(every_n_train_steps) saved at that batch's end; killed 2 batches later
)


@dataclass(frozen=True)
class Fault:
    where: str
    how: str
    epoch: int = 0
    batch: int = 5  # the training batch; for a validation hook, the batch the validation runs after

    def shown(self) -> str:
        return f"{self.how} at {self.where}, epoch {self.epoch} batch {self.batch}"


@dataclass(frozen=True)
class Cell:
    way: str  # typed | adapter
    loop: Loop
    fault: Fault
    second: Fault | None = None  # a fault in the resumed run (it resumes once more)
    expected: str = "exact"

    @property
    def id(self) -> str:
        second = f" then {self.second.shown()}" if self.second else ""
        return f"{self.way} [{self.loop.shown()}] {self.fault.shown()}{second}"


class SimulatedFault(RuntimeError):
    """Stands for an out-of-memory error, a NaN guard, a lost device, a killed job."""


# --- data -----------------------------------------------------------------------------------------


def _rows(count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(count, FEATURES, generator=generator)
    y = x.sum(dim=1, keepdim=True) + 0.1 * torch.randn(count, 1, generator=generator)
    return x, y


class Faults:
    """The one fault planned for a run: fires once, where and when it is due."""

    def __init__(self, fault: Fault | None, root: Path) -> None:
        self.fault, self.root, self.fired = fault, root, False
        self.trainer: Any = None

    def __deepcopy__(self, memo: dict[int, Any]) -> Faults:
        return self  # a module copied whole (StochasticWeightAveraging's average model) shares the plan

    def due(self, where: str, batch: int | None = None) -> bool:
        fault, trainer = self.fault, self.trainer
        if self.fired or fault is None or trainer is None or fault.where != where or fault.how == "checkpoint_kill":
            return False
        if trainer.sanity_checking or trainer.current_epoch != fault.epoch:
            return False
        return batch is None or batch == fault.batch

    def at(self, where: str, batch: int | None = None) -> None:
        if self.due(where, batch):
            self.fire()

    def fire(self) -> None:
        self.fired = True
        how = self.fault.how if self.fault is not None else ""
        if how == "exception":
            raise SimulatedFault(self.fault.shown() if self.fault else "")
        if how == "save":
            self.trainer.save_checkpoint(self.root / "saved.ckpt")
        elif how == "sigusr1":
            os.kill(os.getpid(), signal.SIGUSR1)
        elif how == "sigterm":
            os.kill(os.getpid(), signal.SIGTERM)

    def kill_if_due(self, batch: int) -> None:
        """checkpoint_kill: ModelCheckpoint saved at the fault's batch; the job dies two batches later."""
        fault, trainer = self.fault, self.trainer
        if self.fired or fault is None or fault.how != "checkpoint_kill" or trainer is None:
            return
        if (trainer.current_epoch, batch) >= (fault.epoch, fault.batch + 2):
            self.fired = True
            raise SimulatedFault("killed")

    def training_batch(self) -> int:
        """The training batch in flight (its index), read from Lightning's progress counters."""
        return int(self.trainer.fit_loop.epoch_loop.batch_progress.current.ready) - 1

    def batch_validated(self) -> int:
        """The training batch a running validation comes after."""
        return int(self.trainer.fit_loop.epoch_loop.batch_progress.current.completed) - 1


class MapRows(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(self, count: int, seed: int, faults: Faults | None) -> None:
        self.x, self.y = _rows(count, seed)
        self.faults = faults

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.faults is not None and index % BATCH == 0:
            self.faults.at("fetch", index // BATCH)
        return self.x[index], self.y[index]


class IterableRows(IterableDataset[tuple[torch.Tensor, torch.Tensor]]):
    """Rows without a length, with a ``state_dict`` of their own (the loader's state is read before each
    fetch). Without one, StatefulDataLoader replays the rows at a load and the library reads its state
    back at a save (``tests/test_loader_rewind.py``)."""

    def __init__(self, count: int, seed: int, faults: Faults | None) -> None:
        self.x, self.y = _rows(count, seed)
        self.faults = faults
        self.next_index = 0
        self.resume_at = 0  # set by load_state_dict, for the next iteration only

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        start, self.resume_at = self.resume_at, 0
        self.next_index = start  # now: a state asked for before the first row is this iteration's
        return self._rows_from(start)

    def _rows_from(self, start: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for index in range(start, len(self.x)):
            if self.faults is not None and index % BATCH == 0:
                self.faults.at("fetch", index // BATCH)
            self.next_index = index + 1
            yield self.x[index], self.y[index]

    def state_dict(self) -> dict[str, int]:
        return {"next_index": self.next_index}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.resume_at = state["next_index"]


def train_loaders(loop: Loop, faults: Faults) -> Any:
    made = getattr(loop, "make_train_loaders", None)
    if made is not None:  # a loop of another test file that builds its own loaders (samplers, combined modes)
        return made(faults)
    kind = IterableRows if loop.data == "iterable" else MapRows
    first = StatefulDataLoader(kind(ROWS, 0, faults), batch_size=BATCH)
    if loop.loaders == 1:
        return first
    return {"a": first, "b": StatefulDataLoader(kind(SECOND_LOADER_ROWS, 1, None), batch_size=BATCH)}


def val_loader() -> StatefulDataLoader[Any]:
    return StatefulDataLoader(MapRows(VAL_ROWS, 2, None), batch_size=BATCH)


# --- the module -----------------------------------------------------------------------------------


class FaultInBackward(torch.autograd.Function):
    """The identity forward; its backward, the first of the batch's, fires the fault (an exception: as an
    out-of-memory error in backward does)."""

    @staticmethod
    def forward(ctx: Any, loss: torch.Tensor, faults: Faults) -> torch.Tensor:
        ctx.faults = faults
        return loss.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        ctx.faults.fire()
        return grad, None


def _linear(seed: int) -> nn.Linear:
    net = nn.Linear(FEATURES, 1)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        net.weight.copy_(0.3 * torch.randn(net.weight.shape, generator=generator))
        net.bias.zero_()
    return net


class MatrixSteps:
    """Every hook a fault can land in, for both ways in (mixed into a plain and a typed module)."""

    loop: Loop
    faults: Faults

    def build(self, loop: Loop, faults: Faults) -> None:
        self.loop, self.faults = loop, faults
        self.net = _linear(0)
        if loop.optimization == "manual_two":
            self.other = _linear(1)
        self.mae = torchmetrics.MeanAbsoluteError()
        self.automatic_optimization = not loop.manual

    # --- batches -----------------------------------------------------------------------------------

    def batch_of(self, args: tuple[Any, ...]) -> tuple[Any, int]:
        if self.loop.signature == "dataloader_iter":
            iterator = args[0]
            batch, batch_idx, _ = next(iterator)
            return batch, batch_idx
        return args[0], args[1]

    def loss_of(self, batch: Any, net: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
        parts = [batch["a"], batch["b"]] if isinstance(batch, dict) else [batch]
        parts = [part for part in parts if part is not None]  # CombinedLoader(mode="max_size"): b ran out
        losses, preds = [], []
        for x, y in parts:
            pred = net(x)
            losses.append(F.mse_loss(pred, y))
            preds.append(pred)
        return sum(losses[1:], losses[0]), preds[0]

    def train_on(self, *args: Any) -> torch.Tensor:
        batch, batch_idx = self.batch_of(args)
        loss, pred = self.loss_of(batch, self.net)
        target = batch["a"][1] if isinstance(batch, dict) else batch[1]
        # with dataloader_iter Lightning cannot infer the batch size: every value is logged with it
        log: Any = functools.partial(getattr(self, "log"), batch_size=len(target))
        log("train_loss", loss, on_step=True, on_epoch=True)
        log("train_max", loss, on_step=False, on_epoch=True, reduce_fx="max")
        self.mae(pred.detach(), target)
        log("train_mae", self.mae, on_step=False, on_epoch=True)
        if self.loop.logging == "some_batches":
            if batch_idx % 2 == 0:
                log("even_loss", loss, on_step=True, on_epoch=True)
            if batch_idx < 3:
                log("early_loss", loss, on_step=False, on_epoch=True, reduce_fx="sum")
        self.faults.at("training_step", batch_idx)
        if self.faults.due("backward", batch_idx):
            loss = FaultInBackward.apply(loss, self.faults)
        if self.loop.manual:
            self.step_manually(loss, batch, batch_idx)
        return loss

    def step_manually(self, loss: torch.Tensor, batch: Any, batch_idx: int) -> None:
        optimizers: Any = getattr(self, "optimizers")()
        opts = optimizers if isinstance(optimizers, list) else [optimizers]
        manual_backward: Any = getattr(self, "manual_backward")
        kind = self.loop.optimization
        if kind == "manual_accumulate":
            manual_backward(loss / 2)
            if batch_idx % 2 == 1 or batch_idx == self.loop.batches - 1:
                opts[0].step()
                opts[0].zero_grad()
                self.faults.at("after_update", batch_idx)
            return
        opts[0].zero_grad()
        manual_backward(loss)
        opts[0].step()
        if kind == "manual_two":
            self.faults.at("after_update", batch_idx)  # between the two optimizers' steps
            other_loss, _ = self.loss_of(batch, self.other)
            opts[1].zero_grad()
            manual_backward(other_loss)
            opts[1].step()
            return
        self.faults.at("after_update", batch_idx)
        if kind == "manual_scheduler":
            scheduler: Any = getattr(self, "lr_schedulers")()
            scheduler.step()

    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        loss, _ = self.loss_of(batch, self.net)
        getattr(self, "log")("val_loss", loss, batch_size=len(batch[1]))
        self.faults.at("validation_step", self.faults.batch_validated())
        return None

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.net.parameters(), lr=0.05, momentum=0.9)
        if self.loop.optimization == "manual_two":
            return [optimizer, torch.optim.SGD(self.other.parameters(), lr=0.05, momentum=0.9)]
        scheduler = self.loop.scheduler
        if self.loop.optimization == "manual_scheduler":
            return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.95)}
        if scheduler == "none":
            return optimizer
        if scheduler in ("step", "epoch"):
            config = {"scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.9), "interval": scheduler}
        elif scheduler == "plateau_epoch":
            plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=0, factor=0.5)
            config = {"scheduler": plateau, "interval": "epoch", "monitor": "val_loss"}
        else:  # plateau_step
            plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=1, factor=0.5)
            config = {"scheduler": plateau, "interval": "step", "monitor": "train_loss_step"}
        return {"optimizer": optimizer, "lr_scheduler": config}

    # --- hooks -------------------------------------------------------------------------------------

    def on_train_epoch_start(self) -> None:
        if self.loop.logging == "epoch_hooks":
            value = torch.tensor(1.0 + self.faults.trainer.current_epoch)
            getattr(self, "log")("epoch_start_value", value, on_epoch=True, batch_size=1)
        self.faults.at("on_train_epoch_start")

    def on_train_epoch_end(self) -> None:
        if self.loop.logging == "epoch_hooks":
            getattr(self, "log")("epoch_end_value", torch.tensor(2.0 + self.faults.trainer.current_epoch), batch_size=1)
        self.faults.at("on_train_epoch_end")

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        self.faults.at("on_before_batch_transfer", self.faults.training_batch() + 1)
        return batch

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        if not getattr(self, "trainer").validating:
            self.faults.at("transfer_batch_to_device", self.faults.training_batch() + 1)
        return super().transfer_batch_to_device(batch, device, dataloader_idx)  # type: ignore[misc]

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        if not getattr(self, "trainer").validating:
            self.faults.at("on_after_batch_transfer", self.faults.training_batch() + 1)
        return batch

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        batch_idx = self.faults.training_batch()  # with dataloader_iter the hook's index is the last fetch's
        self.faults.at("module_batch_start", batch_idx)
        if isinstance(self, TypedLightningModule):  # the typed module's own hook runs after the library's
            self.faults.at("callback_batch_start_after", batch_idx)

    def on_before_zero_grad(self, optimizer: Any) -> None:
        self.faults.at("on_before_zero_grad", self.faults.training_batch())

    def on_before_backward(self, loss: torch.Tensor) -> None:
        self.faults.at("on_before_backward", self.faults.training_batch())

    def on_after_backward(self) -> None:
        self.faults.at("on_after_backward", self.faults.training_batch())

    def on_before_optimizer_step(self, optimizer: Any) -> None:
        self.faults.at("on_before_optimizer_step", self.faults.training_batch())

    def optimizer_step(self, *args: Any, **kwargs: Any) -> None:
        self.faults.at("optimizer_step_before", self.faults.training_batch())
        super().optimizer_step(*args, **kwargs)  # type: ignore[misc]
        self.faults.at("after_update", self.faults.training_batch())

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        self.faults.at("lr_scheduler_step", self.faults.training_batch())
        super().lr_scheduler_step(scheduler, metric)  # type: ignore[misc]

    def batch_ended(self, batch_idx: int) -> None:
        batch_idx = self.faults.training_batch()
        if self.loop.logging == "batch_end":
            getattr(self, "log")("end_count", 1.0, on_step=False, on_epoch=True, reduce_fx="sum", batch_size=1)
        self.faults.at("module_batch_end", batch_idx)

    def on_validation_start(self) -> None:
        self.faults.at("on_validation_start", self.faults.batch_validated())

    def on_validation_epoch_end(self) -> None:
        self.faults.at("on_validation_epoch_end", self.faults.batch_validated())

    def on_validation_end(self) -> None:
        self.faults.at("on_validation_end", self.faults.batch_validated())


class PlainMatrixModel(MatrixSteps, pl.LightningModule):
    def __init__(self, loop: Loop, faults: Faults) -> None:
        super().__init__()
        self.build(loop, faults)

    def training_step(self, *args: Any) -> Any:
        loss = self.train_on(*args)
        return None if self.loop.manual else loss

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.batch_ended(batch_idx)


class TypedMatrixModel(MatrixSteps, TypedLightningModule):
    def __init__(self, loop: Loop, faults: Faults) -> None:
        super().__init__()
        self.build(loop, faults)

    def training_step(self, *args: Any) -> TrainStepResult | None:
        loss = self.train_on(*args)
        return None if self.loop.manual else TrainStepResult(loss=loss)

    def on_train_batch_result(self, result: Any, batch: Any, batch_idx: int) -> None:
        self.batch_ended(batch_idx)


def _signature(loop: Loop, cls: type) -> type:
    """``training_step(self, dataloader_iter)`` is told apart by Lightning from the step's signature."""
    if loop.signature != "dataloader_iter":
        return cls

    def training_step(self: Any, dataloader_iter: Any) -> Any:
        return cls.training_step(self, dataloader_iter)

    return type(cls.__name__, (cls,), {"training_step": training_step})


_STEP_ITER_CLASSES: dict[tuple[str, str], type] = {}


def module_class(way: str, loop: Loop) -> type:
    base = TypedMatrixModel if way == "typed" else PlainMatrixModel
    key = (way, loop.signature)
    if key not in _STEP_ITER_CLASSES:
        _STEP_ITER_CLASSES[key] = _signature(loop, base)
    return _STEP_ITER_CLASSES[key]


# --- callbacks and the logger ---------------------------------------------------------------------


class BatchHooks(Callback):
    """A user's callback: faults in its batch hooks; ``before`` places it ahead of the adapter."""

    def __init__(self, faults: Faults, before: bool) -> None:
        self.faults, self.before = faults, before

    @property
    def state_key(self) -> str:
        return f"BatchHooks(before={self.before})"

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self.faults.trainer = trainer

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        batch_idx = self.faults.training_batch()  # with dataloader_iter the hook's index is the last fetch's
        self.faults.kill_if_due(batch_idx)
        self.faults.at("callback_batch_start_before" if self.before else "callback_batch_start_after", batch_idx)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if not self.before:
            self.faults.at("callback_batch_end", self.faults.training_batch())


class AfterBatchEnd(Callback):
    """Faults after a batch's end is done, before the next batch starts (or the epoch ends): no hook
    runs there, but SLURM's signal may land there. `_TrainingEpochLoop.run` calls `on_iteration_done()`
    right after `on_advance_end`; the fault comes first in it (the instance attribute wraps it)."""

    def __init__(self, faults: Faults) -> None:
        self.faults = faults

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        epoch_loop = trainer.fit_loop.epoch_loop
        original = type(epoch_loop).on_iteration_done.__get__(epoch_loop)

        def on_iteration_done() -> None:
            if sys.exc_info()[0] is None:  # not on the way out of an exception (it runs in a `finally`)
                self.faults.at("after_batch_end", self.faults.training_batch())
            original()

        epoch_loop.on_iteration_done = on_iteration_done

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        trainer.fit_loop.epoch_loop.__dict__.pop("on_iteration_done", None)


class BetweenBatches(Callback):
    """Saves where ModelCheckpoint does, after every other callback's on_train_batch_end."""

    def __init__(self, faults: Faults) -> None:
        self.faults = faults

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.faults.at("between_batches", self.faults.training_batch())


@dataclass
class Row:
    position: tuple[int, int, int, int]  # (epoch, batches completed, kind: 0 step, 1 validation, 2 epoch end, n)
    step: int
    values: dict[str, float]


_KINDS = {"train": 0, "val": 1, "epoch": 2}


class Rows(Logger):
    """Every row Lightning's logger connector writes (what CSVLogger stores), with where it was logged."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[Row] = []
        self.trainer: Any = None

    @property
    def name(self) -> str:
        return "rows"

    @property
    def version(self) -> int:
        return 0

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        trainer = self.trainer
        if trainer.validating:
            kind = "val"
        else:  # Lightning's logger connector marks a training epoch's end by dropping its first-iteration flag
            kind = "epoch" if trainer._logger_connector._first_loop_iter is None else "train"
        epoch = int(trainer.current_epoch)
        completed = int(trainer.fit_loop.epoch_loop.batch_progress.current.completed)
        same = [row for row in self.rows if row.position[:3] == (epoch, completed, _KINDS[kind])]
        position = (epoch, completed, _KINDS[kind], len(same))
        self.rows.append(Row(position, int(step or 0), {name: float(value) for name, value in metrics.items()}))


# --- running a chain ------------------------------------------------------------------------------


@dataclass
class Segment:
    """One fit of a chain: what it ended with, its rows, and the StepResultWarnings it gave."""

    trainer: Any
    module: Any
    rows: list[Row]
    warnings: list[str]
    error: BaseException | None
    checkpoint: Path | None  # the checkpoint the next segment resumes from
    fired: bool  # whether its planned fault came


class SegmentExtras(Protocol):
    """What a matrix of its own adds to a fit (``fit_segment(..., extras=...)``)."""

    def callbacks(self, faults: Faults, root: Path) -> list[Callback]: ...

    def trainer_kwargs(self, faults: Faults, root: Path) -> dict[str, Any]: ...

    def module_class(self, way: str, loop: Loop) -> type: ...

    def adapter(self, way: str) -> bool: ...


@contextlib.contextmanager
def on_slurm(root: Path) -> Iterator[None]:
    """A job step as SLURM starts one, with a fake ``scontrol`` for Lightning's requeue call."""
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(f'#!/bin/sh\necho "$@" >> {root / "requeued"}\n')
    scontrol.chmod(scontrol.stat().st_mode | stat.S_IEXEC)
    names = dict(
        SLURM_NTASKS="1",
        SLURM_JOB_NAME="train",
        SLURM_JOB_ID="4242",
        SLURM_PROCID="0",
        SLURM_LOCALID="0",
        SLURM_NODEID="0",
        PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
    )
    saved = {name: os.environ.get(name) for name in names}
    os.environ.update(names)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value


def fit_segment(
    way: str,
    loop: Loop,
    root: Path,
    fault: Fault | None,
    ckpt_path: Path | None,
    extras: SegmentExtras | None = None,
) -> Segment:
    """One fit: the fault (if any) fires once where it is due."""
    root.mkdir(parents=True, exist_ok=True)
    faults = Faults(fault, root)
    how = fault.how if fault is not None else None
    callbacks: list[Callback] = [BatchHooks(faults, before=True)]
    if extras.adapter(way) if extras is not None else way == "adapter":
        callbacks.append(StepResultAdapter())
    callbacks += [BatchHooks(faults, before=False), BetweenBatches(faults), AfterBatchEnd(faults)]
    if extras is not None:
        callbacks += extras.callbacks(faults, root)
    if how in ("exception", "sigterm", "write_fails"):
        callbacks.append(OnExceptionCheckpoint(root))
    if how == "checkpoint_kill" and fault is not None:
        callbacks.append(
            ModelCheckpoint(
                dirpath=root / "ckpt",
                every_n_train_steps=global_step_after(loop, fault),
                save_top_k=-1,
                filename="{step}",
                save_on_train_epoch_end=False,
            )
        )
    rows = Rows()
    kwargs: dict[str, Any] = dict(
        accelerator="cpu",
        devices=1,
        max_epochs=2,
        logger=rows,
        log_every_n_steps=1,
        callbacks=callbacks,
        enable_checkpointing=any(isinstance(c, Checkpoint) for c in callbacks),
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=str(root),
        accumulate_grad_batches=loop.accumulate,
    )
    if loop.validation == "half":
        kwargs["val_check_interval"] = loop.val_check_interval
    if loop.limit == "max_steps":
        kwargs["max_steps"] = 15
    elif loop.limit == "limit_train_batches":
        kwargs["limit_train_batches"] = 7
    if how == "sigusr1":
        kwargs["plugins"] = [SLURMEnvironment(auto_requeue=True)]
    if extras is not None:
        kwargs.update(extras.trainer_kwargs(faults, root))
    kwargs.update(getattr(loop, "trainer_kwargs", {}))  # a loop of another test file may set more
    trainer = pl.Trainer(**kwargs)
    rows.trainer = faults.trainer = trainer
    module = (extras.module_class(way, loop) if extras is not None else module_class(way, loop))(loop, faults)
    loaders = train_loaders(loop, faults)
    # a LightningDataModule passed as the training data (as `trainer.fit(model, datamodule)` accepts) brings
    # its validation loader with it
    val = val_loader() if loop.validation != "none" and not isinstance(loaders, pl.LightningDataModule) else None
    error: BaseException | None = None
    slurm = on_slurm(root) if how == "sigusr1" else contextlib.nullcontext()
    with warnings.catch_warnings(record=True) as caught, slurm:
        warnings.simplefilter("always")
        try:
            trainer.fit(module, loaders, val, ckpt_path=ckpt_path)
        except (SimulatedFault, pl.utilities.exceptions.SIGTERMException) as raised:
            error = raised
        except Exception as raised:  # a crash: the outcome says which
            error = raised
    messages = [str(w.message) for w in caught if issubclass(w.category, StepResultWarning)]
    return Segment(trainer, module, rows.rows, messages, error, _checkpoint_left(root, how), faults.fired)


def _checkpoint_left(root: Path, how: str | None) -> Path | None:
    candidates = {
        "exception": root / "on_exception.ckpt",
        "sigterm": root / "on_exception.ckpt",
        "write_fails": root / "on_exception.ckpt",  # the failed write raised OSError: OnExceptionCheckpoint saved
        "save": root / "saved.ckpt",
        "sigusr1": root / "hpc_ckpt_1.ckpt",
    }
    if how == "checkpoint_kill":
        saved = sorted((root / "ckpt").glob("step=*.ckpt"), key=lambda path: int(path.stem.split("=")[1]))
        return saved[0] if saved else None
    path = candidates.get(how or "")
    return path if path is not None and path.exists() else None


def global_step_after(loop: Loop, fault: Fault) -> int:
    """The optimizer steps done once the fault's batch has ended (what ModelCheckpoint counts)."""
    return loop.optimizer_steps(fault.epoch * loop.batches + fault.batch + 1)


# --- comparing ------------------------------------------------------------------------------------


@dataclass
class Outcome:
    kind: str  # exact | warned | silent | crash | no checkpoint
    differences: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def shown(self) -> str:
        if self.kind in ("exact", "no checkpoint"):
            return self.kind
        return f"{self.kind}: {', '.join(self.differences)}"


def normalized(value: Any, directory: Path) -> Any:
    """A callback's state with its checkpoint directory's path left out (the chain's is not the reference's)."""
    if isinstance(value, dict):
        return {normalized(k, directory): normalized(v, directory) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [normalized(v, directory) for v in value]
    if isinstance(value, str):
        return value.replace(str(directory), "<dir>")
    if isinstance(value, Path):
        return str(value).replace(str(directory), "<dir>")
    return value


def _tensors_differ(a: Any, b: Any) -> bool:
    a, b = torch.as_tensor(a), torch.as_tensor(b)
    return a.shape != b.shape or not torch.equal(a, b)


def _state_differs(a: Any, b: Any) -> bool:
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return sorted(map(str, a)) != sorted(map(str, b)) or any(_state_differs(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) != len(b) or any(_state_differs(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return _tensors_differ(a, b)
    return bool(a != b)


def differences(reference: Segment, chain: list[Segment], rows_to_fault: bool = False) -> list[str]:
    """What the chain's last segment (and the rows of all of them) ends with that the reference does not.

    ``rows_to_fault``: each segment's rows count up to where its run failed or saved (what its loggers
    hold), not up to where the next one resumed: a row a resumed run writes again is a row too many.
    """
    last = chain[-1]
    found: list[str] = []
    ref_state, state = reference.module.state_dict(), last.module.state_dict()
    found += [
        f"weights ({name})" for name in ref_state if _tensors_differ(ref_state[name], state.get(name, torch.tensor([])))
    ]
    for kind in ("callback_metrics", "logged_metrics"):
        ref, got = getattr(reference.trainer, kind), getattr(last.trainer, kind)
        for name in sorted(set(ref) | set(got)):
            if name not in ref or name not in got or _tensors_differ(ref[name], got[name]):
                found.append(f"{kind}[{name}]")
    if reference.trainer.global_step != last.trainer.global_step:
        found.append(f"global_step {last.trainer.global_step} (not {reference.trainer.global_step})")
    ref_logged = reference.trainer.fit_loop.epoch_loop._batches_that_stepped
    logged = last.trainer.fit_loop.epoch_loop._batches_that_stepped
    if ref_logged != logged:
        found.append(f"logger step {logged} (not {ref_logged})")
    for index, (a, b) in enumerate(zip(reference.trainer.optimizers, last.trainer.optimizers)):
        if _state_differs(a.state_dict(), b.state_dict()):
            found.append(f"optimizer {index}")
    for index, (a, b) in enumerate(zip(reference.trainer.lr_scheduler_configs, last.trainer.lr_scheduler_configs)):
        if _state_differs(a.scheduler.state_dict(), b.scheduler.state_dict()):
            found.append(f"scheduler {index}")
    if rows_to_fault:
        found += _rows_differ({row.position: row for row in reference.rows}, rows_up_to_faults(chain))
    else:
        found += _row_differences(reference.rows, [segment.rows for segment in chain])
    return found


def rows_up_to_faults(chain: list[Segment]) -> dict[tuple[int, int, int, int], Row]:
    """Each segment's rows up to its fault (one that failed: all it wrote; one that went on after a save:
    up to where the next resumed), then the last segment's, each numbered anew among the rows at its place."""
    kept: dict[tuple[int, int, int, int], Row] = {}
    counts: dict[tuple[int, ...], int] = {}
    for index, segment in enumerate(chain):
        rows = segment.rows
        if index + 1 < len(chain) and segment.error is None:
            resumed_at = chain[index + 1].rows[0].position[:3] if chain[index + 1].rows else None
            rows = [row for row in rows if resumed_at is None or row.position[:3] < resumed_at]
        for row in rows:
            place = row.position[:3]
            counts[place] = counts.get(place, 0) + 1
            kept[(place[0], place[1], place[2], counts[place] - 1)] = row
    return kept


def chained_rows(segments: list[list[Row]]) -> dict[tuple[int, int, int, int], Row]:
    """Each segment's rows up to where the next one resumed (its first row's position), then the last's."""
    kept: dict[tuple[int, int, int, int], Row] = {}
    for index, rows in enumerate(segments):
        resumed_at = segments[index + 1][0].position[:3] if index + 1 < len(segments) and segments[index + 1] else None
        for row in rows:
            if resumed_at is None or row.position[:3] < resumed_at:
                kept[row.position] = row
    return kept


def _row_differences(reference: list[Row], segments: list[list[Row]]) -> list[str]:
    return _rows_differ({row.position: row for row in reference}, chained_rows(segments))


def _rows_differ(
    expected: dict[tuple[int, int, int, int], Row], got: dict[tuple[int, int, int, int], Row]
) -> list[str]:
    found: list[str] = []
    for position in sorted(set(expected) | set(got)):
        where = (
            f"row at epoch {position[0]} after {position[1]} batches"
            + ("", " (validation)", " (epoch end)")[position[2]]
        )
        if position not in got:
            found.append(f"{where} missing")
        elif position not in expected:
            found.append(f"{where} extra")
        elif got[position].step != expected[position].step:
            found.append(f"{where} at step {got[position].step} (not {expected[position].step})")
        elif got[position].values != expected[position].values:
            names = sorted(set(got[position].values) ^ set(expected[position].values)) or [
                name
                for name in expected[position].values
                if got[position].values[name] != expected[position].values[name]
            ]
            found.append(f"{where}: {', '.join(names)}")
    return found


_REFERENCES: dict[tuple[str, Loop], Segment] = {}


def reference_run(way: str, loop: Loop, root: Path) -> Segment:
    """The uninterrupted fit, once per way in and loop (the tests share it)."""
    key = (way, loop)
    if key not in _REFERENCES:
        _REFERENCES[key] = fit_segment(way, loop, root / "reference", None, None)
        if _REFERENCES[key].error is not None:
            raise _REFERENCES[key].error
    return _REFERENCES[key]


def run_cell(cell: Cell, root: Path) -> Outcome:
    """The interrupted chain of ``cell`` against the uninterrupted fit: its outcome."""
    reference = reference_run(cell.way, cell.loop, root.parent / f"reference-{cell.way}-{abs(hash(cell.loop))}")
    first = fit_segment(cell.way, cell.loop, root / "first", cell.fault, None)
    if not first.fired:
        raise AssertionError(f"the fault never came: {cell.fault.shown()} is not a place this loop reaches")
    if first.checkpoint is None:
        return Outcome("no checkpoint", [repr(first.error)] if first.error else [])
    if first.error is None:  # a save that lets the run go on must change nothing in it
        changed = differences(reference, [first])
        if changed:
            return Outcome("crash", [f"the run that saved differs: {', '.join(changed)}"])
    chain = [first]
    resumed = fit_segment(cell.way, cell.loop, root / "resumed", cell.second, first.checkpoint)
    chain.append(resumed)
    if cell.second is not None:
        if resumed.checkpoint is None:
            return Outcome("no checkpoint", [f"second fault: {resumed.error!r}"])
        chain.append(fit_segment(cell.way, cell.loop, root / "resumed_again", None, resumed.checkpoint))
    messages = [message for segment in chain for message in segment.warnings]
    crashed = [
        segment.error
        for segment in chain[1:]
        if segment.error is not None and not isinstance(segment.error, SimulatedFault)
    ]
    crashed = [error for error in crashed if not isinstance(error, pl.utilities.exceptions.SIGTERMException)]
    if crashed or (chain[-1].error is not None):
        error = crashed[0] if crashed else chain[-1].error
        return Outcome(
            "crash", [f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"], messages
        )
    found = differences(reference, chain)
    if not found and not messages:
        return Outcome("exact")
    if messages:
        return Outcome("warned", found, messages)
    return Outcome("silent", found, messages)


# --- designs over many dimensions -----------------------------------------------------------------


def pairwise(
    dimensions: Mapping[str, tuple[Any, ...]], allowed: Callable[[Mapping[str, Any]], bool], seed: int = 0
) -> list[dict[str, Any]]:
    """Rows over ``dimensions`` (name -> its values) in which every two values of two dimensions meet at
    least once, where ``allowed`` (called on partial rows too) lets them: a greedy all-pairs design, the
    same rows for the same seed. Each row is built from a pair not covered yet, each further dimension
    taking the value that covers most pairs not covered yet (ties drawn); the best of 20 tries is kept."""
    names = list(dimensions)
    uncovered = {
        ((a, value_a), (b, value_b))
        for i, a in enumerate(names)
        for b in names[i + 1 :]
        for value_a in dimensions[a]
        for value_b in dimensions[b]
        if allowed({a: value_a, b: value_b})
    }
    draw = random.Random(seed)
    rows: list[dict[str, Any]] = []

    def covered(row: Mapping[str, Any]) -> set[tuple[tuple[str, Any], tuple[str, Any]]]:
        present = [name for name in names if name in row]
        return {((a, row[a]), (b, row[b])) for i, a in enumerate(present) for b in present[i + 1 :]} & uncovered

    while uncovered:
        best: dict[str, Any] | None = None
        for _ in range(20):
            (a, value_a), (b, value_b) = draw.choice(sorted(uncovered, key=repr))
            row: dict[str, Any] = {a: value_a, b: value_b}
            rest = [name for name in names if name not in row]
            draw.shuffle(rest)
            for name in rest:
                options = [value for value in dimensions[name] if allowed({**row, name: value})]
                scores = [len(covered({**row, name: value})) for value in options]
                top = max(scores)
                row[name] = draw.choice([value for value, score in zip(options, scores) if score == top])
            if best is None or len(covered(row)) > len(covered(best)):
                best = row
        assert best is not None
        uncovered -= covered(best)
        rows.append({name: best[name] for name in names})
    return rows


# --- the tables docs/resume.md holds ---------------------------------------------------------------


def counts(outcomes: list[str]) -> str:
    """``N cells: X exact, Y warned``, as the tables' headings and the prose say it."""
    exact = sum(outcome == "exact" for outcome in outcomes)
    return f"{len(outcomes)} cells: {exact} exact, {len(outcomes) - exact} warned"


def named_cells_table(heading: str, named: list[tuple[str, Any]], outcomes: list[str]) -> list[str]:
    """The lines of a table of named cases (``(name, cell)``), both ways in, with their outcomes."""
    return [
        f"{heading} ({counts(outcomes)}):",
        "",
        "| case | way in | outcome |",
        "| --- | --- | --- |",
        *(f"| {name} | {cell.way} | {outcome} |" for (name, cell), outcome in zip(named, outcomes)),
    ]


__all__ = [
    "BATCHES",
    "Cell",
    "Fault",
    "HOWS",
    "Loop",
    "Outcome",
    "SegmentExtras",
    "SimulatedFault",
    "TRAIN_WHERES",
    "VAL_WHERES",
    "WHERES",
    "counts",
    "named_cells_table",
    "pairwise",
    "run_cell",
]
