"""The typed callback: batch-end hooks that receive typed step results.

Mixed into each Lightning flavour's ``Callback`` as ``TypedCallback``.
"""

from __future__ import annotations

from typing import Any

from lightning_step_types.adapter import (
    BATCH_END_HOOKS,
    adapt_callback_batch_end_function,
    converts_its_outputs,
    typed_outputs,
    wrap_inherited_hooks,
)

__all__ = ["TypedCallbackMixin"]


class TypedCallbackMixin:
    """A callback whose ``on_train_batch_result`` / ``on_validation_batch_result`` /
    ``on_test_batch_result`` receive the step's ``TrainStepResult`` / ``ValStepResult`` (or ``None``
    when the step returned None), instead of Lightning's plain dict. Its ``on_*_batch_end`` receive
    the same and call them: override either (call ``super()`` to keep the result hooks).

    It reads the results of steps adapted by ``TypedLightningModule`` or ``StepResultAdapter``;
    for a step that returned a legacy Tensor or dict, the hooks receive what Lightning gives.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        wrap_inherited_hooks(cls, BATCH_END_HOOKS, adapt_callback_batch_end_function)

    # See TypedModuleMixin: hooks Lightning does not declare can be typed exactly for every checker.
    @converts_its_outputs
    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, *args: Any, **kwargs: Any) -> None:
        result = typed_outputs(pl_module, "training_step", outputs)
        self.on_train_batch_result(trainer, pl_module, result, *args, **kwargs)

    @converts_its_outputs
    def on_validation_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, *args: Any, **kwargs: Any) -> None:
        result = typed_outputs(pl_module, "validation_step", outputs)
        self.on_validation_batch_result(trainer, pl_module, result, *args, **kwargs)

    @converts_its_outputs
    def on_test_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, *args: Any, **kwargs: Any) -> None:
        result = typed_outputs(pl_module, "test_step", outputs)
        self.on_test_batch_result(trainer, pl_module, result, *args, **kwargs)

    def on_train_batch_result(self, trainer: Any, pl_module: Any, result: Any, batch: Any, batch_idx: int) -> None:
        """Called after each training step with its ``TrainStepResult`` (loss detached), or None."""

    def on_validation_batch_result(
        self, trainer: Any, pl_module: Any, result: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Called after each validation step with its ``ValStepResult``, or None."""

    def on_test_batch_result(
        self, trainer: Any, pl_module: Any, result: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Called after each test step with its ``ValStepResult``, or None."""
