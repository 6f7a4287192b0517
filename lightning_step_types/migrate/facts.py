"""File-wide facts a step's rewrite depends on: which string keys are read, which batch-end hooks
exist, and where steps are called.
"""

from __future__ import annotations

import dataclasses
import re

import libcst as cst

from lightning_step_types.migrate.conventions import BATCH_END_FOR_HOOK, HOOKS_GIVEN_OUTPUTS, STEP_HOOKS
from lightning_step_types.migrate.positions import Positions
from lightning_step_types.migrate.steps import ClassInfo
from lightning_step_types.migrate.syntax import string_key, tail_name


class FileFacts:
    """What the whole file says that a single step's rewrite depends on."""

    def __init__(self, module: cst.Module, positions: Positions) -> None:
        self.key_reads: dict[str, int] = {}  # string key -> first line reading it (x["k"], x.get("k"), "k" in x)
        # reads inside hooks Lightning 2 removed (validation_epoch_end(outputs)...): key -> (line, hook)
        self.removed_hook_reads: dict[str, list[tuple[int, str, ClassInfo | None]]] = {}
        self.attribute_reads: dict[str, int] = {}  # attribute -> first line reading it on something not `self`
        self.hook_defs: dict[str, int] = {}  # on_validation_batch_end etc. -> line
        # (call, class it is in, receiver: "self" / "super" / "other", hook, the class the receiver is built from)
        self.step_calls: list[tuple[cst.Call, ClassInfo | None, str, str, str | None]] = []
        self.module = module
        self.positions = positions


class FactCollector(cst.CSTVisitor):
    def __init__(self, facts: FileFacts, class_of: dict[int, ClassInfo]) -> None:
        super().__init__()
        self.facts = facts
        self.class_of = class_of
        self._classes: list[ClassInfo | None] = []
        self._self_names: list[str | None] = []
        self._written: set[int] = set()  # id() of `x["k"]` assigned to, which is not a read
        self._discarded: set[int] = set()  # id() of calls whose value is thrown away (a statement of their own)
        self._built: list[dict[str, str]] = [{}]  # per function: `model = Model(...)` -> "Model"
        self._functions: list[str] = []

    def visit_Assign(self, node: cst.Assign) -> None:
        self._written.update(id(t.target) for t in node.targets if isinstance(t.target, cst.Subscript))
        target = node.targets[0].target if len(node.targets) == 1 else None
        if isinstance(target, cst.Name) and isinstance(node.value, cst.Call):
            built = tail_name(node.value.func)
            if built is not None:
                self._built[-1][target.value] = built

    def visit_Expr(self, node: cst.Expr) -> None:
        self._discarded.add(id(node.value))

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._classes.append(self.class_of.get(id(node)))

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self._classes.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        name = node.name.value
        if name in BATCH_END_FOR_HOOK.values() and name not in self.facts.hook_defs:
            self.facts.hook_defs[name] = self.facts.positions.line(node.name)
        params = node.params.params
        self._self_names.append(params[0].name.value if params else None)
        self._built.append({})
        self._functions.append(name)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._self_names.pop()
        self._built.pop()
        self._functions.pop()

    def _read(self, key_expr: cst.BaseExpression, node: cst.CSTNode) -> None:
        key = string_key(key_expr)
        removed = next((f for f in self._functions if f in HOOKS_GIVEN_OUTPUTS), None)
        if key is not None and removed is not None:  # it never runs under Lightning 2, which refuses the hook
            owner = next((c for c in reversed(self._classes) if c is not None), None)
            self.facts.removed_hook_reads.setdefault(key, []).append((self.facts.positions.line(node), removed, owner))
        elif key is not None and key not in self.facts.key_reads:
            self.facts.key_reads[key] = self.facts.positions.line(node)

    def visit_Subscript(self, node: cst.Subscript) -> None:
        if id(node) in self._written:
            return
        if len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
            self._read(node.slice[0].slice.value, node)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        receiver = node.value
        if isinstance(receiver, cst.Name) and self._self_names and receiver.value == self._self_names[-1]:
            return
        name = node.attr.value
        if name not in self.facts.attribute_reads:
            self.facts.attribute_reads[name] = self.facts.positions.line(node)

    def visit_Comparison(self, node: cst.Comparison) -> None:
        if any(isinstance(t.operator, (cst.In, cst.NotIn)) for t in node.comparisons):
            self._read(node.left, node)

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not isinstance(func, cst.Attribute):
            return
        if func.attr.value in ("get", "pop") and node.args:
            self._read(node.args[0].value, node)
        if func.attr.value in STEP_HOOKS and id(node) not in self._discarded:
            receiver = "other"
            built: str | None = None  # `Model().training_step(...)`, or `model = Model(); model.training_step(...)`
            callee = func.value.func if isinstance(func.value, cst.Call) else None
            if isinstance(callee, cst.Name) and callee.value == "super":
                receiver = "super"
            elif isinstance(func.value, cst.Name) and self._self_names and func.value.value == self._self_names[-1]:
                receiver = "self"
            elif callee is not None:
                built = tail_name(callee)
            elif isinstance(func.value, cst.Name):
                built = self._built[-1].get(func.value.value)
            owner = next((c for c in reversed(self._classes) if c is not None), None) if self._classes else None
            self.facts.step_calls.append((node, owner, receiver, func.attr.value, built))


@dataclasses.dataclass(frozen=True)
class Options:
    base_class: bool = False  # --base-class
    assume_lightning: bool = False  # --assume-lightning
    strict_keys: bool = False  # --strict-keys


@dataclasses.dataclass(frozen=True)
class KeyReader:
    path: str
    line: int
    how: str  # `outputs["val_loss"]`-like, or `.val_loss`

    def where(self, here: str) -> str:
        return f"line {self.line}" if self.path == here else f"{self.path} line {self.line}"


class RunFacts:
    """What every file of the run says that a step's rewrite depends on: who reads which key."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.files: list[tuple[str, FileFacts]] = []
        self.texts: list[tuple[str, str]] = []  # files not parsed (no LightningModule in them): read as text

    def removed_hook_readers(self, key: str, family: list[ClassInfo]) -> list[KeyReader]:
        """Reads of ``key`` inside hooks Lightning 2 removed, in one of ``family`` (the step's class, its
        bases and subclasses: such a hook gets its own module's outputs only). They do not run; their
        port will."""
        return [
            KeyReader(path, line, hook)
            for path, facts in self.files
            for line, hook, owner in facts.removed_hook_reads.get(key, [])
            if any(owner is member for member in family)
        ]

    def readers(self, key: str, attributes: bool = True) -> list[KeyReader]:
        """Places in the run that may read ``key`` from a step's output: ``x[key]``, ``.get(key)``,
        ``key in x``, ``x.key``."""
        found: list[KeyReader] = []
        for path, facts in self.files:
            if key in facts.key_reads:
                found.append(KeyReader(path, facts.key_reads[key], f"[{key!r}]"))
            if attributes and key in facts.attribute_reads:
                found.append(KeyReader(path, facts.attribute_reads[key], f".{key}"))
        pattern = r"""\[\s*(['"])%s\1\s*\]|\.(get|pop)\(\s*(['"])%s\3""" % ((re.escape(key),) * 2)
        if attributes:
            pattern += r"|\.%s\b" % re.escape(key)
        for path, text in self.texts:
            match = re.search(pattern, text)
            if match is not None:
                found.append(KeyReader(path, text.count("\n", 0, match.start()) + 1, match.group(0)))
        return found
