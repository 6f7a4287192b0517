"""ModelCheckpoint's own saves: what it sets once its file is written, and what its loading leaves out.

Part of the one place where the library reads names Lightning (or torch, torchmetrics) keeps
private; each function says which it reads and what it relies on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from lightning_step_types._lightning.instance_methods import StateWithoutOurs, put_on_instance, take_off_instance

__all__ = [
    "after_own_save",
    "follow_own_saves",
    "keys_not_loaded",
    "quiet_in_batch",
    "saves_at_batch_end",
    "unfollow_own_saves",
]

# `ModelCheckpoint._save_checkpoint(trainer, filepath)` (pytorch-lightning 2.1 to 2.6) writes the file
# with `trainer.save_checkpoint(filepath, ...)` and then sets `_last_global_step_saved` to the global step
# and `_last_checkpoint_saved` to the path: after the save, so the checkpoint it writes cannot hold them.
# A resume from that file starts after the hook that saved it, where both are already set; neither is in
# `state_dict()`. The method is looked up on the instance, so an instance attribute runs first.
_SAVE = "_save_checkpoint"
_SET_AFTER_THE_WRITE = ("_last_global_step_saved", "_last_checkpoint_saved")
# With `save_last`, every hook that saves a top-k file (`on_train_batch_end`, `on_validation_end`,
# `on_train_epoch_end`, `on_exception`; 2.5 to 2.6) calls `_save_last_checkpoint` right after it, which sets
# `last_model_path` (in `state_dict()`) to the last file's path: the name `format_checkpoint_name` gives
# `CHECKPOINT_NAME_LAST` with `_monitor_candidates(trainer)`, versioned (`STARTING_VERSION` on) while
# `file_exists` says a file other than `last_model_path` has that name, where `_enable_version_counter`.
# A top-k file is written before that, with the previous path: a resume from it finds its own `last.ckpt` "taken"
# and writes `last-v1.ckpt` from then on.
_LAST_PATH = "last_model_path"
# `on_validation_end` (2.6) makes the save `on_train_batch_end` deferred to it (`_defer_save_until_validation`:
# the monitored key was missing, or the epoch's last batch is followed by a validation) and sets the flag back to
# False after it: the file holds True, and a fit resumed from it would save again at its next validation's end.
_DEFERRED = "_defer_save_until_validation"

# Keys of a Lightning callback's `state_dict()` that its `load_state_dict` does not read (2.1 to 2.6):
# `ModelCheckpoint.current_score` is saved, and a resumed ModelCheckpoint starts it at None.
_NOT_LOADED = {"ModelCheckpoint": frozenset({"current_score"})}


def _is_model_checkpoint(callback: Any) -> bool:
    return any(
        cls.__name__ == "ModelCheckpoint" and cls.__module__.endswith("callbacks.model_checkpoint")
        for cls in type(callback).__mro__
    )


def follow_own_saves(callback: Any, saving: Callable[[Any, Any, str], None], saved: Callable[[Any], None]) -> bool:
    """Around each of a ``ModelCheckpoint``'s own saves: ``saving(callback, trainer, filepath)`` before the
    write, ``saved(callback)`` after it. False (nothing wrapped) for any other callback."""
    kind: type = callback.__class__
    if not _is_model_checkpoint(callback) or not callable(getattr(kind, _SAVE, None)):
        return False
    original: Callable[..., Any] = getattr(callback, _SAVE)

    def save(trainer: Any, filepath: str, *args: Any, **kwargs: Any) -> Any:
        saving(callback, trainer, filepath)
        try:
            return original(trainer, filepath, *args, **kwargs)
        finally:
            saved(callback)

    put_on_instance(callback, _SAVE, save)
    # pickled or copied during the fit (a module may keep the Trainer's callbacks in its hyperparameters,
    # which every checkpoint pickles): without ``save``, a closure
    put_on_instance(callback, "__getstate__", StateWithoutOurs(callback))
    return True


def unfollow_own_saves(callback: Any) -> None:
    take_off_instance(callback, "__getstate__")
    take_off_instance(callback, _SAVE)


def after_own_save(callback: Any, trainer: Any, filepath: str) -> dict[str, Any]:
    """The attributes ``ModelCheckpoint._save_checkpoint`` sets once the file at ``filepath`` is written, and what
    the hook saving it sets next: the last file's path (with ``save_last``, after a top-k file), the deferred
    save's flag (in ``on_validation_end``)."""
    values = {"_last_global_step_saved": int(trainer.global_step), "_last_checkpoint_saved": filepath}
    present: dict[str, Any] = cast("dict[str, Any]", vars(callback))
    found = {name: values[name] for name in _SET_AFTER_THE_WRITE if name in present}
    last = _last_path_next(callback, trainer, filepath)
    if last is not None:
        found[_LAST_PATH] = last
    if present.get(_DEFERRED) is True and bool(getattr(trainer, "validating", False)):
        found[_DEFERRED] = False  # the deferred save, in on_validation_end (the only save that hook makes with it)
    return found


def _last_path_next(callback: Any, trainer: Any, filepath: str) -> str | None:
    """The path ``_save_last_checkpoint`` sets ``last_model_path`` to after the top-k file at ``filepath`` (None:
    no last file follows, or this is the last file's own write, whose path is set already)."""
    now: Any = getattr(callback, _LAST_PATH, None)
    if not getattr(callback, "save_last", None) or not isinstance(now, str) or filepath == now:
        return None
    candidates: Any = callback._monitor_candidates(trainer)
    name: str = callback.CHECKPOINT_NAME_LAST
    path: str = callback.format_checkpoint_name(candidates, name)
    if getattr(callback, "_enable_version_counter", True):
        version = int(callback.STARTING_VERSION)
        # in Lightning's order: `file_exists` is a collective under DDP, which every process calls as it saves
        while callback.file_exists(path, trainer) and path != now:
            path = callback.format_checkpoint_name(candidates, name, ver=version)
            version += 1
    return path


def saves_at_batch_end(callback: Any, trainer: Any) -> bool:
    """Whether ``callback``'s ``on_train_batch_end`` may save (or change anything) at the batch in flight: any
    callback but a ``ModelCheckpoint``; a ``ModelCheckpoint`` that saves by time (`_train_time_interval`), or
    every `_every_n_train_steps` steps where the global step now is one of them (its own test, 2.1 to 2.6:
    with neither it returns at once)."""
    if not _is_model_checkpoint(callback):
        return True
    if getattr(callback, "_train_time_interval", None) is not None:
        return True
    every = int(getattr(callback, "_every_n_train_steps", 0) or 0)
    return every >= 1 and int(trainer.global_step) % every == 0


def quiet_in_batch(callback: Any, hooks: tuple[str, ...]) -> bool:
    """Whether ``callback`` is a ``ModelCheckpoint`` whose ``hooks`` change nothing at any batch: its class keeps
    Lightning's own, and it saves neither by time (`_train_time_interval`) nor every `_every_n_train_steps`
    steps, set at its construction (its own test in `on_train_batch_end`, 2.1 to 2.6: with neither it returns at
    once; it overrides no other batch hook). The default Trainer's is such a one."""
    if not _is_model_checkpoint(callback):
        return False
    kind: type = callback.__class__
    lightning_class: type = next(cls for cls in kind.__mro__ if cls.__name__ == "ModelCheckpoint")
    if any(getattr(kind, hook, None) is not getattr(lightning_class, hook, None) for hook in hooks):
        return False  # a subclass's own batch hook
    if getattr(callback, "_train_time_interval", None) is not None:
        return False
    return int(getattr(callback, "_every_n_train_steps", 0) or 0) < 1


def keys_not_loaded(callback: Any) -> frozenset[str]:
    """The keys of ``callback``'s ``state_dict()`` that its ``load_state_dict`` leaves unread."""
    found: frozenset[str] = frozenset()
    for cls in type(callback).__mro__:
        if cls.__module__.startswith(("pytorch_lightning.", "lightning.pytorch.")):
            found |= _NOT_LOADED.get(cls.__name__, frozenset())
    return found
