"""Hook wrapping: how the adapter's per-step path is attached to a module's methods.

``TypedLightningModule`` wraps its subclasses' steps and batch-end hooks on the class, once,
in ``__init_subclass__``; ``StepResultAdapter`` wraps one existing module's bound steps on the
instance for one run. Every wrapper calls into ``step/adapter.py`` and keeps the original signature
visible, since Lightning inspects it.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple, TypeGuard, TypeVar

import torch

from lightning_step_types._lightning.compile import compiler_of, keep_uncompiled_step, uncompiled_step
from lightning_step_types.policy import StepPolicy
from lightning_step_types.step.adapter import BATCH_END_HOOKS, STEP_HOOKS, run_step, typed_outputs
from lightning_step_types.step.compiled_logging import logs_after

__all__ = [
    "BatchEndPlan",
    "RESULT_HOOKS",
    "adapt_batch_end_function",
    "adapt_callback_batch_end_function",
    "adapt_step_function",
    "adapted_bound_step",
    "batch_end_plan",
    "compile_inside_adapted_steps",
    "compiles_its_steps",
    "converts_its_outputs",
    "defining_class",
    "is_lightning_default",
    "run_ours_first",
    "wrap_inherited_hooks",
]

F = TypeVar("F", bound=Callable[..., Any])


def _lightning_view(wrapper: Callable[..., Any], step: Callable[..., Any]) -> None:
    # Lightning inspects a step's signature one `__wrapped__` deep (dataloader_idx, batch_idx) and
    # compares `__wrapped__.__code__` to decide whether a hook is overridden: show it what it would
    # see without us.
    # Functions take any attribute at runtime; Callable does not declare these.
    wrapper.__wrapped__ = getattr(step, "__wrapped__", step)  # type: ignore[attr-defined]  # pyright: ignore[reportFunctionMemberAccess]
    converts_its_outputs(wrapper)


def adapt_step_function(func: Callable[..., Any], hook_name: str) -> Callable[..., Any]:
    """Wrap a step defined on a class (``TypedLightningModule`` subclasses): it runs with the module's
    own settings, read per call."""

    @functools.wraps(func)
    def adapted_step(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        return run_step(self, hook_name, None, func, (self, *args), kwargs)

    _lightning_view(adapted_step, func)
    setattr(adapted_step, "__lst_step__", func)  # noqa: B010 - the user's step, for compile_inside_adapted_steps
    return adapted_step


def compile_inside_adapted_steps(module: torch.nn.Module) -> None:
    """Under ``trainer.fit(torch.compile(model))``, compile the user's steps and not the library's wrapper.

    Lightning compiles a module by setting ``dynamo_ctx(module.training_step)`` (and the other
    steps) on the instance. For a typed module that bound method is the class's wrapper, so dynamo
    would trace the checks and conversion too, and break its graph at the non-finite check's
    ``loss.item()``. Instead the instance gets the wrapper around the user's step compiled alone:
    the compiled region is the same as for a plain module, and the checks run eagerly after it,
    still before backward. The step's ``self.log`` calls are made after it too (``logs_after``).
    Called at each run's setup, after Lightning compiled the steps.
    """
    compiler = compiler_of(module)
    if compiler is None:
        return
    for hook_name in STEP_HOOKS:
        func = getattr(getattr(type(module), hook_name, None), "__lst_step__", None)
        if func is None:  # Lightning's own default step: left as Lightning compiled it
            continue
        compiled = logs_after(compiler(types.MethodType(func, module)))
        module.__dict__[hook_name] = _adapted_compiled_step(module, hook_name, func, compiled)
        keep_uncompiled_step(module, hook_name, types.MethodType(getattr(type(module), hook_name), module))


def _adapted_compiled_step(
    module: torch.nn.Module, hook_name: str, func: Callable[..., Any], compiled: Callable[..., Any]
) -> Callable[..., Any]:
    @functools.wraps(func)
    def adapted_step(*args: Any, **kwargs: Any) -> Any:
        return run_step(module, hook_name, None, compiled, args, kwargs)

    _lightning_view(adapted_step, func)
    return adapted_step


def adapted_bound_step(module: torch.nn.Module, hook_name: str, policy: StepPolicy) -> Callable[..., Any]:
    """Wrap one module's bound step, to be set as an instance attribute for one run (``StepResultAdapter``).

    Under ``trainer.fit(torch.compile(model))`` Lightning has set ``dynamo_ctx(<the step>)`` on the
    instance; as for the typed module (``compile_inside_adapted_steps``), the user's step is compiled
    alone instead and run through ``logs_after``, so that its ``self.log`` calls (noted by the
    instance's ``log``, ``compiled_logging.log_after_compiled_step``) are made after it returns.
    """
    bound = getattr(module, hook_name)
    shown = bound
    if compiles_its_steps(module):
        compiler = compiler_of(module)
        assert compiler is not None
        shown = uncompiled_step(module, hook_name)
        bound = logs_after(compiler(shown))

    @functools.wraps(shown)
    def adapted_step(*args: Any, **kwargs: Any) -> Any:
        return run_step(module, hook_name, policy, bound, args, kwargs)

    _lightning_view(adapted_step, shown)
    return adapted_step


def compiles_its_steps(module: torch.nn.Module) -> bool:
    """Whether Lightning compiled the module's steps for this run (``trainer.fit(torch.compile(model))``)."""
    return compiler_of(module) is not None


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


def run_ours_first(func: Callable[..., Any], ours: Callable[..., None]) -> Callable[..., Any]:
    """Wrap a user's override of a hook the library must see (``on_save_checkpoint``, ...): ``ours``
    runs first with the same arguments, even when the override does not call ``super()``; the
    override's return value (``on_train_batch_start``'s ``-1``) is kept. ``ours`` must be idempotent:
    an override that does call ``super()`` reaches the mixin's hook, which calls it again."""

    @functools.wraps(func)
    def with_ours_first(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        ours(self, *args, **kwargs)
        return func(self, *args, **kwargs)

    _lightning_view(with_ours_first, func)
    return with_ours_first


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
