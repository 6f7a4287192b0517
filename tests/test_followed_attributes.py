"""The one per-batch reader of an object's attributes (``resume/followed_attributes.py``), as the callbacks use it.

A callback whose batch hooks may change its attributes is followed from batch to batch: at each batch's start
only what changed since the last one is marked again (the module's own attributes are read the same way). What
a save then reads back for the batch's start must be what a fresh mark of every attribute there reads back:
each change a batch can make is made, then the two readings are compared, before and after the next batch
changes the object again.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from typing import Any

import pytest
import torch

from lightning_step_types.resume import attributes
from lightning_step_types.resume.attributes import followed_in_batch
from lightning_step_types.resume.marks import Unknown, mark_of
from lightning_step_types.resume.plain_data import same


class Helper:
    """An object of the user's own class among the attributes: followed by its identity."""


class Holder:
    def __init__(self) -> None:
        self.count = 0
        self.name = "holder"
        self.items: list[int] = [1, 2]
        self.totals = {"a": 1.0, "b": 2.0}
        self.bests = {"x": torch.tensor(1.0)}
        self.window: deque[float] = deque([0.5, 1.5], maxlen=2)
        self.best = torch.tensor(0.0)
        self.pair = (1, [3])
        self.rng = random.Random(0)
        self.helper = Helper()


def _append_to_tuple_list(holder: Holder) -> None:
    holder.pair[1].append(4)


def _replace_an_attribute(holder: Holder) -> None:
    value = holder.__dict__.pop("name", None) or holder.__dict__.pop("renamed", None)
    setattr(holder, "renamed" if "renamed" not in holder.__dict__ else "name", value)


CHANGES: list[tuple[str, Callable[[Holder], object]]] = [
    ("nothing", lambda h: None),
    ("a counter", lambda h: setattr(h, "count", h.count + 1)),
    ("a string rebound", lambda h: setattr(h, "name", h.name + "!")),
    ("a list appended to", lambda h: h.items.append(3)),
    ("a list rebound", lambda h: setattr(h, "items", [9])),
    ("a list emptied", lambda h: h.items.clear()),
    ("a dict of numbers changed in place", lambda h: h.totals.__setitem__("a", h.totals["a"] + 1.5)),
    ("a dict's key added", lambda h: h.totals.__setitem__("c", 3.0)),
    ("a dict of tensors, one replaced", lambda h: h.bests.__setitem__("x", torch.tensor(2.0))),
    ("a dict of tensors, one changed in place", lambda h: h.bests["x"].add_(1)),
    ("a bounded deque appended to", lambda h: h.window.append(7.0)),
    ("a tensor rebound", lambda h: setattr(h, "best", torch.tensor(3.0))),
    ("a tensor changed in place", lambda h: h.best.add_(1)),
    ("a list inside a tuple appended to", _append_to_tuple_list),
    ("an attribute added", lambda h: setattr(h, "added", len(h.items))),
    ("an attribute deleted", lambda h: h.__dict__.pop("count", None)),
    ("an attribute deleted and another added", _replace_an_attribute),
    ("a random generator drawn from", lambda h: h.rng.random()),
    ("an object rebound", lambda h: setattr(h, "helper", Helper())),
]


def _read_back(reading: dict[str, Any]) -> dict[str, Any]:
    """Each attribute's value as a save reads it back, or the exception saying it cannot be."""
    found: dict[str, Any] = {}
    for name, read in reading.items():
        generator = attributes._generator(read)
        if generator is not None:
            found[name] = ("generator", read[1], generator.plain())
            continue
        try:
            found[name] = attributes._value(read)
        except Unknown:
            found[name] = Unknown
    return found


def _assert_same_reading(followed: dict[str, Any], fresh: dict[str, Any]) -> None:
    assert sorted(followed) == sorted(fresh)
    for name in fresh:
        a, b = followed[name], fresh[name]
        if isinstance(b, Helper):
            assert a is b, name
        elif type(b) is tuple and b and b[0] == "generator":
            assert a[1] is b[1] and same(a[2], b[2]), name
        else:
            assert a is b if b is Unknown else same(a, b), name


@pytest.mark.parametrize("change", [change for _, change in CHANGES], ids=[name for name, _ in CHANGES])
def test_the_followed_reading_at_a_batchs_start_is_a_fresh_readings(change: Callable[[Holder], object]) -> None:
    holder = Holder()
    followed = followed_in_batch(holder, frozenset())
    for _ in range(3):  # batch after batch: each makes the change, then the next batch's start reads
        change(holder)
        followed.batch_start()
        fresh = {name: mark_of(value, depth=0) for name, value in vars(holder).items()}
        _assert_same_reading(_read_back(followed.present), _read_back(fresh))
        change(holder)  # the batch goes on: what each reading gives back now, for a save inside it
        _assert_same_reading(_read_back(followed.present), _read_back(fresh))


def test_an_unchanged_attribute_is_not_marked_again() -> None:
    """The point of following: a batch that changes nothing of the callback marks nothing again."""
    holder = Holder()
    followed = followed_in_batch(holder, frozenset())
    marks = list(followed.marks_at)
    followed.batch_start()
    changed = [name for name, old, new in zip(followed.names, marks, followed.marks_at) if old is not new]
    assert changed == ["rng"]  # a random generator is read at each batch's start: its draws move it in place
