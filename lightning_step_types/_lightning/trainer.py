"""The Trainer a module runs in, and what it is doing.

Part of the one place where the library reads names Lightning (or torch, torchmetrics) keeps
private; each function says which it reads and what it relies on.
"""

from __future__ import annotations

from typing import Any, cast

__all__ = ["lightning_checks_nonfinite", "pending_training_state", "running", "trainer_is_running", "trainer_of"]


def lightning_checks_nonfinite(trainer: Any) -> str | None:
    """What of Lightning's own handles a non-finite training loss in this Trainer, or None.

    A ``SpikeDetection`` callback (``callbacks/spike.py``: it reads the loss in
    ``on_train_batch_end``, matched by class name so that both flavours and subclasses count), or
    ``Trainer(detect_anomaly=True)`` (`Trainer._detect_anomaly`, private: the fit runs inside
    ``torch.autograd.set_detect_anomaly``, whose backward raises on a NaN).
    """
    if trainer is None:
        return None
    for callback in getattr(trainer, "callbacks", []):
        if any(kind.__name__ == "SpikeDetection" for kind in type(callback).__mro__):
            return f"{type(callback).__name__} callback"
    if bool(getattr(trainer, "_detect_anomaly", False)):
        return "Trainer(detect_anomaly=True)"
    return None


def trainer_of(module: Any) -> Any:
    """The Trainer a LightningModule is attached to, or None.

    Reads ``LightningModule._trainer`` straight from the instance ``__dict__``: the public
    ``module.trainer`` property raises when no Trainer is attached, and this runs on every step.
    """
    return module.__dict__.get("_trainer")


def running(trainer: Any) -> bool:
    """Whether ``trainer`` (or None) is inside ``fit``/``validate``/``test``/``predict`` now."""
    if trainer is None:
        return False
    status: str = trainer.state.status._value_  # TrainerStatus is a str enum: its value skips the case-folding __eq__
    return status == "running"


def trainer_is_running(module: Any) -> bool:
    """Whether ``module`` is inside ``fit``/``validate``/``test``/``predict`` right now.

    Asked on every step, so it reads ``LightningModule._trainer`` (None until a Trainer attaches
    it) as a plain attribute, with no call: not through ``trainer_of``'s instance-``__dict__``
    lookup, nor ``getattr`` with a default (a module without one raises AttributeError instead).
    """
    try:
        trainer = module._trainer
    except AttributeError:  # not a LightningModule set up by its __init__
        return False
    if trainer is None:
        return False
    # TrainerStatus is a str enum in both Lightning flavours; comparing its member value (`_value_`,
    # Enum's documented value attribute) skips the enum's case-folding __eq__.
    status: str = trainer.state.status._value_
    return status == "running"


def pending_training_state(trainer: Any) -> dict[str, Any]:
    """The entries of the checkpoint a fit resumes from whose restore is still to come, or none.

    `Trainer._run` restores the module and the callbacks before ``on_fit_start``, and the training state
    after it (`_CheckpointConnector.restore_training_state`, from `_CheckpointConnector._loaded_checkpoint`,
    private, until `resume_end` clears it): the precision plugin's state (under its class's name, or
    ``native_amp_scaling_state``), the loops, the optimizers' and LR schedulers' states. A checkpoint saved
    in between (``BatchSizeFinder``'s own, which it restores after its trials) holds the fresh ones there.
    """
    connector: Any = getattr(trainer, "_checkpoint_connector", None)
    loaded: Any = getattr(connector, "_loaded_checkpoint", None)
    if not isinstance(loaded, dict) or not loaded:
        return {}
    entries = cast("dict[str, Any]", loaded)
    precision = type(getattr(trainer, "precision_plugin", None)).__qualname__
    names = ("optimizer_states", "lr_schedulers", "loops", precision, "native_amp_scaling_state")
    return {name: entries[name] for name in names if name in entries}
