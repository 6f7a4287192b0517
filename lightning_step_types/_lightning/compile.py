"""``torch.compile``d modules, as Lightning unwraps them.

Part of the one place where the library reads names Lightning (or torch, torchmetrics) keeps
private; each function says which it reads and what it relies on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

__all__ = ["compiler_of", "keep_uncompiled_step", "uncompiled_step"]


# `trainer.fit(torch.compile(model))`: Lightning's `_maybe_unwrap_optimized` (utilities/compile.py,
# `from_compiled`) unwraps the OptimizedModule and sets `module._compiler_ctx = {"dynamo_ctx": ...,
# "original_training_step": ..., ...}`, then replaces the instance's `forward` and steps with
# `dynamo_ctx(<bound method>)`. `_compiler_ctx` exists (None) on every LightningModule since 2.0.


def compiler_of(module: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]] | None:
    """What Lightning compiled the module's steps with (``dynamo_ctx``), or None if it did not."""
    context = getattr(module, "_compiler_ctx", None)
    if not isinstance(context, dict):
        return None
    compiler: Any = cast("dict[str, Any]", context).get("dynamo_ctx")
    return cast("Callable[[Callable[..., Any]], Callable[..., Any]]", compiler) if callable(compiler) else None


def keep_uncompiled_step(module: Any, hook_name: str, step: Callable[..., Any]) -> None:
    """Make ``step`` what Lightning's ``to_uncompiled`` puts back (``_compiler_ctx["original_<hook>"]``).

    ``from_compiled`` records the step it finds on the instance; from a second compiled run on,
    that is the step the library set there for the first one, not the module's own.
    """
    context = getattr(module, "_compiler_ctx", None)
    key = f"original_{hook_name}"
    if isinstance(context, dict) and key in context:
        cast("dict[str, Any]", context)[key] = step


def uncompiled_step(module: Any, hook_name: str) -> Callable[..., Any]:
    """The step ``from_compiled`` found on the instance (``_compiler_ctx["original_<hook>"]``), before it
    compiled it: the module's own bound step. From a second compiled run on, what it found was the first
    run's compiled step, a function ``dynamo_ctx`` made; its ``_torchdynamo_orig_callable`` (torch's
    ``_TorchDynamoContext.__call__`` sets it) is the step it compiled."""
    context = cast("dict[str, Any]", getattr(module, "_compiler_ctx"))
    step: Any = context[f"original_{hook_name}"]
    while hasattr(step, "_torchdynamo_orig_callable"):
        step = step._torchdynamo_orig_callable
    return cast("Callable[..., Any]", step)
