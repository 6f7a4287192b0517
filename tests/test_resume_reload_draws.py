"""A fit that makes its training loaders anew at each epoch's start (``reload_dataloaders_every_n_epochs=1``),
resumed from a checkpoint saved at an epoch's end, before the uninterrupted run asked for the next epoch's loaders
(the second ModelCheckpoint's on_train_epoch_end had not run at that save: the resumed fit runs the epoch's end
hooks that had not returned, then the next epoch).

- ``train_dataloader()`` draws from torch's global stream (here the rows' offset): the resumed fit asks for the
  loaders in ``FitLoop.setup_data`` before the saved streams went back, so it drew from a fresh stream. The
  streams saved at the point now go back right before that request.
- The uninterrupted epoch makes two iterators of the new loaders (in ``FitLoop.setup_data`` and at the epoch
  loop's start) and trains from the second; a resumed fit's epoch loop makes none. A loader with ``generator=``
  draws its workers' base seed from the generator for each iterator, and one without draws it from torch's
  stream: the resumed epoch shuffled otherwise. Its epoch loop now makes the iterator again, and the training
  generators recorded for the point (those of the epoch before's loaders) are not put into the new ones.

Resumed inside the reloading epoch, or from a save in its ``on_train_epoch_start`` (after the request), the
resumed fit's request drew from a fresh stream too: the streams before the uninterrupted run's request are
now read there (once per request) and go back before the resumed fit's.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from models import assert_same_params, trainer_kwargs
from pytorch_lightning.callbacks import Callback, ModelCheckpoint
from test_resume import TypedResume, dataset
from torch.utils.data import DataLoader, TensorDataset

from lightning_step_types import StepResultWarning

DRAWN: list[tuple[str, Any]] = []  # what each fit drew, in order (a module's attributes come back at a resume)


class ReloadsWithADraw(TypedResume):
    def __init__(self, generator: bool) -> None:
        super().__init__()
        self.generator = generator

    def train_dataloader(self) -> Any:
        offset = int(torch.randint(0, 1000, ()).item())
        DRAWN.append(("offset", (self.current_epoch, offset)))
        x, y = dataset(0).tensors
        rows = TensorDataset(x.roll(offset, 0), y.roll(offset, 0))
        generator = torch.Generator().manual_seed(5) if self.generator else None
        return DataLoader(rows, batch_size=2, shuffle=True, generator=generator)

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        if batch_idx == 0:
            DRAWN.append(("first batch", (self.current_epoch, batch[1].flatten().tolist())))
        return super().training_step(batch, batch_idx)


class SavesAtTheSecondEpochsStart(Callback):
    def __init__(self, path: Path) -> None:
        self.path = path

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.current_epoch == 1 and not self.path.exists():
            trainer.save_checkpoint(self.path)


def _fit(root: Path, generator: bool, ckpt_path: Path | None = None) -> tuple[pl.LightningModule, list[str]]:
    pl.seed_everything(0)
    at_epoch_ends = ModelCheckpoint(dirpath=root, save_top_k=-1, filename="{epoch}")
    inside = ModelCheckpoint(dirpath=root, save_top_k=-1, every_n_train_steps=14, filename="{step}")
    callbacks = [at_epoch_ends, inside, SavesAtTheSecondEpochsStart(root / "epoch_start.ckpt")]
    kwargs = trainer_kwargs(root, max_epochs=3, reload_dataloaders_every_n_epochs=1, enable_checkpointing=True)
    trainer = pl.Trainer(**kwargs, callbacks=callbacks)
    module = ReloadsWithADraw(generator)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(module, ckpt_path=ckpt_path)
    return module, [str(w.message) for w in caught if issubclass(w.category, StepResultWarning)]


def _offsets() -> list[Any]:
    return [value[1] for kind, value in DRAWN if kind == "offset"]


def _from_epoch_1() -> list[tuple[str, Any]]:
    """What the fit drew for epoch 1 and after: a fit resumed at epoch 0's end (its epoch-end hooks run again: a
    ModelCheckpoint after the one that saved had not run its on_train_epoch_end) asks for epoch 0's loaders at its
    start first, from the streams the uninterrupted fit's start drew from too."""
    return [(kind, value) for kind, value in DRAWN if value[0] >= 1]


@pytest.mark.parametrize("generator", [True, False], ids=["loader_generator", "global_stream"])
def test_a_resume_at_a_reloading_epochs_start_draws_as_the_uninterrupted_run(generator: bool, tmp_path: Path) -> None:
    DRAWN.clear()
    full, _ = _fit(tmp_path / "full", generator)
    uninterrupted = _from_epoch_1()  # from epoch 1's request on
    first_request = DRAWN[0]
    DRAWN.clear()
    resumed, warned = _fit(tmp_path / "resumed", generator, tmp_path / "full" / "epoch=0.ckpt")
    assert [kind for kind, _ in uninterrupted] == ["offset", "first batch", "offset", "first batch"]
    assert _from_epoch_1() == uninterrupted
    assert DRAWN[0] == first_request  # epoch 0's request again, at the resumed fit's start: no batch trains from it
    assert warned == []
    assert_same_params(resumed, full)


@pytest.mark.parametrize("saved", ["step=14.ckpt", "epoch_start.ckpt"], ids=["inside", "in_on_train_epoch_start"])
@pytest.mark.parametrize("generator", [True, False], ids=["loader_generator", "global_stream"])
def test_a_resume_after_the_reloading_epochs_request_draws_as_the_uninterrupted_run(
    generator: bool, saved: str, tmp_path: Path
) -> None:
    """Inside epoch 1 (at its batch 3) or in its on_train_epoch_start: its loaders were asked for before the save."""
    DRAWN.clear()
    full, _ = _fit(tmp_path / "full", generator)
    uninterrupted = _offsets()[1:]  # epoch 1's and epoch 2's
    DRAWN.clear()
    resumed, warned = _fit(tmp_path / "resumed", generator, tmp_path / "full" / saved)
    assert _offsets() == uninterrupted
    assert warned == []
    assert_same_params(resumed, full)
