"""``TypedLightningModule``: a LightningModule whose subclasses' steps are adapted with no decorator."""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl

from lightning_step_types.adapter import (
    BATCH_END_HOOKS,
    STEP_HOOKS,
    adapt_batch_end_function,
    adapt_step_function,
    is_plain_function,
)
from lightning_step_types.policy import NonFiniteLoss, StepPolicy

__all__ = ["TypedLightningModule"]


class TypedLightningModule(pl.LightningModule):
    """A ``LightningModule`` whose steps return typed results.

    ``training_step`` returns ``TrainStepResult`` (or ``None`` to skip the batch on one device),
    ``validation_step`` and ``test_step`` return ``ValStepResult`` (or ``None``). Anything else
    raises ``StepResultError`` before any backward or optimizer step. The module's own
    ``on_train_batch_end`` / ``on_validation_batch_end`` / ``on_test_batch_end`` receive the
    typed result (for training with the loss detached, as Lightning gives it); callbacks keep
    receiving Lightning's plain dict.

    ``nonfinite_loss`` (``"raise"``, ``"warn"``, ``"skip"`` or ``None``) says what a NaN or infinite
    loss does; set it on the class or as ``self.nonfinite_loss = ...`` in ``__init__``.
    """

    nonfinite_loss: NonFiniteLoss = "raise"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for hook_name in STEP_HOOKS:
            func = cls.__dict__.get(hook_name)
            if is_plain_function(func):
                setattr(cls, hook_name, adapt_step_function(func, hook_name, _policy_of))
        for hook_name, step_hook in BATCH_END_HOOKS.items():
            func = cls.__dict__.get(hook_name)
            if is_plain_function(func):
                setattr(cls, hook_name, adapt_batch_end_function(func, step_hook))


def _policy_of(module: TypedLightningModule) -> StepPolicy:
    return StepPolicy.of(True, module.nonfinite_loss)
