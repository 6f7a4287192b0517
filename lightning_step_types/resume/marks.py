"""Marks: what is cheap to take of an attribute's value and tells whether it changed, and its value then.

One definition serves every object whose attributes exact resume follows: the module's own
(``resume/undeclared_state.py``, at each batch's start and at the fit's moments) and the callbacks'
(``resume/attributes.py``, the same, and around their ``on_train_epoch_start``: ``epoch_start_watch.py``).
Taking a mark copies nothing that can be followed without a copy: a list by its identity and length (a
list is followed as append-only between two marks), a tensor by its identity and in-place version, a dict
by its items' marks, an immutable value by itself. A deque is copied (a bounded one drops its oldest items
as it appends), and so is a list where a hook may empty it before the mark is read (``copy``). An object of
another class is marked by its identity, and, down to ``depth``, by its own attributes' marks; a generator
function's generator by where it stopped, a file by its position, a random generator
(``resume/held_generators.py``) by its state.

What a checkpoint can hold of a value read back from its mark is ``plain_data``'s to say.
"""

from __future__ import annotations

import enum
import gc
import io
import sys
import types
from collections import deque
from typing import Any, cast

import torch

from lightning_step_types._lightning.module_attributes import tensor_version
from lightning_step_types.resume.held_generators import kind_of_type, plain_state, state_of
from lightning_step_types.resume.plain_data import same

__all__ = [
    "ABSENT",
    "ABSENT_MARK",
    "DEQUE",
    "DICT",
    "LEAF",
    "LIST",
    "OBJECT",
    "OBJECT_DEPTH",
    "TENSOR",
    "TUPLE",
    "GeneratorState",
    "Mark",
    "Unknown",
    "equal_items",
    "held_by",
    "mark_of",
    "same_mark",
    "value_at",
]

_LEAVES = (bool, int, float, complex, str, bytes)
# objects of these packages are followed by identity only: their state is theirs (a Trainer, a
# datamodule, a loader the module holds changes as the fit runs, and no checkpoint of the module's is
# expected to hold it)
_FRAMEWORKS = ("torch", "pytorch_lightning", "lightning", "lightning_fabric", "torchmetrics", "torchdata", "numpy")
OBJECT_DEPTH = 2  # an object's own attributes are followed this deep


class _Absent:
    def __repr__(self) -> str:
        return "<absent>"


ABSENT: Any = _Absent()

# A mark is a tuple whose first item is its kind:
#   (LEAF, value)                            an immutable value (or ABSENT)
#   (LIST, list, length, copy or None)        followed as append-only: the value is list[:length]
#   (TENSOR, tensor, version, clone or None)  the value is the tensor while its version is the same
#   (DICT, dict, {key: mark}, a copy where every item is a LEAF, else None)
#   (TUPLE, tuple, (mark, ...))
#   (DEQUE, deque, its items copied, its maxlen)   a bounded deque drops its oldest items as it appends: its
#                                                   length does not tell its value (copied at each mark)
#   (OBJECT, object, probe)                   anything else: not data a checkpoint holds
LEAF, LIST, TENSOR, DICT, TUPLE, DEQUE, OBJECT = "leaf", "list", "tensor", "dict", "tuple", "deque", "object"
Mark = tuple[Any, ...]
ABSENT_MARK: Mark = (LEAF, ABSENT)


def mark_of(value: Any, clone: bool = False, copy: bool = False, depth: int = OBJECT_DEPTH) -> Mark:
    """A mark of ``value``, to compare with a later one (`same_mark`) or to read its value back (`value_at`).

    ``clone``: a tensor's value now is kept (it may change in place before the mark is read); ``copy``: a
    list's items now are kept (it may be cleared before); ``depth``: how deep an object's own attributes are
    marked (0: by its identity only)."""
    cls: type[Any] = type(cast(object, value))
    kind = _KINDS.get(cls)
    if kind is None:
        kind = _kind_of_type(cls)
    if kind is LEAF:
        return (LEAF, value)
    if kind is LIST:
        items = cast("list[Any]", value)
        return (LIST, items, len(items), list(items) if copy else None)
    if kind is TENSOR:
        return (TENSOR, value, tensor_version(value), value.detach().clone() if clone else None)
    if kind is DICT:
        entries = value
        marks = {key: mark_of(item, clone, copy, depth) for key, item in entries.items()}
        plain = all(mark[0] is LEAF for mark in marks.values())  # compared by == at each batch's start
        return (DICT, entries, marks, dict(entries) if plain else None)
    if kind is TUPLE:
        marks_of = tuple(mark_of(item, clone, copy, depth) for item in cast("tuple[Any, ...]", value))
        if all(mark[0] is LEAF for mark in marks_of):
            return (LEAF, value)  # immutable all through
        return (TUPLE, value, marks_of)
    if kind is DEQUE:
        window = cast("deque[Any]", value)
        return (DEQUE, window, tuple(window), window.maxlen)
    return (OBJECT, value, _probe(value, depth))


# a value's type -> its mark's kind, filled as types come: one dict lookup, where the checks against
# torch.Tensor, Enum and NumPy's scalar types would run at each mark (an exact list, tuple or deque only: a
# subclass of one is an object of its own class)
_KINDS: dict[type[Any], str] = {list: LIST, tuple: TUPLE, deque: DEQUE, type(None): LEAF, _Absent: LEAF}
_KINDS.update((leaf, LEAF) for leaf in _LEAVES)


def _kind_of_type(cls: type[Any]) -> str:
    if issubclass(cls, torch.Tensor):
        kind = TENSOR
    elif issubclass(cls, dict):  # an OrderedDict, a defaultdict: marked by its items (its identity stays)
        kind = DICT
    elif issubclass(cls, _LEAVES) or _immutable_scalar_type(cls):
        kind = LEAF
    else:
        kind = OBJECT
    _KINDS[cls] = kind
    return kind


def _immutable_scalar_type(cls: type[Any]) -> bool:
    """An Enum's or a NumPy scalar type: immutable, and plain data (``plain_data``). NumPy not imported yet: no
    value of its types exists."""
    if issubclass(cls, enum.Enum):
        return True
    numpy: Any = sys.modules.get("numpy")
    return numpy is not None and issubclass(cls, numpy.generic)


# how an object is probed (`_probe`), by its type: a generator function's generator, a file, a random generator
# (its kind, ``held_generators``), an object of a framework's (identity only), any other (its own attributes)
_GENERATOR_FUNCTION, _FILE, _FRAMEWORK_OBJECT, _OWN_OBJECT = "generator function", "file", "framework", "own"
_PROBES: dict[type[Any], str] = {}


def _probe_of_type(cls: type[Any]) -> str:
    if issubclass(cls, types.GeneratorType):
        probe = _GENERATOR_FUNCTION
    elif issubclass(cls, io.IOBase):
        probe = _FILE
    else:
        generator = kind_of_type(cls)
        if generator is not None:
            probe = generator
        elif cls.__module__.split(".")[0] in _FRAMEWORKS:
            probe = _FRAMEWORK_OBJECT
        else:
            probe = _OWN_OBJECT
    _PROBES[cls] = probe
    return probe


def _probe(value: Any, depth: int) -> Any:
    """What can be seen of an object's state without copying it."""
    cls: type[Any] = type(cast(object, value))
    how = _PROBES.get(cls)
    if how is None:
        how = _probe_of_type(cls)
    if how is _OWN_OBJECT:
        return None if depth <= 0 else tuple(mark_of(item, depth=depth - 1) for item in held_by(value))
    if how is _FRAMEWORK_OBJECT:
        return None
    if how is _GENERATOR_FUNCTION:
        frame = value.gi_frame
        if frame is None:
            return "done"
        return (frame.f_lasti, {name: mark_of(item, depth=0) for name, item in frame.f_locals.items()})
    if how is _FILE:
        try:
            return (value.closed, value.tell() if not value.closed and value.seekable() else None)
        except (OSError, ValueError):
            return None
    return GeneratorState(how, state_of(value, how))


def same_mark(a: Mark, b: Mark) -> bool:
    """Whether two marks (`mark_of`) are of the same value (the same objects, unchanged)."""
    kind = a[0]
    if kind is not b[0]:
        return False
    if kind is LEAF:
        return a[1] is b[1] or (type(a[1]) is type(b[1]) and bool(a[1] == b[1]))
    if a[1] is not b[1]:
        return False
    if kind is LIST or kind is TENSOR:
        return bool(a[2] == b[2])
    if kind is DICT:
        return bool(a[2].keys() == b[2].keys()) and all(same_mark(mark, b[2][key]) for key, mark in a[2].items())
    if kind is TUPLE:
        return all(same_mark(x, y) for x, y in zip(a[2], b[2]))
    if kind is DEQUE:
        return len(a[2]) == len(b[2]) and all(x is y or same(x, y) for x, y in zip(a[2], b[2]))
    return _same_probe(a[2], b[2])


class GeneratorState:
    """A generator's probe (`held_generators`): its kind and its state, as its getter gave it."""

    __slots__ = ("kind", "state")

    def __init__(self, kind: str, state: Any) -> None:
        self.kind: str = kind
        self.state: Any = state

    def plain(self) -> Any:
        """The state as plain data: what a checkpoint holds, and what two probes compare by."""
        return plain_state(self.kind, self.state)


def _same_probe(a: Any, b: Any) -> bool:
    if isinstance(a, GeneratorState) or isinstance(b, GeneratorState):
        return (
            isinstance(a, GeneratorState)
            and isinstance(b, GeneratorState)
            and a.kind == b.kind
            and same(a.plain(), b.plain())
        )
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    x_held: tuple[Any, ...] = cast(Any, a) if type(a) is tuple else ()
    y_held: tuple[Any, ...] = cast(Any, b) if type(b) is tuple else ()
    if x_held is a and y_held is b and all(type(item) is tuple for item in (*x_held, *y_held)):
        # an object's: the marks of what it holds, in order
        return len(x_held) == len(y_held) and all(same_mark(x, y) for x, y in zip(x_held, y_held))
    if isinstance(a, dict) and isinstance(b, dict):
        x, y = cast("dict[str, Mark]", a), cast("dict[str, Mark]", b)
        return x.keys() == y.keys() and all(same_mark(mark, y[name]) for name, mark in x.items())
    if isinstance(a, tuple) and isinstance(b, tuple):  # a generator's: where it stopped, and its locals
        x_at, y_at = cast("tuple[Any, ...]", cast(Any, a)), cast("tuple[Any, ...]", cast(Any, b))
        if len(x_at) == 2 and len(y_at) == 2 and isinstance(x_at[1], dict):
            return bool(x_at[0] == y_at[0]) and _same_probe(x_at[1], y_at[1])
    return bool(a == b)


def equal_items(copy: dict[Any, Any], live: dict[Any, Any]) -> bool:
    """``copy == live``, where the live dict may hold a tensor now (its ``==`` is elementwise)."""
    try:
        return bool(copy == live)
    except (RuntimeError, ValueError, TypeError):
        return False


class Unknown(Exception):
    """A value at the point that its marks no longer give (changed in place since, before it was kept)."""


def value_at(mark: Mark) -> Any:
    kind = mark[0]
    if kind is LEAF or kind is OBJECT:
        return mark[1]
    if kind is LIST:
        if mark[3] is not None:
            return list(cast("list[Any]", mark[3]))
        if len(mark[1]) < mark[2]:
            raise Unknown("cleared or shortened after")
        return mark[1][: mark[2]]
    if kind is TENSOR:
        if mark[3] is not None:
            return mark[3]
        if tensor_version(mark[1]) != mark[2]:
            raise Unknown("changed in place after")
        return mark[1]
    if kind is DICT:
        return {key: value_at(item) for key, item in cast("dict[Any, Mark]", mark[2]).items()}
    if kind is DEQUE:
        return deque(mark[2], mark[3])
    return tuple(value_at(item) for item in mark[2])


def held_by(holder: object) -> list[Any]:
    """What an object holds in its attributes (and in a dict among them, one level), in order.

    Read through the garbage collector's traversal, not ``vars()``: on CPython 3.11 reading an
    object's ``__dict__`` makes its attributes a dict for good, and every attribute read on it then
    takes the interpreter's unspecialized path (a callback's, a logger's, a helper's, per step).
    """
    found: list[Any] = []
    for item in gc.get_referents(holder):
        if type(item) is dict:  # the object's __dict__ where it is one already, or a dict attribute
            found += gc.get_referents(item)
        elif not isinstance(item, type):
            found.append(item)
    return found
