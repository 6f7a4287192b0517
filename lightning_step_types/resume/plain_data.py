"""Plain data: what a checkpoint can hold and a resumed run can put back exactly.

Numbers, strings, bytes, None, tensors, and lists, tuples and dicts of those (a dict's keys plain
too): what a checkpoint loaded with ``torch.load(weights_only=True)`` holds. Anything else (a module, a file handle, an object of the user's class) is not: a resumed run
cannot rebuild it from a checkpoint, and the library names it rather than guess.

An ``Enum`` member (Lightning's ``RunningStage``, ``EarlyStoppingReason``), as a value or a dict's key, is
written by its class and name (`encoded`) and read back as the same member (`decoded`); a
``collections.deque`` of plain data (a window of recent losses) by its items and its ``maxlen``, and read
back as a deque with the same items and bound.
"""

from __future__ import annotations

import enum
import importlib
import sys
from collections import deque
from collections.abc import Mapping
from typing import Any, cast

import torch

__all__ = ["GENERATOR", "NotPlain", "decoded", "encoded", "is_plain", "same"]

_SCALARS = (type(None), bool, int, float, complex, str, bytes)


def is_plain(value: Any) -> bool:
    """Whether ``value`` is plain data (see the module docstring). Exactly these types, not subclasses (a
    ``str`` enum's member is not: a checkpoint loaded with ``weights_only=True`` cannot hold its class)."""
    if type(value) in _SCALARS or isinstance(value, torch.Tensor):
        return True
    if type(value) in (list, tuple):
        return all(is_plain(item) for item in value)
    if type(value) is dict:
        items = cast(Any, value)
        return all(is_plain(key) and is_plain(item) for key, item in items.items())
    return False


def same(a: Any, b: Any) -> bool:
    """Whether two values are equal as data: tensors by dtype, shape and values (NaN equal to NaN),
    containers item by item, anything else by identity or ``==``."""
    if a is b:
        return True
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        if a.dtype != b.dtype or a.shape != b.shape or a.device != b.device:
            return False
        return bool(
            torch.equal(a, b)
            or (
                a.is_floating_point()
                and torch.equal(a.isnan(), b.isnan())
                and torch.equal(a.nan_to_num(), b.nan_to_num())
            )
        )
    if type(a) is deque or type(b) is deque:
        first, second = cast(Any, a), cast(Any, b)
        return (
            type(first) is type(second)
            and first.maxlen == second.maxlen
            and len(first) == len(second)
            and all(map(same, first, second))
        )
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        left, right = cast(Any, a), cast(Any, b)
        return left.keys() == right.keys() and all(same(left[key], right[key]) for key in left)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        first, second = cast(Any, a), cast(Any, b)  # isinstance leaves the item types unknown
        return type(first) is type(second) and len(first) == len(second) and all(map(same, first, second))
    if isinstance(a, _SCALARS) and isinstance(b, _SCALARS):
        if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
            return True  # NaN, as a tensor's NaN
        return type(a) is type(b) and a == b
    return False


class NotPlain(Exception):
    """A value that is not plain data, nor an Enum member, nor a container of those."""


_ENUM = "lightning_step_types.enum"  # {_ENUM: "module:Qualname.MEMBER"}
_ITEMS = "lightning_step_types.items"  # {_ITEMS: [[key, value], ...]}: a dict with a key that is not plain
_DEQUE = "lightning_step_types.deque"  # {_DEQUE: [[item, ...], maxlen or None]}
GENERATOR = "lightning_step_types.generator"  # a random generator's state: ``resume/held_generators.py``'s record
_MARKERS = (_ENUM, _ITEMS, _DEQUE, GENERATOR)  # a user's dict with one of these as its only key: written as items


def encoded(value: Any) -> Any:
    """``value`` as plain data (raises `NotPlain`)."""
    if type(value) in _SCALARS or isinstance(value, torch.Tensor):
        return value
    if isinstance(value, enum.Enum):
        cls = type(value)
        return {_ENUM: f"{cls.__module__}:{cls.__qualname__}.{value.name}"}
    if type(value) in (list, tuple):
        items = [encoded(item) for item in value]
        return items if type(value) is list else tuple(items)
    if type(value) is deque:
        window: deque[Any] = cast(Any, value)
        return {_DEQUE: [[encoded(item) for item in window], window.maxlen]}
    if type(value) is dict:
        pairs = [(encoded(key), encoded(item)) for key, item in cast(Any, value).items()]
        if all(type(key) in _SCALARS for key, _ in pairs) and not (len(pairs) == 1 and pairs[0][0] in _MARKERS):
            return dict(pairs)
        return {_ITEMS: [list(pair) for pair in pairs]}
    raise NotPlain(type(value).__name__)


def decoded(value: Any) -> Any:
    """What `encoded` wrote, read back (an Enum whose class is gone: raises `NotPlain`)."""
    if type(value) is list:
        return [decoded(item) for item in cast(Any, value)]
    if type(value) is tuple:
        return tuple(decoded(item) for item in cast(Any, value))
    if type(value) is not dict:
        return value
    items = cast(Any, value)
    if len(items) == 1 and _ENUM in items:
        module, _, path = str(items[_ENUM]).partition(":")
        owner: Any = sys.modules.get(module) or importlib.import_module(module)
        *classes, member = path.split(".")
        for name in classes:
            owner = getattr(owner, name)
        if not (isinstance(owner, type) and issubclass(owner, enum.Enum)):
            raise NotPlain(path)
        return owner[member]
    if len(items) == 1 and _ITEMS in items:
        return {decoded(key): decoded(item) for key, item in items[_ITEMS]}
    if len(items) == 1 and _DEQUE in items:
        window, maxlen = items[_DEQUE]
        return deque((decoded(item) for item in window), maxlen)
    return {key: decoded(item) for key, item in items.items()}
