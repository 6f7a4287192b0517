"""The typed callback: batch-end hooks that receive typed step results.

Mixed into each Lightning flavour's ``Callback`` as ``TypedCallback``.
"""

from __future__ import annotations

from typing import Any, ClassVar, cast

from lightning_step_types.step.adapter import BATCH_END_HOOKS, typed_outputs
from lightning_step_types.step.wrapping import (
    BatchEndPlan,
    adapt_callback_batch_end_function,
    batch_end_plan,
    converts_its_outputs,
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

    _batch_end_plan: ClassVar[BatchEndPlan] = BatchEndPlan(frozenset(), frozenset())

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        wrap_inherited_hooks(cls, BATCH_END_HOOKS, adapt_callback_batch_end_function)
        plan = batch_end_plan(cls, TypedCallbackMixin)
        if plan != cls._batch_end_plan:  # the flavour classes add nothing of their own
            cls._batch_end_plan = plan

    # See TypedModuleMixin: hooks Lightning does not declare can be typed exactly for every checker.
    @converts_its_outputs
    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, *args: Any, **kwargs: Any) -> None:
        plan = type(self)._batch_end_plan
        if "training_step" in plan.typed:
            outputs = typed_outputs(pl_module, "training_step", outputs)
            self.on_train_batch_result(trainer, pl_module, outputs, *args, **kwargs)
            if "training_step" in plan.continued:
                cast(Any, super()).on_train_batch_end(trainer, pl_module, outputs, *args, **kwargs)

    @converts_its_outputs
    def on_validation_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, *args: Any, **kwargs: Any) -> None:
        plan = type(self)._batch_end_plan
        if "validation_step" in plan.typed:
            outputs = typed_outputs(pl_module, "validation_step", outputs)
            self.on_validation_batch_result(trainer, pl_module, outputs, *args, **kwargs)
            if "validation_step" in plan.continued:
                cast(Any, super()).on_validation_batch_end(trainer, pl_module, outputs, *args, **kwargs)

    @converts_its_outputs
    def on_test_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, *args: Any, **kwargs: Any) -> None:
        plan = type(self)._batch_end_plan
        if "test_step" in plan.typed:
            outputs = typed_outputs(pl_module, "test_step", outputs)
            self.on_test_batch_result(trainer, pl_module, outputs, *args, **kwargs)
            if "test_step" in plan.continued:
                cast(Any, super()).on_test_batch_end(trainer, pl_module, outputs, *args, **kwargs)

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
