"""The typed callback: batch-end hooks that receive typed step results.

Mixed into each Lightning flavour's ``Callback`` as ``TypedCallback``.
"""

from __future__ import annotations

from typing import Any

from lightning_step_types.adapter import BATCH_END_HOOKS, adapt_callback_batch_end_function, wrap_inherited_hooks

__all__ = ["TypedCallbackMixin"]


class TypedCallbackMixin:
    """A callback whose ``on_train_batch_end`` / ``on_validation_batch_end`` / ``on_test_batch_end``
    receive the step's ``TrainStepResult`` / ``ValStepResult`` (or ``None`` when the step returned
    None), instead of Lightning's plain dict.

    It reads the results of steps adapted by ``TypedLightningModule`` or ``StepResultAdapter``;
    for a step that returned a legacy Tensor or dict, the hook receives what Lightning gives.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        wrap_inherited_hooks(cls, BATCH_END_HOOKS, adapt_callback_batch_end_function)
