"""A random generator a module or a callback holds as an attribute: its state, as plain data, and put back.

A module or a callback that draws from a generator of its own (noise from ``self.rng = np.random.default_rng(11)`` in
``training_step``, a ``random.Random`` picking an augmentation, a ``torch.Generator``) draws on after a
resume from where the generator was at the point only if the resumed run's generator is set there.
The generators followed: ``torch.Generator``, ``random.Random`` (not ``SystemRandom``, which has no
state), numpy's ``Generator`` (its bit generator's state) and ``RandomState``.

`state_of` reads a generator's state through its public getter (at each batch's start, for each
generator the module holds, ``benchmarks/attribute_marks.py``: about 2 µs a batch for a numpy
``Generator`` or a ``torch.Generator``, 8 µs for a ``random.Random``, 33 µs for a numpy ``RandomState``,
whose getter copies its key array); `plain_state` writes it as plain data
(``resume/plain_data.py``: what a checkpoint loaded with ``torch.load(weights_only=True)`` holds, and
what `same` compares): torch's as its state tensor, Python's as its tuple of numbers, numpy's as its
dict with each array written as its dtype, shape and bytes. `put_back` sets a generator to a state
`plain_state` wrote, in place (another reference to the generator, a sampler's or a helper's, sees it).
A callback's attribute is saved as `record` writes it (`from_record` reads it back).
"""

from __future__ import annotations

import random
import sys
from typing import Any, cast

import torch

from lightning_step_types.resume.plain_data import GENERATOR

__all__ = ["NAMES", "kind_of", "kind_of_type", "from_record", "plain_state", "put_back", "record", "state_of"]

TORCH, PYTHON, NUMPY, NUMPY_LEGACY = "torch", "random", "numpy", "numpy_legacy"
_ARRAY = "lightning_step_types.ndarray"  # {_ARRAY: [dtype, [dimension, ...], bytes]}
# each kind, as a warning names it
NAMES = {
    TORCH: "torch.Generator",
    PYTHON: "random.Random",
    NUMPY: "numpy.random.Generator",
    NUMPY_LEGACY: "numpy.random.RandomState",
}


def kind_of(value: Any) -> str | None:
    """Which generator ``value`` is (None: not one of those followed)."""
    return kind_of_type(type(cast(object, value)))


def kind_of_type(cls: type) -> str | None:
    """Which generator an object of class ``cls`` is (None: not one of those followed)."""
    if issubclass(cls, torch.Generator):
        return TORCH
    if issubclass(cls, random.Random):
        return None if issubclass(cls, random.SystemRandom) else PYTHON
    numpy: Any = sys.modules.get("numpy")  # not imported: nothing holds one of its generators
    if numpy is not None:
        if issubclass(cls, numpy.random.Generator):
            return NUMPY
        if issubclass(cls, numpy.random.RandomState):
            return NUMPY_LEGACY
    return None


def record(kind: str, state: Any) -> dict[str, Any]:
    """A generator's state `plain_state` wrote, marked as one (a callback's attribute in a checkpoint)."""
    return {GENERATOR: [kind, state]}  # a user's dict of that one key is written otherwise (`encoded`)


def from_record(value: Any) -> tuple[str, Any] | None:
    """What `record` wrote: the generator's kind and its state (None: ``value`` is not such a record)."""
    if type(value) is dict and len(cast("dict[str, Any]", value)) == 1 and GENERATOR in value:
        kind, state = cast("dict[str, Any]", value)[GENERATOR]
        return str(kind), state
    return None


def state_of(value: Any, kind: str) -> Any:
    """The generator's state now, as its getter gives it (``kind``: `kind_of`'s)."""
    if kind == TORCH:
        return cast(torch.Generator, value).get_state()
    if kind == PYTHON:
        return cast(random.Random, value).getstate()
    if kind == NUMPY:
        return value.bit_generator.state
    return value.get_state(legacy=False)


def plain_state(kind: str, state: Any) -> Any:
    """A state `state_of` read, as plain data."""
    return _plain(state) if kind in (NUMPY, NUMPY_LEGACY) else state


def put_back(value: Any, kind: str, state: Any) -> bool:
    """Set the generator ``value`` to ``state`` (`state_of`'s, for a generator of ``kind``); False where
    ``value`` is not such a generator, or one of another bit generator (numpy's PCG64 for an MT19937)."""
    if kind_of(value) != kind:
        return False
    try:
        if kind == TORCH:
            cast(torch.Generator, value).set_state(state)
        elif kind == PYTHON:
            cast(random.Random, value).setstate(state)
        elif kind == NUMPY:
            value.bit_generator.state = _arrays(state)
        else:
            value.set_state(_arrays(state))
    except (TypeError, ValueError, RuntimeError):
        return False
    return True


def _plain(state: Any) -> Any:
    """numpy's state dict with each array written as its dtype, shape and bytes."""
    if isinstance(state, dict):
        return {key: _plain(item) for key, item in cast("dict[str, Any]", state).items()}
    numpy: Any = sys.modules["numpy"]
    if isinstance(state, numpy.ndarray):
        return {_ARRAY: [state.dtype.str, list(state.shape), state.tobytes()]}
    if isinstance(state, numpy.generic):
        return state.item()
    return state


def _arrays(state: Any) -> Any:
    """What `_plain` wrote, as numpy's state dict again."""
    if not isinstance(state, dict):
        return state
    items = cast("dict[str, Any]", state)
    if len(items) == 1 and _ARRAY in items:
        numpy: Any = sys.modules["numpy"]
        dtype, shape, data = items[_ARRAY]
        return numpy.frombuffer(data, dtype=dtype).reshape(shape).copy()
    return {key: _arrays(item) for key, item in items.items()}
