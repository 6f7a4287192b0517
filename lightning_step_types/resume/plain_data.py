"""Plain data: what a checkpoint can hold and a resumed run can put back exactly.

Numbers, strings, bytes, None, tensors, and lists, tuples and dicts of those (a dict's keys plain
too): what a checkpoint loaded with ``torch.load(weights_only=True)`` holds. Anything else (a module, a file handle, an object of the user's class) is not: a resumed run
cannot rebuild it from a checkpoint, and the library names it rather than guess.

One definition serves every attribute the library saves for a resume, a module's and a callback's alike.
An ``Enum`` member of any kind (a ``str`` or ``int`` enum's too: Lightning's ``RunningStage``,
``EarlyStoppingReason``), as a value or a dict's key, is written by its class and name (`encoded`) and read
back as the same member (`decoded`); a NumPy scalar (``np.float64``, ``np.int64``, ``np.bool_``) by its dtype
and its value, and read back as the same scalar; a ``collections.deque`` of plain data (a window of recent
losses) by its items and its ``maxlen``, and read back as a deque with the same items and bound; a dict
with keys that are not strings or numbers (tuples, enum members) by its items. A dict of a subclass
(``OrderedDict``, ``defaultdict``) is written as a dict and put back into the live object (`put_into`).
So a checkpoint that holds them loads with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import enum
import importlib
import sys
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, cast

import torch

__all__ = ["GENERATOR", "NotPlain", "decoded", "encoded", "is_plain", "put_into", "same"]

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
    """A value that is not plain data, nor an Enum member, a NumPy scalar or a deque, nor a container of those."""

    def __init__(self, value: Any) -> None:
        super().__init__(type(value).__name__)
        self.value = value  # the item that is not


_ENUM = "lightning_step_types.enum"  # {_ENUM: "module:Qualname.MEMBER"}
_ITEMS = "lightning_step_types.items"  # {_ITEMS: [[key, value], ...]}: a dict with a key that is not plain
_DEQUE = "lightning_step_types.deque"  # {_DEQUE: [[item, ...], maxlen or None]}
_NUMPY = "lightning_step_types.numpy"  # {_NUMPY: [dtype.str, the value as a Python number]}
GENERATOR = "lightning_step_types.generator"  # a random generator's state: ``resume/held_generators.py``'s record
# a user's dict with one of these as its only key: written as items
_MARKERS = (_ENUM, _ITEMS, _DEQUE, _NUMPY, GENERATOR)


def encoded(value: Any, tensor: Callable[[torch.Tensor], torch.Tensor] | None = None) -> Any:
    """``value`` as plain data (raises `NotPlain`); each tensor in it as ``tensor(it)`` where given (a copy on
    the CPU)."""
    if type(value) in _SCALARS:
        return value
    if isinstance(value, torch.Tensor):
        return tensor(value) if tensor is not None else value
    if isinstance(value, enum.Enum):
        cls = type(value)
        return {_ENUM: f"{cls.__module__}:{cls.__qualname__}.{value.name}"}
    numpy: Any = sys.modules.get("numpy")  # a NumPy scalar exists only where NumPy is imported
    if numpy is not None and isinstance(value, numpy.generic) and _exact_in_python(value.dtype):
        return {_NUMPY: [value.dtype.str, value.item()]}
    if type(value) in (list, tuple):
        items = [encoded(item, tensor) for item in value]
        return items if type(value) is list else tuple(items)
    if type(value) is deque:
        window: deque[Any] = cast(Any, value)
        return {_DEQUE: [[encoded(item, tensor) for item in window], window.maxlen]}
    if isinstance(value, dict):
        pairs = [(encoded(key, tensor), encoded(item, tensor)) for key, item in cast(Any, value).items()]
        if all(type(key) in _SCALARS for key, _ in pairs) and not (len(pairs) == 1 and pairs[0][0] in _MARKERS):
            return dict(pairs)
        return {_ITEMS: [list(pair) for pair in pairs]}
    raise NotPlain(value)


def _exact_in_python(dtype: Any) -> bool:
    """Whether a NumPy scalar of ``dtype`` goes through a Python number and back unchanged: booleans, integers,
    and floats and complex numbers up to double precision (not ``longdouble``)."""
    return dtype.kind in "biu" or (dtype.kind in "fc" and dtype.itemsize <= (8 if dtype.kind == "f" else 16))


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
    if len(items) == 1 and _NUMPY in items:
        dtype, number = items[_NUMPY]
        numpy: Any = importlib.import_module("numpy")
        return numpy.dtype(str(dtype)).type(number)
    return {key: decoded(item) for key, item in items.items()}


def put_into(live: Any, value: Any) -> Any:
    """What to set an attribute to for it to hold ``value`` (`decoded`): the live list or dict itself, with
    ``value``'s items put in, where it is one (another object may hold it; a dict subclass keeps its class and,
    for a ``defaultdict``, its factory), else ``value``."""
    kind: type = type(cast(object, value))
    if type(live) is list and kind is list:
        items: list[Any] = cast(Any, live)
        items[:] = value
        return items
    if isinstance(live, dict) and kind is dict and type(cast(object, live)) is not dict:
        held: dict[Any, Any] = cast(Any, live)
        held.clear()
        held.update(value)
        return held
    return value
