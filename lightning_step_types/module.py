"""The typed module: a LightningModule mixin whose subclasses' steps are adapted with no decorator.

The Lightning flavour (``pytorch_lightning`` or ``lightning.pytorch``) is chosen by the class
that mixes this in: see ``lightning_step_types.pytorch_lightning`` and ``.lightning_pytorch``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lightning_step_types.adapter import (
    BATCH_END_HOOKS,
    STEP_HOOKS,
    adapt_batch_end_function,
    adapt_step_function,
    wrap_inherited_hooks,
)
from lightning_step_types.policy import LossLogging, NonFiniteLoss, StepPolicy

__all__ = ["TypedModuleMixin"]


class TypedModuleMixin:
    """A ``LightningModule`` whose steps return typed results.

    ``training_step`` returns ``TrainStepResult`` (or ``None`` to skip the batch on one device),
    ``validation_step`` and ``test_step`` return ``ValStepResult`` (or ``None``). Anything else
    raises ``StepResultError`` before any backward or optimizer step. The module's own
    ``on_train_batch_end`` / ``on_validation_batch_end`` / ``on_test_batch_end`` receive the
    typed result, or None when the step returned None (for training with the loss detached,
    as Lightning gives it); plain callbacks keep receiving Lightning's dict.

    Settings, on the class or as ``self.<name> = ...`` in ``__init__``:

    - ``nonfinite_loss``: ``"raise"`` (default), ``"warn"``, ``"skip"`` or ``None``: what a NaN or
      infinite loss does.
    - ``log_loss``: ``False`` (default), ``True`` or a ``LossLogging``: log each stage's loss
      with ``self.log`` as ``train_loss`` / ``val_loss`` / ``test_loss``.
    """

    nonfinite_loss: NonFiniteLoss = "raise"
    log_loss: bool | LossLogging = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        StepPolicy.of(True, cls.nonfinite_loss, cls.log_loss)  # a wrong setting fails at the class, not the first step
        wrap_inherited_hooks(cls, {hook_name: hook_name for hook_name in STEP_HOOKS}, _adapt_step)
        wrap_inherited_hooks(cls, BATCH_END_HOOKS, adapt_batch_end_function)


def _adapt_step(func: Callable[..., Any], hook_name: str) -> Callable[..., Any]:
    return adapt_step_function(func, hook_name, module_policy)


def module_policy(module: TypedModuleMixin) -> StepPolicy:
    """The adapter settings a typed module's steps run with (read on every step)."""
    return StepPolicy.of(True, module.nonfinite_loss, module.log_loss)
