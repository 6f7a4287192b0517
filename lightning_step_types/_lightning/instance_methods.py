"""Methods replaced on an instance, and put back.

Part of the one place where the library reads names Lightning (or torch, torchmetrics) keeps
private; each function says which it reads and what it relies on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

__all__ = ["put_on_instance", "take_off_instance"]


# Lightning looks each method below up on the instance, so an instance attribute runs first. The
# library puts its own there for a fit and takes it off again, putting back what the instance had
# before (a user's own replacement, such as ``trainer.fit_loop.epoch_loop.val_loop.run = ...``), and
# leaves alone anything set after it. Both write the instance's ``__dict__`` itself, so that an object
# with attribute machinery of its own (a ``unittest.mock.Mock`` logger or callback, which records a
# deleted attribute and raises on it afterwards) is left as it was.


_ABSENT: Any = object()


_PREVIOUS = "_lightning_step_types_previous"  # on the library's callable: what the instance had before it


def put_on_instance(instance: Any, name: str, value: Callable[..., Any]) -> None:
    """``instance.<name> = value`` (in its ``__dict__``), remembering what was there before the
    library's (one of the library's own still there is replaced, never remembered)."""
    current: Any = instance.__dict__.get(name, _ABSENT)
    vars(value)[_PREVIOUS] = vars(current)[_PREVIOUS] if _is_ours(current) else current
    instance.__dict__[name] = value


def take_off_instance(instance: Any, name: str) -> None:
    """Undo `put_on_instance`: what the instance had before it goes back. Anything else is left alone."""
    current: Any = instance.__dict__.get(name, _ABSENT)
    if not _is_ours(current):
        return
    attributes = cast("dict[str, Any]", vars(current))
    previous = attributes[_PREVIOUS]
    if previous is _ABSENT:
        del instance.__dict__[name]
    else:
        instance.__dict__[name] = previous


def _is_ours(value: object) -> bool:
    attributes: Any = getattr(value, "__dict__", None)  # a function's, a partial's, or a callable object's
    return isinstance(attributes, dict) and _PREVIOUS in attributes
