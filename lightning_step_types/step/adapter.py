"""The runtime adapter: one code path between a user's step and Lightning's loops.

Data flows one way: the user's step returns, the adapter checks the value
(``step/checks.py``), converts a typed result to the plain dict Lightning's loops already
handle, and hands that to Lightning. The conversion happens inside the step call, so
under DDP the wrapper's ``forward`` sees the plain dict.

``TypedLightningModule`` wraps its subclasses' methods on the class; ``StepResultAdapter``
wraps one module's methods on the instance for one run (``step/wrapping.py``). Both call ``run_step``.
"""

from __future__ import annotations

import inspect
import types
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Protocol, cast

import torch

from lightning_step_types._lightning.data import fetched_batch_size
from lightning_step_types._lightning.result_collection import logged_in_current_hook
from lightning_step_types._lightning.trainer import lightning_checks_nonfinite, trainer_is_running
from lightning_step_types.errors import StepResultError
from lightning_step_types.policy import LossLogging, NonFiniteLoss, StepPolicy
from lightning_step_types.results import StepResult, TrainStepResult, is_loss_tensor
from lightning_step_types.step.checks import (
    StepCall,
    accept_training_result,
    check_evaluation_return,
    check_training_return,
    new_run,
    no_batch_size_for_log_loss,
    warn_loss_logged_by_the_step,
)

__all__ = [
    "BATCH_END_HOOKS",
    "STEP_HOOKS",
    "module_state",
    "set_nonfinite_deferral",
    "source_of",
    "run_step",
    "typed_outputs",
    "typed_policy",
]

STEP_HOOKS = ("training_step", "validation_step", "test_step")
# batch-end hook -> the step whose result it receives
BATCH_END_HOOKS = {
    "on_train_batch_end": "training_step",
    "on_validation_batch_end": "validation_step",
    "on_test_batch_end": "test_step",
}


class MetricUpdates(Protocol):
    """Declared metrics, as the per-step path sees them (``metrics.MetricSet``)."""

    def update(self, module: Any, call: StepCall, result: Any, batch: Any) -> None: ...

    def explain(self, error: BaseException, call: StepCall) -> StepResultError | None: ...

    def skipped(self, call: StepCall, output: object) -> None: ...


class _ModuleState:
    """Per-module runtime state, kept off the module so that it pickles and copies as it was."""

    __slots__ = (
        "calls",
        "own_settings",
        "active",
        "latest",
        "metric_sets",
        "in_setup",
        "nonfinite_deferred",
        "__weakref__",
    )

    def __init__(self) -> None:
        self.calls: dict[str, StepCall] = {}  # per hook, rebuilt when the module's policy changes
        # a typed module's `nonfinite_loss` and `log_loss` as last read, and the policy they make
        self.own_settings: tuple[object, object, StepPolicy] | None = None
        self.active: bool = False  # inside an adapted step: nested calls (super().training_step) pass through
        # The latest typed result per step, read by typed batch-end hooks (module and callbacks alike).
        self.latest: dict[str, StepResult[Any]] = {}
        # Declared metrics for the current run, by who declared them (the module, a StepResultAdapter).
        self.metric_sets: dict[object, MetricUpdates] = {}
        self.in_setup: bool = False  # inside the typed module's wrapped `setup` (super().setup() calls nest)
        # the default non-finite check steps aside for Lightning's own in this run (set_nonfinite_deferral)
        self.nonfinite_deferred: bool = False


_STATES: weakref.WeakKeyDictionary[torch.nn.Module, _ModuleState] = weakref.WeakKeyDictionary()


# The module of the previous step and its state: a training loop asks for the same module every
# step, and a weakref call is cheaper than a WeakKeyDictionary lookup (which builds a weakref).
_last: tuple[weakref.ref[torch.nn.Module], _ModuleState] | None = None


def module_state(module: torch.nn.Module) -> _ModuleState:
    global _last
    last = _last
    if last is not None and last[0]() is module:
        return last[1]
    state = _STATES.get(module)
    if state is None:
        state = _STATES[module] = _ModuleState()
    _last = (weakref.ref(module), state)
    return state


def typed_policy(nonfinite_loss: NonFiniteLoss, log_loss: bool | LossLogging) -> StepPolicy:
    """The policy a typed module's steps run with, from its ``nonfinite_loss`` and ``log_loss`` settings."""
    return StepPolicy.of(True, nonfinite_loss, log_loss)


def run_step(
    module: torch.nn.Module,
    hook_name: str,
    settings: StepPolicy | None,
    step: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """Call a step, then check and convert what it returned.

    ``settings`` is the policy, or None for a typed module, whose own settings (``nonfinite_loss``,
    ``log_loss``: ``typed_policy``) are read on every step. They are read only past the pass-through
    below, so that a nested call traced by torch.compile (``super().training_step(...)`` in a
    compiled step) traces no more of the library than that.

    Outside a running Trainer (a unit test calling ``model.training_step`` directly, Fabric)
    and in nested calls such as ``super().training_step(...)``, the step's own return value
    passes through untouched.

    This runs on every step, so it makes no call it can avoid: lookups are written inline.
    """
    last = _last  # module_state's fast path, inline
    state = last[1] if last is not None and last[0]() is module else module_state(module)
    if state.active or not trainer_is_running(module):
        return step(*args, **kwargs)
    if settings is None:
        typed: Any = module
        nonfinite_loss, log_loss = typed.nonfinite_loss, typed.log_loss
        own = state.own_settings
        # the same two objects make the same policy: StepPolicy.of is asked only when one changed
        if own is not None and own[0] is nonfinite_loss and own[1] is log_loss:
            policy = own[2]
        else:
            policy = typed_policy(nonfinite_loss, log_loss)
            state.own_settings = (nonfinite_loss, log_loss, policy)
    else:
        policy = settings
    if state.nonfinite_deferred and policy.nonfinite_loss is not None:
        policy = StepPolicy.of(policy.strict, None, policy.log_loss or False)
    calls = state.calls
    call = calls[hook_name] if hook_name in calls else None
    if call is None or call.policy is not policy:  # policies are shared instances (StepPolicy.of)
        call = calls[hook_name] = StepCall(module, hook_name, policy, source_of(step), adapter=settings is not None)
    state.active = True
    try:
        output = step(*args, **kwargs)
    except StepResultError as error:
        if error.hook is None:  # a result built inside the step failed its own checks
            error.hook = call.hook
        raise
    except Exception as error:
        # The step logged a declared metric's name itself: say so instead of Lightning's raw error.
        for metric_set in state.metric_sets.values():
            explained = metric_set.explain(error, call)
            if explained is not None:
                raise explained from error
        raise
    finally:
        state.active = False
    call.step_args = args  # a message may name the batch index
    try:
        if hook_name != "training_step":
            lightning_output, result = check_evaluation_return(output, call)
        elif type(output) is TrainStepResult:  # a typed step's usual return: what check_training_return would do
            lightning_output, result = accept_training_result(output, call)
        else:
            lightning_output, result = check_training_return(output, call)
    finally:
        call.step_args = ()  # the batch is not kept past its step
    if result is None:
        if state.latest:
            state.latest.pop(hook_name, None)
    else:
        state.latest[hook_name] = result
    if policy.log_loss is not None:
        _log_loss(module, call, policy.log_loss, lightning_output, result)
    if state.metric_sets:
        if lightning_output is not None:
            seen = result if result is not None else _legacy_view(lightning_output)
            batch = _batch_of(module, args, kwargs)
            for metric_set in state.metric_sets.values():
                metric_set.update(module, call, seen, batch)
        else:  # a skipped batch updates no metric; noted, so that a stage that fed none is told so
            for metric_set in state.metric_sets.values():
                metric_set.skipped(call, output)
    return lightning_output


def set_nonfinite_deferral(trainer: Any, module: torch.nn.Module, steps_aside: bool) -> None:
    """At a run's setup: whether the module's steps skip the non-finite check in this run, because its
    setting steps aside (``policy.steps_aside_for_lightning``) and Lightning's own handling is on
    (``SpikeDetection``, ``detect_anomaly``). The run's first non-finite loss is reported again."""
    module_state(module).nonfinite_deferred = steps_aside and lightning_checks_nonfinite(trainer) is not None
    new_run(module)


def _legacy_view(output: object) -> object:
    """What a declared metric's ``update`` gets for a legacy return: a read-only view of the dict
    (a bare loss tensor as ``{"loss": loss}``)."""
    if isinstance(output, torch.Tensor):
        return types.MappingProxyType({"loss": output})
    if isinstance(output, dict):
        return types.MappingProxyType(
            cast("dict[object, object]", output)
        )  # isinstance leaves the type arguments unknown
    if isinstance(output, Mapping):
        return types.MappingProxyType(dict(cast("Mapping[object, object]", output)))
    return output


def _batch_of(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The step's batch: its first argument (after ``self`` for a method wrapped on the class)."""
    if args and args[0] is module:
        args = args[1:]
    return args[0] if args else kwargs.get("batch")


def _log_loss(
    module: Any, call: StepCall, logging: LossLogging, lightning_output: Any, result: StepResult[Any] | None
) -> None:
    """The ``self.log`` call a user would write for this stage's loss: a typed result's, or in a step's own
    return (a tensor, a dict with "loss") the loss, in every stage.

    Where the step logs that name itself, its own call wins: a second ``self.log`` of one name in
    one hook raises in Lightning (other arguments) or counts the value twice (the same ones).
    """
    hook_name = call.hook_name
    name = logging.name_for(hook_name)
    if name is None:
        return
    training = hook_name == "training_step"
    if result is not None:
        loss, batch_size = result.loss, result.batch_size
    elif lightning_output is not None:  # Lightning's own returns: a loss tensor, or a dict with "loss"
        loss = lightning_output if type(lightning_output) is torch.Tensor else _legacy_loss(lightning_output)
        batch_size = None
        # manual optimization may return a dict without a loss; an evaluation step may return anything
        # (predictions, a per-sample loss): only a loss (one real floating value) is logged
        if loss is None or not (training or is_loss_tensor(loss)):
            return
    else:
        return
    if not call.loss_logged_by_adapter:  # once the adapter has logged the name, the key is its own
        if logged_in_current_hook(module, name):
            warn_loss_logged_by_the_step(call, name, logging)
            return
        call.loss_logged_by_adapter = True
    if training and batch_size is None:
        if call.fetches_its_batches is None:
            call.fetches_its_batches = "dataloader_iter" in _parameters(module.training_step)
        if call.fetches_its_batches:  # Lightning cannot infer it there: the size of the batch the step fetched
            batch_size = fetched_batch_size(module.trainer)
            if batch_size is None:
                raise no_batch_size_for_log_loss(call, name)
    module.log(
        name,
        loss,
        on_step=training,
        on_epoch=True,
        prog_bar=logging.prog_bar,
        batch_size=batch_size,
        sync_dist=logging.sync_dist,
    )


def _legacy_loss(output: object) -> Any:
    """The loss in a step's own return: the tensor itself, or a mapping's "loss" (None where there is none)."""
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, Mapping):
        mapping = cast("Mapping[object, Any]", output)  # isinstance leaves the type arguments unknown
        return mapping["loss"] if "loss" in mapping else None
    return None


def _parameters(step: Callable[..., Any]) -> list[str]:
    """The step's parameter names, as Lightning reads them (``is_param_in_hook_signature`` follows ``__wrapped__``)."""
    try:
        return list(inspect.signature(step).parameters)
    except (TypeError, ValueError):
        return []


def source_of(step: Callable[..., Any]) -> tuple[str, int] | None:
    """Where a step is defined: its original, under any wrapper (the typed module's)."""
    code = getattr(inspect.unwrap(step), "__code__", None)
    return (code.co_filename, code.co_firstlineno) if code is not None else None


def typed_outputs(module: Any, step_hook: str, outputs: Any) -> Any:
    """What a typed batch-end hook receives: the step's typed result, or None if the step returned None.

    For training, Lightning hands batch-end hooks a new dict whose loss is detached (and divided
    by ``accumulate_grad_batches``); the typed result carries that same loss, so the module and
    callbacks see one value.
    """
    if isinstance(outputs, StepResult):
        return cast(Any, outputs)  # isinstance leaves the type argument unknown to pyright
    state = _STATES.get(module)
    result = state.latest.get(step_hook) if state is not None else None
    if result is None:
        if step_hook == "training_step" and isinstance(outputs, Mapping) and not outputs:
            return None  # Lightning's {} for a skipped training step
        return outputs  # a legacy return: what Lightning gives  # pyright: ignore[reportUnknownVariableType]
    if step_hook == "training_step" and isinstance(outputs, Mapping) and "loss" in outputs:
        loss = cast("Mapping[str, Any]", outputs)["loss"]  # isinstance leaves the type arguments unknown
        return type(result)._trusted(loss, result.metadata, result.batch_size)
    return result
