"""The codemod's picture of a file: its LightningModule classes, their steps, and each return's plan.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Literal

import libcst as cst

from lightning_step_types.migrate.conventions import LIGHTNING_BASES, RESULT_FOR_HOOK
from lightning_step_types.migrate.syntax import ImportTable


@dataclasses.dataclass(eq=False)
class ClassInfo:
    node: cst.ClassDef
    qualname: str
    # (base argument, the package of the LightningModule it names) for bases naming a LightningModule
    lightning_bases: list[tuple[cst.Arg, str]] = dataclasses.field(default_factory=lambda: [])
    parents: list[ClassInfo] = dataclasses.field(default_factory=lambda: [])  # in-file base classes
    children: list[ClassInfo] = dataclasses.field(default_factory=lambda: [])
    is_lightning: bool = False
    steps: dict[str, Step] = dataclasses.field(default_factory=lambda: {})

    def ancestors(self) -> Iterator[ClassInfo]:
        seen: set[int] = set()
        stack = list(self.parents)
        while stack:
            info = stack.pop(0)
            if id(info) not in seen:
                seen.add(id(info))
                yield info
                stack.extend(info.parents)

    def descendants(self) -> Iterator[ClassInfo]:
        seen: set[int] = set()
        stack = list(self.children)
        while stack:
            info = stack.pop(0)
            if id(info) not in seen:
                seen.add(id(info))
                yield info
                stack.extend(info.children)


class _ClassCollector(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.classes: list[ClassInfo] = []
        self._stack: list[str] = []

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._stack.append(node.name.value)
        self.classes.append(ClassInfo(node, ".".join(self._stack)))

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self._stack.pop()


def find_lightning_classes(module: cst.Module, imports: ImportTable) -> list[ClassInfo]:
    """Every class deriving from a LightningModule, directly or through another class of the file."""
    collector = _ClassCollector()
    module.visit(collector)
    by_name: dict[str, list[ClassInfo]] = {}
    for info in collector.classes:
        by_name.setdefault(info.node.name.value, []).append(info)
    for info in collector.classes:
        for arg in info.node.bases:
            if arg.keyword is not None or arg.star:
                continue
            qualified = imports.qualify(arg.value)
            if qualified in LIGHTNING_BASES:
                info.lightning_bases.append((arg, LIGHTNING_BASES[qualified]))
                info.is_lightning = True
            elif isinstance(arg.value, cst.Name) and len(by_name.get(arg.value.value, [])) == 1:
                parent = by_name[arg.value.value][0]
                if parent is not info:
                    info.parents.append(parent)
                    parent.children.append(info)
    changed = True
    while changed:  # a class deriving from a LightningModule class of this file is one too
        changed = False
        for info in collector.classes:
            if not info.is_lightning and any(p.is_lightning for p in info.parents):
                info.is_lightning = changed = True
    return [info for info in collector.classes if info.is_lightning]


# --- one step ----------------------------------------------------------------------------------


@dataclasses.dataclass(eq=False)
class DictPlan:
    """How a returned dict becomes a result: which element is the loss and what becomes log_dict calls."""

    node: cst.Dict
    loss_index: int
    removed: list[int]  # the loss and the 0.x entries, dropped from the metadata
    log_calls: list[tuple[cst.BaseExpression, bool]]  # (the dict or name to log, prog_bar)
    log_comments: list[cst.EmptyLine] = dataclasses.field(default_factory=lambda: [])  # of entries logged once


@dataclasses.dataclass(eq=False)
class ReturnPlan:
    node: cst.Return
    kind: Literal["none", "typed", "loss", "dict", "delegate", "problem"]
    line: int
    loss: cst.BaseExpression | None = None
    dict_plan: DictPlan | None = None
    delegate: tuple[str, str] | None = None  # ("super" | "self", hook)
    problem: str = ""

    def shape(self) -> str:
        shapes = {"typed": "a typed result", "loss": "a loss tensor", "dict": "a dict", "none": "None"}
        if self.kind == "delegate" and self.delegate is not None:
            receiver = "super()" if self.delegate[0] == "super" else "self"
            return f"`{receiver}.{self.delegate[1]}(...)`"
        return shapes.get(self.kind, "something else")


@dataclasses.dataclass(eq=False)
class Step:
    owner: ClassInfo
    function: cst.FunctionDef | None  # None for a step bound by assignment (`training_step = shared`)
    hook: str
    line: int
    self_name: str = "self"
    returns: list[ReturnPlan] = dataclasses.field(default_factory=lambda: [])
    problems: list[tuple[int, str]] = dataclasses.field(default_factory=lambda: [])
    notes: list[tuple[int, str]] = dataclasses.field(default_factory=lambda: [])
    falls_off_end: bool = False
    status: Literal["pending", "rewritten", "typed", "nothing", "skipped"] = "pending"
    annotation: cst.Annotation | None = None  # the new return annotation, when it changes

    @property
    def result_name(self) -> str:
        return RESULT_FOR_HOOK[self.hook]

    @property
    def qualname(self) -> str:
        return f"{self.owner.qualname}.{self.hook}"

    def may_return_none(self, steps_done: set[int] | None = None) -> bool:
        if self.falls_off_end or any(r.kind == "none" for r in self.returns):
            return True
        seen = steps_done if steps_done is not None else set[int]()
        seen.add(id(self))
        for plan in self.returns:
            if plan.kind == "delegate" and plan.delegate is not None:
                for target in delegate_targets(self, plan.delegate)[0]:
                    if id(target) not in seen and target.may_return_none(seen):
                        return True
        return False


def delegate_targets(step: Step, delegate: tuple[str, str]) -> tuple[list[Step], bool]:
    """The steps a ``super().hook(...)`` / ``self.hook(...)`` return may run, and whether one lies outside the file."""
    receiver, hook = delegate
    owner = step.owner
    if receiver == "super":
        for ancestor in owner.ancestors():
            if hook in ancestor.steps:
                return [ancestor.steps[hook]], False
        return [], True
    targets: list[Step] = []
    if hook in owner.steps:
        targets.append(owner.steps[hook])
    else:
        found = next((a.steps[hook] for a in owner.ancestors() if hook in a.steps), None)
        if found is None:
            return [], True
        targets.append(found)
    targets += [d.steps[hook] for d in owner.descendants() if hook in d.steps]
    return targets, False
