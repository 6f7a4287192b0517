"""The modules the LightningCLI configs here name by class path (``cli_models.<Name>``), for both packages.

Each module brings its own data, so a config needs nothing but the model, the trainer and callbacks.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch
import pytorch_lightning
from models import BATCH_SIZE, RegressorParts, make_dataset, make_loader
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

from lightning_step_types import LossLogging, TrainStepResult, ValStepResult
from lightning_step_types import lightning_pytorch as lst_lightning_pytorch
from lightning_step_types import pytorch_lightning as lst_pytorch_lightning


class TypedSteps(RegressorParts):
    """Steps returning typed results, with no ``self.log``; and the data they train on."""

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        loss, preds = self.loss_and_preds(batch)
        return TrainStepResult(loss=loss, metadata={"preds": preds.detach()}, batch_size=len(preds))

    def validation_step(self, batch: Any, batch_idx: int) -> ValStepResult:
        loss, preds = self.loss_and_preds(batch)
        return ValStepResult(loss=loss, metadata={"preds": preds}, batch_size=len(preds))

    def train_dataloader(self) -> DataLoader[Any]:
        return make_loader()

    def val_dataloader(self) -> DataLoader[Any]:
        return make_loader(seed=1)


class PlainRegressor(TypedSteps, pytorch_lightning.LightningModule):
    """A plain ``pytorch_lightning`` module returning typed results: meant for ``StepResultAdapter``."""

    def __init__(self, lr: float = 0.1) -> None:
        super().__init__()
        self.build(seed=0, lr=lr)


class TypedRegressor(TypedSteps, lst_pytorch_lightning.TypedLightningModule):
    """A typed module whose loss logging is an init argument, so a config can set it."""

    # Steps inherited from a plain mixin are not adapted yet (test_typed_module.py::
    # test_inherited_steps_are_checked_too): restate them in the subclass body.
    training_step = TypedSteps.training_step
    validation_step = TypedSteps.validation_step

    def __init__(self, lr: float = 0.1, log_loss: bool | LossLogging = False) -> None:
        super().__init__()
        self.build(seed=0, lr=lr)
        self.log_loss = log_loss


class LightningPlainRegressor(TypedSteps, lightning.pytorch.LightningModule):
    """``PlainRegressor`` for ``lightning.pytorch``."""

    def __init__(self, lr: float = 0.1) -> None:
        super().__init__()
        self.build(seed=0, lr=lr)


class LightningTypedRegressor(TypedSteps, lst_lightning_pytorch.TypedLightningModule):
    """``TypedRegressor`` for ``lightning.pytorch``."""

    training_step = TypedSteps.training_step
    validation_step = TypedSteps.validation_step

    def __init__(self, lr: float = 0.1, log_loss: bool | LossLogging = False) -> None:
        super().__init__()
        self.build(seed=0, lr=lr)
        self.log_loss = log_loss


class ResumableTypedRegressor(TypedRegressor):
    """``TypedRegressor`` on ``StatefulDataLoader``s, so that a resume inside an epoch takes up the data's order."""

    def train_dataloader(self) -> StatefulDataLoader[Any]:
        return StatefulDataLoader(make_dataset(), batch_size=BATCH_SIZE)

    def val_dataloader(self) -> StatefulDataLoader[Any]:
        return StatefulDataLoader(make_dataset(seed=1), batch_size=BATCH_SIZE)
