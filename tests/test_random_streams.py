"""The global random streams across a resume: dropout, augmentation, numpy's and Python's draws.

Every fit here starts as a process does, with ``seed_everything(0)`` before the model is built.
A fault stops a fit inside an epoch, and the fit resumed from its checkpoint (a fresh process: seeded
again) is compared with the uninterrupted fit of the same setup: every parameter bit for bit, and
every row the resumed fit logged (the epoch's ``train_loss``, each validation's ``val_loss``) the
uninterrupted fit's at the same position. The checkpoint comes from ``OnExceptionCheckpoint`` after
an exception, or from ``ModelCheckpoint(every_n_train_steps=...)`` with the job killed two batches
later. Both ways in: ``TypedLightningModule`` and ``StepResultAdapter()``.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from pytorch_lightning.callbacks import Callback, Checkpoint, ModelCheckpoint, OnExceptionCheckpoint, TQDMProgressBar
from pytorch_lightning.loggers.logger import Logger
from torch import nn
from torch.utils.data import Dataset
from torchdata.stateful_dataloader import StatefulDataLoader

from lightning_step_types import StepResultAdapter, StepResultWarning, TrainStepResult, TypedLightningModule

ROWS, VAL_ROWS, BATCH, FEATURES = 24, 8, 4, 8  # 6 training batches an epoch, 2 validation batches


@dataclass(frozen=True)
class Setup:
    """What draws at random in the fit: each field one dimension."""

    dropout: bool = True  # nn.Dropout(0.5) in the model
    augment: bool = False  # Dataset.__getitem__ adds noise from torch's global generator
    workers: int = 0  # the training loader's num_workers
    host: bool = False  # the step draws from numpy's and Python's global streams
    validation: bool = False  # val_check_interval=0.5, a shuffled validation loader, validation_step draws
    stateful_dataset: bool = False  # the augmenting dataset keeps its own generator in state_dict()
    loader_generator: bool = True  # the shuffled loader's generator=; without, its order comes from torch's stream


@dataclass(frozen=True)
class Fault:
    # exception (OnExceptionCheckpoint) | kill (ModelCheckpoint(every_n_train_steps) two batches before) |
    # epoch_kill (ModelCheckpoint at each training epoch's end, killed at the next epoch's batch)
    how: str
    where: str = "training_step"  # training_step | validation_step
    epoch: int = 0
    batch: int = 4  # training_step: the batch; validation_step: its batch in the mid-epoch validation


class SimulatedFault(RuntimeError):
    pass


class Rows(Logger):
    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[str, float]] = []

    @property
    def name(self) -> str:
        return "rows"

    @property
    def version(self) -> int:
        return 0

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        self.rows += [(key, float(value)) for key, value in sorted(metrics.items()) if key != "epoch"]


class Augmented(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(self, rows: int, seed: int, augment: bool) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.x = torch.randn(rows, FEATURES, generator=generator)
        self.y = self.x.sum(dim=1, keepdim=True)
        self.augment = augment

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.x[index]
        if self.augment:
            x = x + 0.5 * torch.randn(FEATURES)  # torch's global generator (a worker's own in a worker)
        return x, self.y[index]


class OwnGenerator(Augmented):
    """Augments from a generator of its own, kept in its state (each worker's, with workers)."""

    def __init__(self, rows: int, seed: int) -> None:
        super().__init__(rows, seed, augment=False)
        self.generator = torch.Generator().manual_seed(7)
        self.seeded_worker: int | None = None

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        info = torch.utils.data.get_worker_info()
        if info is not None and self.seeded_worker is None:
            self.seeded_worker = info.id
            self.generator.manual_seed(7 + info.id)
        return self.x[index] + 0.5 * torch.randn(FEATURES, generator=self.generator), self.y[index]

    def state_dict(self) -> dict[str, Any]:
        return {"generator": self.generator.get_state(), "seeded_worker": self.seeded_worker}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.generator.set_state(state["generator"])
        self.seeded_worker = state["seeded_worker"]


class Steps:
    """The model and its steps, shared by both ways in."""

    setup_: Setup
    fault: Fault | None
    fired: list[bool]

    def build(self, setup: Setup, fault: Fault | None, fired: list[bool]) -> None:
        self.setup_, self.fault, self.fired = setup, fault, fired
        layers: list[nn.Module] = [nn.Linear(FEATURES, 16), nn.ReLU()]
        if setup.dropout:
            layers.append(nn.Dropout(0.5))
        self.net = nn.Sequential(*layers, nn.Linear(16, 1))

    def _due(self, where: str, batch: int) -> bool:
        trainer: Any = getattr(self, "trainer")
        fault = self.fault
        if fault is None or self.fired[0] or fault.how != "exception" or fault.where != where:
            return False
        return not trainer.sanity_checking and (trainer.current_epoch, batch) == (fault.epoch, fault.batch)

    def _kill_if_due(self, batch: int) -> None:
        trainer: Any = getattr(self, "trainer")
        fault = self.fault
        if fault is not None and fault.how == "epoch_kill" and not self.fired[0]:
            if (trainer.current_epoch, batch) == (fault.epoch, fault.batch):
                self.fired[0] = True
                raise SimulatedFault("killed")
        if fault is not None and fault.how == "kill" and not self.fired[0]:
            batches = ROWS // BATCH
            if trainer.current_epoch * batches + batch == fault.epoch * batches + fault.batch + 2:
                self.fired[0] = True
                raise SimulatedFault("killed")

    def loss_of(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self._kill_if_due(batch_idx)
        x, y = batch
        loss = F.mse_loss(self.net(x), y)  # the dropout draws here
        if self.setup_.host:
            loss = loss * (1.0 + 0.2 * float(np.random.rand()) + 0.2 * random.random())
        if self._due("training_step", batch_idx):
            self.fired[0] = True
            raise SimulatedFault("in training_step, after the forward drew")
        getattr(self, "log")("train_loss", loss, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        loss = F.mse_loss(self.net(x), y) + 0.1 * torch.rand(())
        if self._due("validation_step", batch_idx):
            self.fired[0] = True
            raise SimulatedFault("in validation_step")
        getattr(self, "log")("val_loss", loss)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.net.parameters(), lr=0.02, momentum=0.9)


class TypedNoisy(Steps, TypedLightningModule):
    def __init__(self, setup: Setup, fault: Fault | None, fired: list[bool]) -> None:
        super().__init__()
        self.build(setup, fault, fired)

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        return TrainStepResult(loss=self.loss_of(batch, batch_idx))


class PlainNoisy(Steps, pl.LightningModule):
    def __init__(self, setup: Setup, fault: Fault | None, fired: list[bool]) -> None:
        super().__init__()
        self.build(setup, fault, fired)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.loss_of(batch, batch_idx)


@dataclass
class Run:
    params: dict[str, torch.Tensor]
    rows: list[tuple[str, float]]
    warnings: list[str]
    checkpoint: Path | None


def fit(
    way: str,
    setup: Setup,
    root: Path,
    fault: Fault | None = None,
    ckpt: Path | None = None,
    exact: bool = True,
    named: str | None = None,
) -> Run:
    """One fit, started as a process starts: seeded, then the model and the data made."""
    pl.seed_everything(0, verbose=False)
    fired = [ckpt is not None]  # a resumed fit runs on without a fault
    root.mkdir(parents=True, exist_ok=True)
    callbacks: list[Callback] = []
    if way == "adapter":
        callbacks.append(StepResultAdapter(exact_resume=exact))
    if fault is not None and fault.how == "exception":
        callbacks.append(OnExceptionCheckpoint(root))
    if fault is not None and fault.how == "kill":
        every = fault.epoch * ROWS // BATCH + fault.batch + 1
        callbacks.append(
            ModelCheckpoint(
                dirpath=root / "ckpt",
                every_n_train_steps=every,
                save_top_k=-1,
                filename="{step}",
                save_on_train_epoch_end=False,
            )
        )
    if fault is not None and fault.how == "epoch_kill":
        callbacks.append(
            ModelCheckpoint(dirpath=root / "ckpt", save_top_k=-1, filename="{step}", save_on_train_epoch_end=True)
        )
    rows = Rows()
    trainer = pl.Trainer(
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
        val_check_interval=0.5 if setup.validation else None,
        limit_val_batches=None if setup.validation else 0,
    )
    cls: type = TypedNoisy if way == "typed" else PlainNoisy
    module: Any = (type(named, (cls,), {}) if named else cls)(setup, fault, fired)
    if way == "typed":
        module.exact_resume = exact
    dataset = OwnGenerator(ROWS, 1) if setup.stateful_dataset else Augmented(ROWS, 1, setup.augment)
    train = StatefulDataLoader(
        dataset,
        batch_size=BATCH,
        shuffle=True,
        generator=torch.Generator().manual_seed(3) if setup.loader_generator else None,
        num_workers=setup.workers,
    )
    val = (
        StatefulDataLoader(
            Augmented(VAL_ROWS, 2, False), batch_size=BATCH, shuffle=True, generator=torch.Generator().manual_seed(4)
        )
        if setup.validation
        else None
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            trainer.fit(module, train, val, ckpt_path=ckpt)
        except SimulatedFault:
            pass
    messages = [str(w.message) for w in caught if issubclass(w.category, StepResultWarning)]
    left: Path | None = None
    if fault is not None and fault.how == "exception":
        left = root / "on_exception.ckpt"
    elif fault is not None and fault.how in ("kill", "epoch_kill"):
        left = min((root / "ckpt").glob("step=*.ckpt"), key=lambda path: int(path.stem.split("=")[1]))
    params = {name: value.detach().clone() for name, value in module.state_dict().items()}
    return Run(params, rows.rows, messages, left)


def resumed(way: str, setup: Setup, fault: Fault, root: Path, exact: bool = True) -> tuple[Run, Run]:
    """The uninterrupted fit, and the fit resumed from the faulted fit's checkpoint."""
    whole = fit(way, setup, root / "whole", exact=exact)
    broken = fit(way, setup, root / "broken", fault, exact=exact)
    assert broken.checkpoint is not None and broken.checkpoint.exists()
    again = fit(way, setup, root / "again", ckpt=broken.checkpoint, exact=exact)
    return whole, again


def differences(whole: Run, again: Run) -> list[str]:
    found = [name for name, value in whole.params.items() if not torch.equal(value, again.params[name])]
    if not again.rows or whole.rows[-len(again.rows) :] != again.rows:
        found.append("logged rows")
    return found


WAYS = ("typed", "adapter")
DROPOUT = Setup()
CELLS = {
    "dropout": DROPOUT,
    "augment": Setup(dropout=False, augment=True),
    "numpy and random": Setup(dropout=False, host=True),
    "everything": Setup(augment=True, host=True),
}


@pytest.mark.parametrize("how", ["exception", "kill"])
@pytest.mark.parametrize("cell", list(CELLS))
@pytest.mark.parametrize("way", WAYS)
def test_resumes_on_the_uninterrupted_draws(way: str, cell: str, how: str, tmp_path: Path) -> None:
    whole, again = resumed(way, CELLS[cell], Fault(how), tmp_path)
    assert differences(whole, again) == []
    assert again.warnings == []
    assert [key for key, _ in again.rows] == ["train_loss", "train_loss"]  # the resumed epoch's end, the next's


@pytest.mark.parametrize("way", WAYS)
def test_resumes_in_the_second_epoch_and_at_its_first_batch(way: str, tmp_path: Path) -> None:
    setup = Setup(augment=True, host=True)
    for fault in (Fault("exception", epoch=1, batch=3), Fault("exception", epoch=1, batch=0)):
        whole, again = resumed(way, setup, fault, tmp_path / str(fault.batch))
        assert differences(whole, again) == []
        assert again.warnings == []


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("way", WAYS)
def test_an_epochs_order_and_worker_seeds_drawn_from_torchs_stream(way: str, workers: int, tmp_path: Path) -> None:
    """Saved at epoch 0's end: the resumed run makes epoch 1's iterator from torch's stream as it was there
    (a shuffled loader without generator=: its sampler's seed, and its workers' base seed)."""
    setup = Setup(augment=True, workers=workers, loader_generator=False)
    whole, again = resumed(way, setup, Fault("epoch_kill", epoch=1, batch=2), tmp_path)
    assert differences(whole, again) == []
    assert again.warnings == []
    assert [key for key, _ in again.rows] == ["train_loss"]


@pytest.mark.parametrize("way", WAYS)
def test_plain_lightning_resumes_on_other_draws(way: str, tmp_path: Path) -> None:
    """The dropout cell with exact resume off: what the library's restore changes."""
    whole, again = resumed(way, DROPOUT, Fault("exception"), tmp_path, exact=False)
    assert "net.0.weight" in differences(whole, again)


VALIDATION = Setup(validation=True)
VALIDATION_FAULTS = {
    "inside the validation": Fault("exception", where="validation_step", batch=1),  # after batch 2, its second batch
    "after the validation": Fault("exception", batch=3),
    "saved before the validation, killed": Fault("kill", batch=2),  # ModelCheckpoint at batch 2's end, before it
    "saved after the validation, killed": Fault("kill", batch=3),
}


@pytest.mark.parametrize("fault", list(VALIDATION_FAULTS))
@pytest.mark.parametrize("way", WAYS)
def test_validation_draws_as_the_uninterrupted_run(way: str, fault: str, tmp_path: Path) -> None:
    """A shuffled validation loader (its generator) and draws in validation_step, validated mid-epoch."""
    whole, again = resumed(way, VALIDATION, VALIDATION_FAULTS[fault], tmp_path)
    assert differences(whole, again) == []
    assert again.warnings == []
    assert "val_loss" in [key for key, _ in again.rows]


WORKERS_MESSAGE = (
    "{cls}: resuming epoch 0 at batch 4\n"
    "  got:      a training loader whose worker processes draw at random: loader 0"
    " (torchdata.stateful_dataloader.stateful_dataloader.StatefulDataLoader, num_workers=2); each worker seeds"
    " torch's, numpy's and Python's random streams from the loader's base seed when it starts, no checkpoint"
    " holds where they were, and the resumed workers start them again, so random draws in the workers"
    " (augmentation in Dataset.__getitem__) are not the uninterrupted run's\n"
    "  expected: a loader whose workers' streams a checkpoint can hold, or one that loads in the main process,"
    " whose streams the checkpoint holds\n"
    "  fix:      nothing, where the dataset draws nothing at random; else draw the augmentation from a"
    " torch.Generator the dataset keeps, and return its get_state() from the dataset's state_dict()"
    " (StatefulDataLoader saves it for each worker), or set num_workers=0"
)


@pytest.mark.parametrize("way", WAYS)
def test_workers_drawing_at_random_are_named(way: str, tmp_path: Path) -> None:
    whole, again = resumed(way, Setup(dropout=False, augment=True, workers=2), Fault("exception"), tmp_path)
    assert differences(whole, again) == ["net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias", "logged rows"]
    cls = "TypedNoisy" if way == "typed" else "PlainNoisy"
    assert again.warnings == [WORKERS_MESSAGE.format(cls=cls)]


@pytest.mark.parametrize("way", WAYS)
def test_workers_drawing_from_the_datasets_state_resume_exactly(way: str, tmp_path: Path) -> None:
    """The warning's fix: the dataset keeps its generator in state_dict(), which torchdata saves per worker."""
    whole, again = resumed(way, Setup(stateful_dataset=True, workers=2), Fault("exception"), tmp_path)
    assert differences(whole, again) == []
    assert again.warnings == []


def test_the_checkpoint_holds_each_stream_as_plain_data(tmp_path: Path) -> None:
    """torch's state as a tensor, Python's and numpy's as bytes and numbers: a weights_only load reads them."""
    broken = fit("typed", DROPOUT, tmp_path, Fault("exception"))
    assert broken.checkpoint is not None
    checkpoint = torch.load(broken.checkpoint, weights_only=True)
    (rank,) = checkpoint["lightning_step_types"]["epoch_state"]["ranks"]
    streams = rank["random_streams"]
    assert sorted(streams) == ["iterator", "loaders", "point", "validation", "validation_made"]
    assert streams["validation_made"] is None  # validation loaders made once: no epoch to count reloads from
    point = streams["point"]
    assert sorted(point) == ["numpy", "python", "torch"]
    assert point["torch"].dtype == torch.uint8 and point["torch"].numel() == 5056
    assert point["python"][0] == 3 and len(point["python"][1]) == 625 * 4
    assert point["numpy"][0] == "MT19937" and len(point["numpy"][1]) == 624 * 4


class CopiesTheCallbacks(Callback):
    """Deep-copies ``trainer.callbacks`` as a fit starts, as Lightning's own tests do
    (``tests_pytorch/models/test_restore.py``): a progress bar among them holds the Trainer, and so
    everything the followed fit put on its loops (the global streams' reader among it)."""

    copied: list[Callback] | None = None

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        import copy

        self.copied = copy.deepcopy(trainer.callbacks)  # pyright: ignore[reportAttributeAccessIssue]


class TinyPlain(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5), nn.Linear(4, 1))

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        return self.net(batch[0]).pow(2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class TinyTyped(TinyPlain, TypedLightningModule):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        return TrainStepResult(loss=super().training_step(batch, batch_idx))


@pytest.mark.parametrize("way", ["typed", "adapter"])
def test_a_deep_copy_of_the_trainer_during_a_fit(way: str, tmp_path: Path) -> None:
    copier = CopiesTheCallbacks()
    callbacks: list[Callback] = [copier, TQDMProgressBar()]
    if way == "adapter":
        callbacks.append(StepResultAdapter())
    trainer = pl.Trainer(
        max_epochs=1,
        limit_train_batches=2,
        logger=False,
        enable_checkpointing=False,
        callbacks=callbacks,
        default_root_dir=tmp_path,
    )
    rows = torch.utils.data.TensorDataset(torch.randn(8, 4))
    trainer.fit(TinyTyped() if way == "typed" else TinyPlain(), StatefulDataLoader(rows, batch_size=4))
    assert copier.copied is not None
    callbacks_now: list[Callback] = trainer.callbacks  # pyright: ignore[reportAttributeAccessIssue]
    assert [type(callback) for callback in copier.copied] == [type(callback) for callback in callbacks_now]
    assert trainer.global_step == 2
