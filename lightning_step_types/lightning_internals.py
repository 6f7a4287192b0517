"""Every access to a name Lightning keeps private, in one place.

A Lightning upgrade is this one file to check: each function says which private name it
reads and what it relies on. Both flavours (``pytorch_lightning`` and ``lightning.pytorch``)
share these internals.
"""

from __future__ import annotations

from typing import Any

__all__ = ["trainer_is_running", "trainer_of"]


def trainer_of(module: Any) -> Any:
    """The Trainer a LightningModule is attached to, or None.

    Reads ``LightningModule._trainer`` straight from the instance ``__dict__``: the public
    ``module.trainer`` property raises when no Trainer is attached, and this runs on every step.
    """
    return module.__dict__.get("_trainer")


def trainer_is_running(module: Any) -> bool:
    """Whether ``module`` is inside ``fit``/``validate``/``test``/``predict`` right now.

    Asked on every step, so it reads ``LightningModule._trainer`` (None until a Trainer attaches
    it) directly rather than through ``trainer_of``'s instance-``__dict__`` lookup.
    """
    trainer = getattr(module, "_trainer", None)
    if trainer is None:
        return False
    # TrainerStatus is a str enum in both Lightning flavours; comparing its member value (`_value_`,
    # Enum's documented value attribute) skips the enum's case-folding __eq__.
    status: str = trainer.state.status._value_
    return status == "running"
