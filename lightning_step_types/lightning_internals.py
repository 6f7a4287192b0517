"""Every access to a name Lightning keeps private, in one place.

A Lightning upgrade is this one file to check: each function says which private name it
reads and what it relies on. Both flavours (``pytorch_lightning`` and ``lightning.pytorch``)
share these internals.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = [
    "LoggingContext",
    "log_clash_name",
    "logged_in_current_hook",
    "logged_metric",
    "logging_context",
    "trainer_is_running",
    "trainer_of",
]


def trainer_of(module: Any) -> Any:
    """The Trainer a LightningModule is attached to, or None.

    Reads ``LightningModule._trainer`` straight from the instance ``__dict__``: the public
    ``module.trainer`` property raises when no Trainer is attached, and this runs on every step.
    """
    return module.__dict__.get("_trainer")


def trainer_is_running(module: Any) -> bool:
    """Whether ``module`` is inside ``fit``/``validate``/``test``/``predict`` right now."""
    trainer = trainer_of(module)
    if trainer is None:
        return False
    # TrainerStatus is a str enum in both Lightning flavours; str.__eq__ skips its case-folding __eq__.
    return str.__eq__(trainer.state.status, "running") is True


# --- metrics ---

# Where a `self.log` call from the running step goes: (the trainer's active `_ResultCollection`
# or None, `LightningModule._current_fx_name`, `_ResultCollection.dataloader_idx`).
LoggingContext = tuple[Any, "str | None", "int | None"]


def logging_context(module: Any) -> LoggingContext:
    """Read once per step: ``Trainer._results`` (the running loop's result collection) costs a
    few property lookups. ``dataloader_idx`` is set by the loops for each batch, None with one
    loader; ``self.log`` adds ``/dataloader_idx_N`` exactly when it is not None."""
    trainer = trainer_of(module)
    results = trainer._results if trainer is not None else None
    return results, module._current_fx_name, results.dataloader_idx if results is not None else None


def _entry(context: LoggingContext, name: str) -> Any:
    """The ``_ResultMetric`` that ``self.log(name, ...)`` from the running hook writes to, or None.

    Relies on the storage key of ``_ResultCollection.log``: ``"{fx}.{name}"``, plus
    ``".{dataloader_idx}"`` when set.
    """
    results, fx, idx = context
    if results is None or fx is None:
        return None
    return results.get(f"{fx}.{name}" if idx is None else f"{fx}.{name}.{idx}")


def logged_in_current_hook(module: Any, name: str) -> bool:
    """Whether ``self.log(name, ...)`` has been called from the hook running now (this epoch).

    An entry stays in the result collection across epochs; ``_ResultMetric.has_reset`` marks one
    that was reset at an epoch's end and not logged since.
    """
    entry = _entry(logging_context(module), name)
    return entry is not None and not entry.has_reset


def logged_metric(context: LoggingContext, name: str) -> Any:
    """The metric object that ``self.log(name, metric)`` from the running hook logged this epoch, or None.

    For a logged ``torchmetrics.Metric``, ``_ResultMetric.value`` is that object (``is_tensor``
    False); Lightning calls its ``compute()`` at the epoch's end and resets it.
    """
    entry = _entry(context, name)
    if entry is None or entry.has_reset or entry.is_tensor:
        return None
    return entry.value


# MisconfigurationException from `_ResultCollection.log` when one name is logged twice in a hook
# with other arguments (Lightning 2.x message).
_LOGGED_TWICE = re.compile(r"^You called `self\.log\((?P<name>.+?), \.\.\.\)` twice in `(?P<fx>[^`]+)` with different arguments")


def log_clash_name(error: BaseException) -> str | None:
    """The name in Lightning's "logged twice with different arguments" error, or None for other errors."""
    if type(error).__name__ != "MisconfigurationException":
        return None
    match = _LOGGED_TWICE.match(str(error))
    return match["name"] if match else None
