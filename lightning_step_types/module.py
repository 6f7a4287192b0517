"""The typed module: a LightningModule mixin whose subclasses' steps are adapted with no decorator.

The Lightning flavour (``pytorch_lightning`` or ``lightning.pytorch``) is chosen by the class
that mixes this in: see ``lightning_step_types.pytorch_lightning`` and ``.lightning_pytorch``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, cast

import lightning_step_types.metrics.stage_isolation as stage_isolation
import lightning_step_types.resume.epoch_state as epoch_state
from lightning_step_types._lightning.trainer import trainer_of
from lightning_step_types.metrics import (
    StepMetric,
    attach_metric_set,
    build_metric_set,
    loss_log_names,
    taken_log_names,
)
from lightning_step_types.metrics.updates import end_of_stage
from lightning_step_types.policy import (
    DEFAULT_NONFINITE_LOSS,
    LossLogging,
    NonFiniteLoss,
    StepPolicy,
    steps_aside_for_lightning,
)
from lightning_step_types.step.adapter import (
    BATCH_END_HOOKS,
    STEP_HOOKS,
    module_state,
    set_nonfinite_deferral,
    typed_outputs,
    typed_policy,
)
from lightning_step_types.step.compiled_logging import record_log, recording_logs
from lightning_step_types.step.wrapping import (
    BatchEndPlan,
    adapt_batch_end_function,
    adapt_step_function,
    batch_end_plan,
    compile_inside_adapted_steps,
    converts_its_outputs,
    run_ours_first,
    wrap_inherited_hooks,
)

__all__ = ["TypedModuleMixin"]


class TypedModuleMixin:
    """A ``LightningModule`` whose steps return typed results.

    ``training_step`` returns ``TrainStepResult`` (or ``None`` to skip the batch on one device),
    ``validation_step`` and ``test_step`` return ``ValStepResult`` (or ``None``). Anything else
    raises ``StepResultError`` before any backward or optimizer step.

    After each step the module's ``on_train_batch_result`` / ``on_validation_batch_result`` /
    ``on_test_batch_result`` receive the typed result, or None when the step returned None (for
    training with the loss detached, as Lightning gives it). They are called by this class's
    ``on_*_batch_end``, which receive the same typed result: override either (call
    ``super().on_train_batch_end(...)`` to keep the result hooks). Plain callbacks keep receiving
    Lightning's dict.

    Settings, on the class or as ``self.<name> = ...`` in ``__init__``:

    - ``nonfinite_loss``: ``"raise"`` (default), ``"warn"``, ``"skip"`` or ``None``: what a NaN or
      infinite loss does.
    - ``log_loss``: ``False`` (default), ``True`` or a ``LossLogging``: log each stage's loss
      with ``self.log`` as ``train_loss`` / ``val_loss`` / ``test_loss``.
    - ``exact_resume``: ``True`` (default) or ``False``: a checkpoint saved mid-epoch carries the
      running epoch aggregates (``self.log(..., on_epoch=True)`` values, logged torchmetrics
      objects), restored on resume so that every epoch value equals the uninterrupted run's.

    Metrics: override ``configure_step_metrics`` to declare torchmetrics metrics fed by each
    step's result and logged as ``train_<name>`` / ``val_<name>`` / ``test_<name>``.
    """

    nonfinite_loss: NonFiniteLoss = DEFAULT_NONFINITE_LOSS
    log_loss: bool | LossLogging = False
    exact_resume: bool = True
    _batch_end_plan: ClassVar[BatchEndPlan] = BatchEndPlan(frozenset(), frozenset())

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        typed_policy(cls.nonfinite_loss, cls.log_loss)  # a wrong setting fails at the class, not the first step
        wrap_inherited_hooks(cls, {hook_name: hook_name for hook_name in STEP_HOOKS}, _adapt_step)
        wrap_inherited_hooks(cls, BATCH_END_HOOKS, adapt_batch_end_function)
        wrap_inherited_hooks(cls, {hook_name: hook_name for hook_name in _EPOCH_STATE_HOOKS}, _with_epoch_state)
        wrap_inherited_hooks(cls, {hook_name: hook_name for hook_name in _STAGE_END_HOOKS}, _with_stage_end)
        wrap_inherited_hooks(cls, {"setup": "setup"}, _adapt_setup)
        boundaries = {hook_name: hook_name for hook_name in stage_isolation.BOUNDARY_HOOKS}
        wrap_inherited_hooks(cls, boundaries, _with_boundary_check)
        plan = batch_end_plan(cls, TypedModuleMixin)
        if plan != cls._batch_end_plan:  # the flavour classes add nothing of their own
            cls._batch_end_plan = plan

    # Lightning's batch-end hooks hand the typed result to hooks of their own name: Lightning
    # declares `outputs` as STEP_OUTPUT and mypy checks an override against every base, so only
    # hooks Lightning does not declare can be typed exactly. They run on every batch, so they type
    # the result only where someone reads it, and go on up the MRO only to user code (_batch_end_plan).
    # The training one takes Lightning's exact parameters (always passed, by position), so no *args
    # tuple or **kwargs dict is built per batch; the evaluation ones pass on `dataloader_idx` only
    # when Lightning gives it (one dataloader: user hooks often leave it out).
    @converts_its_outputs
    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        plan = type(self)._batch_end_plan
        if "training_step" in plan.typed:
            outputs = typed_outputs(self, "training_step", outputs)
            self.on_train_batch_result(outputs, batch, batch_idx)
            if "training_step" in plan.continued:
                cast(Any, super()).on_train_batch_end(outputs, batch, batch_idx)

    @converts_its_outputs
    def on_validation_batch_end(self, outputs: Any, *args: Any, **kwargs: Any) -> None:
        plan = type(self)._batch_end_plan
        if "validation_step" in plan.typed:
            outputs = typed_outputs(self, "validation_step", outputs)
            self.on_validation_batch_result(outputs, *args, **kwargs)
            if "validation_step" in plan.continued:
                cast(Any, super()).on_validation_batch_end(outputs, *args, **kwargs)

    @converts_its_outputs
    def on_test_batch_end(self, outputs: Any, *args: Any, **kwargs: Any) -> None:
        plan = type(self)._batch_end_plan
        if "test_step" in plan.typed:
            outputs = typed_outputs(self, "test_step", outputs)
            self.on_test_batch_result(outputs, *args, **kwargs)
            if "test_step" in plan.continued:
                cast(Any, super()).on_test_batch_end(outputs, *args, **kwargs)

    # Exact resume (resume/epoch_state.py) rides on these hooks; a subclass's override is wrapped so that
    # it works even when the override does not call super().
    @converts_its_outputs
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        _save_epoch_state(self, checkpoint)
        cast(Any, super()).on_save_checkpoint(checkpoint)

    @converts_its_outputs
    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        _load_epoch_state(self, checkpoint)
        cast(Any, super()).on_load_checkpoint(checkpoint)

    @converts_its_outputs
    def teardown(self, stage: str) -> None:
        _end_fit(self, stage)
        cast(Any, super()).teardown(stage)

    # The declared metrics check what each stage's epoch fed them; overrides are wrapped like the above.
    @converts_its_outputs
    def on_train_epoch_end(self) -> None:
        _end_of_training_epoch(self)
        cast(Any, super()).on_train_epoch_end()

    # Stage isolation (metrics/stage_isolation.py) checks at these stage boundaries, overridden or not.
    @converts_its_outputs
    def on_train_epoch_start(self) -> None:
        _check_boundary(self, "on_train_epoch_start")
        cast(Any, super()).on_train_epoch_start()

    @converts_its_outputs
    def on_validation_start(self) -> None:
        _check_boundary(self, "on_validation_start")
        cast(Any, super()).on_validation_start()

    @converts_its_outputs
    def on_validation_end(self) -> None:
        _check_boundary(self, "on_validation_end")
        cast(Any, super()).on_validation_end()

    @converts_its_outputs
    def on_validation_epoch_end(self) -> None:
        _end_of_validation_epoch(self)
        cast(Any, super()).on_validation_epoch_end()

    @converts_its_outputs
    def on_test_epoch_end(self) -> None:
        _end_of_test_epoch(self)
        cast(Any, super()).on_test_epoch_end()

    def log(self, name: str, value: Any, *args: Any, **kwargs: Any) -> None:
        """Lightning's ``self.log``. Inside a step compiled with ``trainer.fit(torch.compile(model))``
        the call is made as soon as the step returns, outside the compiled graph (``compiled_logging``)."""
        if recording_logs():
            record_log(_lightning_log, self, name, value, args, kwargs)
        else:
            _lightning_log(self, name, value, args, kwargs)

    def configure_step_metrics(self) -> Mapping[str, StepMetric[Any]]:
        """Declare metrics fed by each step's result, e.g.
        ``{"acc": StepMetric(Accuracy(task="multiclass", num_classes=3), update=lambda result, batch:
        (result.metadata["logits"], batch[1]))}``.

        Called once per run (``fit``, ``validate``, ``test``) at setup, after the module's own
        ``setup``. Each metric is deep-copied per stage and per validation/test dataloader, updated
        after every step from the checked result, and logged with ``self.log`` as
        ``{stage}_{name}`` (``val_acc``; ``val_acc/dataloader_idx_1`` for a second loader), so
        Lightning computes, syncs and resets it at each epoch's end. The default declares none.
        """
        return {}

    @converts_its_outputs
    def setup(self, stage: str) -> None:
        _setup_then_metrics(self, cast(Any, super()).setup, (stage,), {})

    def on_train_batch_result(self, result: Any, batch: Any, batch_idx: int) -> None:
        """Called after each training step with its ``TrainStepResult`` (loss detached), or None."""

    def on_validation_batch_result(self, result: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Called after each validation step with its ``ValStepResult``, or None."""

    def on_test_batch_result(self, result: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Called after each test step with its ``ValStepResult``, or None."""


def _lightning_log(
    module: TypedModuleMixin, name: str, value: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    cast(Any, super(TypedModuleMixin, module)).log(name, value, *args, **kwargs)


def _adapt_step(func: Callable[..., Any], hook_name: str) -> Callable[..., Any]:
    return adapt_step_function(func, hook_name)


def _adapt_setup(func: Callable[..., Any], hook_name: str) -> Callable[..., Any]:
    """A user's ``setup`` runs first; the declared metrics are made after it (it may build what they need)."""

    @functools.wraps(func)
    def setup_then_metrics(self: Any, *args: Any, **kwargs: Any) -> Any:
        return _setup_then_metrics(self, functools.partial(func, self), args, kwargs)

    return converts_its_outputs(setup_then_metrics)


def _setup_then_metrics(module: Any, setup: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run the module's setup chain, then (once, at the outermost call) make its declared metrics."""
    state = module_state(module)
    if state.in_setup:  # super().setup() from inside a setup: the outermost call attaches
        return setup(*args, **kwargs)
    state.in_setup = True
    try:
        result = setup(*args, **kwargs)
    finally:
        state.in_setup = False
    compile_inside_adapted_steps(module)
    set_nonfinite_deferral(trainer_of(module), module, steps_aside_for_lightning(module.nonfinite_loss))
    stage = kwargs.get("stage", args[0] if args else None)
    if epoch_state.exact_resume_enabled(module):
        epoch_state.fit_starts(trainer_of(module), module, stage)
    if stage != "predict":  # predict_step's outputs feed no metric: nothing is declared or copied
        attach_declared_metrics(module)
    return result


_NO_METRICS: Callable[..., Any] = TypedModuleMixin.configure_step_metrics


def attach_declared_metrics(module: TypedModuleMixin) -> None:
    """Call ``configure_step_metrics`` (once per run), check it, and hand its copies to the adapter."""
    if type(module).configure_step_metrics is _NO_METRICS:
        return  # declares none: nothing to pay per step
    declared_by = f"{type(module).__qualname__}.configure_step_metrics"
    taken = {**taken_log_names(module, TypedModuleMixin), **loss_log_names(module_policy(module))}
    metric_set = build_metric_set(declared_by, module.configure_step_metrics(), taken, container=True)
    attach_metric_set(module, TypedModuleMixin, metric_set)


def module_policy(module: TypedModuleMixin) -> StepPolicy:
    """The adapter settings a typed module's steps run with (``run_step`` reads them on every step)."""
    return typed_policy(module.nonfinite_loss, module.log_loss)


def _save_epoch_state(module: TypedModuleMixin, checkpoint: dict[str, Any]) -> None:
    trainer = trainer_of(module)
    if trainer is not None and epoch_state.exact_resume_enabled(module):
        epoch_state.save_epoch_state(trainer, module, checkpoint)


def _load_epoch_state(module: TypedModuleMixin, checkpoint: dict[str, Any]) -> None:
    if epoch_state.exact_resume_enabled(module):
        epoch_state.load_epoch_state(trainer_of(module), module, checkpoint)


def _end_fit(module: TypedModuleMixin, stage: str) -> None:
    epoch_state.fit_ends(trainer_of(module), module)


def _end_of_training_epoch(module: TypedModuleMixin) -> None:
    end_of_stage(module, TypedModuleMixin, "train", f"{type(module).__qualname__}.on_train_epoch_end")


def _end_of_validation_epoch(module: TypedModuleMixin) -> None:
    end_of_stage(module, TypedModuleMixin, "val", f"{type(module).__qualname__}.on_validation_epoch_end")


def _end_of_test_epoch(module: TypedModuleMixin) -> None:
    end_of_stage(module, TypedModuleMixin, "test", f"{type(module).__qualname__}.on_test_epoch_end")


_EPOCH_STATE_HOOKS: dict[str, Callable[..., None]] = {
    "on_save_checkpoint": _save_epoch_state,
    "on_load_checkpoint": _load_epoch_state,
    "teardown": _end_fit,
}
_STAGE_END_HOOKS: dict[str, Callable[..., None]] = {
    "on_train_epoch_end": _end_of_training_epoch,
    "on_validation_epoch_end": _end_of_validation_epoch,
    "on_test_epoch_end": _end_of_test_epoch,
}


def _with_epoch_state(func: Callable[..., Any], hook_name: str) -> Callable[..., Any]:
    return run_ours_first(func, _EPOCH_STATE_HOOKS[hook_name])


def _check_boundary(module: TypedModuleMixin, hook_name: str) -> None:
    trainer = trainer_of(module)
    if trainer is not None:
        stage_isolation.BOUNDARY_HOOKS[hook_name](trainer, cast(Any, module))


def _with_boundary_check(func: Callable[..., Any], hook_name: str) -> Callable[..., Any]:
    def check(module: TypedModuleMixin, *_: object) -> None:
        _check_boundary(module, hook_name)

    return run_ours_first(func, check)


def _with_stage_end(func: Callable[..., Any], hook_name: str) -> Callable[..., Any]:
    return run_ours_first(func, _STAGE_END_HOOKS[hook_name])
