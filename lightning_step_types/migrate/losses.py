"""When a returned expression counts as a loss tensor, and why not when it does not.
"""

from __future__ import annotations

import libcst as cst

from lightning_step_types.migrate.conventions import LOSS_PRESERVING_METHODS, NUMBER_BUILTINS, NUMBER_METHODS
from lightning_step_types.migrate.facts import Positions
from lightning_step_types.migrate.scan import BodyScan
from lightning_step_types.migrate.syntax import (
    container_kind,
    says_loss,
    says_loss_function,
    short,
    string_key,
    tail_name,
)


_BOUND_BY = {
    "for": "bound by a for loop",
    "with": "bound by a with statement",
    "except": "bound by an except clause",
    "global": "declared global or nonlocal",
    "def": "bound to a nested function",
    "class": "bound to a nested class",
    "del": "deleted",
}


class LossRules:
    """Loss-likeness of returned expressions, by naming convention and by what the method assigns."""

    def __init__(self, positions: Positions) -> None:
        self.positions = positions

    def problem(
        self, expr: cst.BaseExpression, scan: BodyScan, params: set[str], self_name: str
    ) -> str | None:
        """None if ``expr`` is a loss tensor by the conventions above, else why it cannot be shown to be one."""
        kind = container_kind(expr)
        if kind is not None:
            return f"returns {kind}"
        if isinstance(expr, cst.Name):
            return self._name_problem(expr.value, scan, params)
        if isinstance(expr, cst.Attribute):
            if says_loss(expr.attr.value) and not (isinstance(expr.value, cst.Name) and expr.value.value == self_name):
                return None
            return f"returns `{short(expr)}`, which is not known to be a loss tensor"
        if isinstance(expr, cst.Call):
            return self._call_problem(expr, scan, params, self_name)
        if isinstance(expr, cst.BinaryOperation) and not isinstance(expr.operator, (cst.BitOr, cst.BitAnd, cst.BitXor)):
            for side in (expr.left, expr.right):
                side_kind = container_kind(side)
                if side_kind is not None and side_kind != "a Python number":
                    return f"returns `{short(expr)}`, which involves {side_kind}"
            left = self.problem(expr.left, scan, params, self_name)
            right = self.problem(expr.right, scan, params, self_name)
            if left is None or right is None:
                return None
            return f"returns `{short(expr)}`, which is not known to be a loss tensor"
        if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, (cst.Minus, cst.Plus)):
            return self.problem(expr.expression, scan, params, self_name)
        return f"returns `{short(expr)}`, which is not known to be a loss tensor"

    def _name_problem(self, name: str, scan: BodyScan, params: set[str]) -> str | None:
        if name in params:
            return f"returns its parameter `{name}`"
        bindings = scan.bindings.get(name, [])
        if not bindings:
            return f"returns a variable `{name}` built elsewhere"
        for binding in bindings:
            line = self.positions.line(binding.node)
            how = _BOUND_BY.get(binding.kind)
            if how is not None:
                return f"returns a variable `{name}` {how} at line {line}"
            value = binding.value
            if value is None or binding.kind != "assign":
                continue  # `loss += 0.1 * reg` keeps a tensor a tensor
            value_kind = container_kind(value)
            if isinstance(value, cst.Dict):
                return f"returns a variable `{name}` holding a dict built at line {line}; return the dict itself"
            if value_kind is not None:
                shown = short(value, 32)
                return f"returns a variable `{name}` that is assigned {value_kind} (`{shown}`) at line {line}"
            number = self.number_problem(value)
            if number is not None:
                return f"returns a variable `{name}` that is assigned {number} at line {line}"
            if _unreduced(value):
                return f"returns a variable `{name}` computed with reduction='none' at line {line} (not one value)"
        if says_loss(name):
            return None
        assigned = [b for b in bindings if b.kind == "assign" and b.value is not None]
        if assigned and all(
            isinstance(b.value, cst.Call) and self._call_problem(b.value, scan, params, "") is None for b in assigned
        ) and len(assigned) == len(bindings):
            return None  # out = F.cross_entropy(...)
        origin = ""
        if assigned and assigned[0].value is not None:
            origin = f" (from `{short(assigned[0].value)}`, line {self.positions.line(assigned[0].node)})"
        return f"returns a variable `{name}` built elsewhere{origin}, not known to be a loss tensor"

    def number_problem(self, value: cst.BaseExpression) -> str | None:
        """Values that are Python numbers: ``x.item()``, ``float(x)``."""
        if isinstance(value, cst.Call):
            func = value.func
            if isinstance(func, cst.Attribute) and func.attr.value in NUMBER_METHODS:
                return f"a Python number (`{short(value)}`)"
            if isinstance(func, cst.Name) and func.value in NUMBER_BUILTINS:
                return f"a Python number (`{short(value)}`)"
        if isinstance(value, (cst.Integer, cst.Float)):
            return f"a Python number (`{short(value)}`)"
        return None

    def _call_problem(self, call: cst.Call, scan: BodyScan, params: set[str], self_name: str) -> str | None:
        number = self.number_problem(call)
        if number is not None:
            return f"returns {number}"
        if _unreduced(call):
            return f"returns `{short(call)}`, computed with reduction='none' (not one value)"
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value in LOSS_PRESERVING_METHODS:
            inner = self.problem(func.value, scan, params, self_name)
            return None if inner is None else f"returns `{short(call)}`, which is not known to be a loss tensor"
        tail = tail_name(func)
        if tail is not None and says_loss_function(tail):
            return None
        return f"returns `{short(call)}`, which is not known to be a loss tensor"

    # -- a returned dict --


def _unreduced(value: cst.BaseExpression) -> bool:
    """A loss call with ``reduction="none"``: one value per sample, not a loss."""
    return isinstance(value, cst.Call) and any(
        arg.keyword is not None and arg.keyword.value == "reduction" and string_key(arg.value) == "none"
        for arg in value.args
    )
