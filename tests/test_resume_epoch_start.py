"""A resume at an epoch's start, where the on_train_epoch_start hooks draw from the global random streams.

Uninterrupted, Lightning makes each epoch's training iterator after its on_train_epoch_start hooks (the
epoch loop's start), past the fit's first epoch; a fit resumed at an epoch's start makes its first one in
``FitLoop.setup_data``, before them. Making a plain ``DataLoader``'s iterator draws its workers' base seed
from torch's global stream: the hook's draw and the iterator's swapped places, and the resumed hook drew
another value (then other weights), silently. A save inside the hooks (``OnExceptionCheckpoint`` after a
fault there) took the streams after the hooks' draws, and in the fit's first epoch after the iterator
``setup_data`` had made. Each case here: the draws, the weights and the momentum end as uninterrupted.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback, LearningRateMonitor, ModelCheckpoint, OnExceptionCheckpoint
from pytorch_lightning.loggers.logger import Logger
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from lightning_step_types import StepResultWarning, TrainStepResult, TypedLightningModule


class PlannedFault(RuntimeError):
    pass


class Stream(IterableDataset[Any]):
    """The rows as an IterableDataset whose position is its state (``state_dict()``): a loader without a
    length, which Lightning fetches one batch ahead of as it makes the iterator."""

    def __init__(self, data: TensorDataset) -> None:
        self.data, self.position = data, 0

    def __iter__(self) -> Iterator[Any]:
        start, self.position = self.position, 0
        for index in range(start, len(self.data)):
            self.position = index + 1
            yield self.data[index]
        self.position = 0

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.position = state["position"]


class DrawsAtEpochStart(TypedLightningModule):
    """Scales each epoch's inputs by a draw from torch's global stream in on_train_epoch_start; dropout."""

    def __init__(self, loader: dict[str, Any], fault_epoch: int | None = None, manual: bool = False) -> None:
        super().__init__()
        self.loader, self.fault_epoch = loader, fault_epoch
        self.automatic_optimization = not manual
        with torch.random.fork_rng():  # the same weights in each fit
            torch.manual_seed(0)
            self.body = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.ReLU(), torch.nn.Dropout(0.5))
            self.head = torch.nn.Linear(8, 1)
        self.scale = 1.0
        self.scales: list[float] = []

    def train_dataloader(self) -> DataLoader[Any]:
        generator = torch.Generator().manual_seed(0)
        data = TensorDataset(torch.randn(14, 3, generator=generator), torch.randn(14, 1, generator=generator))
        options = dict(self.loader)
        if options.pop("stream", False):
            return DataLoader(Stream(data), batch_size=3, **options)
        return DataLoader(data, batch_size=3, **options)

    def on_train_epoch_start(self) -> None:
        self.scale = 1.0 + 0.1 * float(torch.rand(()).item())
        self.scales.append(self.scale)
        if self.current_epoch == self.fault_epoch:
            self.fault_epoch = None
            raise PlannedFault(f"on_train_epoch_start of epoch {self.current_epoch}")

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.head(self.body(x * self.scale)), y)
        if not self.automatic_optimization:
            optimizer: Any = self.optimizers()
            optimizer.zero_grad()
            self.manual_backward(loss)
            optimizer.step()
        return TrainStepResult(loss=loss)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


def _fit(root: Path, module: DrawsAtEpochStart, ckpt_path: Path | None = None) -> list[str]:
    pl.seed_everything(7, verbose=False)
    callbacks: list[Callback] = [ModelCheckpoint(dirpath=root / "every", save_top_k=-1), OnExceptionCheckpoint(root)]
    trainer = pl.Trainer(
        accelerator="cpu",
        max_epochs=3,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=root,
        callbacks=callbacks,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            trainer.fit(module, ckpt_path=ckpt_path, weights_only=False)
        except PlannedFault:
            pass
    return [str(w.message) for w in caught if issubclass(w.category, StepResultWarning)]


def _state(module: DrawsAtEpochStart, optimizer: Any) -> dict[str, torch.Tensor]:
    momentum = {f"momentum {index}": state["momentum_buffer"] for index, state in enumerate(optimizer.state.values())}
    return {**{name: value.detach().clone() for name, value in module.state_dict().items()}, **momentum}


def _same(resumed: DrawsAtEpochStart, full: DrawsAtEpochStart) -> None:
    resumed_state = _state(resumed, resumed.trainer.optimizers[0])
    full_state = _state(full, full.trainer.optimizers[0])
    assert resumed_state.keys() == full_state.keys()
    for name, value in full_state.items():
        assert torch.equal(resumed_state[name], value), name


LOADERS = {
    "shuffle": {"shuffle": True},
    "two workers": {"shuffle": True, "num_workers": 2},
    "persistent workers": {"shuffle": True, "num_workers": 2, "persistent_workers": True},
    "an IterableDataset with a position": {"stream": True},
}


@pytest.mark.parametrize("loader", list(LOADERS))
def test_a_draw_in_on_train_epoch_start_after_a_resume_at_that_epochs_start(loader: str, tmp_path: Path) -> None:
    """Resumed from epoch=0-step=5.ckpt (ModelCheckpoint's, at epoch 0's end): epoch 1's hook draws the
        uninterrupted value, its iterator's base seed and order come after it (an IterableDataset's first batch,
    fetched ahead, too), and the fit ends as uninterrupted."""
    full = DrawsAtEpochStart(LOADERS[loader])
    assert _fit(tmp_path / "full", full) == []
    resumed = DrawsAtEpochStart(LOADERS[loader])
    warned = _fit(tmp_path / "resumed", resumed, ckpt_path=tmp_path / "full" / "every" / "epoch=0-step=5.ckpt")
    assert warned == []
    assert resumed.scales == full.scales  # epoch 0's comes back with the module's attributes
    _same(resumed, full)


@pytest.mark.parametrize("manual", [False, True], ids=["automatic", "manual"])
@pytest.mark.parametrize("epoch", [0, 1])
def test_a_fault_in_on_train_epoch_start_after_its_draw(epoch: int, manual: bool, tmp_path: Path) -> None:
    """The module's on_train_epoch_start draws, then fails; resumed from OnExceptionCheckpoint's file (the
    epoch from its start): the hook draws what it drew before the fault, and the fit ends as uninterrupted
    (epoch 0: its iterator was made before the hook; epoch 1: after it)."""
    full = DrawsAtEpochStart({"shuffle": True}, manual=manual)
    assert _fit(tmp_path / "full", full) == []
    interrupted = DrawsAtEpochStart({"shuffle": True}, fault_epoch=epoch, manual=manual)
    assert _fit(tmp_path / "interrupted", interrupted) == []
    assert interrupted.scales == full.scales[: epoch + 1]
    resumed = DrawsAtEpochStart({"shuffle": True}, manual=manual)
    warned = _fit(tmp_path / "resumed", resumed, ckpt_path=tmp_path / "interrupted" / "on_exception.ckpt")
    assert warned == []
    assert resumed.scales == full.scales
    _same(resumed, full)


class RecordsEpochStarts(Callback):
    """A user callback that records each epoch it starts, in a list no checkpoint of Lightning's holds."""

    def __init__(self) -> None:
        self.epoch_starts: list[int] = []

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self.epoch_starts.append(int(trainer.current_epoch))


class Rows(Logger):
    """The rows the loggers are given, into a list the fits share (as a file a resumed fit appends to)."""

    def __init__(self, rows: list[tuple[int | None, dict[str, float]]]) -> None:
        super().__init__()
        self.rows = rows

    @property
    def name(self) -> str:
        return "rows"

    @property
    def version(self) -> int:
        return 0

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.rows.append((step, {name: float(value) for name, value in metrics.items()}))


@pytest.mark.parametrize("epoch", [0, 1])
def test_the_callbacks_epoch_start_hooks_before_a_fault_in_the_modules_run_again_once(
    epoch: int, tmp_path: Path
) -> None:
    """Lightning calls the callbacks' on_train_epoch_start before the module's, which fails; resumed at the
    epoch's start, they run again: a user callback's record, and LearningRateMonitor's row, are there once."""

    def fit(root: Path, module: DrawsAtEpochStart, rows: list[Any], ckpt_path: Path | None = None) -> Any:
        pl.seed_everything(7, verbose=False)
        trainer = pl.Trainer(
            accelerator="cpu",
            max_epochs=2,
            logger=Rows(rows),
            log_every_n_steps=1,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            default_root_dir=root,
            callbacks=[
                RecordsEpochStarts(),
                LearningRateMonitor(logging_interval="epoch"),
                OnExceptionCheckpoint(root),
            ],
        )
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                trainer.fit(module, ckpt_path=ckpt_path, weights_only=False)
            except PlannedFault:
                pass
        assert [str(w.message) for w in caught if issubclass(w.category, StepResultWarning)] == []
        return next(c for c in trainer.callbacks if isinstance(c, RecordsEpochStarts))

    full_rows: list[Any] = []
    full = fit(tmp_path / "full", DrawsAtEpochStart({}), full_rows)
    assert full.epoch_starts == [0, 1]
    rows: list[Any] = []
    interrupted = fit(tmp_path / "interrupted", DrawsAtEpochStart({}, fault_epoch=epoch), rows)
    assert interrupted.epoch_starts == [0, 1][: epoch + 1]
    resumed = fit(
        tmp_path / "resumed", DrawsAtEpochStart({}), rows, ckpt_path=tmp_path / "interrupted" / "on_exception.ckpt"
    )
    assert [step for step, row in rows if "lr-SGD" in row] == [0, 5]
    assert rows == full_rows
    assert resumed.epoch_starts == [0, 1]
