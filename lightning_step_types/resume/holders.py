"""Who else holds state at a resume point: the callbacks and the loggers.

A resumed run goes on from a point (``resume/points.py``); what ran after that point in the run that
saved runs again. For the weights, the loops and the logged aggregates the library saves the state
at the point. For the other holders the one rule is: a resumed run neither repeats an effect the
checkpoint already holds nor loses one.

- A callback's state: never read through its ``state_dict()`` outside a save (Lightning calls that,
  once per checkpoint; it may flush, sync or count). Its attributes are read instead
  (``resume/attributes.py``): after the on_train_start hooks, at each batch's start (for the
  callbacks whose batch hooks may change them: only what changed since the last batch's start, by the
  module's own attributes' reader, ``resume/followed_attributes.py``), at a validation's start and an
  epoch's end's start.
  At a save, each attribute that changed in the fit or since the point's start is taken back to the
  point: in the checkpoint's ``state_dict()`` entry where that entry holds it under its name (the
  resumed run loads that entry in place of the checkpoint's), else set on the callback at the resumed
  fit's start (a random generator's state set back into the callback's generator, in place,
  ``resume/held_generators.py``); what is not plain data (``resume/plain_data.py``) is named in one warning. So the hooks
  that run again start from the state they started from (``EarlyStopping`` counts one epoch once;
  ``ModelCheckpoint`` keeps and evicts the files the uninterrupted run does), and a counter outside
  ``state_dict()`` counts as in the uninterrupted run. A callback with a ``state_dict()`` whose last hook
  of that validation or epoch's end had returned keeps its state as it is at the save instead, and the
  resumed run does not call it there again (a ``ModelCheckpoint`` that had saved writes no second copy).
- Each process's callbacks are its own: under DDP each process's part (its entries, attributes, what
  cannot be put back, the hooks that returned, what its epoch-start hooks changed) goes into its running
  state, which ``resume/rank_exchange.py`` gathers into the one checkpoint rank 0 writes, and comes back
  to the same rank (``RANK_SAVED``). A process whose state is missing keeps what its fresh run and
  Lightning's load give it, named in the warning on missing ranks.
- A row a hook wrote to a logger (``LearningRateMonitor``'s, a user's ``logger.log_metrics``, the
  validation's own): the rows written since the point's start are saved, and the resumed run does
  not write them again when its hooks write the same rows.
- ``trainer.should_stop`` (an ``EarlyStopping`` or ``Timer`` stop, or the module's own): saved with
  the fit's limits (``max_epochs``, ``max_steps``), and set again at the start of a resumed fit with
  the same limits, so that a relaunch from ``last.ckpt`` stops where the run that saved stopped; a fit
  given other limits (to train on) goes on, as in plain Lightning. Saved inside an epoch, the stop goes
  back at the resumed run's first batch or the epoch's end instead (``resume/load.py``): the rest of
  that epoch's end runs first, as it did in the run that saved.
- The on_train_epoch_start hooks Lightning skips when it restarts inside an epoch: those of
  ``StochasticWeightAveraging``, ``GradientAccumulationScheduler`` (which set up from the epoch and
  the checkpoint, whatever ran before) and the progress bars (a display) run at the resumed fit's
  start; any other callback's call is watched in the run that saves (``resume/epoch_start_watch.py``),
  and named in one warning where it changed what no checkpoint carries (``BackboneFinetuning``
  unfreezing the backbone), or where the checkpoint holds no record of it.
- ``ModelPruning``: its checkpoint holds the pruned weights without their masks; a resume after its
  first pruning is named in one warning.
- A ``ModelCheckpoint``'s own save: what it sets once its file is written (which step and file it saved
  last) is what a resume from that file starts with, so it is taken as the point's value (not at a save
  on an exception, which the uninterrupted run never made). An entry its ``load_state_dict`` does not read
  (``current_score``) is set on the callback after Lightning's load.
- An exception in a batch's ``on_train_batch_end`` hooks: the callbacks whose hook had not returned (read
  from the exception's traceback) and that can change what a resume starts from there are named in one
  warning; the resumed run goes on after the batch. The same for a save the user makes from inside those hooks
  (``trainer.save_checkpoint`` in a callback's): the callbacks whose hook had yet to run for the batch (read
  from the live call stack: those after the saving one, and that one where anything follows the save in it).
- A resumed fit with nothing left to train runs no ``on_train_start`` hook: what those hooks set in the run
  that saved comes back with the rest.

What the module saves in its own ``on_save_checkpoint`` is ``resume/undeclared_state.py``'s: named where
the module's own loading puts back a value that what runs again had changed.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any, cast

import torch

from lightning_step_types._lightning.averaging import (
    averaging_loaded,
    averaging_set_up,
    is_averaging,
    put_back_averaging_loaded,
)
from lightning_step_types._lightning.checkpoint_callback import (
    after_own_save,
    follow_own_saves,
    keys_not_loaded,
    quiet_in_batch,
    saves_at_batch_end,
    unfollow_own_saves,
)
from lightning_step_types._lightning.fit_loop import interrupted, restart_inside_epoch
from lightning_step_types._lightning.instance_methods import pickled_as, put_on_instance, take_off_instance
from lightning_step_types._lightning.trainer import batch_end_hooks_after_save, batch_end_hooks_not_returned
from lightning_step_types.resume.attributes import (
    Snapshot,
    changes,
    followed_in_batch,
    holds_containers,
    set_up_between,
    skipped_names,
    snapshot,
)
from lightning_step_types.resume.epoch_start_watch import EPOCH_START_HOOK, EpochStartWatch, changes_before
from lightning_step_types.resume.followed_attributes import FollowedAttributes
from lightning_step_types.resume.held_generators import NAMES, from_record, put_back
from lightning_step_types.resume.messages import (
    Problem,
    batch_end_callbacks_problem,
    batch_end_save_problem,
    callback_attributes_problem,
    epoch_start_hooks_problem,
    plain_epoch_end_problem,
    pruning_problem,
)
from lightning_step_types.resume.plain_data import decoded, is_plain, put_into
from lightning_step_types.resume.source import Loading, Moment, Saving

__all__ = [
    "RANK_SAVED",
    "SAVED",
    "CallbackState",
    "Holders",
    "fit_limits",
    "holders_at_resume",
    "loaded_holders",
    "resume_holders",
    "saved_stop_holds",
]

# The fit's part (the rows the loggers were given, the stop): checkpoint[CHECKPOINT_KEY]["epoch_state"][SAVED]
SAVED = "holders"
# Each process's part, its own callbacks' states and attributes, the hooks that returned, what its
# epoch-start hooks changed: checkpoint[CHECKPOINT_KEY]["epoch_state"]["ranks"][rank][RANK_SAVED], gathered
# into the one checkpoint rank 0 writes (``resume/rank_exchange.py``) and restored to the same rank
RANK_SAVED = "holders"
_RANK_KEYS = ("callbacks", "attributes", "set_up", "lost", "done", "epoch_start", "as_loaded")

# Lightning's callbacks whose on_train_epoch_start sets up from the epoch and the restored state
# (StochasticWeightAveraging: once, guarded by its own flags; GradientAccumulationScheduler: the
# epoch's window), so running it at a restart inside the epoch does what the skipped call would have.
# A progress bar's sets up its display for the epoch.
_EPOCH_START_AGAIN = ("StochasticWeightAveraging", "GradientAccumulationScheduler", "ProgressBar")
# Lightning's callbacks whose attributes are not read at points: what they hold is the time, the
# machine, a display or a search that runs before the fit (its state lives in the module and the
# loops), none of which a resumed run can or should equal.
_NOT_TRACKED = (
    "Timer",
    "DeviceStatsMonitor",
    "ProgressBar",
    "ModelSummary",
    "BatchSizeFinder",
    "LearningRateFinder",
)
# Attributes of Lightning's callbacks that hold a clock's reading: this process's, which another's cannot use.
_CLOCK_ATTRIBUTES = {"ThroughputMonitor": frozenset({"_t0s"}), "ModelCheckpoint": frozenset({"_last_time_checked"})}
# The hooks a validation and an epoch's end call a callback with, and the last of them: a callback
# whose last hook returned before the fault has done its part, and the resumed run calls none of them
# for it when that validation or epoch's end runs again.
_NONE: frozenset[str] = frozenset()
_WINDOW_HOOKS = {
    "validation": (
        "on_validation_start",
        "on_validation_epoch_start",
        "on_validation_batch_start",
        "on_validation_batch_end",
        "on_validation_epoch_end",
        "on_validation_end",
    ),
    "epoch_end": ("on_train_epoch_end",),
}
# The batch hooks through which a callback can change its state inside a batch.
_BATCH_HOOKS = (
    "on_train_batch_start",
    "on_train_batch_end",
    "on_before_backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "on_before_zero_grad",
)


def _overrides(obj: Any, name: str, base: type) -> bool:
    cls: type = obj.__class__
    return getattr(cls, name, None) is not getattr(base, name, None)


def _lightning_callback_base(callback: Any) -> type:
    """The ``Callback`` class of the flavour ``callback`` comes from (the first base named so)."""
    for cls in type(callback).__mro__:
        if cls.__name__ == "Callback" and cls.__module__.endswith("callbacks.callback"):
            return cls
    return object


def _named(callback: Any, names: tuple[str, ...]) -> bool:
    return any(cls.__name__ in names for cls in type(callback).__mro__)


def _library_callback(callback: Any) -> bool:
    return type(callback).__module__.startswith("lightning_step_types")


def _row(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """A row as compared with a resumed run's: numbers as floats, anything else by its repr."""
    return {name: _comparable(value) for name, value in metrics.items()}


def _comparable(value: Any) -> Any:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value.item())
    return repr(value)


class _RowRecorder:
    """In place of a logger's ``log_metrics`` for a fit: notes each row, and leaves out a resumed run's
    rows that the run that saved wrote already."""

    def __init__(self, holders: Holders, index: int, original: Any) -> None:
        self.holders, self.index, self.original = holders, index, original

    def __reduce__(self) -> tuple[Any, ...]:  # pickled or copied: what the instance had (`pickled_as`)
        return pickled_as(self.original)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # forwarded as called: a logger may be a Mock that records how it was called
        metrics: Mapping[str, Any] = kwargs["metrics"] if "metrics" in kwargs else args[0]
        step: int | None = kwargs["step"] if "step" in kwargs else (args[1] if len(args) > 1 else None)
        row = (self.index, step, _row(metrics))
        holders = self.holders
        if holders.written:
            if holders.written[0] == row:
                holders.written.pop(0)
                # given in the fit's history all the same: a later save records it as the uninterrupted run's does
                holders.rows.append(row)
                return None
            holders.written = []  # the resumed run went another way: every row from here is its own
        holders.rows.append(row)
        return self.original(*args, **kwargs)


def _wrap(callback: Any, hook: str, wrapper: Any) -> None:
    try:
        put_on_instance(callback, hook, wrapper)
    except AttributeError:  # a callback with __slots__: called as it is
        pass


class _NoteDone:
    """In place of a stateful callback's last hook of a validation or an epoch's end: notes that it returned."""

    def __init__(self, done: set[str], key: str, original: Any) -> None:
        self.done, self.key, self.original = done, key, original

    def __reduce__(self) -> tuple[Any, ...]:  # pickled or copied: what the instance had (`pickled_as`)
        return pickled_as(self.original)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        result = self.original(*args, **kwargs)
        self.done.add(self.key)
        return result


class _Asleep:
    """In place of a window's hook of a callback that did its part before the fault: not called, once."""

    def __init__(self, callback: Any, hooks: tuple[str, ...], original: Any) -> None:
        self.callback, self.hooks, self.original = callback, hooks, original

    def __reduce__(self) -> tuple[Any, ...]:  # pickled or copied: what the instance had (`pickled_as`)
        return pickled_as(self.original)

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        if getattr(self.callback, self.hooks[-1]) is self:  # the window's last hook: called again from now on
            for hook in self.hooks:
                wrapper = getattr(self.callback, hook)
                if not isinstance(wrapper, _Asleep):
                    continue
                if isinstance(wrapper.original, _NoteDone):
                    put_on_instance(self.callback, hook, wrapper.original)
                else:
                    take_off_instance(self.callback, hook)  # the callback's own method again


class Holders:
    """The callbacks' attributes and the loggers' rows of one fit, at the starts of the points it can resume from."""

    def __init__(self, trainer: Any) -> None:
        self.trainer: weakref.ReferenceType[Any] = weakref.ref(trainer)
        self.stateful: list[tuple[str, Any]] = [
            (callback.state_key, callback)
            for callback in trainer.callbacks
            if not _library_callback(callback)
            and _overrides(callback, "state_dict", _lightning_callback_base(callback))
        ]
        # the callbacks whose attributes are read at each point's start (never their state_dict(): that is
        # Lightning's to call, at a save), with the names a reading leaves out (their methods)
        self.tracked: list[tuple[str, Any, frozenset[str]]] = [
            (
                callback.state_key,
                callback,
                skipped_names(callback) | _CLOCK_ATTRIBUTES.get(type(callback).__name__, _NONE),
            )
            for callback in trainer.callbacks
            if not _library_callback(callback)
            and hasattr(callback, "__dict__")
            and not _named(callback, _NOT_TRACKED + _EPOCH_START_AGAIN)  # those set up again from their state
            and isinstance(callback.state_key, str)
        ]
        # of those, the callbacks whose batch hooks may change their attributes: followed at every batch's start (not
        # a ModelCheckpoint that saves at no batch's end, the default Trainer's: its hook returns at once)
        self.in_batch: list[tuple[str, Any, frozenset[str]]] = [
            (key, callback, skip)
            for key, callback, skip in self.tracked
            if any(_overrides(callback, hook, _lightning_callback_base(callback)) for hook in _BATCH_HOOKS)
            and not quiet_in_batch(callback, _BATCH_HOOKS)
        ]
        # the callbacks whose on_train_batch_end may change what a checkpoint holds or what the resumed run
        # starts from (their state, their attributes, files)
        self.batch_end_holders: list[Any] = [
            callback
            for callback in trainer.callbacks
            if not _library_callback(callback)
            and _overrides(callback, "on_train_batch_end", _lightning_callback_base(callback))
            and (
                any(callback is held for _, held in self.stateful)
                or any(callback is held for _, held, _ in self.tracked)
                or _named(callback, ("Checkpoint",))
            )
        ]
        # state_key -> what its on_train_epoch_start changed that no resume carries, in the epoch it last ran
        # (``resume/epoch_start_watch.py``)
        self.epoch_start: dict[str, dict[str, Any]] = {}
        tracked = {id(callback) for _, callback, _ in self.tracked}
        self.watched: list[Any] = []
        for callback in trainer.callbacks:
            if not _epoch_start_skipped(callback) or not isinstance(getattr(callback, "state_key", None), str):
                continue
            take_off_instance(callback, EPOCH_START_HOOK)  # an earlier fit's watch, which an exception left
            watch = EpochStartWatch(
                self.epoch_start,
                callback.state_key,
                callback,
                skipped_names(callback),
                id(callback) in tracked,
                getattr(callback, EPOCH_START_HOOK),
            )
            _wrap(callback, EPOCH_START_HOOK, watch)
            self.watched.append(callback)
        # state_key -> what a ModelCheckpoint sets once the file it is saving now is written (its own save, in
        # the fit's history: not one at an exception), which a resume from that file starts with
        self.saving: dict[str, dict[str, Any]] = {}
        self.own_savers: list[Any] = [
            callback
            for _, callback, _ in self.tracked
            if follow_own_saves(callback, self._own_save_starts, self._own_save_ends)
        ]
        # the StochasticWeightAveragings: what their loading keeps for their set-up (which a resumed run's set-up
        # reads, and which the run that saved holds as its own loading left it) is saved and put back after it
        self.averaging: list[tuple[str, Any]] = [
            (callback.state_key, callback)
            for callback in trainer.callbacks
            if is_averaging(callback) and isinstance(callback.state_key, str)
        ]
        self.done: set[str] = set()  # the stateful callbacks whose last hook of the validation or epoch's end returned
        self.asleep: list[tuple[Any, tuple[str, ...]]] = []  # a resumed run's callbacks not called again, and the hooks
        for key, callback in self.stateful:
            for hook in ("on_validation_end", "on_train_epoch_end"):
                take_off_instance(callback, hook)  # an earlier fit's wrapper, which an exception left
                _wrap(callback, hook, _NoteDone(self.done, key, getattr(callback, hook)))
        self.before: dict[str, Snapshot] = {}  # state_key -> the attributes before the on_train_start hooks
        self.start: dict[str, Snapshot] = {}  # state_key -> the attributes after the on_train_start hooks
        # validation | epoch_end | epoch_start -> state_key -> attributes
        self.marks: dict[str, dict[str, Snapshot]] = {}
        # the in-batch callbacks' attributes at the last batch's start, from the fit's start on (`begin`)
        self.batch_marks: list[tuple[str, FollowedAttributes]] = []
        self.row_marks: dict[str, int] = {}  # the same -> how many of ``rows`` came before it
        self.rows: list[tuple[int, int | None, dict[str, Any]]] = []  # written since the batch's start
        self.written: list[tuple[int, int | None, dict[str, Any]]] = []  # a resumed run's rows written already
        self.loggers: list[Any] = []
        for index, logger in enumerate(trainer.loggers):
            try:
                take_off_instance(logger, "log_metrics")  # an earlier fit's recorder, which an exception left
                put_on_instance(logger, "log_metrics", _RowRecorder(self, index, logger.log_metrics))
            except AttributeError:  # a logger with __slots__: its rows are not followed
                continue
            self.loggers.append(logger)

    def before_train_start(self) -> None:
        """Before the on_train_start hooks: what they set up is saved apart, for a resumed fit that does not
        run them (one with nothing left to train, which Lightning ends before its start)."""
        self.before = {key: snapshot(callback, skip) for key, callback, skip in self.tracked}

    def begin(self) -> None:
        """At the fit's start, after the on_train_start hooks (which a resumed run runs again): what a
        callback's attributes change from later is what the fit changed."""
        self.start = {key: snapshot(callback, skip) for key, callback, skip in self.tracked}
        self.batch_marks = [(key, followed_in_batch(callback, skip)) for key, callback, skip in self.in_batch]

    def _own_save_starts(self, callback: Any, trainer: Any, filepath: str) -> None:
        if not interrupted(trainer):
            self.saving[callback.state_key] = after_own_save(callback, trainer, filepath)

    def _own_save_ends(self, callback: Any) -> None:
        self.saving.pop(callback.state_key, None)

    def stop(self) -> None:
        for logger in self.loggers:
            take_off_instance(logger, "log_metrics")
        for callback in self.watched:
            take_off_instance(callback, EPOCH_START_HOOK)
        for _, callback in self.stateful:
            for hook in {hook for hooks in _WINDOW_HOOKS.values() for hook in hooks}:
                if hasattr(callback, "__dict__"):
                    take_off_instance(callback, hook)
        for callback in self.own_savers:
            unfollow_own_saves(callback)
        for _, callback in self.averaging:
            if isinstance(getattr(callback, "__dict__", {}).get(EPOCH_START_HOOK), _PutBackAfterSetUp):
                take_off_instance(callback, EPOCH_START_HOOK)

    def epoch_end_hooks_left(self) -> bool:
        """Inside an epoch's end: whether a stateful callback's on_train_epoch_end has not returned yet, other than
        a ModelCheckpoint's writing its file now (its save is the point's)."""
        return any(
            key not in self.done
            and key not in self.saving
            and _overrides(callback, "on_train_epoch_end", _lightning_callback_base(callback))
            for key, callback in self.stateful
        )

    def sleep_through(self, keys: list[str], window: str) -> None:
        """The resumed run calls none of the window's hooks for these callbacks, until its last one."""
        for key, callback in self.stateful:
            if key in keys:
                hooks = _WINDOW_HOOKS[window]
                for hook in hooks:
                    _wrap(callback, hook, _Asleep(callback, hooks, getattr(callback, hook)))

    # --- the marks ------------------------------------------------------------------------------------

    def batch_start(self) -> None:
        """At every batch's start: only the callbacks whose batch hooks may change their state."""
        if self.rows:
            self.rows = []
        self.row_marks["batch"] = 0
        for _, attributes in self.batch_marks:  # what changed since the last batch's start, marked again
            attributes.batch_start()

    def mark(self, name: str) -> None:
        """At a validation's start (``validation``), an epoch's end's start (``epoch_end``) and before an
        epoch's on_train_epoch_start hooks (``epoch_start``)."""
        self.row_marks[name] = len(self.rows)
        self.done.clear()
        if self.tracked:
            self.marks[name] = {key: snapshot(callback, skip) for key, callback, skip in self.tracked}

    def saved(
        self,
        mark: str | None,
        stop: list[int | None] | None,
        unfinished_batch: int | None,
        entries: Mapping[str, Any] | None = None,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """What a checkpoint of a point starting at ``mark`` (None: nothing runs again) carries: the fit's
        part (for ``SAVED``) and this process's (for ``RANK_SAVED``). ``stop``: the fit's limits
        (`fit_limits`) where a stop was requested, else None; ``unfinished_batch``: an exception stopped that
        batch's on_train_batch_end hooks, which do not run again; ``entries``: the checkpoint's ``callbacks``
        entries, each callback's ``state_dict()`` as Lightning called it for this save, on this process.

        The fit's part: the rows the loggers were given since the point's start, the stop, where the part
        that runs again starts. This process's part: under ``callbacks``, the entries as they were at the
        point (an entry that holds an attribute under its name, with the attribute's value at the point);
        under ``attributes``, what the resumed run sets on a callback after Lightning's load; under ``as_loaded``,
        what a ``StochasticWeightAveraging``'s loading kept for its set-up, set back once the resumed run's set-up
        read the checkpoint's (`put_back_as_loaded`); under ``lost``,
        what it cannot put back; under ``done``, the callbacks whose last hook of the window that runs again
        returned; under ``epoch_start``, what each callback's on_train_epoch_start changed that no resume
        carries (``resume/epoch_start_watch.py``)."""
        shared: dict[str, Any] = {"rows": [], "should_stop": stop is not None, "runs_again": mark}
        own: dict[str, Any] = {
            "callbacks": {},
            "attributes": {},
            "set_up": {},
            "lost": [],
            "done": [],
            "epoch_start": dict(self.epoch_start),
            "as_loaded": {},
        }
        if stop is not None:
            shared["stop_limits"] = stop
        start = "batch" if mark == "fetch" else mark  # a fault before a batch's hooks ended: from its start
        done: set[str] = self.done if start in _WINDOW_HOOKS else set()  # these keep their state, uncalled
        marked: dict[str, Snapshot] = {}
        if start == "batch" and start in self.row_marks:
            marked = {key: attributes.present for key, attributes in self.batch_marks}
        elif start is not None and start in self.row_marks:
            marked = self.marks.get(start, {})
        found = entries or {}
        # the tracked callbacks that keep state in their attributes: changed during the fit, or a list, a dict or
        # a tensor (where a callback collects, from its first batch on)
        changed: set[str] = set()
        for key, callback, skip in self.tracked:
            if key not in self.start:
                continue
            # a callback whose hooks of the window are done keeps its state as it is now (the resumed run
            # does not call them again); any other's is taken back to the point's start
            point = None if key in done else marked.get(key)
            if point is None:  # no change since the point's start: the attributes now are its
                # (a ModelCheckpoint saving this file: with what it sets once the file is written)
                point = {**snapshot(callback, skip), **self.saving.get(key, {})}
            entry: Any = found.get(key)
            if isinstance(entry, Mapping):  # an entry's key its callback's loading leaves unread holds nothing
                unread = keys_not_loaded(callback)
                loaded = {name: value for name, value in cast("Mapping[str, Any]", entry).items() if name not in unread}
            else:
                loaded = None
            change = changes(callback, skip, point, self.start[key], loaded)
            if change.attributes or change.lost or holds_containers(self.start[key]):
                changed.add(key)
            if change.entry and isinstance(entry, Mapping):
                own["callbacks"][key] = {**cast("Mapping[str, Any]", entry), **change.entry}
            if change.attributes:
                own["attributes"][key] = change.attributes
            set_up = set_up_between(callback, skip, self.before[key], self.start[key]) if key in self.before else {}
            if set_up:  # what the on_train_start hooks set, unchanged since
                own["set_up"][key] = set_up
            own["lost"] += [[type(callback).__name__, name, kind] for name, kind in change.lost]
        trainer = self.trainer()
        if trainer is not None and int(getattr(trainer, "global_rank", 0)) > 0:
            # the file holds rank 0's entries, which Lightning loads into every process's callbacks: this process's
            # own go back to it (a ModelCheckpoint's best scores are of the values this process logged)
            for key, entry in found.items():
                if key not in own["callbacks"] and isinstance(entry, Mapping):
                    own["callbacks"][key] = dict(cast("Mapping[str, Any]", entry))
        for key, callback in self.averaging:  # never changed in a fit: as at any point
            kept = averaging_loaded(callback)
            if kept and is_plain(kept):
                own["as_loaded"][key] = kept
        if start is not None and start in self.row_marks:
            own["done"] = sorted(done)
            shared["rows"] = [[index, step, values] for index, step, values in self.rows[self.row_marks[start] :]]
        if unfinished_batch is not None:
            inside = trainer is not None and not interrupted(trainer)  # a save from inside the hooks, not an exception
            names = [type(callback).__name__ for callback in self._stopped_batch_end_holders(changed, inside)]
            shared["unfinished"] = {"batch": unfinished_batch, "callbacks": names, "inside": inside} if names else None
        return shared, own

    def _stopped_batch_end_holders(self, changed: set[str], inside: bool) -> list[Any]:
        """Of the callbacks whose on_train_batch_end may change what a resume starts from, those whose hook had
        not returned for the batch in flight and that could change something there: a ModelCheckpoint due to save
        at that step (or by time), any other Checkpoint, a callback with a state_dict(), one that keeps state in
        its attributes (``changed``). Stopped by the exception in hand (the callbacks are called in order, the
        module's hook last; where that cannot be told, all of them); or, ``inside``, a save made from inside the
        hooks: those after the saving callback, and that one where anything follows the save in its hook (none
        where that cannot be told, nor a ModelCheckpoint's own save, whose part after it the point holds)."""
        trainer = self.trainer()
        stopped: list[Any] | None
        if inside:
            after = batch_end_hooks_after_save(trainer) or []
            stopped = [item for item in after if getattr(item, "state_key", None) not in self.saving]
        else:
            stopped = batch_end_hooks_not_returned(trainer) if trainer is not None else None
        stateful = {id(callback) for _, callback in self.stateful}
        return [
            callback
            for callback in self.batch_end_holders
            if (stopped is None or any(callback is item for item in stopped))
            and (trainer is None or saves_at_batch_end(callback, trainer))
            and (
                id(callback) in stateful
                or _named(callback, ("Checkpoint",))
                or getattr(callback, "state_key", None) in changed
            )
        ]


class CallbackState:
    """The callbacks' attributes and states, and the loggers' rows: a source of state (``resume/source.py``).
    Its `Holders` is made at each start of the fit loop (a tuner's trials start it too), from the Trainer's
    callbacks and loggers then. Per batch: nothing, but where a callback's batch hooks may change its attributes
    (what changed of those callbacks' attributes marked again, `followed_in_batch`) or the loggers were given rows
    since the last batch's start."""

    key = RANK_SAVED
    reads_each_batch = True

    def __init__(self, trainer: Any) -> None:
        self.trainer: weakref.ReferenceType[Any] = weakref.ref(trainer)
        self.holders: Holders | None = None
        self.loaded: Mapping[str, Any] | None = None  # this process's view of a resumed fit's (`holders_at_resume`)
        self.plain: bool = False  # the resumed checkpoint has no state of the library's (plain Lightning's)

    def mark(self, moment: Moment) -> None:
        if moment is Moment.FIT_START:
            trainer = self.trainer()
            if trainer is not None:
                self.holders = Holders(trainer)
        holders = self.holders
        if holders is None:
            return
        if moment is Moment.FIT_START:
            holders.before_train_start()
        elif moment is Moment.TRAIN_STARTED:
            holders.begin()
        elif moment in (Moment.EPOCH_START, Moment.VALIDATION, Moment.EPOCH_END):
            holders.mark(moment.value)

    def batch_start(self) -> None:
        holders = self.holders
        # only where there is something to do: rows written since the last batch's start, callbacks whose
        # batch hooks change their state, or the first batch's mark
        if holders is not None and (holders.rows or holders.in_batch or "batch" not in holders.row_marks):
            holders.batch_start()

    def encode(self, saving: Saving) -> dict[str, Any] | None:
        if self.holders is None:
            return None
        shared, own = self.holders.saved(saving.runs_again, saving.stop, saving.unfinished, saving.callback_entries)
        saving.shared[SAVED] = shared
        return own

    def load(self, entry: Any, loading: Loading, checkpoint: Mapping[str, Any]) -> None:
        saved = loading.saved
        self.plain = saved is None
        self.loaded = holders_at_resume(saved.get(SAVED), list(saved["ranks"]), loading.rank) if saved else None
        loaded_holders(checkpoint, self.loaded)

    def restore(self, loading: Loading, nothing_runs: bool) -> list[Problem]:
        trainer = loading.trainer()
        if trainer is None:
            return []
        # a stop saved inside the epoch the fit resumes in goes back at its first batch or its end (``resume/load.py``)
        inside = not nothing_runs and loading.point is not None and loading.point.kind != "epoch"
        return resume_holders(
            trainer, loading.module(), self.holders, self.loaded, self.plain, nothing_runs, stop_now=not inside
        )

    def reach_point(self, loading: Loading, batch: bool, inside_epoch: bool) -> None:
        pass

    def stop(self) -> None:
        if self.holders is not None:
            self.holders.stop()


def holders_at_resume(shared: Any, ranks: list[Any], rank: int) -> Mapping[str, Any] | None:
    """What this process resumes its holders from: the fit's part with this process's own (``ranks[rank]``'s,
    None where its state is missing: its callbacks keep what Lightning's load and the fresh run give them).
    A checkpoint of an earlier release holds every part in the fit's (rank 0's, as every process's)."""
    if not isinstance(shared, Mapping):
        return None
    fit_part = cast("Mapping[str, Any]", shared)
    states: list[Mapping[str, Any]] = [
        cast("Mapping[str, Any]", state) for state in ranks if isinstance(state, Mapping)
    ]
    if not any(RANK_SAVED in state for state in states):
        return fit_part  # an earlier release's layout
    state: Any = ranks[rank] if 0 <= rank < len(ranks) else None
    own: Any = cast("Mapping[str, Any]", state).get(RANK_SAVED) if isinstance(state, Mapping) else None
    kept = {name: value for name, value in fit_part.items() if name not in _RANK_KEYS}
    return {**kept, **cast("Mapping[str, Any]", own)} if isinstance(own, Mapping) else kept


def attributes_named(state: Mapping[str, Any], classes: Mapping[str, str]) -> list[str]:
    """The callbacks' attributes a process's saved part (``state[RANK_SAVED]``) restores, as a warning names
    them (``MyCallback.seen``); of the callbacks ``classes`` (state_key -> class name) only, the resuming fit's."""
    own: Any = state.get(RANK_SAVED)
    if not isinstance(own, Mapping):
        return []
    part = cast("Mapping[str, Any]", own)
    names: list[str] = []
    for key, attributes in cast("Mapping[str, Any]", part.get("attributes") or {}).items():
        if key in classes:
            names += [f"{classes[key]}.{name}" for name in cast("Mapping[str, Any]", attributes)]
    return names


def saved_stop_holds(trainer: Any, saved: Mapping[str, Any] | None) -> bool:
    """Whether the run that saved had been asked to stop (``trainer.should_stop``) and the stop holds for this
    fit: a relaunch with the limits it was requested under (a checkpoint of an earlier release has none: it
    holds); with others, the fit goes on as plain Lightning's does."""
    if saved is None or not saved.get("should_stop"):
        return False
    return bool(saved.get("stop_limits", fit_limits(trainer)) == fit_limits(trainer))


def fit_limits(trainer: Any) -> list[int | None]:
    """The fit's ``[max_epochs, max_steps]``, as the Trainer reports them: what a saved stop is tied to."""
    max_epochs: Any = trainer.max_epochs
    return [None if max_epochs is None else int(max_epochs), int(trainer.max_steps)]


def loaded_holders(checkpoint: Any, saved: Mapping[str, Any] | None) -> None:
    """The callbacks' states at the point, in place of the checkpoint's entries, before Lightning loads them
    (the module's and every callback's ``on_load_checkpoint`` come before any ``load_state_dict``)."""
    if saved is None or not isinstance(checkpoint, dict):
        return
    entries: Any = cast("dict[str, Any]", checkpoint).get("callbacks")
    if isinstance(entries, dict):
        for key, state in saved.get("callbacks", {}).items():
            if key in entries:
                entries[key] = state


def resume_holders(
    trainer: Any,
    module: Any,
    holders: Holders | None,
    saved: Mapping[str, Any] | None,
    plain: bool,
    nothing_runs: bool = False,
    stop_now: bool = True,
) -> list[Problem]:
    """At the resumed fit's start (after the on_train_start hooks): the stop, the rows not to write
    again, the skipped epoch-start hooks; what cannot be put back, as problems for the warning.
    ``saved``: this process's view (`holders_at_resume`); ``plain``: a checkpoint without the library's
    state (plain Lightning's); ``nothing_runs``: a resumed fit with nothing left to train, which runs no
    on_train_start hook (what they set in the run that saved comes back too); ``stop_now``: the saved stop
    goes back here (a point between epochs), else the caller sets it where the run goes on inside the epoch."""
    problems: list[Problem] = []
    restart = restart_inside_epoch(trainer)
    if plain and restart in ("epoch_end", "after_batches"):  # after_batches: Lightning counts the epoch done
        problems.append(plain_epoch_end_problem(int(trainer.current_epoch) - (restart == "after_batches")))
    if saved is not None:
        unfinished = saved.get("unfinished")
        if unfinished:
            make = batch_end_save_problem if unfinished.get("inside") else batch_end_callbacks_problem
            problems.append(make(int(unfinished["batch"]), list(unfinished["callbacks"])))
        if stop_now and saved_stop_holds(trainer, saved):
            trainer.should_stop = True
        if nothing_runs:  # a fit with nothing left to train runs no on_train_start hook: what they set comes back
            _set_attributes(trainer, saved.get("set_up") or {})
        lost: list[list[str]] = list(saved.get("lost") or [])
        lost += _set_attributes(trainer, saved.get("attributes") or {})
        if lost:
            problems.append(callback_attributes_problem([(str(cls), str(name), str(kind)) for cls, name, kind in lost]))
        if holders is not None:
            holders.written = [(int(index), step, dict(values)) for index, step, values in saved.get("rows", [])]
            if saved.get("done") and saved.get("runs_again") in _WINDOW_HOOKS:
                holders.sleep_through(list(saved["done"]), str(saved["runs_again"]))
    if int(trainer.current_epoch) > 0 and any(_named(callback, ("ModelPruning",)) for callback in trainer.callbacks):
        problems.append(pruning_problem(int(trainer.current_epoch)))
    if restart in ("mid_epoch", "epoch_end"):
        skipped = _skipped_epoch_start_hooks(trainer, module, holders, saved)
        if skipped:
            problems.append(epoch_start_hooks_problem(int(trainer.current_epoch), skipped))
    if saved is not None:
        put_back_as_loaded(trainer, saved.get("as_loaded") or {}, nothing_runs)
    return problems


class _PutBackAfterSetUp:
    """In place of a ``StochasticWeightAveraging``'s on_train_epoch_start in a resumed fit, until its set-up ran:
    then what the run that saved held of what loading keeps goes back, and its own method again."""

    def __init__(self, callback: Any, kept: Mapping[str, Any], original: Any) -> None:
        self.callback, self.kept, self.original = callback, kept, original

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        result = self.original(*args, **kwargs)
        if averaging_set_up(self.callback):
            take_off_instance(self.callback, EPOCH_START_HOOK)
            put_back_averaging_loaded(self.callback, dict(self.kept))
        return result


def put_back_as_loaded(trainer: Any, as_loaded: Mapping[str, Any], nothing_runs: bool) -> None:
    """What a ``StochasticWeightAveraging``'s ``load_state_dict`` keeps for its set-up (``_init_n_averaged``,
    ``_scheduler_state``: the checkpoint's), as the run that saved held it (what its own fit's loading left: 0
    and None for a fit from the start), once the resumed fit's set-up has read the checkpoint's: now where it ran
    (at a restart inside an epoch the library runs its on_train_epoch_start at the fit's start) or never will
    (``nothing_runs``), else after the on_train_epoch_start that runs it."""
    if not as_loaded:
        return
    for callback in trainer.callbacks:
        key = getattr(callback, "state_key", None)
        kept: Any = as_loaded.get(key) if isinstance(key, str) else None
        if not isinstance(kept, Mapping) or not is_averaging(callback):
            continue
        values = {str(name): value for name, value in cast("Mapping[str, Any]", kept).items()}  # plain data
        if nothing_runs or averaging_set_up(callback):
            put_back_averaging_loaded(callback, values)
        else:
            take_off_instance(callback, EPOCH_START_HOOK)  # an earlier fit's, which an exception left
            _wrap(callback, EPOCH_START_HOOK, _PutBackAfterSetUp(callback, values, getattr(callback, EPOCH_START_HOOK)))


def _epoch_start_skipped(callback: Any) -> bool:
    """Whether Lightning's restart inside an epoch skips something of this callback's: an
    ``on_train_epoch_start`` of its class or set on it (``LambdaCallback``), not one the library runs again."""
    if _library_callback(callback) or _named(callback, _EPOCH_START_AGAIN):
        return False
    own: Any = getattr(callback, "__dict__", {})
    return EPOCH_START_HOOK in own or _overrides(callback, EPOCH_START_HOOK, _lightning_callback_base(callback))


def _skipped_epoch_start_hooks(
    trainer: Any, module: Any, holders: Holders | None, saved: Mapping[str, Any] | None
) -> list[str]:
    """At a restart inside the epoch: the hooks of ``_EPOCH_START_AGAIN`` run now; of the others, those whose
    call in the run that saved changed what no resume carries (with what), and those not watched there."""
    epoch = int(trainer.current_epoch)
    watched: Any = saved.get("epoch_start") if saved is not None else None
    known: Mapping[str, Any] | None = cast("Mapping[str, Any]", watched) if isinstance(watched, Mapping) else None
    if holders is not None and known is not None:  # a later save carries them on: the hooks do not run again here
        holders.epoch_start.update(
            {
                str(key): dict(cast("Mapping[str, Any]", record))
                for key, record in known.items()
                if isinstance(record, Mapping)
            }
        )
    skipped: list[str] = []
    for callback in trainer.callbacks:
        if not _library_callback(callback) and _named(callback, _EPOCH_START_AGAIN):
            if _overrides(callback, EPOCH_START_HOOK, _lightning_callback_base(callback)):
                callback.on_train_epoch_start(trainer, module)
            continue
        if not _epoch_start_skipped(callback):
            continue
        hook = f"{type(callback).__name__}.{EPOCH_START_HOOK}"
        record: Any = known.get(getattr(callback, "state_key", None) or "") if known is not None else None
        changed = changes_before(
            dict(cast("Mapping[str, Any]", record)) if isinstance(record, Mapping) else None, epoch
        )
        if changed is not None:
            if changed:
                skipped.append(f"{hook} (it changed {'; '.join(changed)})")
            continue
        if _named(callback, ("LearningRateMonitor",)) and callback.logging_interval == "step":
            continue  # writes nothing at an epoch's start
        skipped.append(hook)
    return skipped


def _set_attributes(trainer: Any, attributes: Mapping[str, Mapping[str, Any]]) -> list[list[str]]:
    """Each callback's attributes as they were at the point, where its ``state_dict()`` does not hold them
    (after Lightning loaded the callbacks, and after the on_train_start hooks, which set up from nothing); a
    random generator's state set back into the callback's generator, in place. Returns what could not be
    (a generator the callback no longer holds): ``[class, attribute, what]`` each."""
    missed: list[list[str]] = []
    if not attributes:
        return missed
    for callback in trainer.callbacks:
        key = getattr(callback, "state_key", None)
        if isinstance(key, str) and key in attributes:
            for name, value in attributes[key].items():
                generator = from_record(value)
                if generator is None:
                    live = getattr(callback, name, None)
                    put = put_into(live, decoded(value))  # a list or dict: the same object (another may hold it)
                    if put is not live:
                        setattr(callback, name, put)
                    continue
                live = getattr(callback, name, None)
                if not put_back(live, *generator):
                    what = f"{type(live).__name__}, a {NAMES[generator[0]]} at the save"
                    missed.append([type(callback).__name__, name, what])
    return missed
