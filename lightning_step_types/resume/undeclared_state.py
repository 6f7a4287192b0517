"""The module's own attributes: what a LightningModule changes during a fit that no checkpoint holds.

Lightning's checkpoint holds the module's ``state_dict()`` (parameters and buffers) and what its
``on_save_checkpoint`` adds; the library adds the metrics' states (``resume/metric_state.py``). A
plain attribute is in none of them: ``self.training_step_outputs.append(loss)`` in
``training_step``, consumed in ``on_train_epoch_end`` (the pattern Lightning's 2.0 migration guide
recommends), a counter, a cached tensor, a dict of running sums. A resumed run starts them as the
new module's ``__init__`` and ``setup`` left them, and its epoch-end values differ.

``ModuleAttributes`` follows them for one fit of one module:

- which attributes: those in the module's ``__dict__`` that a fresh ``LightningModule`` does not
  have (Lightning's and torch's own, ``_trainer``, ``training``, ``_parameters``...), other than
  functions, classes, submodules (parameters, buffers, metrics and modules live elsewhere) and
  containers of submodules (``resume/metric_state.py`` saves the metrics in them). A name starting
  with ``_`` is followed like any other: a user's ``self._outputs`` is state as much as
  ``self.outputs``, and Lightning's own underscored names are the fresh instance's;
- what changed: each attribute's mark at the fit's start (before the ``on_train_start`` hooks) is
  compared with its mark at the resume point (``resume/marks.py``, the marks the callbacks' attributes
  are read by too). A mark is cheap: a list's identity and length (lists are followed as append-only
  between two marks), a tensor's identity and in-place version, a dict's marks per key, an immutable
  value itself; an object of another class by its identity and its own attributes' marks (two levels
  down), a generator function's generator by where it stopped, a file by its position, a random
  generator (``resume/held_generators.py``) by its state;
- the value at the resume point (``resume/points.py``): where the part of the fit from a batch's
  start runs again, the value at that batch's start, from the marks the follower takes there
  (``FitFollower.run_batch``; a mark is taken again only where an attribute changed, and for each
  random generator, whose draws move it in place); where a
  validation or an epoch's end runs again, the value at its start, copied there; otherwise the
  value now;
- what is saved: values a checkpoint holds faithfully (tensors, numbers, strings, ``None``, bytes, and
  lists, tuples and dicts of those, nested), under the library's key with the process's running
  state, and put back into the resumed module after its ``on_train_start`` hooks (a list or a dict
  in place: another reference to it sees the values); a random generator's state at the point, as
  plain data, set back into the resumed module's generator of that name, in place (one it does not
  hold there is named); everything else that changed is named in one
  ``StepResultWarning`` at resume, attribute by attribute;
- what the module's own checkpoint code covers: an attribute its ``on_load_checkpoint`` or
  ``load_state_dict`` set (it changed between Lightning's read of the checkpoint, before those run,
  and the end of the module's restore, after them) is left as they set it; what ``on_fit_start`` or
  ``on_train_start`` set is what the uninterrupted run had set too, and the saved value replaces it.
  Where what runs again changed such an attribute after the point (the save records which changed
  between the point's marks and the save's), and the module's loading set it to another value than
  the point's (the one its ``on_save_checkpoint`` saved at the save), it counts that part twice: one
  warning names it, with the checkpoint's entries that hold the value. What runs again does not
  change (a dtype, shapes, hyperparameters, a loss module saved by reference) is not named;
- configuration: an attribute that did not change during the fit is not saved, so a resumed module
  keeps its own (``__init__``'s). A save before the fit's start (``BatchSizeFinder``'s and
  ``LearningRateFinder``'s own, in ``on_fit_start``, which they restore after their trials) saves
  none: nothing of the fit has run.
"""

from __future__ import annotations

import types
import weakref
from collections.abc import Mapping
from functools import partial
from typing import Any, cast

import torch

from lightning_step_types._lightning.module_attributes import (
    around_module_restore,
    framework_names,
    stop_around_module_restore,
)
from lightning_step_types.resume.followed_attributes import FollowedAttributes
from lightning_step_types.resume.held_generators import NAMES, put_back
from lightning_step_types.resume.marks import (
    ABSENT,
    ABSENT_MARK,
    OBJECT,
    OBJECT_DEPTH,
    GeneratorState,
    Mark,
    Unknown,
    held_by,
    mark_of,
    same_mark,
    value_at,
)
from lightning_step_types.resume.messages import CHECKPOINT_KEY, Problem, module_checkpoint_problem
from lightning_step_types.resume.plain_data import NotPlain, decoded, encoded, put_into, same
from lightning_step_types.resume.source import Loading, Moment, Saving

__all__ = ["ATTRIBUTES", "ModuleAttributes", "undeclared_state_problem"]

ATTRIBUTES = "attributes"  # a process's running state: checkpoint[...]["epoch_state"]["ranks"][rank][ATTRIBUTES]

# values that are code, not state; and submodules, which the state_dict and the metrics' states hold
_NOT_STATE = (
    types.FunctionType,
    types.MethodType,
    types.BuiltinFunctionType,
    types.BuiltinMethodType,
    partial,
    type,
    types.ModuleType,
    torch.nn.Module,
)


class _NotData(Exception):
    """A value (or an item in it) that a checkpoint does not hold faithfully."""


def _saved_form(value: Any, accelerated: list[bool]) -> Any:
    """The value as the checkpoint holds it (``plain_data.encoded``): tensors copied to the CPU."""

    def on_cpu(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.device.type != "cpu":
            accelerated[0] = True
        return tensor.detach().cpu().clone()

    try:
        return encoded(value, on_cpu)
    except NotPlain as not_plain:
        raise _NotData(f"a {_type_name(not_plain.value)}") from None


def _on_device(value: Any, device: torch.device | None) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device) if device is not None else value
    if type(value) is list or type(value) is tuple:
        items = [_on_device(item, device) for item in cast("list[Any]", value)]
        return items if type(cast(object, value)) is list else tuple(items)
    if type(value) is dict:
        return {key: _on_device(item, device) for key, item in cast(Any, value).items()}
    return value


def _type_name(value: Any) -> str:
    if isinstance(value, types.GeneratorType):
        return "generator"
    cls: type = type(cast(object, value))
    return cls.__qualname__ if cls.__module__ in ("builtins", "__main__") else f"{cls.__module__}.{cls.__qualname__}"


def _holds_module(value: Any, depth: int) -> bool:
    if isinstance(value, torch.nn.Module):
        return True
    if depth <= 0:
        return False
    if isinstance(value, dict):
        return any(_holds_module(item, depth - 1) for item in cast(Any, value).values())
    if type(value) is list or type(value) is tuple:
        return any(_holds_module(item, depth - 1) for item in cast("list[Any]", value))
    return False


def _followed(name: str, value: Any, framework: frozenset[str]) -> bool:
    """Whether the attribute ``name`` is the module's own state (see the module docstring)."""
    if name in framework or name.startswith("__") or name.startswith("_lightning_step_types"):
        return False
    if isinstance(value, _NOT_STATE) or type(value).__module__.startswith("lightning_step_types"):
        return False
    return not ((isinstance(value, dict) or type(value) in (list, tuple)) and _holds_module(value, 3))


def _held_elsewhere(trainer: Any) -> set[int]:
    """The objects the callbacks, the loggers and the datamodule hold as their own attributes: an object
    the module shares with one of them is that one's state, not the module's (a callback's resumes
    through its ``state_dict()``)."""
    holders: list[Any] = [*getattr(trainer, "callbacks", []), *getattr(trainer, "loggers", [])]
    datamodule = getattr(trainer, "datamodule", None)
    if datamodule is not None:
        holders.append(datamodule)
    return {id(value) for holder in holders for value in held_by(holder)}


class ModuleAttributes:
    """One fit of one module: its attributes' marks at the fit's start and at the points' starts; a source of
    state (``resume/source.py``). Per batch: one read of the followed attributes (one C call), compared by
    identity; a list's length, a tensor's version, a small dict's items compared only where there is one."""

    key = ATTRIBUTES
    reads_each_batch = True

    def __init__(self, trainer: Any, module: Any) -> None:
        self.trainer: weakref.ReferenceType[Any] = weakref.ref(trainer)
        self.module: weakref.ReferenceType[Any] = weakref.ref(module)
        self.owner: str = type(module).__qualname__
        self.framework: frozenset[str] = framework_names(module)
        self.namespace: dict[str, Any] = cast("dict[str, Any]", vars(module))
        # name -> mark at the fit's start; None before it (nothing of the fit has run: a save then, as
        # BatchSizeFinder's and LearningRateFinder's own in on_fit_start, finds nothing changed)
        self.start: dict[str, Mark] | None = None
        self.before_load: dict[str, Mark] | None = None  # name -> mark before on_load_checkpoint ran
        self.after_load: dict[str, Mark] | None = None  # and after the module's load_state_dict
        self.loaded_by_module: set[str] = set()  # set by the module's own on_load_checkpoint / load_state_dict
        # the checkpoint's entries the module's own on_save_checkpoint may have added (not Lightning's, not
        # the library's), by reference, from the module's restore until the resumed fit's start
        self.loaded_entries: dict[str, Any] = {}
        # the marks at the last batch's start, taken again where an attribute changed (objects two levels down; a
        # tensor or container changed in place is cloned at each later mark, for a save inside the batch)
        self.batch_marks: FollowedAttributes = FollowedAttributes(self.namespace, self.followed, OBJECT_DEPTH, True)
        self.marks: dict[str, dict[str, Mark]] = {}  # validation | epoch_end | epoch_start -> name -> mark, copied
        self.resumed: Mapping[str, Any] | None = None  # a resumed fit's entry, until its start
        around_module_restore(trainer, self._before_load, self._after_load)

    # --- the source protocol (resume/source.py) ----------------------------------------------------------

    def mark(self, moment: Moment) -> None:
        if moment is Moment.FIT_START:
            self._fit_start()
        elif moment in (Moment.EPOCH_START, Moment.VALIDATION, Moment.EPOCH_END):
            self._mark_moment(moment.value)

    def encode(self, saving: Saving) -> dict[str, Any]:
        return self.saved(saving.runs_again, saving.trainer)

    def load(self, entry: Any, loading: Loading, checkpoint: Mapping[str, Any]) -> None:
        self.resumed = cast("Mapping[str, Any]", entry) if isinstance(entry, Mapping) else None

    def restore(self, loading: Loading, nothing_runs: bool) -> list[Problem]:
        trainer = loading.trainer()
        saved, self.resumed = self.resumed, None
        return self._restore(saved, trainer.strategy.root_device) if trainer is not None else []

    def reach_point(self, loading: Loading, batch: bool, inside_epoch: bool) -> None:
        pass

    def _before_load(self) -> None:
        self.before_load = self.marks_now()

    def _after_load(self, checkpoint: Any) -> None:
        self.after_load = self.marks_now()
        if isinstance(checkpoint, dict):
            entries = cast("dict[str, Any]", checkpoint)
            self.loaded_entries = {key: value for key, value in entries.items() if key not in _LIGHTNING_ENTRIES}

    def stop(self) -> None:
        trainer = self.trainer()
        if trainer is not None:
            stop_around_module_restore(trainer)

    def followed(self) -> dict[str, Any]:
        framework = self.framework
        return {name: value for name, value in list(self.namespace.items()) if _followed(name, value, framework)}

    def marks_now(self, clone: bool = False, copy: bool = False) -> dict[str, Mark]:
        return {name: mark_of(value, clone, copy) for name, value in self.followed().items()}

    # --- the follower's moments ---------------------------------------------------------------------

    def _fit_start(self) -> None:
        """Before the on_train_start hooks: the marks every change is measured from."""
        self.start = self.marks_now()
        self.batch_marks.start(self.start)
        if self.before_load is not None:
            before, after = self.before_load, self.after_load if self.after_load is not None else self.start
            self.loaded_by_module = {
                name
                for name in {*before, *after}
                if not same_mark(before.get(name, ABSENT_MARK), after.get(name, ABSENT_MARK))
            }

    def batch_start(self) -> None:
        """At each batch's start: a new mark for each attribute that changed since the last one
        (`FollowedAttributes.batch_start`)."""
        self.batch_marks.batch_start()

    def _mark_moment(self, name: str) -> None:
        """At a validation's start, an epoch's end's start and before an epoch's on_train_epoch_start hooks:
        the lists copied (they may be cleared in what runs again), the tensors seen to change in place
        cloned (a large cached tensor is not)."""
        kept = self.batch_marks.kept_by_name
        self.marks[name] = {
            attribute: mark_of(value, clone=kept.get(attribute, False), copy=True)
            for attribute, value in self.followed().items()
        }

    def saved(self, runs_again: str | None, trainer: Any) -> dict[str, Any]:
        """What a checkpoint of a point where ``runs_again`` runs again (``resume/save.py``) holds."""
        if self.start is None:  # saved before the fit's start: every attribute is as __init__ and setup left it
            return {
                "values": {},
                "generators": {},
                "accelerated": [],
                "named": [],
                "since_point": [],
                "runs_again": runs_again,
            }
        start_marks = self.start
        now = self.marks_now()
        shared = _held_elsewhere(trainer)
        if runs_again in ("fetch", "batch"):
            at_point: dict[str, Mark] = self.batch_marks.entries
        elif runs_again is not None and runs_again in self.marks:
            at_point = self.marks[runs_again]
        else:
            at_point = now
        values: dict[str, Any] = {}
        generators: dict[str, list[Any]] = {}  # name -> [its kind, its state at the point]
        accelerated: list[str] = []
        named: list[list[str]] = []
        for name in sorted({*at_point, *now}):
            start = start_marks.get(name, ABSENT_MARK)
            mark = at_point.get(name, ABSENT_MARK)  # not there: made after the point, and made again
            if same_mark(start, mark):
                current = now.get(name, ABSENT_MARK)
                # an object is not marked again at each batch's start: changed by now, it is named
                if current[0] is not OBJECT or current[1] is not mark[1] or same_mark(start, current):
                    continue  # not changed during the fit: the resumed module starts as this one did
            if mark[1] is ABSENT:
                continue
            if mark[0] is OBJECT:
                if id(mark[1]) in shared:
                    continue  # its holder's state: a callback's resumes through its state_dict
                probe = mark[2]
                if isinstance(probe, GeneratorState):  # a generator: its mark holds its state at the point
                    generators[name] = [probe.kind, probe.plain()]
                    continue
                named.append([name, _type_name(mark[1]), "not data a checkpoint holds"])
                continue
            try:
                on_accelerator = [False]
                values[name] = _saved_form(value_at(mark), on_accelerator)
                if on_accelerator[0]:
                    accelerated.append(name)
            except Unknown as unknown:
                named.append([name, _type_name(mark[1]), f"changed in place in what runs again, {unknown} its start"])
            except _NotData as not_data:
                named.append([name, _type_name(mark[1]), f"it holds {not_data}, which no checkpoint holds"])
        # what runs again changed after the point: a value the module's own on_save_checkpoint saved then is
        # not the point's (the resume compares it with what the module's on_load_checkpoint puts back)
        since_point = sorted(
            name
            for name in {*at_point, *now}
            if not same_mark(at_point.get(name, ABSENT_MARK), now.get(name, ABSENT_MARK))
        )
        return {
            "values": values,
            "generators": generators,
            "accelerated": accelerated,
            "named": named,
            "since_point": since_point,
            "runs_again": runs_again,
        }

    def _restore(self, saved: Mapping[str, Any] | None, device: Any) -> list[Problem]:
        """Put the saved values back (after the on_train_start hooks); what could not be, as a problem."""
        module = self.module()
        if saved is None or module is None:
            return []
        mine = self.loaded_by_module
        for name, value in saved.get("values", {}).items():
            if name in mine:
                continue  # the module's own on_load_checkpoint set it
            restored = _on_device(decoded(value), device if name in saved.get("accelerated", ()) else None)
            live = self.namespace.get(name, ABSENT)
            put = put_into(live, restored)  # a list or dict: the same object (another may hold it)
            if put is not live:
                setattr(module, name, put)
        named = [item for item in saved.get("named", []) if item[0] not in mine]
        for name, (kind, state) in saved.get("generators", {}).items():
            live = self.namespace.get(name, ABSENT)
            if name not in mine and not put_back(live, kind, state):
                named.append([name, _type_name(live), f"a {NAMES[kind]} at the save, which it does not hold now"])
        problems = [undeclared_state_problem(self.owner, named)] if named else []
        twice = self._loaded_at_the_save(saved)
        if twice:
            problems.append(module_checkpoint_problem(self.owner, str(saved["runs_again"]), twice))
        self.loaded_entries = {}
        return problems

    def _loaded_at_the_save(self, saved: Mapping[str, Any]) -> list[tuple[str, list[str]]]:
        """The attributes that what runs again changed after the point and that the module's own loading
        (``on_load_checkpoint``, ``load_state_dict``) set to another value than the point's: the value its
        ``on_save_checkpoint`` saved at the save. Each with the checkpoint's entries holding that value."""
        runs_again = saved.get("runs_again")
        if runs_again not in ("batch", "validation", "epoch_end", "epoch_start"):
            return []
        values: Mapping[str, Any] = saved.get("values") or {}
        found: list[tuple[str, list[str]]] = []
        since_point: list[str] = saved.get("since_point") or []
        for name in since_point:
            if name not in self.loaded_by_module:
                continue  # the library puts it back at the point (or names it)
            live = self.namespace.get(name, ABSENT)
            if name in values and _same_data(live, values[name]):
                continue  # the module's loading gave it the point's value
            found.append((name, _entries_holding(self.loaded_entries, live)))
        return found


# Lightning's own top-level checkpoint entries, and the library's: not the module's own data
_LIGHTNING_ENTRIES = frozenset(
    (
        "epoch",
        "global_step",
        "pytorch-lightning_version",
        "state_dict",
        "loops",
        "callbacks",
        "optimizer_states",
        "lr_schedulers",
        "hparams_name",
        "hyper_parameters",
        "hparams_type",
        "datamodule_hparams_name",
        "datamodule_hyper_parameters",
        CHECKPOINT_KEY,
    )
)


def _same_data(live: Any, saved: Any) -> bool:
    """Whether a live value is the saved one, as data (a tensor compared on the CPU)."""
    try:
        return same(_saved_form(live, [False]), saved)
    except _NotData:
        return False


def _entries_holding(entries: Mapping[str, Any], live: Any) -> list[str]:
    """The checkpoint entries (``checkpoint['rows_seen']``, one level into a dict) that hold ``live``'s value."""
    found: list[str] = []
    for key, value in entries.items():
        if value is live or _same_data(live, _saved_or_self(value)):
            found.append(f"checkpoint[{key!r}]")
        elif type(cast(object, value)) is dict:
            found += [
                f"checkpoint[{key!r}][{inner!r}]"
                for inner, item in cast("dict[Any, Any]", value).items()
                if item is live or _same_data(live, _saved_or_self(item))
            ]
    return found


def _saved_or_self(value: Any) -> Any:
    try:
        return _saved_form(value, [False])
    except _NotData:
        return value


def undeclared_state_problem(owner: str, named: list[list[str]]) -> Problem:
    """``named``: ``[attribute, its type, why it cannot be saved]`` each."""
    shown = "; ".join(f"{owner}.{name} ({kind}, {why})" for name, kind, why in named)
    first = named[0][0]
    return (
        f"module attributes that changed during the fit before the save and that no checkpoint holds: {shown};"
        " the resumed run starts them as the new module's __init__ and setup left them",
        "attributes a checkpoint can hold (tensors, numbers, strings, None, and lists, tuples and dicts of"
        " those: the library saves them at the resume point), or state the module saves in on_save_checkpoint",
        f"save it in {owner}.on_save_checkpoint (checkpoint[{first!r}] = ...) and put it back in"
        f" on_load_checkpoint (self.{first} = ...), or keep it in a buffer (self.register_buffer) or a"
        " torchmetrics Metric",
    )
