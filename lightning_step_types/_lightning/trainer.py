"""The Trainer a module runs in, and what it is doing.

Part of the one place where the library reads names Lightning (or torch, torchmetrics) keeps
private; each function says which it reads and what it relies on.
"""

from __future__ import annotations

import dis
import inspect
import sys
from types import FrameType
from typing import Any, cast

__all__ = [
    "batch_end_hooks_after_save",
    "batch_end_hooks_not_returned",
    "epoch_end_hooks_after_save",
    "lightning_checks_nonfinite",
    "pending_training_state",
    "running",
    "trainer_is_running",
    "trainer_of",
]


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


def batch_end_hooks_not_returned(trainer: Any) -> list[Any] | None:
    """The callbacks whose ``on_train_batch_end`` had not returned for the batch in flight when the exception
    being handled (``sys.exc_info()``: a save in ``on_exception``) was raised; None where it cannot be told.

    Read from the exception's traceback: `trainer/call.py`'s `_call_callback_hooks(trainer, hook_name, ...)`
    calls each of its local ``callbacks`` in order, with the one being called in its local ``callback``
    (pytorch-lightning 2.0 to 2.6); that one and those after it had not returned. Where the exception came
    from `_call_lightning_module_hook(trainer, "on_train_batch_end", ...)`, the module's hook, which
    `_TrainingEpochLoop.advance` calls after every callback's: none.
    """
    error = sys.exc_info()[1]
    traceback = error.__traceback__ if error is not None else None
    while traceback is not None:
        frame = traceback.tb_frame
        code = frame.f_code
        if code.co_filename.endswith(("trainer/call.py", "trainer\\call.py")):
            local = frame.f_locals
            if local.get("hook_name") == "on_train_batch_end" and local.get("trainer") is trainer:
                if code.co_name == "_call_lightning_module_hook":
                    return []
                if code.co_name == "_call_callback_hooks":
                    listed: list[Any] = local.get("callbacks") or []  # a list: `trainer.callbacks`, or filtered
                    called = [id(item) for item in listed]
                    if id(local.get("callback")) in called:
                        return listed[called.index(id(local.get("callback"))) :]
        traceback = traceback.tb_next
    return None


def _hook_around_save(trainer: Any, hook_name: str) -> tuple[str, dict[str, Any], bool] | None:
    """The Lightning hook call (in `trainer/call.py`) that a ``trainer.save_checkpoint`` being made now was called
    from: the calling function's name (``_call_callback_hooks`` or ``_call_lightning_module_hook``), its locals, and
    whether the hook in flight returns with nothing else run after the save (read from the bytecode after each call in
    progress between the hook and `Trainer.save_checkpoint`, in ``trainer/trainer.py``: anything but a bare return
    counts). None where the save is not made from inside ``hook_name`` of ``trainer``'s fit."""
    here = inspect.currentframe()
    frame: FrameType | None = here.f_back.f_back if here is not None and here.f_back is not None else None
    between: list[FrameType] = []  # the frames from the hook's down to the one that called save_checkpoint
    # the frames inside the save (its own hooks', through call.py too) are passed over until save_checkpoint's
    saving = False
    while frame is not None:
        code = frame.f_code
        if saving and code.co_filename.endswith(("trainer/call.py", "trainer\\call.py")):
            local = frame.f_locals
            if local.get("hook_name") != hook_name or local.get("trainer") is not trainer:
                return None
            return code.co_name, local, all(_returns_next(inner) for inner in between)
        if saving:
            between.append(frame)
        elif code.co_name == "save_checkpoint" and code.co_filename.endswith(
            ("trainer/trainer.py", "trainer\\trainer.py")
        ):
            saving = True
        frame = frame.f_back
    return None


def batch_end_hooks_after_save(trainer: Any) -> list[Any] | None:
    """The callbacks whose ``on_train_batch_end`` has something left to run for the batch in flight, where the
    save being made now (``trainer.save_checkpoint`` called from inside those hooks) returns into them; None where
    the save is not made from inside them.

    Read from the live call stack: `trainer/call.py`'s `_call_callback_hooks(trainer, hook_name, ...)` calls each of
    its local ``callbacks`` in order, with the one being called in its local ``callback`` (pytorch-lightning 2.0 to
    2.6); those after that one have not run. That one is counted where anything follows the save in its hook (read
    from the bytecode after each call in progress between the hook and `Trainer.save_checkpoint`, in
    ``trainer/trainer.py``: anything but a bare return counts). A save from the module's own hook, which
    `_TrainingEpochLoop.advance` calls after every callback's: none.
    """
    found = _hook_around_save(trainer, "on_train_batch_end")
    if found is None:
        return None
    caller, local, returns_next = found
    if caller == "_call_lightning_module_hook":
        return []
    if caller != "_call_callback_hooks":
        return None
    listed: list[Any] = local.get("callbacks") or []  # a list: `trainer.callbacks`, or filtered
    called = [id(item) for item in listed]
    current = local.get("callback")
    if id(current) not in called:
        return None
    index = called.index(id(current))
    return listed[index + 1 :] if returns_next else listed[index:]


def _returns_next(frame: FrameType) -> bool:
    """Whether ``frame``, once the call in progress returns, returns None with nothing else run (its value dropped)."""
    following = [item for item in dis.get_instructions(frame.f_code) if item.offset > frame.f_lasti]
    for index, item in enumerate(following):
        if item.opname in ("NOP", "POP_TOP"):
            continue
        if item.opname == "RETURN_CONST":
            return item.argval is None
        if item.opname == "LOAD_CONST" and item.argval is None:
            return index + 1 < len(following) and following[index + 1].opname == "RETURN_VALUE"
        return False
    return False


def epoch_end_hooks_after_save(trainer: Any) -> bool:
    """Whether a hook of the epoch's end has something left to run after the save being made now
    (``trainer.save_checkpoint`` called from inside the ``on_train_epoch_end`` hooks); False where the save is not
    made from inside them, or where it is the last thing they do.

    Read from the live call stack, as `batch_end_hooks_after_save` reads it: `_FitLoop.on_advance_end` calls
    `_call_callback_hooks(trainer, "on_train_epoch_end", monitoring_callbacks=False)`, then the module's hook
    (`_call_lightning_module_hook`), then the callbacks again with ``monitoring_callbacks=True`` (the
    ``EarlyStopping`` and ``Checkpoint`` ones, pytorch-lightning 2.0 to 2.6); ``_call_callback_hooks``'s local
    ``callbacks`` is the list it calls in order, ``callback`` the one being called. Left: anything but a bare return
    after the save in the hook in flight, a callback after that one in its list, and after the first list or the
    module's hook, the module's own hook (where its class defines one) and the monitoring callbacks. Not where the
    hook in flight is a ``Checkpoint``'s (its own save, as ``ModelCheckpoint``'s, last: the run goes on past it).
    """
    found = _hook_around_save(trainer, "on_train_epoch_end")
    if found is None:
        return False
    caller, local, returns_next = found
    rest = not returns_next
    monitoring = any(_is_monitoring(callback) for callback in getattr(trainer, "callbacks", []))
    if caller == "_call_lightning_module_hook":
        return rest or monitoring
    if caller != "_call_callback_hooks":
        return False
    listed: list[Any] = local.get("callbacks") or []
    called = [id(item) for item in listed]
    if id(local.get("callback")) not in called or _is_checkpoint(local.get("callback")):
        return False  # a Checkpoint's own save: what follows it there is its own, which the point holds
    after = listed[called.index(id(local.get("callback"))) + 1 :]
    module_after = local.get("monitoring_callbacks") is False and (_defines_epoch_end(trainer) or monitoring)
    return rest or bool(after) or module_after


def _is_monitoring(callback: Any) -> bool:
    """One of the callbacks `_call_callback_hooks` calls with ``monitoring_callbacks=True`` (by class name, either
    flavour: ``EarlyStopping``, a ``Checkpoint``)."""
    return any(kind.__name__ in ("EarlyStopping", "Checkpoint") for kind in type(callback).__mro__)


def _is_checkpoint(callback: Any) -> bool:
    return any(kind.__name__ == "Checkpoint" for kind in type(callback).__mro__)


def _defines_epoch_end(trainer: Any) -> bool:
    """Whether the module's class defines an ``on_train_epoch_end`` of its own (not `ModelHooks`' empty one)."""
    module = getattr(trainer, "lightning_module", None)
    for kind in type(module).__mro__:
        if "on_train_epoch_end" in vars(kind):
            return kind.__name__ != "ModelHooks"
    return False
