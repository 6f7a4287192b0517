"""A callback's attributes at a resume point, read without calling any of its methods.

A callback's ``state_dict()`` is Lightning's to call, at a save: one may flush, sync across
processes, read the clock or count its calls. So the state a callback had at a point's start is
read from its attributes (``vars``) instead, and what the point's checkpoint needs is worked out at
the save, from that reading, the attributes then, and the ``state_dict()`` Lightning called for the
save:

- `snapshot`: each attribute's mark (``resume/marks.py``: the one definition of an attribute's mark, the
  module's own attributes' too), cheaply. Numbers, strings and None are held as they are; a tensor by
  reference and its in-place version (changed in place after the point: its value there is lost, and
  named); a dict (an ``OrderedDict``, a ``defaultdict`` too) by its items, each marked the same way; a
  list copied, its items by reference (at the fit's start, a validation's or an epoch's end's start, where
  a hook may empty it); a ``collections.deque`` copied (a bounded one drops its oldest items as it appends: neither its identity
  nor its length tells its value; the copy costs its length, at most its ``maxlen``); a random generator
  (``resume/held_generators.py``) by reference and its state, read through its getter; any other object
  by its identity only (a callback's helper objects are its own business: the module's are marked two
  levels down, since a module's are its state).
- `followed_in_batch`: at each batch's start, for the callbacks whose batch hooks may change their
  attributes, only what changed since the last batch's start marked again (the module's own attributes'
  reader); a list there by reference and length (assumed to grow by appends inside a batch, whose prefix
  the save reads back).
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

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from lightning_step_types.resume.followed_attributes import FollowedAttributes
from lightning_step_types.resume.held_generators import plain_state, record, state_of
from lightning_step_types.resume.marks import (
    DEQUE,
    DICT,
    LIST,
    OBJECT,
    TENSOR,
    GeneratorState,
    Mark,
    Unknown,
    mark_of,
    value_at,
)
from lightning_step_types.resume.plain_data import NotPlain, encoded, is_plain, same

__all__ = [
    "Changes",
    "Snapshot",
    "changes",
    "followed_in_batch",
    "holds_containers",
    "set_up_between",
    "skipped_names",
    "snapshot",
]

# held as they are in a snapshot, with no mark: immutable, and compared by value
_AS_IS = frozenset((type(None), bool, int, float, complex, str, bytes))
_CONTAINERS = (LIST, TENSOR, DEQUE, DICT)

# an attribute's name -> its value as it is (a number, a string, None) or its mark (``resume/marks.py``)
Snapshot = dict[str, Any]


def skipped_names(callback: Any) -> frozenset[str]:
    """The names a snapshot leaves out: those the callback's class defines as methods (a hook the
    library or a test puts on the instance in place of the class's own)."""
    cls: type = callback.__class__
    return frozenset(name for name in dir(cls) if callable(getattr(cls, name, None)))


def snapshot(obj: Any, skip: frozenset[str]) -> Snapshot:
    """``obj``'s attributes, each read as the module docstring says: one copy of the attribute dict (in C),
    then a mark only for each value that is not a number, a string or None."""
    attributes = cast("dict[str, Any]", vars(obj))
    read = attributes.copy()
    as_is = _AS_IS
    for name, value in attributes.items():
        if value.__class__ in as_is:
            continue
        if name in skip:
            del read[name]
        else:
            read[name] = mark_of(value, copy=True, depth=0)
    return read


def followed_in_batch(callback: Any, skip: frozenset[str]) -> FollowedAttributes:
    """A callback's attributes (but ``skip``), followed from batch to batch from now on
    (``resume/followed_attributes.py``, the module's own attributes' reader): its helper objects by their
    identity, a tensor changed in place not cloned (its value at the point is named as lost instead, as a
    `snapshot` reads it). `FollowedAttributes.present` is the snapshot at the last batch's start."""
    namespace = cast("dict[str, Any]", vars(callback))

    def followed() -> dict[str, Any]:
        return {name: value for name, value in namespace.items() if name not in skip}

    attributes = FollowedAttributes(namespace, followed, 0, False)
    attributes.start({name: mark_of(value, depth=0) for name, value in followed().items()})
    return attributes


def _value(read: Any) -> Any:
    """The value a snapshot read (raises ``marks.Unknown`` where it cannot be read back)."""
    mark = cast("Mark", read)  # or a value held as it is (`snapshot`)
    return value_at(mark) if type(mark) is tuple else read


def _generator(read: Any) -> GeneratorState | None:
    """A random generator's state, where the snapshot read one."""
    mark = cast("Mark", read)
    if type(mark) is not tuple or mark[0] is not OBJECT:
        return None
    probe: Any = mark[2]
    return probe if isinstance(probe, GeneratorState) else None


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
        generator = _generator(read)
        if generator is not None:
            at_point = generator.plain()
            first: Any = start.get(name)
            first_state = _generator(first)
            if (
                first_state is None
                or first[1] is not read[1]
                or not same(first_state.plain(), at_point)
                or current is not read[1]
                or not same(plain_state(generator.kind, state_of(current, generator.kind)), at_point)
            ):  # drawn from in the fit, or since the point: its state at the point is set back
                found.attributes[name] = record(generator.kind, at_point)
            continue
        try:
            value = _value(read)
        except Unknown:
            found.lost.append((name, type(current).__name__))
            continue
        try:
            before = _value(start[name]) if name in start else _MISSING
        except Unknown:
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
        except Unknown:
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
    return any(
        type(read) is tuple and (read[0] in _CONTAINERS or _generator(read) is not None) for read in reading.values()
    )
