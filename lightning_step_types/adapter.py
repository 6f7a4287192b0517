"""The runtime adapter: one code path between a user's step and Lightning's loops.

Data flows one way: the user's step returns, the adapter checks the value
(``checks.py``), converts a typed result to the plain dict Lightning's loops already
handle, and hands that to Lightning. The conversion happens inside the step call, so
under DDP the wrapper's ``forward`` sees the plain dict.

``TypedLightningModule`` wraps its subclasses' methods on the class; ``StepResultAdapter``
wraps one module's methods on the instance for one run. Both call ``run_step``.
"""

from __future__ import annotations

import functools
import inspect
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple, TypeGuard, TypeVar, cast

import torch

from lightning_step_types.checks import StepCall, check_evaluation_return, check_training_return
from lightning_step_types.errors import StepResultError
from lightning_step_types.policy import LossLogging, StepPolicy
from lightning_step_types.results import StepResult

__all__ = [
    "BATCH_END_HOOKS",
    "STEP_HOOKS",
    "adapt_batch_end_function",
    "adapt_callback_batch_end_function",
    "adapt_step_function",
    "adapted_bound_step",
    "converts_its_outputs",
    "defining_class",
    "BatchEndPlan",
    "batch_end_plan",
    "is_lightning_default",
    "wrap_inherited_hooks",
    "run_step",
    "typed_outputs",
]

F = TypeVar("F", bound=Callable[..., Any])

STEP_HOOKS = ("training_step", "validation_step", "test_step")
# batch-end hook -> the step whose result it receives
BATCH_END_HOOKS = {
    "on_train_batch_end": "training_step",
    "on_validation_batch_end": "validation_step",
    "on_test_batch_end": "test_step",
}


class _ModuleState:
    """Per-module runtime state, kept off the module so that it pickles and copies as it was."""

    __slots__ = ("calls", "active", "latest", "__weakref__")

    def __init__(self) -> None:
        self.calls: dict[str, StepCall] = {}  # per hook, rebuilt when the module's policy changes
        self.active = False  # inside an adapted step: nested calls (super().training_step) pass through
        # The latest typed result per step, read by typed batch-end hooks (module and callbacks alike).
        self.latest: dict[str, StepResult[Any]] = {}


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


def _trainer_is_running(module: torch.nn.Module) -> bool:
    trainer = module.__dict__.get("_trainer")
    if trainer is None:
        return False
    # TrainerStatus is a str enum in both Lightning flavours; str.__eq__ skips its case-folding __eq__.
    return str.__eq__(trainer.state.status, "running") is True


def run_step(
    module: torch.nn.Module,
    hook_name: str,
    policy: StepPolicy,
    step: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """Call a step, then check and convert what it returned.

    Outside a running Trainer (a unit test calling ``model.training_step`` directly, Fabric)
    and in nested calls such as ``super().training_step(...)``, the step's own return value
    passes through untouched.
    """
    state = module_state(module)
    if state.active or not _trainer_is_running(module):
        return step(*args, **kwargs)
    call = state.calls.get(hook_name)
    if call is None or call.policy is not policy:  # policies are shared instances (StepPolicy.of)
        call = state.calls[hook_name] = StepCall(module, hook_name, policy, _source_of(step))
    state.active = True
    try:
        output = step(*args, **kwargs)
    except StepResultError as error:
        if error.hook is None:  # a result built inside the step failed its own checks
            error.hook = call.hook
        raise
    finally:
        state.active = False
    training = hook_name == "training_step"
    lightning_output, result = (check_training_return if training else check_evaluation_return)(output, call)
    if result is None:
        state.latest.pop(hook_name, None)
    else:
        state.latest[hook_name] = result
    if policy.log_loss is not None:
        _log_loss(module, hook_name, policy.log_loss, lightning_output, result)
    return lightning_output


def _log_loss(
    module: Any, hook_name: str, logging: LossLogging, lightning_output: Any, result: StepResult[Any] | None
) -> None:
    """The ``self.log`` call a user would write for this stage's loss (typed results, legacy training losses)."""
    name = logging.name_for(hook_name)
    if name is None:
        return
    training = hook_name == "training_step"
    if result is not None:
        loss, batch_size = result.loss, result.batch_size
    elif training and lightning_output is not None:
        loss = lightning_output if isinstance(lightning_output, torch.Tensor) else lightning_output.get("loss")
        batch_size = None
        if loss is None:  # manual optimization may return a dict without a loss
            return
    else:
        return
    module.log(
        name,
        loss,
        on_step=training,
        on_epoch=True,
        prog_bar=logging.prog_bar,
        batch_size=batch_size,
        sync_dist=logging.sync_dist,
    )


def _source_of(step: Callable[..., Any]) -> tuple[str, int] | None:
    code = getattr(inspect.unwrap(step), "__code__", None)
    return (code.co_filename, code.co_firstlineno) if code is not None else None


def _lightning_view(wrapper: Callable[..., Any], step: Callable[..., Any]) -> None:
    # Lightning inspects a step's signature one `__wrapped__` deep (dataloader_idx, batch_idx) and
    # compares `__wrapped__.__code__` to decide whether a hook is overridden: show it what it would
    # see without us.
    # Functions take any attribute at runtime; Callable does not declare these.
    wrapper.__wrapped__ = getattr(step, "__wrapped__", step)  # type: ignore[attr-defined]  # pyright: ignore[reportFunctionMemberAccess]
    converts_its_outputs(wrapper)


def adapt_step_function(
    func: Callable[..., Any], hook_name: str, policy_of: Callable[[Any], StepPolicy]
) -> Callable[..., Any]:
    """Wrap a step defined on a class (``TypedLightningModule`` subclasses); the policy is read per call."""

    @functools.wraps(func)
    def adapted_step(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        return run_step(self, hook_name, policy_of(self), func, (self, *args), kwargs)

    _lightning_view(adapted_step, func)
    return adapted_step


def adapted_bound_step(module: torch.nn.Module, hook_name: str, policy: StepPolicy) -> Callable[..., Any]:
    """Wrap one module's bound step, to be set as an instance attribute for one run (``StepResultAdapter``)."""
    bound = getattr(module, hook_name)

    @functools.wraps(bound)
    def adapted_step(*args: Any, **kwargs: Any) -> Any:
        return run_step(module, hook_name, policy, bound, args, kwargs)

    _lightning_view(adapted_step, bound)
    return adapted_step


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


def adapt_batch_end_function(func: Callable[..., Any], step_hook: str) -> Callable[..., Any]:
    """Wrap a batch-end hook of a ``TypedLightningModule`` subclass so it receives typed results."""

    @functools.wraps(func)
    def typed_batch_end(self: torch.nn.Module, outputs: Any, *args: Any, **kwargs: Any) -> Any:
        return func(self, typed_outputs(self, step_hook, outputs), *args, **kwargs)

    _lightning_view(typed_batch_end, func)
    return typed_batch_end


def adapt_callback_batch_end_function(func: Callable[..., Any], step_hook: str) -> Callable[..., Any]:
    """Wrap a batch-end hook of a ``TypedCallback`` subclass: ``(self, trainer, pl_module, outputs, ...)``."""

    @functools.wraps(func)
    def typed_batch_end(
        self: object, trainer: object, pl_module: torch.nn.Module, outputs: Any, *args: Any, **kwargs: Any
    ) -> Any:
        return func(self, trainer, pl_module, typed_outputs(pl_module, step_hook, outputs), *args, **kwargs)

    _lightning_view(typed_batch_end, func)
    return typed_batch_end


_LIGHTNING_PACKAGES = ("pytorch_lightning.", "lightning.pytorch.")


def defining_class(classes: Iterable[type], name: str) -> type | None:
    """The first of ``classes`` (an MRO, or part of one) whose body defines ``name``."""
    return next((owner for owner in classes if name in owner.__dict__), None)


def is_lightning_default(owner: type) -> bool:
    """Whether a class is Lightning's own (its hooks are defaults, not the user's code)."""
    return owner.__module__.startswith(_LIGHTNING_PACKAGES)


def wrap_inherited_hooks(
    cls: type, hooks: Mapping[str, str], wrap: Callable[[Callable[..., Any], str], Callable[..., Any]]
) -> None:
    """Wrap each hook that ``cls`` defines or inherits from user code (not from Lightning).

    Inherited ones count: ``class M(StepsMixin, TypedLightningModule)`` or
    ``class M(TypedLightningModule, ExistingModule)`` must be checked like steps written in M.
    ``hooks`` maps a hook name to the argument ``wrap`` takes with it.
    """
    for hook_name, arg in hooks.items():
        owner = defining_class(cls.__mro__, hook_name)
        if owner is not None and not is_lightning_default(owner):
            func = owner.__dict__[hook_name]
            if _is_plain_function(func):
                setattr(cls, hook_name, wrap(func, arg))


# batch-end hook -> the typed hook the mixins' batch-end hooks call with the result
RESULT_HOOKS = {
    "on_train_batch_end": "on_train_batch_result",
    "on_validation_batch_end": "on_validation_batch_result",
    "on_test_batch_end": "on_test_batch_result",
}


class BatchEndPlan(NamedTuple):
    """What a typed mixin's batch-end hooks do for one class, per step (computed once per class)."""

    typed: frozenset[str]  # steps whose result someone reads: type it and call the result hook
    continued: frozenset[str]  # steps whose batch-end hook a user's class defines after the mixin


def batch_end_plan(cls: type, mixin: type) -> BatchEndPlan:
    """Type a step's result where ``cls`` overrides its result hook, or where the mixin's batch-end
    hook is followed in the MRO by a user's (``class M(TypedLightningModule, Existing)``): that one
    is called through ``super()`` with the typed result, as if it were written in ``M``. Lightning's
    own batch-end hooks do nothing, so they are not called at all."""
    typed: set[str] = set()
    continued: set[str] = set()
    mro = cls.__mro__
    after_mixin = mro[mro.index(mixin) + 1 :]
    for batch_end, step_hook in BATCH_END_HOOKS.items():
        owner = defining_class(after_mixin, batch_end)
        if owner is not None and not is_lightning_default(owner):
            continued.add(step_hook)
        result_hook = RESULT_HOOKS[batch_end]
        if step_hook in continued or getattr(cls, result_hook) is not getattr(mixin, result_hook):
            typed.add(step_hook)
    return BatchEndPlan(frozenset(typed), frozenset(continued))


def converts_its_outputs(func: F) -> F:
    """Mark a hook as adapted already (our wrappers, and the mixins' batch-end hooks, which call
    ``typed_outputs`` themselves), so that subclasses do not wrap it again."""
    setattr(func, "__lst_adapted__", True)  # noqa: B010 - functions take any attribute; Callable declares none
    return func


def _is_plain_function(func: object) -> TypeGuard[Callable[..., Any]]:
    # staticmethods, classmethods and already adapted methods are left alone
    return callable(func) and hasattr(func, "__code__") and not getattr(func, "__lst_adapted__", False)
