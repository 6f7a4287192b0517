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
from test_random_streams import Rows
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


def _fit(
    root: Path,
    module: DrawsAtEpochStart,
    ckpt_path: Path | None = None,
    callbacks: tuple[Callback, ...] = (),
    **options: Any,
) -> pl.Trainer:
    """One fit (with no StepResultWarning), seeded; ModelCheckpoint keeps every epoch's file under ``every``."""
    pl.seed_everything(7, verbose=False)
    trainer = pl.Trainer(
        **{
            "accelerator": "cpu",
            "max_epochs": 3,
            "logger": False,
            "enable_progress_bar": False,
            "enable_model_summary": False,
            "num_sanity_val_steps": 0,
            "default_root_dir": root,
            "callbacks": [
                *callbacks,
                ModelCheckpoint(dirpath=root / "every", save_top_k=-1),
                OnExceptionCheckpoint(root),
            ],
            **options,
        }
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            trainer.fit(module, ckpt_path=ckpt_path, weights_only=False)
        except PlannedFault:
            pass
    assert [str(w.message) for w in caught if issubclass(w.category, StepResultWarning)] == []
    return trainer


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
    _fit(tmp_path / "full", full)
    resumed = DrawsAtEpochStart(LOADERS[loader])
    _fit(tmp_path / "resumed", resumed, ckpt_path=tmp_path / "full" / "every" / "epoch=0-step=5.ckpt")
    assert resumed.scales == full.scales  # epoch 0's comes back with the module's attributes
    _same(resumed, full)


@pytest.mark.parametrize("manual", [False, True], ids=["automatic", "manual"])
@pytest.mark.parametrize("epoch", [0, 1])
def test_a_fault_in_on_train_epoch_start_after_its_draw(epoch: int, manual: bool, tmp_path: Path) -> None:
    """The module's on_train_epoch_start draws, then fails; resumed from OnExceptionCheckpoint's file (the
    epoch from its start): the hook draws what it drew before the fault, and the fit ends as uninterrupted
    (epoch 0: its iterator was made before the hook; epoch 1: after it)."""
    full = DrawsAtEpochStart({"shuffle": True}, manual=manual)
    _fit(tmp_path / "full", full)
    interrupted = DrawsAtEpochStart({"shuffle": True}, fault_epoch=epoch, manual=manual)
    _fit(tmp_path / "interrupted", interrupted)
    assert interrupted.scales == full.scales[: epoch + 1]
    resumed = DrawsAtEpochStart({"shuffle": True}, manual=manual)
    _fit(tmp_path / "resumed", resumed, ckpt_path=tmp_path / "interrupted" / "on_exception.ckpt")
    assert resumed.scales == full.scales
    _same(resumed, full)


class RecordsEpochStarts(Callback):
    """A user callback that records each epoch it starts, in a list no checkpoint of Lightning's holds."""

    def __init__(self) -> None:
        self.epoch_starts: list[int] = []

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self.epoch_starts.append(int(trainer.current_epoch))


@pytest.mark.parametrize("epoch", [0, 1])
def test_the_callbacks_epoch_start_hooks_before_a_fault_in_the_modules_run_again_once(
    epoch: int, tmp_path: Path
) -> None:
    """Lightning calls the callbacks' on_train_epoch_start before the module's, which fails; resumed at the
    epoch's start, they run again: a user callback's record, and LearningRateMonitor's row, are there once."""

    def fit(root: Path, module: DrawsAtEpochStart, ckpt_path: Path | None = None) -> tuple[list[int], list[Any]]:
        monitor = RecordsEpochStarts()
        logger = Rows()
        options = {"max_epochs": 2, "logger": logger, "log_every_n_steps": 1}
        _fit(root, module, ckpt_path, (monitor, LearningRateMonitor(logging_interval="epoch")), **options)
        return monitor.epoch_starts, logger.rows

    full, full_rows = fit(tmp_path / "full", DrawsAtEpochStart({}))
    assert full == [0, 1]
    interrupted, rows = fit(tmp_path / "interrupted", DrawsAtEpochStart({}, fault_epoch=epoch))
    assert interrupted == [0, 1][: epoch + 1]
    resumed, resumed_rows = fit(
        tmp_path / "resumed", DrawsAtEpochStart({}), ckpt_path=tmp_path / "interrupted" / "on_exception.ckpt"
    )
    rows += resumed_rows
    assert [key for key, _ in rows if key.startswith("lr-")] == ["lr-SGD", "lr-SGD"]
    assert rows == full_rows
    assert resumed == [0, 1]
