"""The fit loop, followed for exact resume: its loops, counters and checkpointed state.

Part of the one place where the library reads names Lightning (or torch, torchmetrics) keeps
private; each function says which it reads and what it relies on.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Mapping
from operator import attrgetter
from typing import Any, NamedTuple, cast

import torch

from lightning_step_types._lightning.instance_methods import put_on_instance, take_off_instance

__all__ = [
    "BatchCounters",
    "ResumePoint",
    "batch_counters",
    "batch_start_counters",
    "clear_logger_views",
    "data_exhausted",
    "epoch_end_done",
    "epoch_end_views",
    "fetch_position",
    "fit_loop_at_point",
    "follow_fetches",
    "follow_fit_loop",
    "in_epoch_start",
    "interrupted",
    "log_step_row",
    "logger_metric_dicts",
    "logger_step",
    "nested_dict",
    "next_zero_grad_index",
    "optimizer_step_due",
    "plateau_epoch_schedulers",
    "restart_as_loaded",
    "restart_inside_epoch",
    "resume_from_fit_loop",
    "run_without_validation_loaders",
    "scheduler_updates",
    "skip_next_validation",
    "step_row",
    "steps_cut_epoch",
    "take_over_restart",
    "training_batches",
    "training_done",
    "unfollow_fetches",
    "unfollow_fit_loop",
    "update_plateau_schedulers_of_epoch",
    "update_schedulers_after_step",
]


# `FitLoop.run` returns before anything else where there is nothing to train (`skip`: the fit is done, as
# a relaunch from a finished job's checkpoint finds it); else it calls `self.on_run_start()` once (the
# on_train_start hooks), then per epoch
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


_COUNTERS = ("ready", "started", "processed", "completed")


def nested_dict(value: object) -> dict[str, Any]:
    """A checkpoint's nested dict, or a detached empty one where it has none (so reads find nothing)."""
    return cast("dict[str, Any]", value) if isinstance(value, dict) else {}


# The loop methods a `FitFollower` wraps: (loop, as `_loops_of` names it; method; follower's method).
_FOLLOWED = (
    ("fit", "run", "run_fit"),
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


def run_without_validation_loaders(trainer: Any, run: Callable[[], None]) -> None:
    """``run()`` (`FitLoop.on_run_start`) without the validation loaders it makes where the fit's first epoch
    validates and none exist yet (``self.epoch_loop.val_loop.setup_data()``, for the progress bar's totals; a
    no-op on the instance meanwhile): the epoch's validation makes them (`_EvaluationLoop.run` calls its
    ``setup_data()`` first). Checked on pytorch-lightning 2.6.6."""
    val_loop = trainer.fit_loop.epoch_loop.val_loop

    def setup_data() -> None:
        pass

    put_on_instance(val_loop, "setup_data", setup_data)
    try:
        run()
    finally:
        take_off_instance(val_loop, "setup_data")


class BatchCounters(NamedTuple):
    """`_TrainingEpochLoop.batch_progress.current` (`_BatchProgress`), and the fit's optimizer steps."""

    ready: int  # fetched (and moved to the device)
    started: int  # its on_train_batch_start hooks done
    processed: int  # its step (forward, backward, optimizer step) done
    completed: int  # its on_train_batch_end hooks done
    is_last_batch: bool


# `Trainer.current_epoch` is `FitLoop.epoch_progress.current.completed`; the epoch's batches completed as
# in `batch_counters`; the logger step as in `logger_step` (only `on_advance_end` and a restart's `reset`
# move it, so a batch's end begins with the value its start had). Lightning keeps each an int.
_BATCH_START_COUNTERS = attrgetter(
    "fit_loop.epoch_progress.current.completed",
    "fit_loop.epoch_loop.batch_progress.current.completed",
    "fit_loop.epoch_loop._batches_that_stepped",
)


def batch_start_counters(trainer: Any) -> tuple[int, int, int]:
    """``(current_epoch, batches completed in it, logger step)``, read at every batch's start in one C
    call (``operator.attrgetter``; see `_BATCH_START_COUNTERS` for what each is)."""
    counters: tuple[int, int, int] = _BATCH_START_COUNTERS(trainer)
    return counters


def follow_fetches(trainer: Any, follower: Any) -> None:
    """Route the epoch loop's `_on_before_fetch` through ``follower.run_fetch`` again (its training
    loaders, made anew, have a state to read before each fetch), as `follow_fit_loop` does."""
    epoch_loop = trainer.fit_loop.epoch_loop
    take_off_instance(epoch_loop, "_on_before_fetch")
    put_on_instance(epoch_loop, "_on_before_fetch", functools.partial(follower.run_fetch, epoch_loop._on_before_fetch))


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


def clear_logger_views(trainer: Any) -> None:
    """Empty the logger connector's running views, as `Trainer._run_stage` does around its sanity check:
    `_LoggerConnector.reset_metrics` (public method of the private `Trainer._logger_connector`; it gives
    `_callback_metrics`, `_logged_metrics` and `_progress_bar_metrics` new empty dicts)."""
    trainer._logger_connector.reset_metrics()


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


def log_step_row(trainer: Any, row: Mapping[str, Mapping[str, Any]]) -> None:
    """A batch's end as `_LoggerConnector.on_batch_end` (its views) and `update_train_step_metrics` log it.

    `_LoggerConnector.log_metrics` (private) writes ``row["log"]`` to the loggers at the logger's
    step (`_batches_that_stepped`) and into `_logged_metrics`, inside a batch (`_first_loop_iter` a
    bool, as while a batch runs); where `update_train_step_metrics` would: outside an accumulation
    window, at a step `_LoggerConnector.should_update_logs` (private; ``log_every_n_steps``, a stop)
    logs, or under ``fast_dev_run``. Called before the batch's `on_advance_end`, as Lightning's call is:
    `_batches_that_stepped` is the one that call reads.
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
    logs = bool(connector.should_update_logs or trainer.fast_dev_run)
    if logs and moved.get("log") and not accumulating:
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
    # the logger step the resumed run starts with, where the checkpoint's is not it (None: the checkpoint's)
    logger_step: int | None = None


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
    fetched from. The logger step (`_TrainingEpochLoop._batches_that_stepped`, in its
    ``on_save_checkpoint`` entry) is ``point.logger_step`` where that is set. None where the
    checkpoint's loops are not laid out as read here.
    """
    fit_loop = copy.deepcopy(nested_dict(nested_dict(checkpoint.get("loops")).get("fit_loop")))
    epochs = nested_dict(fit_loop.get("epoch_progress"))
    batches = nested_dict(fit_loop.get("epoch_loop.batch_progress"))
    counters = [nested_dict(part.get(name)) for part in (epochs, batches) for name in ("current", "total")]
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
    optimizer = nested_dict(
        nested_dict(fit_loop.get("epoch_loop.automatic_optimization.optim_progress")).get("optimizer")
    )
    trackers = [nested_dict(tracker) for tracker in optimizer.values()]
    trackers.append(nested_dict(fit_loop.get("epoch_loop.manual_optimization.optim_step_progress")))
    trackers.append(nested_dict(fit_loop.get("epoch_loop.scheduler_progress")))
    for tracker in trackers:
        for part in (nested_dict(tracker.get("current")), nested_dict(tracker.get("total"))):
            if "completed" in part:  # a step in flight either landed (all its counters done) or is undone
                done = max(part.values()) if point.optimizer_step_done and "ready" in part else part["completed"]
                part.update(dict.fromkeys(part, done))
    if point.validation_again:  # its counters as at that validation's start (`_EvaluationLoop.reset`)
        validation = nested_dict(fit_loop.get("epoch_loop.val_loop.batch_progress"))
        current, total = nested_dict(validation.get("current")), nested_dict(validation.get("total"))
        if all(name in part for part in (current, total) for name in _COUNTERS):
            total.update(dict.fromkeys(_COUNTERS, total["completed"] - current["completed"]))
            current.update(dict.fromkeys(_COUNTERS, 0))
            validation["is_last_batch"] = False
    if point.logger_step is not None:  # `_TrainingEpochLoop.on_save_checkpoint`'s entry, read by its load
        nested_dict(fit_loop.get("epoch_loop.state_dict"))["_batches_that_stepped"] = point.logger_step
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


def restart_as_loaded(trainer: Any) -> None:
    """The fit loop restarts from the progress last loaded into it, as after any checkpoint's load.

    `_Loop.load_state_dict` sets `restarting` (a property over `_restarting`, passed down to the child
    loops) and `_loaded_from_state_dict`; `LearningRateFinder`'s `_lr_find` (`tuner/lr_finder.py`, 2.1 to
    2.6) restores its own checkpoint and then sets `fit_loop.restarting` and `epoch_loop.restarting` to
    False, so that a fit resumed from inside an epoch would start that epoch's batches from the first
    (`_TrainingEpochLoop.reset` keeps the batch progress only when restarting), and its `setup_data` then
    made the loaders without loading the checkpoint's loader states (`_load_combined_loader_states` loads
    `_combined_loader_states_to_load` only when restarting): with `_combined_loader` None, `setup_data`
    makes them again and loads them. Nothing of this where the loops still restart, or were never loaded.

    The validation loop's `_has_run` (private: `_EvaluationLoop` sets it True at the end of each batch of a
    validation outside the sanity check, and only its `reset`, at a validation's start, sets it False) goes
    back to False, as in a Trainer that loaded the checkpoint before any validation ran: a tuner's trials
    (with its own `limit_val_batches`, or the point's validation run again in a trial) leave it True, and
    `_TrainingEpochLoop.done` reads a restarting epoch whose batches are all done as ended where it is True
    (`_is_validation_done`), so a fit resumed at the end of an epoch's last batch ran no `advance`: the epoch
    loop stayed restarting (its `on_iteration_done` never ran) and every later epoch kept the restored batch
    progress, training nothing.

    With ``max_steps`` set, `_FitLoop.restarting`'s setter keeps the fit loop restarting whatever it is given
    (``_iteration_based_training``), so `_lr_find`'s reset leaves the fit loop restarting (its loaders loaded
    their states) and only the epoch loop not: the flag goes down to the epoch loop again.
    """
    fit_loop = trainer.fit_loop
    fit_loop.epoch_loop.val_loop._has_run = False
    if not getattr(fit_loop, "_loaded_from_state_dict", False):
        return
    if not fit_loop.restarting:
        fit_loop.restarting = True
        if getattr(fit_loop, "_combined_loader_states_to_load", None):
            fit_loop._combined_loader = None
    elif not fit_loop.epoch_loop.restarting:
        fit_loop.restarting = True  # `_Loop.restarting`'s setter passes it down to the child loops


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
