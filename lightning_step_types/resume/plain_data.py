"""Plain data: what a checkpoint can hold and a resumed run can put back exactly.

Numbers, strings, bytes, None, tensors, and lists, tuples and dicts of those (a dict's keys plain
too). Anything else (a module, a file handle, an object of the user's class) is not: a resumed run
cannot rebuild it from a checkpoint, and the library names it rather than guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import torch

__all__ = ["is_plain", "same"]

_SCALARS = (type(None), bool, int, float, complex, str, bytes)


def is_plain(value: Any) -> bool:
    """Whether ``value`` is plain data (see the module docstring)."""
    if isinstance(value, _SCALARS) or isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (list, tuple)):
        return all(is_plain(item) for item in cast("list[Any]", value))
    if type(value) is dict:
        items = cast("dict[Any, Any]", value)
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
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        left, right = cast("Mapping[Any, Any]", a), cast("Mapping[Any, Any]", b)
        return left.keys() == right.keys() and all(same(left[key], right[key]) for key in left)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        first, second = cast("list[Any]", a), cast("list[Any]", b)
        return type(a) is type(b) and len(first) == len(second) and all(map(same, first, second))
    if isinstance(a, _SCALARS) and isinstance(b, _SCALARS):
        if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
            return True  # NaN, as a tensor's NaN
        return type(a) is type(b) and a == b
    return False
