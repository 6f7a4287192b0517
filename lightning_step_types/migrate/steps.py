"""The codemod's picture of a file: its LightningModule classes, their steps, and each return's plan."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from typing import Literal

import libcst as cst

from lightning_step_types.migrate.conventions import LIGHTNING_BASES, NON_LIGHTNING_BASES, RESULT_FOR_HOOK, STEP_HOOKS
from lightning_step_types.migrate.positions import Positions
from lightning_step_types.migrate.syntax import ImportTable, dotted_name


@dataclasses.dataclass(eq=False)
class FileContext:
    """One file of the run: its path (as given), tree, imports, line numbers and module-level functions."""

    path: str
    module: cst.Module
    imports: ImportTable
    positions: Positions
    functions: dict[str, cst.FunctionDef] = dataclasses.field(default_factory=lambda: {})
    run: list[FileContext] = dataclasses.field(default_factory=lambda: [])  # every file of the run, this one too

    def __post_init__(self) -> None:
        for statement in self.module.body:
            if isinstance(statement, cst.FunctionDef):
                self.functions[statement.name.value] = statement

    def modules_named(self, module: str) -> list[FileContext]:
        """The files of the run an import of ``module`` from this file may mean (``.base``, ``pkg.utils``)."""
        if module.startswith("."):  # a relative import: the file next to (or above) this one
            level = len(module) - len(module.lstrip("."))
            folder = os.path.dirname(os.path.abspath(self.path))
            for _ in range(level - 1):
                folder = os.path.dirname(folder)
            rest = module.lstrip(".")
            target = os.path.join(folder, *rest.split(".")) if rest else folder
            wanted = {target + ".py", os.path.join(target, "__init__.py")}
            return [f for f in self.run if os.path.abspath(f.path) in wanted]
        return [f for f in self.run if f.dotted == module or f.dotted.endswith("." + module)]

    @property
    def dotted(self) -> str:
        """``pkg/trainers/base.py`` -> ``pkg.trainers.base`` (``__init__`` dropped), to match imports against."""
        path = self.path.replace("\\", "/").removesuffix(".py").removesuffix("/__init__")
        return ".".join(part for part in path.split("/") if part not in ("", ".", ".."))


@dataclasses.dataclass(eq=False)
class ClassInfo:
    node: cst.ClassDef
    qualname: str
    file: FileContext | None = None
    # (base argument, the package of the LightningModule it names) for bases naming a LightningModule
    lightning_bases: list[tuple[cst.Arg, str]] = dataclasses.field(default_factory=lambda: [])
    parents: list[ClassInfo] = dataclasses.field(default_factory=lambda: [])  # in-file base classes
    children: list[ClassInfo] = dataclasses.field(default_factory=lambda: [])
    is_lightning: bool = False
    unresolved: list[str] = dataclasses.field(default_factory=lambda: [])  # bases not found in the run
    steps: dict[str, Step] = dataclasses.field(default_factory=lambda: {})
    _attributes: dict[str, list[cst.BaseExpression]] | None = None

    def defines(self, name: str) -> cst.FunctionDef | None:
        """The method ``name`` written in this class's own body (the last definition wins, as in Python)."""
        found: cst.FunctionDef | None = None
        for statement in self.node.body.body:
            if isinstance(statement, cst.FunctionDef) and statement.name.value == name:
                found = statement
        return found

    def defines_step(self) -> bool:
        return any(self.defines(hook) is not None for hook in STEP_HOOKS)

    def unresolved_in_hierarchy(self) -> list[str]:
        """Bases of this class or its ancestors that the run does not define (their code is unseen)."""
        names = list(self.unresolved)
        for ancestor in self.ancestors():
            names += [n for n in ancestor.unresolved if n not in names]
        return names

    def attribute_values(self) -> dict[str, list[cst.BaseExpression]]:
        """``self.X = value`` assignments in this class's methods: X -> the values."""
        if self._attributes is None:
            found: dict[str, list[cst.BaseExpression]] = {}
            for statement in self.node.body.body:
                if isinstance(statement, cst.FunctionDef) and statement.params.params:
                    statement.body.visit(_SelfAssignments(statement.params.params[0].name.value, found))
            self._attributes = found
        return self._attributes

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


class _SelfAssignments(cst.CSTVisitor):
    def __init__(self, self_name: str, found: dict[str, list[cst.BaseExpression]]) -> None:
        super().__init__()
        self.self_name = self_name
        self.found = found

    def _target(self, target: cst.BaseExpression, value: cst.BaseExpression | None) -> None:
        if (
            isinstance(target, cst.Attribute)
            and isinstance(target.value, cst.Name)
            and target.value.value == self.self_name
        ):
            self.found.setdefault(target.attr.value, []).append(value if value is not None else cst.Name("None"))

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            if isinstance(target.target, (cst.Tuple, cst.List)):
                for element in target.target.elements:  # unpacked: the value is not visible
                    self._target(element.value, cst.Name("__unpacked__"))
            else:
                self._target(target.target, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._target(node.target, node.value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._target(node.target, cst.Name("__augmented__"))

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False


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


def collect_classes(file: FileContext) -> list[ClassInfo]:
    """Every class of a file (nested ones too), not yet linked to their bases."""
    collector = _ClassCollector()
    file.module.visit(collector)
    for info in collector.classes:
        info.file = file
    return collector.classes


def _base_expression(arg: cst.Arg) -> cst.BaseExpression:
    value = arg.value
    return value.value if isinstance(value, cst.Subscript) else value  # Generic[T] -> Generic


def link_classes(classes: list[ClassInfo], assume_lightning: bool = False) -> None:
    """Link every class of the run to its bases: LightningModules, classes of the run (same file first,
    then by import path or a unique name), known non-Lightning bases; the rest is ``unresolved``.
    Then mark the LightningModules: those deriving from one, directly or through classes of the run
    (with ``assume_lightning``, also those deriving from a base the run does not define)."""
    by_name: dict[str, list[ClassInfo]] = {}
    for info in classes:
        by_name.setdefault(info.node.name.value, []).append(info)
    for info in classes:
        assert info.file is not None
        for arg in info.node.bases:
            if arg.keyword is not None or arg.star:
                continue
            expr = _base_expression(arg)
            qualified = info.file.imports.qualify(expr)
            if qualified in LIGHTNING_BASES:
                info.lightning_bases.append((arg, LIGHTNING_BASES[qualified]))
                info.is_lightning = True
                continue
            parent = _find_base(info, expr, qualified, by_name)
            if parent is not None:
                if parent is not info and parent not in info.parents:
                    info.parents.append(parent)
                    parent.children.append(info)
                continue
            if qualified is not None and (
                qualified in NON_LIGHTNING_BASES or qualified.split(".")[0] in ("torch", "typing", "abc", "enum")
            ):
                continue
            info.unresolved.append(qualified or dotted_name(expr) or "?")
    changed = True
    while changed:  # a class deriving from a LightningModule class of the run is one too
        changed = False
        for info in classes:
            if info.is_lightning:
                continue
            if any(p.is_lightning for p in info.parents) or (assume_lightning and info.unresolved):
                info.is_lightning = changed = True


def _find_base(
    info: ClassInfo, expr: cst.BaseExpression, qualified: str | None, by_name: dict[str, list[ClassInfo]]
) -> ClassInfo | None:
    """The class of the run a base expression names, if the run defines exactly one that fits."""
    assert info.file is not None
    name = dotted_name(expr)
    if name is None:
        return None
    tail = name.split(".")[-1]
    candidates = by_name.get(tail, [])
    same_file = [c for c in candidates if c.file is info.file and "." not in c.qualname]
    if "." not in name and qualified == name and same_file:  # a class of this file, not an import
        return same_file[0] if len(same_file) == 1 else None
    others = [c for c in candidates if c.file is not info.file and "." not in c.qualname]
    if qualified is None:
        return None
    if "." not in name and qualified == name:  # neither defined nor imported here (a star import?)
        return others[0] if len(others) == 1 else None
    module = qualified.rsplit(".", 1)[0] if "." in qualified else ""
    if module.startswith("."):
        files = info.file.modules_named(module)
        fitting = [c for c in others if c.file in files]
        if len(fitting) == 1:
            return fitting[0]
    module = module.lstrip(".")
    if module:
        fitting = [
            c
            for c in others
            if c.file is not None and (c.file.dotted == module or c.file.dotted.endswith("." + module))
        ]
        if len(fitting) == 1:
            return fitting[0]
    return others[0] if len(others) == 1 else None


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
    kind: Literal["none", "typed", "loss", "dict", "built", "delegate", "problem"]
    line: int
    loss: cst.BaseExpression | None = None
    dict_plan: DictPlan | None = None
    # kind "built" (a dict built in a variable): the new return value, and the log_dict calls before it
    built: cst.BaseExpression | None = None
    built_logs: list[tuple[cst.BaseExpression, bool]] = dataclasses.field(default_factory=lambda: [])
    delegate: tuple[str, str] | None = None  # ("super" | "self", hook)
    problem: str = ""

    def shape(self) -> str:
        shapes = {
            "typed": "a typed result",
            "loss": "a loss tensor",
            "dict": "a dict",
            "built": "a dict",
            "none": "None",
        }
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
    status: Literal["pending", "rewritten", "typed", "nothing", "skipped", "ignored"] = "pending"
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
