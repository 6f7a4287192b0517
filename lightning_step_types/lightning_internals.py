"""Every access to a name Lightning keeps private, in one place.

A Lightning upgrade is this one file to check: each function says which private name it
reads and what it relies on. Both flavours (``pytorch_lightning`` and ``lightning.pytorch``)
share these internals.
"""

from __future__ import annotations

from typing import Any

__all__ = ["logged_in_current_hook", "trainer_is_running", "trainer_of"]


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


# --- logging from the running hook ---


def logged_in_current_hook(module: Any, name: str) -> bool:
    """Whether ``self.log(name, ...)`` has been called from the hook that is running now.

    Relies on three private names of Lightning 2.x: ``LightningModule._current_fx_name`` (the hook
    the Trainer is calling, set around every hook in ``trainer/call.py``), ``Trainer._results`` (the
    active loop's ``_ResultCollection``) and the collection's keys, which ``_ResultCollection.log``
    builds as ``"<hook>.<name>"``, plus ``".<dataloader_idx>"`` when the loop runs several
    dataloaders and ``add_dataloader_idx`` is left on. A key stays registered for the loop's
    lifetime and its value is reset at each epoch's end (``has_reset``): so this is "logged from
    this hook since the epoch began", which is every step for a call the hook makes on every step.
    """
    trainer = trainer_of(module)
    fx = module.__dict__.get("_current_fx_name")
    if trainer is None or fx is None:
        return False
    results = trainer._results  # None outside a loop
    if results is None:
        return False
    key = f"{fx}.{name}"
    for candidate in (key, f"{key}.{results.dataloader_idx}") if results.dataloader_idx is not None else (key,):
        metric = results.get(candidate)
        if metric is not None and not metric.has_reset:
            return True
    return False
