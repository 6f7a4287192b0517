"""One object's attributes followed from batch to batch: each one's mark (``resume/marks.py``) at the last
batch's start, taken again only where it changed.

A save inside a batch resumes from that batch's start, so exact resume keeps each followed object's
attributes as they were there. Reading every attribute at every batch's start would cost what the object
holds, and most batches change little of it. So a batch's start reads the followed values at once (one C
call) and compares them by identity with those marked at the last start; a list's length, a tensor's
in-place version and a small dict's items are compared only where the object holds one; only what changed
is marked again, and each random generator, whose draws move it in place.

The one reader for every object whose attributes exact resume follows per batch: the module's own
(``resume/undeclared_state.py``) and each callback whose batch hooks may change its attributes
(``resume/holders.py``). They differ in two settings: how deep an object among the attributes is marked
(the module's two levels down, a callback's by its identity), and whether a tensor or a container seen to
change in place is cloned at each later mark (the module's are, so that a save inside a batch holds its
value there; a callback's are not, and a value changed in place after the point is named instead).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from operator import is_, itemgetter
from typing import Any

import torch

from lightning_step_types._lightning.module_attributes import tensor_versions
from lightning_step_types.resume.held_generators import kind_of, state_of
from lightning_step_types.resume.marks import (
    ABSENT,
    DEQUE,
    DICT,
    LIST,
    OBJECT,
    TENSOR,
    TUPLE,
    GeneratorState,
    Mark,
    equal_items,
    mark_of,
    same_mark,
)

__all__ = ["FollowedAttributes"]


class FollowedAttributes:
    """One object's followed attributes, marked at each batch's start where they changed (see the module
    docstring). ``namespace``: the object's ``__dict__``; ``followed``: the attributes followed now, by name;
    ``depth``: how deep an object among them is marked; ``keep_changed``: a tensor or a container seen to
    change in place is cloned at each later mark."""

    def __init__(
        self, namespace: dict[str, Any], followed: Callable[[], dict[str, Any]], depth: int, keep_changed: bool
    ) -> None:
        self.namespace: dict[str, Any] = namespace
        self.followed: Callable[[], dict[str, Any]] = followed
        self.depth: int = depth
        self.keep_changed: bool = keep_changed
        self.size: int = -1  # len(namespace) when the followed names were last read
        # the marks at the last batch's start: each followed name, its mark, and whether it changed in place
        # before (then cloned at each mark); with the fast path's tuples (`_index`)
        self.names: list[str] = []
        self.marks_at: list[Mark] = []
        self.kept: list[bool] = []
        self.refs: tuple[Any, ...] = ()
        self.absent: tuple[Any, ...] = ()
        self.getter: Any = None
        self.list_at: list[int] = []
        self.lists: tuple[list[Any], ...] = ()
        self.lengths: tuple[int, ...] = ()
        self.tensor_at: list[int] = []
        self.tensors: tuple[torch.Tensor, ...] = ()
        self.versions: tuple[int, ...] = ()
        self.containers_at: list[int] = []
        self.generators_at: list[tuple[int, str]] = []  # the generators (`held_generators`), and their kinds

    def start(self, marks: Mapping[str, Mark]) -> None:
        """From ``marks``, the followed attributes' marks now (taken by the caller, with its own settings)."""
        self.size = len(self.namespace)
        self.names = list(marks)
        self.marks_at = list(marks.values())
        self.kept = [False] * len(self.names)
        self._index()

    @property
    def entries(self) -> dict[str, Mark]:
        """The marks at the last batch's start, by name."""
        return dict(zip(self.names, self.marks_at))

    @property
    def present(self) -> dict[str, Mark]:
        """The marks at the last batch's start of the attributes the object held there, by name."""
        return {name: mark for name, mark in zip(self.names, self.marks_at) if mark[1] is not ABSENT}

    @property
    def kept_by_name(self) -> dict[str, bool]:
        """Which attributes changed in place before (and are cloned at each mark)."""
        return dict(zip(self.names, self.kept))

    def batch_start(self) -> None:
        """At each batch's start: a new mark for each attribute that changed since the last one.

        Where nothing changed this is a few C-level passes: the values read at once and compared by
        identity, the lists' lengths, the tensors' versions, the plain dicts of numbers by ``==``."""
        namespace = self.namespace
        if len(namespace) != self.size:
            self._read_names()
        if not self.names:
            return
        try:  # one C call: an attribute deleted since (rare) takes the slower read
            values: tuple[Any, ...] = self.getter(namespace) if len(self.names) > 1 else (namespace[self.names[0]],)
        except KeyError:  # the names read again too: another may have come in its place (the same count)
            self._read_names()
            values = tuple(map(namespace.get, self.names, self.absent))
        marks = self.marks_at
        depth, keep = self.depth, self.keep_changed
        if not all(map(is_, values, self.refs)):
            changed = [index for index, (value, ref) in enumerate(zip(values, self.refs)) if value is not ref]
            kinds: set[str] = set()
            for index in changed:
                old = marks[index][0]
                mark = marks[index] = mark_of(values[index], clone=self.kept[index], depth=depth)
                kinds.add(old if old is mark[0] else "moved")
            self.refs = values
            if "moved" in kinds or DICT in kinds or TUPLE in kinds or DEQUE in kinds or OBJECT in kinds:
                self._index()
            else:
                if LIST in kinds:
                    self.lists = tuple(marks[index][1] for index in self.list_at)
                    self.lengths = tuple(marks[index][2] for index in self.list_at)
                if TENSOR in kinds:
                    self.tensors = tuple(marks[index][1] for index in self.tensor_at)
                    self.versions = tuple(marks[index][2] for index in self.tensor_at)
            # and on: other attributes may have changed in place in the same batch
        if self.lists:
            lengths = tuple(map(len, self.lists))
            if lengths != self.lengths:
                for index, length in zip(self.list_at, lengths):
                    if length != marks[index][2]:
                        marks[index] = mark_of(values[index], depth=depth)
                self.lengths = lengths
        if self.tensors:
            versions = tensor_versions(self.tensors)
            if versions != self.versions:
                for index, version in zip(self.tensor_at, versions):
                    if version != marks[index][2]:
                        self.kept[index] = keep  # changed in place: from now on cloned at each mark
                        marks[index] = mark_of(values[index], clone=keep, depth=depth)
                self.versions = versions
        for index in self.containers_at:
            mark = marks[index]
            if mark[0] is DICT and mark[3] is not None:
                if equal_items(mark[3], mark[1]):  # a dict of numbers and strings: compared in C
                    continue
                marks[index] = mark_of(mark[1], clone=keep, depth=depth)
            else:
                new = mark_of(mark[1], clone=keep, depth=depth)
                if same_mark(mark, new):
                    continue
                marks[index] = new
            self.kept[index] = keep
            if marks[index][0] is not mark[0]:
                self._index()
        for index, kind in self.generators_at:  # where each generator is: a draw moves it, in place
            marks[index] = (OBJECT, values[index], GeneratorState(kind, state_of(values[index], kind)))

    def _index(self) -> None:
        marks = self.marks_at
        self.refs = tuple(mark[1] for mark in marks)
        self.absent = (ABSENT,) * len(marks)
        self.getter = itemgetter(*self.names) if self.names else None
        self.list_at = [index for index, mark in enumerate(marks) if mark[0] is LIST]
        self.lists = tuple(marks[index][1] for index in self.list_at)
        self.lengths = tuple(marks[index][2] for index in self.list_at)
        self.tensor_at = [index for index, mark in enumerate(marks) if mark[0] is TENSOR]
        self.tensors = tuple(marks[index][1] for index in self.tensor_at)
        self.versions = tuple(marks[index][2] for index in self.tensor_at)
        self.containers_at = [index for index, mark in enumerate(marks) if mark[0] in (DICT, TUPLE, DEQUE)]
        self.generators_at = [
            (index, kind)
            for index, mark in enumerate(marks)
            if mark[0] is OBJECT and (kind := kind_of(mark[1])) is not None
        ]

    def _read_names(self) -> None:
        self.size = len(self.namespace)
        known = set(self.names)
        for name, value in self.followed().items():
            if name not in known:
                self.names.append(name)
                self.marks_at.append(mark_of(value, depth=self.depth))
                self.kept.append(False)
        self._index()
