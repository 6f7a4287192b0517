"""The ``pytorch_lightning`` flavour: ``import pytorch_lightning as pl`` users import from here.

``lightning_step_types.TypedLightningModule`` and friends are these classes too, when
``pytorch_lightning`` is installed.
"""

from __future__ import annotations

import pytorch_lightning as pl

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
