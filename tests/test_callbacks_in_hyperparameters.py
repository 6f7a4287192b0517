"""A module that keeps the Trainer's callbacks in its hyperparameters, as neuralforecast's modules do.

6 batches an epoch, 2 epochs; the resume is from an exception after epoch 1's batch 3 (global step 9).

neuralforecast 3.3.0 (``neuralforecast/common/_base_model.py``) takes the Trainer's arguments as
``__init__`` arguments, keeps them in ``self.trainer_kwargs`` and in ``save_hyperparameters()``, and builds
its Trainer with ``pl.Trainer(**model.trainer_kwargs)``. Lightning extends a non-empty ``callbacks`` list
in place (its default ``ModelCheckpoint`` goes into the user's list), so every checkpoint pickles that
``ModelCheckpoint`` in its hyperparameters while the fit runs. The library wraps the checkpoint
callback's own save for the fit; the checkpoint must pickle it as it is without the library.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from models import make_dataset
from pytorch_lightning.callbacks import ModelCheckpoint, OnExceptionCheckpoint
from torch import nn
from torch.utils.data import DataLoader

from lightning_step_types import StepResultAdapter


class KeepsItsTrainerArguments(pl.LightningModule):
    def __init__(self, **trainer_kwargs: Any) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.trainer_kwargs = trainer_kwargs
        torch.manual_seed(0)
        self.net = nn.Linear(3, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


class Stop(Exception):
    pass


class StopAfter(pl.Callback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
        if trainer.global_step == self.step:
            raise Stop


def fit(root: Path, callbacks: list[Any], ckpt_path: str | None = None) -> tuple[KeepsItsTrainerArguments, pl.Trainer]:
    module = KeepsItsTrainerArguments(callbacks=callbacks)
    trainer = pl.Trainer(
        max_epochs=2,
        default_root_dir=root,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **module.trainer_kwargs,
    )
    loader = DataLoader(make_dataset(0, 6), batch_size=2, shuffle=True, generator=torch.Generator().manual_seed(1))
    try:
        trainer.fit(module, loader, ckpt_path=ckpt_path, weights_only=False)
    except Stop:
        pass
    return module, trainer


def kept(path: str) -> ModelCheckpoint:
    saved: ModelCheckpoint = torch.load(path, weights_only=False)["hyper_parameters"]["callbacks"][-1]
    return saved


def test_the_checkpoint_pickles_the_checkpoint_callback_as_plain_lightning_does(tmp_path: Path) -> None:
    _, plain = fit(tmp_path / "plain", [pl.Callback()])
    _, adapted = fit(tmp_path / "adapted", [StepResultAdapter()])
    assert plain.checkpoint_callback is not None and adapted.checkpoint_callback is not None
    plain_file, adapted_file = plain.checkpoint_callback.best_model_path, adapted.checkpoint_callback.best_model_path
    assert Path(adapted_file).name == Path(plain_file).name == "epoch=1-step=12.ckpt"
    # the ModelCheckpoint in the hyperparameters: the same attributes as plain Lightning's
    assert isinstance(kept(adapted_file), ModelCheckpoint)
    assert sorted(vars(kept(adapted_file))) == sorted(vars(kept(plain_file)))
    # and, the fit over, the library's own attributes are off the callback itself
    assert sorted(vars(adapted.checkpoint_callback)) == sorted(vars(plain.checkpoint_callback))


def test_a_resume_inside_an_epoch_is_exact(tmp_path: Path) -> None:
    uninterrupted, _ = fit(tmp_path / "uninterrupted", [StepResultAdapter()])
    stop = [StepResultAdapter(), StopAfter(9), OnExceptionCheckpoint(dirpath=tmp_path / "stopped")]
    fit(tmp_path / "resumed", stop)
    resumed, trainer = fit(tmp_path / "resumed", [StepResultAdapter()], str(tmp_path / "stopped" / "on_exception.ckpt"))
    assert trainer.global_step == 12
    for (name, a), (_, b) in zip(uninterrupted.state_dict().items(), resumed.state_dict().items()):
        assert torch.equal(a, b), name
