"""A callback's attributes at a resume point, read without calling any of its methods.

A callback's ``state_dict()`` is Lightning's to call, at a save: one may flush, sync across
processes, read the clock or count its calls. So the state a callback had at a point's start is
read from its attributes (``vars``) instead, and what the point's checkpoint needs is worked out at
the save, from that reading, the attributes then, and the ``state_dict()`` Lightning called for the
save:

- `snapshot`: each attribute's value, cheaply. Numbers and strings are held as they are; a tensor
  by reference and its in-place version (changed in place after the point: its value there is lost,
  and named); a dict (an ``OrderedDict``, a ``defaultdict`` too) by its items, each read the same way; a list by reference and length
  (at a batch's start, where this runs every batch: a list is assumed to grow by appends inside a
  batch, whose prefix the save reads back) or copied, its items by reference (at the fit's start,
  a validation's or an epoch's end's start, where a hook may empty it); a ``collections.deque`` copied
  (a bounded one drops its oldest items as it appends: neither its identity nor its length tells its
  value; the copy costs its length, at most its ``maxlen``); a random generator
  (``resume/held_generators.py``) by reference and its state, read through its getter;
  anything else by reference (its identity).
- `changes`: at a save, each attribute that changed in the fit (since the fit's start, after the
  ``on_train_start`` hooks) or since the point's start, and what the resumed run needs: the value at
  the point put into the checkpoint's ``state_dict()`` entry where that entry holds the attribute
  under its name (Lightning's ``load_state_dict`` then loads it as it would), else set on the
  callback after Lightning's load; or, where the value at the point is not plain data
  (``plain_data``) or was lost (a tensor changed in place after the point), its name and type,
  for the warning. An Enum member and a deque of plain data are plain data here too (``plain_data``);
  a random generator's state at the point is saved as plain data and set back into the callback's
  generator of that name, in place.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import torch

from lightning_step_types._lightning.module_state import tensor_version
from lightning_step_types.resume.held_generators import kind_of_type, plain_state, record, state_of
from lightning_step_types.resume.plain_data import NotPlain, encoded, is_plain, same

__all__ = ["Changes", "Snapshot", "changes", "holds_containers", "set_up_between", "skipped_names", "snapshot"]

_AS_IS = (type(None), bool, int, float, complex, str, bytes)


class _Ref:
    """A value held by reference: its identity is what the snapshot knows of it."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class _Tensor:
    __slots__ = ("tensor", "version")

    def __init__(self, tensor: torch.Tensor, version: int) -> None:
        self.tensor, self.version = tensor, version


class _List:
    """A list by reference and length: its first ``length`` items are its value at the snapshot."""

    __slots__ = ("items", "length")

    def __init__(self, items: list[Any], length: int) -> None:
        self.items, self.length = items, length


class _Deque:
    """A deque by a copy of it: its value at the snapshot."""

    __slots__ = ("items",)

    def __init__(self, items: deque[Any]) -> None:
        self.items = items


class _Generator:
    """A random generator by reference, its kind and its state as its getter gave it."""

    __slots__ = ("generator", "kind", "state")

    def __init__(self, generator: Any, kind: str) -> None:
        self.generator, self.kind, self.state = generator, kind, state_of(generator, kind)

    def plain(self) -> Any:
        return plain_state(self.kind, self.state)


class _Lost(Exception):
    """The value at the snapshot cannot be read back."""


Snapshot = dict[str, Any]


def skipped_names(callback: Any) -> frozenset[str]:
    """The names a snapshot leaves out: those the callback's class defines as methods (a hook the
    library or a test puts on the instance in place of the class's own)."""
    cls: type = callback.__class__
    return frozenset(name for name in dir(cls) if callable(getattr(cls, name, None)))


def snapshot(obj: Any, skip: frozenset[str], copy_lists: bool) -> Snapshot:
    """``obj``'s attributes, each read as the module docstring says (``copy_lists``: lists copied).

    Run at every batch's start for the callbacks whose batch hooks may change them: one copy of the
    attribute dict (in C), then a call only for each value that is not a number, a string or None."""
    attributes = cast("dict[str, Any]", vars(obj))
    read = attributes.copy()
    kinds = _KINDS
    for name, value in attributes.items():
        cls: type = value.__class__
        kind = kinds.get(cls)
        if kind is None:
            kind = _kind(cls)
        if kind == _SCALAR:
            continue
        if name in skip:
            del read[name]
        else:
            read[name] = _read(value, copy_lists)
    return read


_SCALAR, _TENSOR, _DICT, _LIST, _TUPLE, _DEQUE, _GENERATOR, _OTHER = range(8)
# a value's type -> how a snapshot reads it; filled as types come (an isinstance check against torch.Tensor
# runs Python code, a dict lookup by type does not)
_KINDS: dict[type, int] = {kind: _SCALAR for kind in _AS_IS} | {dict: _DICT, list: _LIST, tuple: _TUPLE, deque: _DEQUE}


def _kind(cls: type) -> int:
    if issubclass(cls, dict):  # an OrderedDict, a defaultdict: read by its items (its identity stays as it changes)
        _KINDS[cls] = _DICT
        return _DICT
    kind = _TENSOR if issubclass(cls, torch.Tensor) else _GENERATOR if kind_of_type(cast("type[Any]", cls)) else _OTHER
    _KINDS[cls] = kind
    return kind


def _read(value: Any, copy_lists: bool) -> Any:
    cls: type = value.__class__
    kind = _KINDS.get(cls)
    if kind is None:
        kind = _kind(cls)
    if kind == _SCALAR:
        return value
    if kind == _TENSOR:  # by reference and version: Lightning's callbacks rebind theirs
        return _Tensor(value, tensor_version(value))
    if kind == _DICT:
        items = value
        return {key: _read(item, copy_lists) for key, item in items.items()}
    if kind == _LIST:
        if copy_lists:  # a shallow copy, in C: its items by reference, as they are at a save
            return _List(value.copy(), len(value))
        return _List(value, len(value))
    if kind == _TUPLE:
        return tuple(_read(item, copy_lists) for item in value)
    if kind == _DEQUE:  # a shallow copy, in C, with its maxlen
        return _Deque(value.copy())
    if kind == _GENERATOR:
        return _Generator(value, str(kind_of_type(cls)))
    return _Ref(value)


def _value(read: Any) -> Any:
    """The value a snapshot read (raises ``_Lost`` where it cannot be read back)."""
    if type(read) in _AS_IS:
        return read
    if isinstance(read, _Tensor):
        if tensor_version(read.tensor) != read.version:
            raise _Lost
        return read.tensor
    if isinstance(read, _List):
        if len(read.items) < read.length:
            raise _Lost  # emptied since: its items at the snapshot are gone
        return read.items[: read.length]
    if isinstance(read, _Ref):
        return read.value
    if isinstance(read, _Deque):
        return read.items
    if isinstance(read, _Generator):
        return read.generator
    if isinstance(read, dict):
        items = cast(Any, read)
        return {key: _value(item) for key, item in items.items()}
    if isinstance(read, list):
        return [_value(item) for item in cast(Any, read)]
    return tuple(_value(item) for item in read)


@dataclass
class Changes:
    """What a point's checkpoint carries for one callback (see `changes`)."""

    entry: dict[str, Any] = field(default_factory=lambda: {})  # state_dict() keys -> the value at the point
    attributes: dict[str, Any] = field(default_factory=lambda: {})  # attribute -> the value at the point
    lost: list[tuple[str, str]] = field(default_factory=lambda: [])  # (attribute, its type) not restorable


_MISSING = object()


def changes(obj: Any, skip: frozenset[str], point: Snapshot, start: Snapshot, entry: Any) -> Changes:
    """For a save now: ``obj``'s attributes that changed since the fit's ``start`` or since the ``point``,
    with ``entry``, the ``state_dict()`` Lightning called for this save (see the module docstring)."""
    found = Changes()
    now = cast("dict[str, Any]", vars(obj))
    saved: Mapping[str, Any] = cast("Mapping[str, Any]", entry) if isinstance(entry, Mapping) else {}
    for name, read in point.items():
        if name in skip:
            continue
        current = now.get(name, _MISSING)
        if isinstance(read, _Generator):
            at_point = read.plain()
            first = start.get(name)
            if (
                not isinstance(first, _Generator)
                or first.generator is not read.generator
                or not same(first.plain(), at_point)
                or current is not read.generator
                or not same(plain_state(read.kind, state_of(current, read.kind)), at_point)
            ):  # drawn from in the fit, or since the point: its state at the point is set back
                found.attributes[name] = record(read.kind, at_point)
            continue
        try:
            value = _value(read)
        except _Lost:
            found.lost.append((name, type(current).__name__))
            continue
        try:
            before = _value(start[name]) if name in start else _MISSING
        except _Lost:
            before = _MISSING
        changed_in_fit = before is _MISSING or not same(value, before)
        changed_since = current is _MISSING or not same(current, value)
        if not (changed_in_fit or changed_since):
            continue
        key = name if name in saved else name.lstrip("_") if name.lstrip("_") in saved else None
        held = key is not None and current is not _MISSING and same(saved[key], current)
        if held and not changed_since:
            continue  # the checkpoint's entry holds it as it was at the point: Lightning loads it
        if held and key is not None and is_plain(value):
            found.entry[key] = value
            continue
        try:
            found.attributes[name] = encoded(value)
        except NotPlain:
            found.lost.append((name, type(value).__name__))
    return found


def set_up_between(obj: Any, skip: frozenset[str], before: Snapshot, after: Snapshot) -> dict[str, Any]:
    """``obj``'s attributes that changed between the readings ``before`` and ``after`` (the on_train_start
    hooks) and have not changed since: each with its value, as plain data (what is not, or cannot be read
    back, is left out)."""
    found: dict[str, Any] = {}
    now = cast("dict[str, Any]", vars(obj))
    for name, read in after.items():
        if name in skip or name not in now:
            continue
        try:
            value = _value(read)
            earlier = _value(before[name]) if name in before else _MISSING
        except _Lost:
            continue
        if (earlier is not _MISSING and same(value, earlier)) or not same(now[name], value):
            continue
        try:
            found[name] = encoded(value)
        except NotPlain:
            continue
    return found


def holds_containers(reading: Snapshot) -> bool:
    """Whether a reading holds a list, a dict, a deque, a tensor or a random generator: where a callback keeps what
    its hooks collect or draw from."""
    return any(isinstance(read, (_List, _Tensor, _Deque, _Generator, dict)) for read in reading.values())
