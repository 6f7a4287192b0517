"""The ``lightning.pytorch`` flavour: ``import lightning as L`` / ``lightning.pytorch`` users import from here."""

from __future__ import annotations

import lightning.pytorch as pl

from lightning_step_types.callback import StepResultAdapterMixin
from lightning_step_types.module import TypedModuleMixin
from lightning_step_types.typed_callback import TypedCallbackMixin

__all__ = ["StepResultAdapter", "TypedCallback", "TypedLightningModule"]


class TypedLightningModule(TypedModuleMixin, pl.LightningModule):
    __doc__ = TypedModuleMixin.__doc__


class StepResultAdapter(StepResultAdapterMixin, pl.Callback):
    __doc__ = StepResultAdapterMixin.__doc__


class TypedCallback(TypedCallbackMixin, pl.Callback):
    __doc__ = TypedCallbackMixin.__doc__
