"""Lightning's result collections: what ``self.log`` holds, and the epoch's running aggregates.

Part of the one place where the library reads names Lightning (or torch, torchmetrics) keeps
private; each function says which it reads and what it relies on.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, cast

import torch

from lightning_step_types._lightning.instance_methods import put_on_instance, take_off_instance
from lightning_step_types._lightning.trainer import trainer_of

__all__ = [
    "LoggedEntry",
    "LoggedSnapshot",
    "LoggingContext",
    "before_batch_logging",
    "call_before_updates",
    "create_logged_entry",
    "epoch_results_mismatch",
    "evaluation_results",
    "guard_logged_keys",
    "log_clash_name",
    "logged_entries",
    "logged_entries_at",
    "logged_in_current_hook",
    "logged_metric",
    "logged_metric_objects",
    "logged_snapshot",
    "logging_context",
    "stop_calling_before_updates",
    "training_epoch_results",
    "unguard_logged_keys",
    "write_logged_tensors",
]


# The running aggregates of the training epoch's `self.log(..., on_epoch=True)` values live in
# `trainer.fit_loop.epoch_loop._results`, a `_ResultCollection` (a dict: "<fx>.<name>[.<dataloader>]"
# -> `_ResultMetric`), from `trainer/connectors/logger_connector/result.py`. Lightning 2.0 stopped
# saving it (PR #16516), so `resume/epoch_state.py` saves and restores it through the functions below.
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
