"""Return annotations: which ones the codemod may replace, and what replaces them."""

from __future__ import annotations

from typing import Literal

import libcst as cst

from lightning_step_types.migrate.syntax import ImportTable, is_none, tail_name

_KNOWN_ANNOTATION_NAMES = {
    "Tensor", "STEP_OUTPUT", "dict", "Dict", "OrderedDict", "Mapping", "MutableMapping", "Any", "object",
}  # fmt: skip


def annotation_shape(
    expr: cst.BaseExpression, imports: ImportTable
) -> Literal["plain", "optional", "pipe", "typed"] | None:
    """How a step's current return annotation is written, if it is one the codemod may replace."""
    tail = tail_name(expr)
    if tail in ("TrainStepResult", "ValStepResult"):
        return "typed"
    if tail in _KNOWN_ANNOTATION_NAMES:
        return "plain"
    if isinstance(expr, cst.Subscript):
        head = tail_name(expr.value)
        members = [e.slice.value for e in expr.slice if isinstance(e.slice, cst.Index)]
        if head in ("TrainStepResult", "ValStepResult"):
            return "typed"
        if head in ("Dict", "dict", "OrderedDict", "Mapping", "MutableMapping"):
            return "plain"
        if head == "Optional" and len(members) == 1 and annotation_shape(members[0], imports) is not None:
            return "optional"
        if head == "Union" and members and all(is_none(m) or annotation_shape(m, imports) is not None for m in members):
            return "pipe"
        return None
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.BitOr):
        sides = [expr.left, expr.right]
        if all(is_none(s) or annotation_shape(s, imports) is not None for s in sides):
            return "pipe"
    return None


def _mentions_none(expr: cst.BaseExpression) -> bool:
    if is_none(expr):
        return True
    if isinstance(expr, cst.BinaryOperation):
        return _mentions_none(expr.left) or _mentions_none(expr.right)
    if isinstance(expr, cst.Subscript):
        head = tail_name(expr.value)
        return head == "Optional" or (
            head == "Union" and any(isinstance(e.slice, cst.Index) and is_none(e.slice.value) for e in expr.slice)
        )
    return False


def new_annotation(
    current: cst.Annotation | None, result_name: str, may_return_none: bool, imports: ImportTable
) -> cst.Annotation | None:
    """The new return annotation, or None when the current one already says the right thing."""
    plain: cst.BaseExpression = cst.Name(result_name)
    with_none: cst.BaseExpression = cst.BinaryOperation(plain, cst.BitOr(), cst.Name("None"))
    if current is None:
        return cst.Annotation(with_none if may_return_none else plain)
    expr = current.annotation
    shape = annotation_shape(expr, imports)
    if _is_typed(expr):
        if not may_return_none or _mentions_none(expr):
            return None
        return current.with_changes(annotation=cst.BinaryOperation(expr, cst.BitOr(), cst.Name("None")))
    if not may_return_none:
        return current.with_changes(annotation=plain)
    if shape == "optional" and isinstance(expr, cst.Subscript):  # keep the file's `Optional[...]` spelling
        return current.with_changes(annotation=expr.with_changes(slice=[cst.SubscriptElement(cst.Index(plain))]))
    return current.with_changes(annotation=with_none)


def _is_typed(expr: cst.BaseExpression) -> bool:
    """``TrainStepResult``, ``ValStepResult[...]``, or either with None (``X | None``, ``Optional[X]``...)."""
    results = ("TrainStepResult", "ValStepResult")
    if tail_name(expr) in results:
        return True
    members: list[cst.BaseExpression] = []
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.BitOr):
        members = [expr.left, expr.right]
    elif isinstance(expr, cst.Subscript):
        head = tail_name(expr.value)
        if head in results:
            return True
        if head in ("Optional", "Union"):
            members = [e.slice.value for e in expr.slice if isinstance(e.slice, cst.Index)]
    typed = [m for m in members if not is_none(m)]
    return bool(typed) and all(_is_typed(m) for m in typed)
