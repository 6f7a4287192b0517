"""Every access to a name Lightning (or torchmetrics) keeps private, in one place.

A Lightning upgrade is this one file to check: each function says which private name it
reads and what it relies on. Both flavours (``pytorch_lightning`` and ``lightning.pytorch``)
share these internals.
"""

from __future__ import annotations

import copy
import functools
import importlib
import re
import sys
import types
import warnings
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, cast

import torch

__all__ = [
    "LoggedEntry",
    "LoggingContext",
    "call_before_updates",
    "compiler_of",
    "epoch_results_mismatch",
    "evaluation_results",
    "keep_uncompiled_step",
    "load_metric_states",
    "loaded_loader_states",
    "log_clash_name",
    "logged_entries",
    "logged_entries_at",
    "logged_in_current_hook",
    "logged_metric",
    "logged_metric_objects",
    "logged_snapshot",
    "logging_context",
    "metric_states",
    "metric_states_on_cpu",
    "metric_states_on_device",
    "set_update_bookkeeping",
    "stateful_loader_states",
    "stop_calling_before_updates",
    "trainer_is_running",
    "trainer_of",
    "training_epoch_results",
    "update_bookkeeping",
    "write_logged_tensors",
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


def fetched_batch_size(trainer: Any) -> int | None:
    """The size of the batch a ``training_step(self, dataloader_iter)`` fetched last, or None.

    `_DataLoaderIterDataFetcher._batch` (private; `FitLoop._data_fetcher`) holds the last batch the
    step's iterator yielded; its size is read as Lightning reads a batch's (`extract_batch_size`, public,
    in the Trainer's own flavour: ``utilities/data.py``), which raises where it finds no tensor.
    """
    fetcher = trainer.fit_loop._data_fetcher
    batch = getattr(fetcher, "_batch", None) if type(fetcher).__name__ == "_DataLoaderIterDataFetcher" else None
    if batch is None:
        return None
    package = type(trainer).__module__.split(".trainer")[0]  # "pytorch_lightning" or "lightning.pytorch"
    extract_batch_size: Any = importlib.import_module(f"{package}.utilities.data").extract_batch_size
    try:
        with warnings.catch_warnings():  # several sizes: Lightning's "ambiguous collection" warning, and its first size
            warnings.simplefilter("ignore")
            return int(extract_batch_size(batch))
    except Exception:  # MisconfigurationException where no tensor is found; a batch may hold anything
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
    it) directly rather than through ``trainer_of``'s instance-``__dict__`` lookup.
    """
    trainer = getattr(module, "_trainer", None)
    if trainer is None:
        return False
    # TrainerStatus is a str enum in both Lightning flavours; comparing its member value (`_value_`,
    # Enum's documented value attribute) skips the enum's case-folding __eq__.
    status: str = trainer.state.status._value_
    return status == "running"


# --- torch.compile ---
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


# --- epoch state (exact resume) ---
# The running aggregates of the training epoch's `self.log(..., on_epoch=True)` values live in
# `trainer.fit_loop.epoch_loop._results`, a `_ResultCollection` (a dict: "<fx>.<name>[.<dataloader>]"
# -> `_ResultMetric`), from `trainer/connectors/logger_connector/result.py`. Lightning 2.0 stopped
# saving it (PR #16516), so `epoch_state.py` saves and restores it through the functions below.
# Checked on pytorch-lightning 2.1.4, 2.4.0, 2.5.0 and 2.6.6 (before 2.5 a resume replays the
# checkpoint's batch, see `epoch_state.restore_before_first_batch`); `epoch_results_mismatch` is the probe
# that turns any other shape into a one-time warning instead of an exception or a wrong value.

# `_Metadata` fields that identify what was logged and how it is reduced (all exist since 2.0).
_META_FIELDS = ("fx", "name", "on_step", "on_epoch", "reduce_fx", "dataloader_idx", "add_dataloader_idx")
# The reductions whose running state is `value` (+ `cumulated_batch_size` for the mean).
_REDUCTIONS = {"mean", "sum", "max", "min"}


class LoggedEntry(NamedTuple):
    """One `_ResultMetric` of the training epoch, read into plain values."""

    key: str  # the collection's key: "<fx>.<name>" plus ".<dataloader_idx>" where Lightning adds it
    shown: str  # how the user knows it: "train_loss (training_step)"
    fingerprint: tuple[Any, ...]  # what was logged and how: a changed one is not restored
    # logged since the last reset: its epoch aggregate is still running, or its last on_step value
    # still stands (Lightning logs it again in each step's row until it is logged anew)
    in_flight: bool
    # a tensor's running state: `value`, `cumulated_batch_size` (a mean), `_forward_cache` (the last
    # on_step value); empty for a logged torchmetrics object
    tensors: dict[str, torch.Tensor]
    metric_attribute: str | None  # a logged torchmetrics object's path in `named_modules()`
    meta: dict[str, Any]  # the rest of how it was logged, for `create_logged_entry`


def training_epoch_results(trainer: Any) -> Any:
    """The training epoch's `_ResultCollection`, or None.

    Reads `FitLoop.epoch_loop._results` (private; `_TrainingEpochLoop.__init__` builds it once per
    Trainer, and it lives as long as the Trainer).
    """
    epoch_loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
    return getattr(epoch_loop, "_results", None)


def epoch_results_mismatch(results: Any) -> str | None:
    """Why ``results`` is not the `_ResultCollection` this section reads, or None when it is."""
    if not isinstance(results, dict):
        return "this Lightning's `trainer.fit_loop.epoch_loop._results` is not a dict of `_ResultMetric`"
    collection = cast(Any, results)  # isinstance leaves the type arguments unknown
    kind: Any = collection.__class__
    if not callable(getattr(kind, "update_metrics", None)):
        return "this Lightning's `_ResultCollection` has no `update_metrics`"
    items: Mapping[str, Any] = collection
    for key, item in items.items():
        meta: Any = getattr(item, "meta", None)
        missing = [field for field in _META_FIELDS if not hasattr(meta, field)]
        missing += [attr for attr in ("is_tensor", "has_reset", "value") if not hasattr(item, attr)]
        if missing:
            return f"this Lightning's `_ResultMetric` of {key!r} has no {', '.join(missing)}"
        if item.is_tensor and _reduction(meta) not in _REDUCTIONS:
            return f"this Lightning's `_ResultMetric` of {key!r} reduces with {meta.reduce_fx!r}"
        if item.is_tensor and _reduction(meta) == "mean" and not hasattr(item, "cumulated_batch_size"):
            return f"this Lightning's `_ResultMetric` of {key!r} has no cumulated_batch_size"
    return None


def _reduction(meta: object) -> str:
    # `_Metadata._parse_reduce_fx` turns "mean"/"sum"/... into torch.mean/torch.sum/...; the
    # builtins sum/max/min are accepted as they are. Both kinds are named by `__name__`.
    reduce_fx = getattr(meta, "reduce_fx", None)
    return str(getattr(reduce_fx, "__name__", reduce_fx))


def logged_entries(results: Any) -> list[LoggedEntry]:
    """Every `_ResultMetric` of the collection (probe it first with `epoch_results_mismatch`).

    Relies on `_ResultMetric.meta` (`_Metadata`), `.is_tensor`, `.has_reset` (set by `reset()`,
    cleared by the next update) and the metric states `value` (the sum of `v * batch_size` for a
    mean, the running sum/max/min otherwise) and `cumulated_batch_size` (mean only).
    """
    items: Mapping[str, Any] = results
    return [_entry(key, item) for key, item in items.items()]


def _entry(key: str, item: Any, snapshot: tuple[dict[str, torch.Tensor], bool] | None = None) -> LoggedEntry:
    meta = item.meta
    shown = meta.name
    if meta.add_dataloader_idx and meta.dataloader_idx is not None:
        shown += f"/dataloader_idx_{meta.dataloader_idx}"  # `_ResultCollection.DATALOADER_SUFFIX`
    fx = str(meta.fx).split(".")[0]
    reduction = _reduction(meta)
    fingerprint = (meta.fx, meta.name, bool(item.is_tensor), reduction, bool(meta.on_step), bool(meta.on_epoch))
    tensors: dict[str, torch.Tensor] = {}
    if snapshot is not None:
        tensors, has_reset = snapshot
    else:
        has_reset = bool(item.has_reset)
        if item.is_tensor:
            tensors = _running_tensors(
                item,
                reduction,
                item.value,
                item.__dict__.get("cumulated_batch_size"),
                item.__dict__.get("_forward_cache"),
            )
    standing_step_value = bool(meta.on_step) and "_forward_cache" in tensors
    return LoggedEntry(
        key=key,
        shown=f"{shown!r} ({fx})",
        fingerprint=fingerprint,
        in_flight=(bool(meta.on_epoch) or standing_step_value) and not has_reset,
        tensors=tensors,
        metric_attribute=getattr(meta, "metric_attribute", None),
        meta=_logged_with(meta),
    )


def _logged_with(meta: Any) -> dict[str, Any]:
    """`_Metadata`'s fields as `_ResultCollection.log` takes them (its `_Sync`: `_should`, `rank_zero_only`)."""
    sync: Any = getattr(meta, "_sync", None)
    return {
        "fx": str(meta.fx).split(".")[0],
        "name": meta.name,
        "prog_bar": bool(meta.prog_bar),
        "logger": bool(meta.logger),
        "on_step": bool(meta.on_step),
        "on_epoch": bool(meta.on_epoch),
        "reduce_fx": _reduction(meta),
        "enable_graph": bool(meta.enable_graph),
        "add_dataloader_idx": bool(meta.add_dataloader_idx),
        "sync_dist": bool(getattr(sync, "_should", False)),
        "rank_zero_only": bool(getattr(sync, "rank_zero_only", False)),
    }


def create_logged_entry(results: Any, trainer: Any, saved: Mapping[str, Any], value: Any) -> Any:
    """Create the `_ResultMetric` a saved value was logged into, as `LightningModule.log` would.

    `_ResultCollection.log` (private) registers the key with the `_Metadata` built from these
    arguments and applies one update of ``value`` (for a torchmetrics object, its own state is not
    touched); the caller then writes the saved running state over it. It passes the strategy's
    ``reduce`` as `LightningModule.log` does.
    """
    meta = saved["meta"]
    results.log(
        meta["fx"],
        meta["name"],
        value,
        prog_bar=meta["prog_bar"],
        logger=meta["logger"],
        on_step=meta["on_step"],
        on_epoch=meta["on_epoch"],
        reduce_fx=meta["reduce_fx"],
        enable_graph=meta["enable_graph"],
        sync_dist=meta["sync_dist"],
        sync_dist_fn=trainer.strategy.reduce,
        add_dataloader_idx=meta["add_dataloader_idx"],
        batch_size=1,
        metric_attribute=saved.get("metric_attribute"),
        rank_zero_only=meta["rank_zero_only"],
    )
    return results[saved["key"]]


def _running_tensors(
    item: Any, reduction: str, value: Any, cumulated_batch_size: Any, forward_cache: Any
) -> dict[str, Any]:
    tensors: dict[str, Any] = {"value": value}
    if reduction == "mean":
        tensors["cumulated_batch_size"] = cumulated_batch_size
    if item.meta.on_step and isinstance(forward_cache, torch.Tensor):
        tensors["_forward_cache"] = forward_cache
    return tensors


# What `logged_snapshot` keeps per `_ResultMetric`: its key, the item, its `value`,
# `cumulated_batch_size` and `_forward_cache` (None where it has none) and `has_reset`.
LoggedSnapshot = list[tuple[str, Any, Any, Any, Any, bool]]


def logged_snapshot(results: Any) -> tuple[LoggedSnapshot, dict[str, Any]]:
    """The collection's running state now, by reference, and the torchmetrics objects logged this epoch.

    Taken at every training batch's start, so it copies nothing: `_ResultMetric.update` rebinds
    `value` and `cumulated_batch_size` (``self.value = self.value + ...``, never ``+=``), and `reset()`
    and `.to()` rebind them too, so the tensors held here keep their values. A logged torchmetrics
    object (``value`` is the object; `_Metadata.metric_attribute` its path) is updated in place by the
    user's code: the caller copies its states (`metric_states`).
    """
    items: Mapping[str, Any] = results
    snapshot: LoggedSnapshot = []
    metric_objects: dict[str, Any] = {}
    for key, item in items.items():
        has_reset = item.has_reset
        # the instance __dict__: a missing state would go through nn.Module.__getattr__ and raise
        state = item.__dict__
        snapshot.append(
            (key, item, item.value, state.get("cumulated_batch_size"), state.get("_forward_cache"), has_reset)
        )
        if not item.is_tensor and not has_reset and item.meta.metric_attribute is not None:
            metric_objects[item.meta.metric_attribute] = item.value
    return snapshot, metric_objects


def logged_entries_at(snapshot: LoggedSnapshot) -> list[LoggedEntry]:
    """`logged_entries` as they were when `logged_snapshot` was taken."""
    entries: list[LoggedEntry] = []
    for key, item, value, cumulated_batch_size, forward_cache, has_reset in snapshot:
        tensors: dict[str, torch.Tensor] = {}
        if item.is_tensor:
            tensors = _running_tensors(item, _reduction(item.meta), value, cumulated_batch_size, forward_cache)
        entries.append(_entry(key, item, (tensors, bool(has_reset))))
    return entries


def write_logged_tensors(item: Any, tensors: Mapping[str, torch.Tensor]) -> None:
    """Set a freshly created `_ResultMetric`'s running state, before its first update.

    `_ResultMetric.__setattr__` is `object.__setattr__`, as is Lightning's own `update()`; the
    state keeps the device and dtype Lightning gave it (`_ResultCollection.log` moves it first).
    """
    for name, saved in tensors.items():
        current = item.__dict__.get(name)
        like = current if isinstance(current, torch.Tensor) else item.value
        setattr(item, name, saved.to(device=like.device, dtype=like.dtype).clone())


def call_before_updates(results: Any, before_update: Callable[[str, Any], None]) -> None:
    """Call ``before_update(key, result_metric)`` before each `_ResultCollection.update_metrics`.

    `LightningModule.log` -> `_ResultCollection.log` first creates the key's `_ResultMetric` (after
    `reset(metrics=False, fx=...)` on the loop's first batch) and then calls `self.update_metrics(key,
    value, batch_size)`, looked up on the instance: so an instance attribute runs first, and sees the
    `_ResultMetric` Lightning built with its own metadata, before its first update.
    """
    kind: Any = results.__class__
    update_metrics = cast("Callable[..., None]", getattr(kind, "update_metrics"))

    def restoring_update_metrics(key: str, value: Any, batch_size: int) -> None:
        before_update(key, results[key])
        update_metrics(results, key, value, batch_size)

    put_on_instance(results, "update_metrics", restoring_update_metrics)


def stop_calling_before_updates(results: Any) -> None:
    take_off_instance(results, "update_metrics")


_LOG_DEFAULTS = {  # `_ResultCollection.log`'s defaults, as `_logged_with` reads them back
    "prog_bar": False,
    "logger": True,
    "on_step": False,
    "on_epoch": True,
    "reduce_fx": "mean",
    "enable_graph": False,
    "add_dataloader_idx": True,
    "sync_dist": False,
    "rank_zero_only": False,
}


def guard_logged_keys(results: Any, created: dict[str, Mapping[str, Any]], on_change: Callable[[str], None]) -> None:
    """Before ``self.log`` reaches an entry in ``created`` (key -> the meta it was created with), check
    that it is logged the same way; where it is not, the entry goes (``on_change(key)``) and Lightning
    creates it anew, as for a fresh run. `_ResultCollection.log` raises on a second log of one key
    with other arguments; it is looked up on the instance, so an instance attribute runs first.
    """
    kind: Any = results.__class__
    log = cast("Callable[..., None]", getattr(kind, "log"))

    def guarded_log(fx: str, name: str, value: Any, *args: Any, **kwargs: Any) -> None:
        key = (
            f"{fx}.{name}"
            if results.dataloader_idx is None or not kwargs.get("add_dataloader_idx", True)
            else (f"{fx}.{name}.{results.dataloader_idx}")
        )
        meta = created.pop(key, None)
        if meta is not None:
            sync = kwargs.get("sync_dist", False)
            asked = {**_LOG_DEFAULTS, **{k: v for k, v in kwargs.items() if k in _LOG_DEFAULTS}, "sync_dist": sync}
            reduction = str(getattr(asked["reduce_fx"], "__name__", asked["reduce_fx"])).lower()
            asked["reduce_fx"] = "mean" if reduction == "avg" else reduction  # `_Metadata._parse_reduce_fx`
            if any(asked[field] != meta[field] for field in _LOG_DEFAULTS) or args:
                del results[key]
                on_change(key)
        if not created:
            take_off_instance(results, "log")
        log(results, fx, name, value, *args, **kwargs)

    if created:
        put_on_instance(results, "log", guarded_log)


def unguard_logged_keys(results: Any) -> None:
    take_off_instance(results, "log")


def before_batch_logging(trainer: Any, call: Callable[[], None]) -> None:
    """Call ``call`` once, after the next training batch's hooks logged what they log and before
    Lightning reads it: `_LoggerConnector.on_batch_end` (private) runs after the module's
    on_train_batch_end and before the step's row is logged (and after each validation batch, which
    is passed over); looked up on the instance, so an instance attribute runs first."""
    connector = trainer._logger_connector
    original = connector.on_batch_end

    def on_batch_end() -> None:
        if trainer.training:
            take_off_instance(connector, "on_batch_end")
            call()
        original()

    put_on_instance(connector, "on_batch_end", on_batch_end)


def stateful_loader_states(trainer: Any) -> list[dict[str, Any]] | None:
    """The training loaders' ``state_dict()``s as Lightning saves them, or None without a stateful one.

    `CombinedLoader._state_dicts` (private) is what `FitLoop.on_save_checkpoint` stores under
    ``checkpoint["loops"]["fit_loop"]["state_dict"]["combined_loader"]``; `FitLoop._combined_loader`
    (private) is the training `CombinedLoader`, set in `setup_data`. Lightning before 2.5 has no
    `_state_dicts` (nor resumes a loader mid-epoch): None there.
    """
    loader = getattr(trainer.fit_loop, "_combined_loader", None)
    state_dicts = getattr(loader, "_state_dicts", None)
    if state_dicts is None:
        return None
    states: list[dict[str, Any]] = state_dicts()
    return states or None


def cycled_loaders(trainer: Any) -> list[bool] | None:
    """Which training loaders of a ``"max_size_cycle"`` `CombinedLoader` ran out and started again.

    `_MaxSizeCycle._consumed` (private; `CombinedLoader._iterator`) ends the epoch once every loader
    ran out; it is in no checkpoint, so a resumed epoch would run its cycled loaders out once more.
    None for another mode, or before the epoch's iterator exists.
    """
    loader = getattr(trainer.fit_loop, "_combined_loader", None)
    consumed: Any = getattr(getattr(loader, "_iterator", None), "_consumed", None)
    if not isinstance(consumed, list) or not consumed:
        return None
    flags: list[Any] = cast(Any, consumed)
    return [bool(flag) for flag in flags]


def continue_loader_iterator(trainer: Any, consumed: list[bool] | None, batches_before: int) -> None:
    """Make the resumed epoch's `CombinedLoader` iterator (made by `FitLoop.setup_data`) go on as the
    saved one would: which loaders had cycled (`cycled_loaders`), and the index it gives each batch.

    `_ModeIterator._idx` (private) counts the batches the iterator yielded: the ``batch_idx`` that
    ``training_step(self, dataloader_iter)`` receives, and that Lightning's accumulation uses to zero
    gradients at a window's start. A restored loader's iterator counts from 0; it started
    ``batches_before`` batches into the epoch.
    """
    loader = getattr(trainer.fit_loop, "_combined_loader", None)
    iterator: Any = getattr(loader, "_iterator", None)
    if consumed and isinstance(getattr(iterator, "_consumed", None), list) and len(iterator._consumed) == len(consumed):
        # a loader without a length may have run out already, at the batch `setup_data`'s `iter()` fetches ahead
        iterator._consumed = [before or now for before, now in zip(consumed, iterator._consumed)]
    if batches_before and isinstance(getattr(iterator, "_idx", None), int):
        iterator._idx += batches_before
    # `_DataLoaderIterDataFetcher._batch_idx` (private): the index of the last fetched batch, which
    # Lightning passes on at the next batch's start (to the hooks, and to the accumulation's zero_grad)
    fetcher = trainer.fit_loop._data_fetcher
    if batches_before and type(fetcher).__name__ == "_DataLoaderIterDataFetcher":
        fetcher._batch_idx = batches_before - 1


def saved_inside_epoch(checkpoint: Mapping[str, Any]) -> bool:
    """Whether a checkpoint's fit loop was inside an epoch (`_Loop.state_dict`'s progress counters)."""
    fit_loop = _dict(_dict(checkpoint.get("loops")).get("fit_loop"))
    epochs = _dict(_dict(fit_loop.get("epoch_progress")).get("current"))
    batches = _dict(_dict(fit_loop.get("epoch_loop.batch_progress")).get("current"))
    return bool(epochs.get("started", 0) > epochs.get("processed", 0) and batches.get("completed", 0) > 0)


def loaded_loader_states(checkpoint: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The loader states a checkpoint resumes with (written by `FitLoop.on_save_checkpoint`)."""
    loops: Any = checkpoint.get("loops") or {}
    fit_loop: Any = loops.get("fit_loop") or {}
    loop_state: Any = fit_loop.get("state_dict") or {}
    states: list[dict[str, Any]] | None = loop_state.get("combined_loader")
    return states or None


_COUNTERS = ("ready", "started", "processed", "completed")


# --- methods replaced on an instance ---
# Lightning looks each method below up on the instance, so an instance attribute runs first. The
# library puts its own there for a fit and takes it off again, putting back what the instance had
# before (a user's own replacement, such as ``trainer.fit_loop.epoch_loop.val_loop.run = ...``), and
# leaves alone anything set after it.

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
    return isinstance(value, (functools.partial, types.FunctionType)) and _PREVIOUS in vars(value)


def _dict(value: object) -> dict[str, Any]:
    """A checkpoint's nested dict, or a detached empty one where it has none (so reads find nothing)."""
    return cast("dict[str, Any]", value) if isinstance(value, dict) else {}


# --- the fit loop, followed for exact resume ---
# `FitLoop.run` calls `self.on_run_start()` once (the on_train_start hooks), then per epoch
# `on_advance_start()` (on_train_epoch_start), `advance()` (`_TrainingEpochLoop.run`) and
# `on_advance_end()` (on_train_epoch_end, the epoch's logging). `_TrainingEpochLoop.run` calls
# `self.advance(data_fetcher)` (fetch, transfer hooks, on_train_batch_start, the step, its hooks,
# on_train_batch_end) then `self.on_advance_end(data_fetcher)` (validation, the logger's step) per
# batch, with nothing between the two: the end of one is the start of the other, so the follower
# wraps `advance` only; `_EvaluationLoop.run` runs a validation and its `on_run_end` calls `self._on_evaluation_end()`
# (on_validation_end). `_DataFetcher.__next__` calls `self._start_profiler()` right before each
# fetch, and `_TrainingEpochLoop.on_run_start` sets that to `self._on_before_fetch`. Each is looked
# up on the instance, so an instance attribute wraps it; `unfollow_fit_loop` removes them. Checked
# on pytorch-lightning 2.5.0 and 2.6.6.

# The loop methods a `FitFollower` wraps: (loop, as `_loops_of` names it; method; follower's method).
_FOLLOWED = (
    ("fit", "on_run_start", "run_fit_start"),
    ("fit", "on_advance_end", "run_epoch_end"),
    ("epoch", "advance", "run_batch"),
    ("epoch", "_on_before_fetch", "run_fetch"),
    ("val", "run", "run_validation"),
    ("val", "_on_evaluation_end", "run_validation_end"),
)


def _loops_of(trainer: Any) -> dict[str, Any]:
    fit_loop = trainer.fit_loop
    return {"fit": fit_loop, "epoch": fit_loop.epoch_loop, "val": fit_loop.epoch_loop.val_loop}


def follow_fit_loop(trainer: Any, follower: Any) -> bool:
    """Route the fit loop's per-fit, per-epoch and per-batch methods through ``follower``.

    ``follower.<name>(original, *args)`` is called in place of each method of ``_FOLLOWED``, and
    calls ``original`` itself. False (nothing wrapped) where this Lightning's loops are not laid out
    as read here (before 2.5: no restart stages).
    """
    loops = _loops_of(trainer)
    if not callable(getattr(loops["epoch"], "update_restart_stage", None)):
        return False
    unfollow_fit_loop(trainer)
    for loop_name, method, handler in _FOLLOWED:
        loop = loops[loop_name]
        original = getattr(loop, method)
        put_on_instance(loop, method, functools.partial(getattr(follower, handler), original))
    return True


def unfollow_fit_loop(trainer: Any) -> None:
    loops = _loops_of(trainer)
    for loop_name, method, _ in _FOLLOWED:
        take_off_instance(loops[loop_name], method)
    take_off_instance(trainer._logger_connector, "on_epoch_end")  # `take_over_restart`'s, if the epoch did not end


class BatchCounters(NamedTuple):
    """`_TrainingEpochLoop.batch_progress.current` (`_BatchProgress`), and the fit's optimizer steps."""

    ready: int  # fetched (and moved to the device)
    started: int  # its on_train_batch_start hooks done
    processed: int  # its step (forward, backward, optimizer step) done
    completed: int  # its on_train_batch_end hooks done
    is_last_batch: bool


def batch_start_counters(trainer: Any) -> tuple[int, int, int, int]:
    """``(current_epoch, batches completed in it, LR scheduler updates completed in it, logger step)``,
    read at every batch's start in one go: `Trainer.current_epoch` is `FitLoop.epoch_progress.current.completed`;
    `_TrainingEpochLoop.batch_progress` and `scheduler_progress` as in `batch_counters` and `scheduler_updates`;
    the logger step as in `logger_step` (only `on_advance_end` and a restart's `reset` move it, so a
    batch's end begins with the value its start had)."""
    fit_loop = trainer.fit_loop
    epoch_loop = fit_loop.epoch_loop
    return (
        int(fit_loop.epoch_progress.current.completed),
        int(epoch_loop.batch_progress.current.completed),
        int(epoch_loop.scheduler_progress.total.completed),
        int(epoch_loop._batches_that_stepped),
    )


def unfollow_fetches(trainer: Any) -> None:
    """Give the epoch loop its own `_on_before_fetch` back (a fit without a stateful training loader)."""
    take_off_instance(trainer.fit_loop.epoch_loop, "_on_before_fetch")


def batch_counters(trainer: Any) -> BatchCounters:
    progress = trainer.fit_loop.epoch_loop.batch_progress
    current = progress.current
    return BatchCounters(current.ready, current.started, current.processed, current.completed, progress.is_last_batch)


def in_epoch_start(trainer: Any) -> bool:
    """Whether the on_train_epoch_start hooks run (`FitLoop.on_advance_start` counts the epoch ready
    before them and started after them, in `FitLoop.epoch_progress`)."""
    epoch = trainer.fit_loop.epoch_progress.current
    return bool(epoch.started < epoch.ready)


def epoch_end_done(trainer: Any) -> bool:
    """Whether `FitLoop.on_advance_end` counted the epoch completed (after its logging, before the
    SIGTERM check): the epoch's end is done."""
    epoch = trainer.fit_loop.epoch_progress.current
    return bool(epoch.completed >= epoch.processed)


def training_done(trainer: Any) -> bool:
    """`_TrainingEpochLoop._is_training_done`: no further batch in this epoch (its length, or max_steps)."""
    return bool(trainer.fit_loop.epoch_loop._is_training_done)


def steps_cut_epoch(trainer: Any) -> bool:
    """Whether ``max_steps`` ends the epoch before its last batch: `_TrainingEpochLoop.global_step`
    reached `max_steps` (`_is_max_limit_reached`) and `_num_ready_batches_reached()` (private) is False.
    Lightning resumes such a checkpoint inside the epoch, at its next batch, in a fit given more steps."""
    epoch_loop = trainer.fit_loop.epoch_loop
    max_steps = int(epoch_loop.max_steps)
    reached = max_steps != -1 and int(epoch_loop.global_step) >= max_steps
    return reached and not epoch_loop._num_ready_batches_reached()


def interrupted(trainer: Any) -> bool:
    """Whether an exception stopped the fit: `trainer/call.py`'s `_interrupt` sets
    `TrainerStatus.INTERRUPTED` before the callbacks' ``on_exception`` (OnExceptionCheckpoint saves there)."""
    status: str = trainer.state.status._value_  # a str enum; its value skips the case-folding __eq__
    return status == "interrupted"


def training_batches(trainer: Any) -> float:
    """The current epoch's number of batches (`Trainer.num_training_batches`; inf without a length)."""
    return float(trainer.num_training_batches)


def logger_step(trainer: Any) -> int:
    """`_TrainingEpochLoop._batches_that_stepped`: the step column of the logged rows."""
    return int(trainer.fit_loop.epoch_loop._batches_that_stepped)


def scheduler_updates(trainer: Any) -> tuple[int, int]:
    """The training epoch's LR scheduler updates, ``(ready, completed)`` (`_SchedulerProgress.total`):
    Lightning counts one ready before the ``lr_scheduler_step`` hook and completed after it."""
    total = trainer.fit_loop.epoch_loop.scheduler_progress.total
    return int(total.ready), int(total.completed)


def fetch_position(trainer: Any) -> tuple[int, int]:
    """``(batches fetched from the epoch's iterator, of which not yet handed to a step)``.

    `FitLoop._data_fetcher` (private): `_DataFetcher.fetched` counts fetches, plus the resumed batch
    index at a resumed epoch's start (`_TrainingEpochLoop.on_run_start`); `_PrefetchDataFetcher.batches`
    holds the batch fetched ahead for a loader without a length.
    """
    fetcher = trainer.fit_loop._data_fetcher
    if fetcher is None:
        return 0, 0
    return int(fetcher.fetched), len(getattr(fetcher, "batches", ()))


def next_zero_grad_index(trainer: Any) -> int:
    """The batch index Lightning's automatic optimization will pass to its next zero_grad decision.

    `_AutomaticOptimization._make_zero_grad_fn` zeroes the gradients where ``batch_idx %
    accumulate_grad_batches == 0``: the next batch's index, or with ``training_step(self,
    dataloader_iter)`` the last fetched one (`_DataLoaderIterDataFetcher._batch_idx`, private),
    whatever the step fetches next.
    """
    fetcher = trainer.fit_loop._data_fetcher
    if type(fetcher).__name__ == "_DataLoaderIterDataFetcher":
        return int(fetcher._batch_idx)
    return int(trainer.fit_loop.epoch_loop.batch_progress.current.ready)


def optimizer_step_due(trainer: Any) -> bool:
    """Whether Lightning's automatic optimization steps at the end of the batch in flight
    (`_TrainingEpochLoop._should_accumulate`: the window's last batch, or the epoch's)."""
    return not trainer.fit_loop.epoch_loop._should_accumulate()


def data_exhausted(trainer: Any) -> bool:
    """`_DataFetcher.done` (`FitLoop._data_fetcher`, private): the epoch's data has no batch left. With
    ``training_step(self, dataloader_iter)`` Lightning copies it to ``batch_progress.is_last_batch``
    only after the step's LR scheduler updates."""
    fetcher = trainer.fit_loop._data_fetcher
    return bool(fetcher is not None and fetcher.done)


def take_over_restart(trainer: Any) -> None:
    """End Lightning's own restart handling of the batches at the resumed run's first batch.

    `_Loop.restarting` (set by `load_state_dict`) makes the first `_TrainingEpochLoop.advance` read
    the restored counters as a restart stage (a validation to finish or skip, a batch end to replay).
    The checkpoint's loops were restored for the point this run resumes at, which
    `lightning_step_types` resumes itself: the epoch loop's and the validation loop's flags are
    cleared (not through the `restarting` setter, which would reach every child), and the epoch
    loop's restart stage reset. The fit loop's flag stays as Lightning set it, so that
    ``trainer.fit_loop.restarting`` reads True through the resumed epoch's hooks as in plain
    Lightning (`FitLoop.run` clears it after the epoch); it is cleared once the epoch's
    ``on_train_epoch_end`` hooks ran (`_LoggerConnector.on_epoch_end`, private, runs right after them
    in `FitLoop.on_advance_end`, and is looked up on the instance), because `FitLoop.on_advance_end`
    then skips the epoch's LR scheduler updates while it is set, which the uninterrupted run makes.
    """
    epoch_loop = trainer.fit_loop.epoch_loop
    epoch_loop._restarting = False
    epoch_loop.val_loop._restarting = False
    epoch_loop.reset_restart_stage()
    if not trainer.fit_loop._restarting:
        return
    connector = trainer._logger_connector
    original = connector.on_epoch_end

    def on_epoch_end() -> None:
        original()
        if trainer.training:  # the training epoch's end (validation's end calls it too)
            take_off_instance(connector, "on_epoch_end")
            trainer.fit_loop._restarting = False

    put_on_instance(connector, "on_epoch_end", on_epoch_end)


def skip_next_validation(trainer: Any) -> None:
    """`_TrainingEpochLoop._skip_next_val`: the next `on_advance_end` runs no validation (it ran)."""
    trainer.fit_loop.epoch_loop._skip_next_val = True


def update_schedulers_after_step(trainer: Any) -> None:
    """What `_TrainingEpochLoop.advance` does after a batch's step: its LR scheduler updates."""
    epoch_loop = trainer.fit_loop.epoch_loop
    epoch_loop.update_lr_schedulers("step", update_plateau_schedulers=False)
    if epoch_loop._num_ready_batches_reached():
        epoch_loop.update_lr_schedulers("epoch", update_plateau_schedulers=False)


def plateau_epoch_schedulers(trainer: Any) -> list[str]:
    """The ``ReduceLROnPlateau`` schedulers Lightning updates at an epoch's end (`LRSchedulerConfig`)."""
    return (
        [
            type(config.scheduler).__name__
            for config in trainer.lr_scheduler_configs
            if config.reduce_on_plateau and config.interval == "epoch"
        ]
        if trainer.lightning_module.automatic_optimization
        else []
    )


def update_plateau_schedulers_of_epoch(trainer: Any, epoch: int) -> None:
    """The plateau LR schedulers' update of epoch ``epoch``'s end, as `FitLoop.on_advance_end` makes it.

    `_TrainingEpochLoop._update_learning_rates` (private) reads the epoch from
    ``trainer.current_epoch`` (`FitLoop.epoch_progress.current.completed`) for each scheduler's
    ``frequency``: it is that epoch's while the update runs.
    """
    epoch_loop = trainer.fit_loop.epoch_loop
    current = trainer.fit_loop.epoch_progress.current
    completed = current.completed
    current.completed = epoch
    try:
        epoch_loop._update_learning_rates(interval="epoch", update_plateau_schedulers=True)
    finally:
        current.completed = completed


def epoch_end_views(trainer: Any) -> dict[str, dict[str, Any]]:
    """What `_LoggerConnector.on_epoch_end` adds to the views at the end of a training epoch's hooks.

    `_LoggerConnector.metrics` (private) computes each epoch value (`_ResultMetric.compute`, synced
    across processes where it was logged with ``sync_dist``): read on one process only, where no
    collective is entered. Empty otherwise.
    """
    if int(getattr(trainer, "world_size", 1)) > 1:
        return {}
    metrics: dict[str, dict[str, Any]] = trainer._logger_connector.metrics
    return {
        "callback_metrics": dict(metrics["callback"]),
        "logged_metrics": dict(metrics["log"]),
        "progress_bar_metrics": dict(metrics["pbar"]),
    }


def logger_metric_dicts(trainer: Any) -> dict[str, dict[str, Any]]:
    """The logger connector's running views (`_LoggerConnector._callback_metrics`, `_logged_metrics`,
    `_progress_bar_metrics`): what ``trainer.callback_metrics`` etc. return, updated in place."""
    connector = trainer._logger_connector
    return {
        "callback_metrics": connector._callback_metrics,
        "logged_metrics": connector._logged_metrics,
        "progress_bar_metrics": connector._progress_bar_metrics,
    }


def step_row(trainer: Any) -> dict[str, dict[str, Any]]:
    """What the logger connector would log at the running batch's end, from what it logged so far.

    `_LoggerConnector.metrics` (private) reads each on_step value's `_ResultMetric._forward_cache`
    (synced when it was logged, so nothing is gathered here): ``{"pbar": ..., "callback": ...,
    "log": ...}``, which `on_batch_end` and `update_train_step_metrics` write.
    """
    metrics: dict[str, dict[str, Any]] = trainer._logger_connector.metrics
    return {kind: dict(values) for kind, values in metrics.items()}


def log_step_row(trainer: Any, row: Mapping[str, Mapping[str, Any]], *, to_loggers: bool) -> None:
    """A batch's end as `_LoggerConnector.on_batch_end` (its views) and `update_train_step_metrics` log it.

    `_LoggerConnector.log_metrics` (private) writes ``row["log"]`` to the loggers at the logger's
    step (`_batches_that_stepped`) and into `_logged_metrics`, inside a batch (`_first_loop_iter` a
    bool, as while a batch runs); ``to_loggers=False``: the views only.
    """
    connector = trainer._logger_connector
    device = trainer.strategy.root_device
    moved = {
        kind: {name: value.to(device) if isinstance(value, torch.Tensor) else value for name, value in values.items()}
        for kind, values in row.items()
    }
    connector._progress_bar_metrics.update(moved.get("pbar", {}))
    connector._callback_metrics.update(moved.get("callback", {}))
    if trainer.loggers:
        connector._logged_metrics.update(moved.get("log", {}))
    # `_LoggerConnector.update_train_step_metrics` logs no row for a batch inside an accumulation window
    accumulating = trainer.fit_loop._should_accumulate() and trainer.lightning_module.automatic_optimization
    if to_loggers and moved.get("log") and not accumulating:
        first_loop_iter = connector._first_loop_iter
        connector._first_loop_iter = False
        try:
            connector.log_metrics(moved["log"])
        finally:
            connector._first_loop_iter = first_loop_iter


class ResumePoint(NamedTuple):
    """Where a checkpoint's loops say the resumed run starts (written by `write_resume_point`)."""

    epoch: int
    epoch_started: bool  # the epoch's on_train_epoch_start hooks are done
    batches_done: int  # the epoch's batches whose on_advance_end is done or is to run first
    loader_states: list[dict[str, Any]] | None  # None: the epoch's data starts from a new iterator
    optimizer_step_done: bool  # an optimizer step in flight at the save landed
    is_last_batch: bool  # whether the batch before the point was its epoch's last
    cycled: list[bool] | None = None  # `cycled_loaders` at the point (the resumed run goes on with them)
    validation_again: bool = False  # the point's batch end runs the validation the save interrupted, from its start


def fit_loop_at_point(checkpoint: Mapping[str, Any], point: ResumePoint) -> dict[str, Any] | None:
    """A copy of a checkpoint's fit loop state (written by `_Loop.state_dict`) rewritten to read ``point``.

    The checkpoint itself is left as Lightning wrote it. In the copy, the progress counters
    (`_Progress`: ready/started/processed/completed, each ``current`` and ``total``) of the fit
    loop's epochs, the epoch loop's batches, its optimizer steps (automatic:
    `_OptimizationProgress`; manual: `_Progress`) and its LR scheduler updates agree on one point:
    nothing in flight. ``total`` counts every batch before the point: at an epoch's start, all of
    the epochs before it (the checkpoint's ``current`` then still holds the previous epoch's batches,
    which `_TrainingEpochLoop.reset` clears when the epoch starts). The loaders' states
    (`FitLoop.on_save_checkpoint`'s ``"combined_loader"``) are those the point's next batch is
    fetched from. None where the checkpoint's loops are not laid out as read here.
    """
    fit_loop = copy.deepcopy(_dict(_dict(checkpoint.get("loops")).get("fit_loop")))
    epochs = _dict(fit_loop.get("epoch_progress"))
    batches = _dict(fit_loop.get("epoch_loop.batch_progress"))
    counters = [_dict(part.get(name)) for part in (epochs, batches) for name in ("current", "total")]
    if not all(name in part for part in counters for name in _COUNTERS):
        return None
    epoch_current, epoch_total, batch_current, batch_total = counters
    for part in (epoch_current, epoch_total):
        part["processed"] = part["completed"] = point.epoch
        part["ready"] = part["started"] = point.epoch + 1 if point.epoch_started else point.epoch
    if point.epoch_started:  # the point is inside the epoch the counters count
        before = batch_total["completed"] + point.batches_done - batch_current["completed"]
    else:  # the epoch's start: every batch counted so far is before it
        before = batch_total["completed"]
    batch_total.update(dict.fromkeys(_COUNTERS, before))
    batch_current.update(dict.fromkeys(_COUNTERS, point.batches_done))
    batches["is_last_batch"] = point.is_last_batch
    optimizer = _dict(_dict(fit_loop.get("epoch_loop.automatic_optimization.optim_progress")).get("optimizer"))
    trackers = [_dict(tracker) for tracker in optimizer.values()]
    trackers.append(_dict(fit_loop.get("epoch_loop.manual_optimization.optim_step_progress")))
    trackers.append(_dict(fit_loop.get("epoch_loop.scheduler_progress")))
    for tracker in trackers:
        for part in (_dict(tracker.get("current")), _dict(tracker.get("total"))):
            if "completed" in part:  # a step in flight either landed (all its counters done) or is undone
                done = max(part.values()) if point.optimizer_step_done and "ready" in part else part["completed"]
                part.update(dict.fromkeys(part, done))
    if point.validation_again:  # its counters as at that validation's start (`_EvaluationLoop.reset`)
        validation = _dict(fit_loop.get("epoch_loop.val_loop.batch_progress"))
        current, total = _dict(validation.get("current")), _dict(validation.get("total"))
        if all(name in part for part in (current, total) for name in _COUNTERS):
            total.update(dict.fromkeys(_COUNTERS, total["completed"] - current["completed"]))
            current.update(dict.fromkeys(_COUNTERS, 0))
            validation["is_last_batch"] = False
    loop_state = fit_loop.setdefault("state_dict", {})
    if point.loader_states is None:
        loop_state.pop("combined_loader", None)
    else:
        loop_state["combined_loader"] = point.loader_states
    return fit_loop


def resume_from_fit_loop(checkpoint: dict[str, Any], fit_loop: Mapping[str, Any]) -> None:
    """Make Lightning restore its fit loop from ``fit_loop`` (a `fit_loop_at_point` copy), not from
    the checkpoint's own entry: called from an ``on_load_checkpoint`` hook, on the dict Lightning
    loaded. `_CheckpointConnector.restore_training_state` (after the module's and callbacks'
    ``on_load_checkpoint``, in `_restore_modules_and_callbacks`) passes ``checkpoint["loops"]["fit_loop"]``
    to `FitLoop.load_state_dict`; only this in-memory dict changes, never the file.
    """
    loops = checkpoint.get("loops")
    if isinstance(loops, dict):
        cast("dict[str, Any]", loops)["fit_loop"] = copy.deepcopy(dict(fit_loop))


def modules_with_running_stats(module: Any) -> list[str]:
    """The submodules, named ``self.bn (BatchNorm1d)``, that update running statistics in their forward.

    Batch, instance and sync-batch norm derive from `torch.nn.modules.batchnorm._NormBase` (torch,
    private) and update `running_mean`/`running_var`/`num_batches_tracked` in place in training mode
    with `track_running_stats`; other modules that follow that convention are found by those names.
    Read when a checkpoint is saved inside a batch, never per batch.
    """
    norm_base: Any = getattr(torch.nn.modules.batchnorm, "_NormBase", ())
    found: list[str] = []
    for path, sub in module.named_modules():
        tracks = bool(getattr(sub, "track_running_stats", False)) and bool(getattr(sub, "training", False))
        buffers = dict(sub.named_buffers(recurse=False))
        if tracks and (isinstance(sub, norm_base) or buffers.get("running_mean") is not None):
            found.append(f"{'self.' + path if path else 'self'} ({type(sub).__name__})")
    return found


def gradient_marks(parameters: list[Any]) -> list[tuple[int, int] | None]:
    """Each parameter's ``.grad`` identity and in-place version (`Tensor._version`, torch-private: autograd
    adds a new gradient into an existing ``.grad`` in place; ``zero_grad()`` sets it to None), or None."""
    return [None if p.grad is None else (id(p.grad), p.grad._version) for p in parameters]


def grad_version(grad: torch.Tensor) -> int:
    return int(grad._version)


def metric_change_mark(metric: Any) -> tuple[Any, ...]:
    """What changes when a torchmetrics object's states do: its update count (`Metric._update_count`,
    private), and each state's identity and in-place version (`Tensor._version`; ``reset()`` rebinds
    every state, an update changes one in place or appends to a list state)."""
    marks: list[Any] = [int(metric._update_count)]
    for value in metric.metric_state.values():
        marks += [id(value), value._version if isinstance(value, torch.Tensor) else len(value)]
    return tuple(marks)


def metric_states(metric: Any) -> dict[str, Any]:
    """A torchmetrics object's running state, copied: its states and how many updates made them.

    `Metric.metric_state` is public; `Metric._update_count` (torchmetrics, private) feeds
    `update_called`, which `compute()` checks.
    """
    states = {name: _copied(value) for name, value in metric.metric_state.items()}
    return {"states": states, "update_count": update_bookkeeping(metric)[0]}


def metric_states_on_device(metric: Any) -> dict[str, Any]:
    """`metric_states`, copied where they are (every batch: `metric_states_on_cpu` when saving)."""
    # torchmetrics (private): `Metric._update_count`, as in `update_bookkeeping`
    return {
        "states": {name: _cloned(value) for name, value in metric.metric_state.items()},
        "update_count": int(metric._update_count),
    }


def metric_states_on_cpu(copied: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "states": {name: _copied(value) for name, value in copied["states"].items()},
        "update_count": copied["update_count"],
    }


def load_metric_states(metric: Any, saved: Mapping[str, Any]) -> None:
    """Put states saved by `metric_states` back into the same kind of metric, device kept."""
    device = getattr(metric, "device", None)
    for name, value in saved["states"].items():
        setattr(metric, name, _copied(value, device))
    set_update_bookkeeping(metric, saved["update_count"], None)  # the states changed: no cached compute()


def update_bookkeeping(metric: Any) -> tuple[int, Any]:
    """A torchmetrics object's ``(_update_count, _computed)``.

    torchmetrics (private): ``Metric._update_count`` backs the public ``update_count`` and
    ``update_called``, which ``compute()`` checks; ``Metric._computed`` caches ``compute()``'s
    result until the next update.
    """
    return int(metric._update_count), metric._computed


def set_update_bookkeeping(metric: Any, update_count: int, computed: Any) -> None:
    """Put back what ``update_bookkeeping`` read (after restoring the metric's states)."""
    metric._update_count = update_count
    metric._computed = computed


def _cloned(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.clone()  # a metric state: no graph to detach from
    if isinstance(value, list):
        items: list[Any] = cast(Any, value)
        return [_cloned(item) for item in items]
    return value


def _copied(value: Any, device: Any = None) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().to(device).clone() if device is not None else value.detach().cpu().clone()
    if isinstance(value, list):
        items: list[Any] = cast(Any, value)  # isinstance leaves the item type unknown
        return [_copied(item, device) for item in items]
    return value


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


def _logged_entry(context: LoggingContext, name: str) -> Any:
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

    Relies on ``LightningModule._current_fx_name`` (set around every hook in ``trainer/call.py``),
    ``Trainer._results`` and the collection's keys (``_logged_entry``). A user's call may pass
    ``add_dataloader_idx=False``, so the key without the loader index counts too. An entry stays in
    the result collection across epochs; ``_ResultMetric.has_reset`` marks one that was reset at an
    epoch's end and not logged since.
    """
    context = logging_context(module)
    entry = _logged_entry(context, name)
    if entry is None and context[2] is not None:
        entry = _logged_entry((context[0], context[1], None), name)
    return entry is not None and not entry.has_reset


def logged_metric(context: LoggingContext, name: str) -> Any:
    """The metric object that ``self.log(name, metric)`` from the running hook logged this epoch, or None.

    For a logged ``torchmetrics.Metric``, ``_ResultMetric.value`` is that object (``is_tensor``
    False); Lightning calls its ``compute()`` at the epoch's end and resets it.
    """
    entry = _logged_entry(context, name)
    if entry is None or entry.has_reset or entry.is_tensor:
        return None
    return entry.value


def evaluation_results(trainer: Any) -> Any:
    """The running evaluation loop's `_ResultCollection` (in ``on_validation_start``/``_end``), or None.

    Reads ``Trainer._results`` (private): the active loop's ``_results``, which during a fit's
    validation run is ``fit_loop.epoch_loop.val_loop._results``.
    """
    return trainer._results


def logged_metric_objects(results: Any, since_reset: bool) -> list[tuple[Any, str]]:
    """The torchmetrics objects logged into a `_ResultCollection` (``self.log(name, metric)``), with their keys.

    Relies on `_ResultMetric.is_tensor` (False for a logged metric object), `.value` (that object,
    the last one logged under the key) and `.has_reset` (set by `reset()`, cleared by the next
    `self.log`). ``since_reset=True``: only those logged since the collection was last reset (this
    epoch); False: every one, which is what `_ResultCollection.reset()` resets (`Metric.reset()` on the
    object, whether or not it was logged since). The loops call that reset at each epoch's end: for
    validation in `_EvaluationLoop._on_evaluation_end`, right after the `on_validation_end` hooks.
    A collection of another shape gives nothing (``epoch_results_mismatch`` probes the same fields).
    """
    if not isinstance(results, dict):
        return []
    items: Mapping[str, Any] = cast(Any, results)  # isinstance leaves the type arguments unknown
    found: list[tuple[Any, str]] = []
    for key, item in items.items():
        if getattr(item, "is_tensor", True) or (since_reset and getattr(item, "has_reset", True)):
            continue
        found.append((getattr(item, "value", None), key))
    return found


# MisconfigurationException from `_ResultCollection.log` when one name is logged twice in a hook
# with other arguments (Lightning 2.x message).
_LOGGED_TWICE = re.compile(
    r"^You called `self\.log\((?P<name>.+?), \.\.\.\)` twice in `(?P<fx>[^`]+)` with different arguments"
)


def log_clash_name(error: BaseException) -> str | None:
    """The name in Lightning's "logged twice with different arguments" error, or None for other errors."""
    if type(error).__name__ != "MisconfigurationException":
        return None
    match = _LOGGED_TWICE.match(str(error))
    return match["name"] if match else None


# --- saves that some processes may not reach (rank_exchange.py) ---
# A checkpoint can be saved on one process alone: `OnExceptionCheckpoint` after an exception on that
# process, a signal (SLURM's requeue) delivered to it, `trainer.save_checkpoint` from one rank's hook.
# A collective entered there waits for processes that never come: until the process group's timeout
# (30 minutes by default). Every process's running state therefore travels through the process
# group's store, with bounded waits, and `Trainer.save_checkpoint`'s closing barrier is replaced for
# the save by a bounded wait on the same store.


def process_group_store() -> Any:
    """The default process group's c10d store, or None (no process group, or a torch without it).

    `torch.distributed.distributed_c10d._get_default_store` (torch-private, since 1.x): the store the
    default group was rendezvoused through (a `PrefixStore` over the `TCPStore` that global rank 0,
    torchrun's agent or the launcher hosts); it supports `set`, `get`, `check`, `add`, `delete_key`.
    """
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return None
    default_store: Any = getattr(torch.distributed.distributed_c10d, "_get_default_store", None)
    if default_store is None:
        return None
    try:
        return default_store()
    except (RuntimeError, ValueError):
        return None


def process_group_backend() -> str | None:
    """The default process group's backend (public: `torch.distributed.get_backend`), or None without one."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return None
    return str(torch.distributed.get_backend())


def replace_save_barrier(strategy: Any, wait: Callable[[], None]) -> None:
    """Run ``wait()`` in place of the next ``strategy.barrier("Trainer.save_checkpoint")``.

    `Trainer.save_checkpoint` ends with ``self.strategy.barrier("Trainer.save_checkpoint")`` after the
    strategy wrote the checkpoint (pytorch-lightning 2.1 to 2.6); `barrier` is looked up on the
    instance, so an instance attribute runs first. It removes itself at that call; any other barrier
    goes to the strategy's own.
    """
    kind: Any = strategy.__class__
    own: Callable[..., None] = kind.barrier

    def barrier(name: str | None = None, *args: Any, **kwargs: Any) -> None:
        if name != "Trainer.save_checkpoint":
            own(strategy, name, *args, **kwargs)
            return
        take_off_instance(strategy, "barrier")
        wait()

    put_on_instance(strategy, "barrier", barrier)


def restore_save_barrier(strategy: Any) -> None:
    take_off_instance(strategy, "barrier")


# --- the training data's order under DDP (data_order.py) ---
# `FitLoop.setup_data` builds the epoch's iterator (`iter(self._data_fetcher)`, right after
# `self._load_combined_loader_states()` puts a stateful loader's saved state back) before
# `FitLoop.on_advance_start` calls `_set_sampler_epoch` for the epoch; a resumed fit uses that
# iterator (`_TrainingEpochLoop.on_run_start` makes no other while `fit_loop.is_resuming`). A
# `DistributedSampler` draws its permutation from ``seed + epoch`` when its iterator is made, which a
# `StatefulDataLoader` does at once (its `BatchSampler` iterator, and its fast-forward to the saved
# batch), as do a loader's worker processes: the resumed epoch is drawn with epoch 0's permutation.
# Lightning issue 21938 (PRs 21941 and 21960). Checked on pytorch-lightning 2.5.0 and 2.6.6.


def before_train_iterator(trainer: Any, call: Callable[[], None]) -> None:
    """Call ``call()`` in `FitLoop.setup_data` right before the training iterator is built (and the
    loaders' saved states loaded): `FitLoop._load_combined_loader_states` (private), looked up on the
    instance, runs there, after `_process_dataloader` put Lightning's distributed sampler in."""
    _call_first(trainer.fit_loop, "_load_combined_loader_states", call)


def stop_before_train_iterator(trainer: Any) -> None:
    take_off_instance(trainer.fit_loop, "_load_combined_loader_states")


def train_loaders(trainer: Any) -> list[Any]:
    """The training loaders as `FitLoop.setup_data` processed them (`FitLoop._combined_loader`, private)."""
    combined = getattr(trainer.fit_loop, "_combined_loader", None)
    return list(combined.flattened) if combined is not None else []


def set_train_sampler_epochs(trainer: Any) -> None:
    """What `FitLoop.on_advance_start` does next: `_set_sampler_epoch` (lightning_fabric, private;
    imported into the fit loop's module) on each training loader, with the epoch it will use there
    (`FitLoop.epoch_progress.current.processed`, restored from the checkpoint by now). Only in a fit
    resumed from a checkpoint (`_Loop.is_resuming`, public, set by `load_state_dict`): a fresh fit's
    first iterator is drawn with the samplers' epoch as the user made them, as in plain Lightning, and
    its samplers see one ``set_epoch`` per epoch."""
    fit_loop = trainer.fit_loop
    if not fit_loop.is_resuming:
        return
    set_sampler_epoch: Any = getattr(sys.modules[type(fit_loop).__module__], "_set_sampler_epoch", None)
    if set_sampler_epoch is None:
        return
    for loader in train_loaders(trainer):
        set_sampler_epoch(loader, fit_loop.epoch_progress.current.processed)


def loader_samplers(loader: Any) -> list[Any]:
    """The samplers `_set_sampler_epoch` reaches: ``loader.sampler`` and ``loader.batch_sampler.sampler``."""
    found: dict[int, Any] = {}
    for sampler in (getattr(loader, "sampler", None), getattr(getattr(loader, "batch_sampler", None), "sampler", None)):
        if sampler is not None:
            found[id(sampler)] = sampler
    return list(found.values())


def wrapped_sampler(sampler: Any) -> Any:
    """The sampler inside Lightning's `DistributedSamplerWrapper` (`_DatasetSamplerWrapper._sampler`,
    lightning_fabric, private), or None for any other sampler."""
    if type(sampler).__name__ != "DistributedSamplerWrapper":
        return None
    return getattr(getattr(sampler, "dataset", None), "_sampler", None)


def before_wrapped_draw(sampler: Any, call: Callable[[], None]) -> None:
    """Call ``call()`` before a `DistributedSamplerWrapper` draws its sampler's order for an epoch:
    `DistributedSamplerWrapper.__iter__` calls `_DatasetSamplerWrapper.reset()` (private), which runs
    ``list(self._sampler)``; looked up on the instance, so an instance attribute runs first."""
    _call_first(sampler.dataset, "reset", call)


def stop_before_wrapped_draw(sampler: Any) -> None:
    dataset = getattr(sampler, "dataset", None)
    if dataset is not None:
        take_off_instance(dataset, "reset")


def _call_first(instance: Any, method: str, call: Callable[[], None]) -> None:
    """``instance.<method>()`` (no arguments) calls ``call()`` first: an instance attribute over the class's."""
    kind: Any = instance.__class__
    own: Callable[[Any], None] = getattr(kind, method)

    def first() -> None:
        call()
        own(instance)

    put_on_instance(instance, method, first)


# --- a StatefulDataLoader's state, rewound to an earlier fetch (fit_follower.py) ---
# A checkpoint saved inside a batch resumes from the loaders' state before that batch's fetch. Where
# the training data comes from one torchdata `StatefulDataLoader` that loads in this process from a
# map-style dataset without a state of its own, that state is counters only: how many batches the
# loader's iterator yielded, and how many samples its sampler iterator drew, under a random
# sampler's generator state from the iterator's start. Those counters are read back at the save, as
# they were before the batch's fetch, instead of reading the loader's state before every fetch.
# Checked on torchdata 0.11.0: `_StatefulSingleProcessDataLoaderIter.state_dict` (the keys below;
# `_num_yielded` counts completed fetches, `_sampler_iter_yielded` the index draws, which run ahead
# of it while a fetch is under way), `_BatchSamplerIterator.state_dict` (``samples_yielded``, and its
# sampler's or sampler iterator's state), `_StatefulRandomSamplerIterator.state_dict` (``yielded``,
# ``generator``: the state the iterator drew its order from) and `StatefulDistributedSampler.state_dict`
# (``yielded``). Any other layout is not rewound: the loader's state is then read before each fetch.

_SINGLE_PROCESS_STATE = frozenset(
    {
        "_index_sampler_state",
        "_sampler_iter_state",
        "_sampler_iter_yielded",
        "_num_yielded",
        "_IterableDataset_len_called",
        "_shared_seed",
        "fetcher_state",
        "dataset_state",
        "_iterator_finished",
    }
)
_BATCH_SAMPLER_STATE = frozenset({"samples_yielded", "sampler_state", "sampler_iter_state"})
_SAMPLER_COUNTERS = frozenset({"yielded", "generator"})


def rewindable_loader(trainer: Any) -> Any:
    """The one training loader whose state `rewound_loader_states` reads back, or None.

    A torchdata `StatefulDataLoader` (matched by its class's name and package) with ``num_workers=0``
    over a map-style dataset without ``state_dict``/``load_state_dict``, alone in the fit's
    `CombinedLoader`, whose state now has the layout read here.
    """
    loaders = train_loaders(trainer)
    if len(loaders) != 1:
        return None
    loader = loaders[0]
    kind: Any = loader.__class__
    if not any(k.__name__ == "StatefulDataLoader" and k.__module__.startswith("torchdata.") for k in kind.__mro__):
        return None
    dataset = getattr(loader, "dataset", None)
    if int(getattr(loader, "num_workers", 1)) != 0 or isinstance(dataset, torch.utils.data.IterableDataset):
        return None
    if callable(getattr(dataset, "state_dict", None)) or callable(getattr(dataset, "load_state_dict", None)):
        return None
    states = stateful_loader_states(trainer)
    if not states or len(states) != 1 or _rewound(states[0], int(states[0].get("_num_yielded", 0)), loader) is None:
        return None
    return loader


def loader_fetches(loader: Any) -> int | None:
    """How many batches the loader's running iterator has yielded (`_StatefulBaseDataLoaderIter._num_yielded`,
    torchdata-private), or None before it has one."""
    iterator = getattr(loader, "_iterator", None)
    fetches = getattr(iterator, "_num_yielded", None)
    return int(fetches) if isinstance(fetches, int) else None


def rewound_loader_states(trainer: Any, loader: Any, fetches: int) -> list[dict[str, Any]] | None:
    """The training loaders' states as Lightning saves them (`stateful_loader_states`), read back to
    when ``loader`` (`rewindable_loader`) had yielded ``fetches`` batches of its running iterator;
    None where they cannot be."""
    states = stateful_loader_states(trainer)
    if not states or len(states) != 1:
        return None
    state = _rewound(states[0], fetches, loader)
    return [state] if state is not None else None


def _rewound(state: Mapping[str, Any], fetches: int, loader: Any) -> dict[str, Any] | None:
    if frozenset(state) != _SINGLE_PROCESS_STATE or not 0 <= fetches <= int(state["_num_yielded"]):
        return None
    if any(state[key] is not None for key in ("_index_sampler_state", "fetcher_state", "dataset_state")):
        return None
    rewound = dict(state)
    if fetches < int(state["_num_yielded"]):
        rewound["_iterator_finished"] = False
    rewound["_num_yielded"] = rewound["_sampler_iter_yielded"] = fetches
    sampler_iter: Any = state["_sampler_iter_state"]
    if sampler_iter is None:  # torchdata fast-forwards the sampler by `_sampler_iter_yielded` draws
        return rewound
    batch_size = getattr(getattr(loader, "batch_sampler", None), "batch_size", None)
    if not isinstance(sampler_iter, dict) or not isinstance(batch_size, int) or "samples_yielded" not in sampler_iter:
        return None
    parts = cast("dict[str, Any]", sampler_iter)
    if not set(parts) <= _BATCH_SAMPLER_STATE:
        return None
    # every batch before the last is full; a fetch under way drew its samples already
    samples = min(fetches * batch_size, int(parts["samples_yielded"]))
    counters: dict[str, Any] = {"samples_yielded": samples}
    for name in ("sampler_state", "sampler_iter_state"):
        if name not in parts:
            continue
        found: Any = parts[name]
        if not isinstance(found, dict):
            return None
        inner = cast("dict[str, Any]", found)
        if "yielded" not in inner or not set(inner) <= _SAMPLER_COUNTERS:
            return None
        yielded: Any = inner["yielded"]
        counters[name] = {**inner, "yielded": min(samples, int(yielded))}
    rewound["_sampler_iter_state"] = counters
    return rewound


# --- who else holds state at a resume point (holders.py) ---


def restart_inside_epoch(trainer: Any) -> str | None:
    """Where inside an epoch Lightning restarted this fit: ``mid_epoch`` or ``epoch_end`` (for both
    `_FitLoop.on_advance_start` skips the on_train_epoch_start hooks), ``after_batches`` (every batch
    done, the epoch's end not: Lightning goes on at the next epoch), None (an epoch's start, or no
    restart). Properties of the private `_FitLoop` read from its restart stage, which `reset` sets
    before the run starts: `restarted_mid_epoch`, `restarted_on_epoch_end`, `resumed_on_epoch_end`."""
    fit_loop = trainer.fit_loop
    if getattr(fit_loop, "restarted_mid_epoch", False):
        return "mid_epoch"
    if getattr(fit_loop, "restarted_on_epoch_end", False):
        return "epoch_end"
    if getattr(fit_loop, "resumed_on_epoch_end", False):
        return "after_batches"
    return None


# --- the training loaders' random generators, and the loaders Lightning combines (data_randomness.py) ---
# `_TrainingEpochLoop.on_run_start` makes each epoch's training iterator after the fit's first
# (`iter(data_fetcher)`, which `FitLoop.setup_data` made): `_DataFetcher.__iter__` calls
# `iter(combined_loader)`, and `CombinedLoader.__iter__` binds a new `_ModeIterator` to
# `CombinedLoader._iterator` (private). A `DataLoader` iterator draws its sampler's order from the
# sampler's generator as it is made (or at its first batch), and its workers' base seed from
# ``loader.generator`` right after. Checked on pytorch-lightning 2.5.0 and 2.6.6, torchdata 0.11.0.


def around_epoch_iterator(trainer: Any, around: Callable[[Callable[[], None]], None]) -> None:
    """Run `_TrainingEpochLoop.on_run_start` (looked up on the instance) as ``around(run)``, where
    ``run()`` calls what the instance had (Lightning's own, or another wrapper): once per epoch,
    before its first batch."""
    epoch_loop = trainer.fit_loop.epoch_loop
    original: Callable[[Any], None] = epoch_loop.on_run_start

    def on_run_start(data_fetcher: Any) -> None:
        around(lambda: original(data_fetcher))

    put_on_instance(epoch_loop, "on_run_start", on_run_start)


def stop_around_epoch_iterator(trainer: Any) -> None:
    take_off_instance(trainer.fit_loop.epoch_loop, "on_run_start")


def train_iterator(trainer: Any) -> Any:
    """The training `CombinedLoader`'s current iterator (`CombinedLoader._iterator`, private): a new
    object each time an epoch's iterator is made."""
    return getattr(getattr(trainer.fit_loop, "_combined_loader", None), "_iterator", None)


def epoch_of_iterator(trainer: Any) -> int:
    """The epoch the training iterator made now is for (`FitLoop.epoch_progress.current.processed`:
    the epochs done, restored from the checkpoint in a resumed fit)."""
    return int(trainer.fit_loop.epoch_progress.current.processed)


# torchdata's `StatefulDataLoader.state_dict()` key (single- and multi-process): its iterator ran out.
_ITERATOR_FINISHED = "_iterator_finished"


def load_finished_loaders_as_ended(trainer: Any) -> None:
    """In ``CombinedLoader(mode="max_size")``, a loader that ran out goes on yielding nothing until the
    epoch ends (`_MaxSize.__next__` suppresses its `StopIteration`). Its `StatefulDataLoader` state
    says its iterator finished, and torchdata's `StatefulDataLoader.__iter__` makes a new iterator
    in place of a finished one: after a resume it would yield its data again from the start. Its
    state is loaded here as not finished (its samples all yielded, it raises `StopIteration` at its
    next batch), as the uninterrupted epoch has it. `FitLoop._combined_loader_states_to_load` (private):
    what `_load_combined_loader_states` loads next; `CombinedLoader._mode` (private): the mode."""
    fit_loop = trainer.fit_loop
    if getattr(getattr(fit_loop, "_combined_loader", None), "_mode", None) != "max_size":
        return
    states: Any = getattr(fit_loop, "_combined_loader_states_to_load", None)
    if not isinstance(states, list):
        return
    listed: list[Any] = cast(Any, states)
    loaded: list[Any] = []
    for state in listed:
        ended = isinstance(state, dict) and cast("dict[str, Any]", state).get(_ITERATOR_FINISHED) is True
        loaded.append({**state, _ITERATOR_FINISHED: False} if ended else state)
    fit_loop._combined_loader_states_to_load = loaded
