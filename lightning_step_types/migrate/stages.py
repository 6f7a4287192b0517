"""A helper called with a literal argument (``self._shared_step(batch, "train")``): which of its returns
that call can reach.

A shared step often branches on its stage (``if stage == "train": ... return metrics``). Given the
literals a call passes, a test on such a parameter is decided (``==``, ``!=``, ``in``, ``not in``
against literals, the parameter's truth, ``not``, ``and``, ``or``), and only the branch taken is
followed. A parameter the helper assigns to is not decided: nothing is pruned for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import libcst as cst

from lightning_step_types.migrate.scan import BodyScan, always_leaves, block_statements

LiteralValue = str | bool
Literals = tuple[tuple[str, LiteralValue], ...]  # parameter -> the literal a call passes (hashable, for Scope)


def literal_of(expr: cst.BaseExpression, known: Mapping[str, LiteralValue]) -> LiteralValue | None:
    """The literal an argument is: a plain string, ``True`` / ``False``, or a parameter of the caller
    that is itself known (``self._common_step(batch, stage)`` inside a helper called with "train")."""
    if isinstance(expr, cst.SimpleString) and "f" not in expr.prefix.lower() and "b" not in expr.prefix.lower():
        value = expr.evaluated_value
        return value if isinstance(value, str) else None
    if isinstance(expr, cst.Name):
        if expr.value in ("True", "False"):
            return expr.value == "True"
        return known.get(expr.value)
    return None


def call_arguments(call: cst.Call, function: cst.FunctionDef, is_method: bool) -> list[tuple[str, cst.BaseExpression]]:
    """(parameter, the expression the call passes for it), for the arguments matched without doubt."""
    params = list(function.params.params)
    if is_method:
        params = params[1:]
    positional = params if is_method else [*function.params.posonly_params, *params]
    found: list[tuple[str, cst.BaseExpression]] = []
    for index, arg in enumerate(call.args):
        if arg.star:
            return found  # `*args` / `**kwargs`: what follows is not matched by position or name
        if arg.keyword is None:
            if index < len(positional):
                found.append((positional[index].name.value, arg.value))
        elif arg.keyword.value in {p.name.value for p in (*params, *function.params.kwonly_params)}:
            found.append((arg.keyword.value, arg.value))
    return found


def call_literals(
    call: cst.Call, function: cst.FunctionDef, is_method: bool, known: Mapping[str, LiteralValue], scan: BodyScan
) -> Literals:
    """The helper's parameters the call binds to a literal, less those the helper reassigns."""
    found: dict[str, LiteralValue] = {}
    for name, expr in call_arguments(call, function, is_method):
        value = literal_of(expr, known)
        if value is not None:
            found[name] = value
    return tuple((name, value) for name, value in found.items() if name not in scan.bindings)


def _decide(test: cst.BaseExpression, literals: Mapping[str, LiteralValue]) -> bool | None:
    """The value of an ``if`` test given the literals, or None when it depends on anything else."""
    if isinstance(test, cst.Name) and test.value in literals:
        return bool(literals[test.value])
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = _decide(test.expression, literals)
        return None if inner is None else not inner
    if isinstance(test, cst.BooleanOperation):
        first, second = _decide(test.left, literals), _decide(test.right, literals)
        if isinstance(test.operator, cst.And):
            if first is False or second is False:
                return False
            return True if first is True and second is True else None
        if first is True or second is True:
            return True
        return False if first is False and second is False else None
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        target = test.comparisons[0]
        left, right = test.left, target.comparator
        equality = isinstance(target.operator, (cst.Equal, cst.NotEqual))
        if isinstance(right, cst.Name) and right.value in literals and equality:
            left, right = right, left  # `"train" == stage`
        if not isinstance(left, cst.Name) or left.value not in literals:
            return None
        value = literals[left.value]
        if isinstance(target.operator, (cst.Equal, cst.NotEqual)):
            other = literal_of(right, {})
            if other is None:
                return None
            equal = other == value and type(other) is type(value)
            return equal if isinstance(target.operator, cst.Equal) else not equal
        if isinstance(target.operator, (cst.In, cst.NotIn)) and isinstance(right, (cst.Tuple, cst.List, cst.Set)):
            options = [literal_of(e.value, {}) for e in right.elements]
            if any(o is None or isinstance(e, cst.StarredElement) for o, e in zip(options, right.elements)):
                return None
            inside = any(o == value and type(o) is type(value) for o in options)
            return inside if isinstance(target.operator, cst.In) else not inside
    return None


def reachable_returns(function: cst.FunctionDef, scan: BodyScan, literals: Literals) -> tuple[list[cst.Return], bool]:
    """The returns of ``function`` a call with these literals may reach, and whether that call always
    ends in a return or raise (else it may fall off the end, returning None)."""
    known = dict(literals)
    returns = {id(r): r for r in scan.returns}
    found: list[cst.Return] = []

    def collect(node: cst.CSTNode) -> None:
        class _Returns(cst.CSTVisitor):
            def visit_Return(self, node: cst.Return) -> None:
                if id(node) in returns:  # not one of a nested function
                    found.append(node)

        node.visit(_Returns())

    def walk(statements: Sequence[cst.BaseStatement | cst.BaseSmallStatement]) -> bool:
        for statement in statements:
            if isinstance(statement, cst.If):
                taken = _decide(statement.test, known) if known else None
                if taken is True:
                    if walk(block_statements(statement.body)):
                        return True
                    continue
                if taken is False:
                    orelse = statement.orelse
                    if isinstance(orelse, cst.If) and walk([orelse]):
                        return True
                    if isinstance(orelse, cst.Else) and walk(block_statements(orelse.body)):
                        return True
                    continue
            collect(statement)
            if always_leaves([statement]):
                return True
        return False

    leaves = walk(block_statements(function.body))
    return found, leaves
