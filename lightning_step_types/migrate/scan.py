"""What one method body does: its returns, yields and local bindings, whether it always returns,
and whether an expression may have side effects.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import libcst as cst

from lightning_step_types.migrate.conventions import LOSS_PRESERVING_METHODS, NUMBER_BUILTINS, NUMBER_METHODS
from lightning_step_types.migrate.syntax import ImportTable

# Calls without side effects, whose evaluation order does not matter.
_PURE_METHODS = LOSS_PRESERVING_METHODS | NUMBER_METHODS | {
    "detach", "cpu", "half", "long", "int", "bool", "argmax", "argmin", "max", "min", "softmax", "log_softmax",
    "sigmoid", "exp", "log", "size", "numel", "dim", "unsqueeze", "flatten", "norm", "std", "var", "eq", "ne",
    "round", "to", "type",
}  # fmt: skip
_PURE_BUILTINS = NUMBER_BUILTINS | {"dict", "list", "tuple", "len", "isinstance"}
_MUTATING_METHODS = {"update", "pop", "popitem", "setdefault", "clear", "__setitem__", "__delitem__"}


@dataclasses.dataclass(frozen=True)
class Binding:
    """One place a method binds a local name: ``kind`` is assign/unpack/augassign/for/with/... ."""

    kind: str
    value: cst.BaseExpression | None  # for "unpack", the whole right-hand side
    node: cst.CSTNode
    index: int | None = None  # for "unpack": the position in the unpacked tuple (None after a `*`)


class BodyScan(cst.CSTVisitor):
    """Returns, yields and local bindings of one function body, outside nested functions and classes."""

    def __init__(self) -> None:
        super().__init__()
        self.returns: list[cst.Return] = []
        self.yields: list[cst.CSTNode] = []
        self.nested_functions: list[cst.FunctionDef] = []
        self.bindings: dict[str, list[Binding]] = {}
        self.mutations: dict[str, list[cst.CSTNode]] = {}

    def _bind(
        self, name: str, kind: str, value: cst.BaseExpression | None, node: cst.CSTNode, index: int | None = None
    ) -> None:
        self.bindings.setdefault(name, []).append(Binding(kind, value, node, index))

    def _bind_target(
        self,
        target: cst.BaseExpression,
        value: cst.BaseExpression | None,
        node: cst.CSTNode,
        kind: str,
        index: int | None = None,
    ) -> None:
        if isinstance(target, cst.Name):
            self._bind(target.value, kind, value, node, index)
        elif isinstance(target, (cst.Tuple, cst.List)):
            starred = False
            for position, element in enumerate(target.elements):
                starred = starred or isinstance(element, cst.StarredElement)
                unpacked = value if kind == "assign" and index is None else None
                self._bind_target(
                    element.value, unpacked, node, "unpack" if kind == "assign" else kind, None if starred else position
                )
        elif isinstance(target, cst.StarredElement):
            self._bind_target(target.value, None, node, kind)
        elif isinstance(target, (cst.Subscript, cst.Attribute)) and isinstance(target.value, cst.Name):
            self.mutations.setdefault(target.value.value, []).append(node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.nested_functions.append(node)
        self._bind(node.name.value, "def", None, node)
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        self._bind(node.name.value, "class", None, node)
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_Return(self, node: cst.Return) -> None:
        self.returns.append(node)

    def visit_Yield(self, node: cst.Yield) -> None:
        self.yields.append(node)

    def visit_Await(self, node: cst.Await) -> None:
        self.yields.append(node)

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._bind_target(target.target, node.value, node, "assign")

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._bind_target(node.target, node.value, node, "assign")

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._bind_target(node.target, node.value, node, "augassign")

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._bind_target(node.target, node.value, node, "assign")

    def visit_For(self, node: cst.For) -> None:
        self._bind_target(node.target, None, node, "for")

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self._bind_target(node.asname.name, None, node, "with")

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        if node.name is not None:
            self._bind_target(node.name.name, None, node, "except")

    def visit_Global(self, node: cst.Global) -> None:
        for item in node.names:
            self._bind(item.name.value, "global", None, node)

    def visit_Nonlocal(self, node: cst.Nonlocal) -> None:
        for item in node.names:
            self._bind(item.name.value, "global", None, node)

    def visit_Del(self, node: cst.Del) -> None:
        self._bind_target(node.target, None, node, "del")

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not isinstance(func, cst.Attribute) or func.attr.value not in _MUTATING_METHODS:
            return
        if isinstance(func.value, cst.Name):
            self.mutations.setdefault(func.value.value, []).append(node)


def scan_body(function: cst.FunctionDef) -> BodyScan:
    scan = BodyScan()
    function.body.visit(scan)
    return scan


def block_statements(body: cst.BaseSuite) -> Sequence[cst.BaseStatement | cst.BaseSmallStatement]:
    return body.body


def always_leaves(statements: Sequence[cst.BaseStatement | cst.BaseSmallStatement]) -> bool:
    """Whether running these statements always ends in a return or raise (conservatively: False if unsure)."""
    return any(_statement_leaves(s) for s in statements)


def _statement_leaves(statement: cst.BaseStatement | cst.BaseSmallStatement) -> bool:
    if isinstance(statement, (cst.Return, cst.Raise)):
        return True
    if isinstance(statement, cst.SimpleStatementLine):
        return any(isinstance(s, (cst.Return, cst.Raise)) for s in statement.body)
    if isinstance(statement, cst.If):
        if not always_leaves(block_statements(statement.body)) or statement.orelse is None:
            return False
        if isinstance(statement.orelse, cst.If):
            return _statement_leaves(statement.orelse)
        return always_leaves(block_statements(statement.orelse.body))
    if isinstance(statement, cst.With):
        return always_leaves(block_statements(statement.body))
    if isinstance(statement, cst.Try):
        if statement.finalbody is not None and always_leaves(block_statements(statement.finalbody.body)):
            return True
        main_path = always_leaves(block_statements(statement.body)) or (
            statement.orelse is not None and always_leaves(block_statements(statement.orelse.body))
        )
        return main_path and all(always_leaves(block_statements(h.body)) for h in statement.handlers)
    if isinstance(statement, cst.While):
        return isinstance(statement.test, cst.Name) and statement.test.value == "True" and not _has_break(statement)
    return False


def _has_break(loop: cst.While) -> bool:
    class _Breaks(cst.CSTVisitor):
        found = False

        def visit_Break(self, node: cst.Break) -> None:
            self.found = True

        def visit_For(self, node: cst.For) -> bool:
            return False

        def visit_While(self, node: cst.While) -> bool:
            return False

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return False

    finder = _Breaks()
    loop.body.visit(finder)
    return finder.found


def has_effects(expr: cst.CSTNode, imports: ImportTable) -> bool:
    """Whether evaluating an expression may have side effects (a call we do not know to be pure)."""

    class _Calls(cst.CSTVisitor):
        impure = False

        def visit_Call(self, node: cst.Call) -> None:
            func = node.func
            if isinstance(func, cst.Attribute) and func.attr.value in _PURE_METHODS:
                return
            if isinstance(func, cst.Name) and func.value in _PURE_BUILTINS:
                return
            qualified = imports.qualify(func) or ""
            if qualified.startswith("torch.") and not qualified.endswith("_"):
                return
            self.impure = True

        def visit_Lambda(self, node: cst.Lambda) -> bool:
            return False

    finder = _Calls()
    expr.visit(finder)
    return finder.impure
